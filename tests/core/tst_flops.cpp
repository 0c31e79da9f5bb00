// Training FLOPs per step (core/planner/flops.h): hand-computed numbers on a tiny shape, the
// 6·N·T approximation on Qwen2.5-7B at a short sequence, the growth of the causal attention
// term, padding-free rows, and the reference numbers that tests/bench/hf_bench.py's
// --self-test asserts too (the Python transcription must stay equal to this convention).
#include <QTest>

#include <cmath>

#include "planner/flops.h"

using namespace odyssey;
using namespace odyssey::planner;

namespace {

// h 64, i 128, 2 layers, 4 heads (2 KV) of 16, vocab 256: q = 64, kv = 32.
// Multiply-adds per token of one block: q 64·64 + k,v 2·64·32 + o 64·64 + mlp 3·64·128
// = 4096 + 4096 + 4096 + 24576 = 36864 (= block_linear_parameters()).
HfModelConfig tiny() {
  HfModelConfig m;
  m.hidden_size = 64, m.intermediate_size = 128, m.num_hidden_layers = 2;
  m.num_attention_heads = 4, m.num_key_value_heads = 2, m.head_dim = 16, m.vocab_size = 256;
  return m;
}

HfModelConfig qwen25_7b() {
  HfModelConfig m;
  m.hidden_size = 3584, m.intermediate_size = 18944, m.num_hidden_layers = 28;
  m.num_attention_heads = 28, m.num_key_value_heads = 4, m.head_dim = 128, m.vocab_size = 152064;
  m.qkv_bias = true;
  return m;
}

bool near(double a, double b, double rel) { return std::fabs(a - b) <= rel * std::fabs(b); }

}  // namespace

class TestFlops : public QObject {
  Q_OBJECT
 private slots:
  // S = 8, full fine-tuning, both layers checkpointed.
  //   F_lin  = 2·8·36864·2 layers          = 1,179,648
  //   F_head = 2·8·64·256                  =   262,144
  //   F_att  = 2 layers · 2·d·H·S² = 2·2·16·4·64 = 16,384
  //   forward 1,458,176; backward 2× = 2,916,352; model 4,374,528
  //   recompute = 2 layers · (589,824 + 8,192) = 1,196,032; hardware 5,570,560
  void tinyFull() {
    FlopsOptions o;
    o.checkpointed_layers = 2;
    const StepFlops f = training_step_flops(tiny(), 8, o);
    QCOMPARE(f.tokens, std::int64_t{8});
    QCOMPARE(f.attention_pairs, 32.0);
    QCOMPARE(f.linear_forward, 1179648.0);
    QCOMPARE(f.lm_head_forward, 262144.0);
    QCOMPARE(f.lora_forward, 0.0);
    QCOMPARE(f.attention_forward, 16384.0);
    QCOMPARE(f.forward, 1458176.0);
    QCOMPARE(f.backward, 2916352.0);
    QCOMPARE(f.model, 4374528.0);
    QCOMPARE(f.layer_forward, 598016.0);
    QCOMPARE(f.recompute, 1196032.0);
    QCOMPARE(f.hardware, 5570560.0);
    // Block linears = block_linear_parameters(): full tuning is 6·(L·block + V·h)·T + 3·F_att.
    const double n_lin = 2.0 * static_cast<double>(tiny().block_linear_parameters()) + 256.0 * 64.0;
    QCOMPARE(f.model, 6.0 * n_lin * 8.0 + 3.0 * f.attention_forward);
  }

  // S = 8, LoRA r = 4 on all seven: adapter multiply-adds per token per layer r·(in + out):
  //   q 4·128 + k 4·96 + v 4·96 + o 4·128 + gate, up, down 3·4·192 = 512+384+384+512+2304 = 4096
  //   F_lora = 2·8·4096·2 = 131,072; forward 1,589,248
  //   backward = 1·(F_lin + F_head) + 2·F_lora + 2·F_att = 1,441,792 + 262,144 + 32,768 = 1,736,704
  //   model 3,325,952; no checkpointing: hardware = model
  void tinyLora() {
    FlopsOptions o;
    o.lora = true, o.lora_rank = 4;
    const StepFlops f = training_step_flops(tiny(), 8, o);
    QCOMPARE(f.lora_forward, 131072.0);
    QCOMPARE(f.forward, 1589248.0);
    QCOMPARE(f.backward, 1736704.0);
    QCOMPARE(f.model, 3325952.0);
    QCOMPARE(f.recompute, 0.0);
    QCOMPARE(f.hardware, f.model);
    // Only q and v: (128 + 96)·4 = 896 per token per layer.
    o.lora_targets = LoraTargets{true, false, true, false, false, false, false};
    QCOMPARE(training_step_flops(tiny(), 8, o).lora_forward, 2.0 * 8 * 896 * 2);
    // The lm_head recomputed by a chunked loss counts in hardware FLOPs only.
    o.lm_head_recomputed = true;
    const StepFlops g = training_step_flops(tiny(), 8, o);
    QCOMPARE(g.recompute, 262144.0);
    QCOMPARE(g.hardware - g.model, 262144.0);
  }

  // head_dim 0 (config.json without one): hidden / heads.
  void headDimDefault() {
    HfModelConfig m = tiny();
    m.head_dim = 0;
    QCOMPARE(training_step_flops(m, 8).model, training_step_flops(tiny(), 8).model);
  }

  // A padding-free row of samples 3 and 5: linears on 8 tokens, attention on 3² + 5² = 34
  // (not 64): F_att = 2 layers · 2·16·4·34 = 8,704.
  void paddingFree() {
    const StepFlops row = padding_free_step_flops(tiny(), {3, 0, 5});
    const StepFlops one = training_step_flops(tiny(), 8);
    QCOMPARE(row.tokens, std::int64_t{8});
    QCOMPARE(row.attention_pairs, 17.0);
    QCOMPARE(row.attention_forward, 8704.0);
    QCOMPARE(row.linear_forward, one.linear_forward);
    QCOMPARE(row.lm_head_forward, one.lm_head_forward);
    QVERIFY(row.model < one.model);
    QCOMPARE(padding_free_step_flops(tiny(), {8}).model, one.model);
    QCOMPARE(training_step_flops(tiny(), 0).model, 0.0);
  }

  // Causal attention: half of the full-matrix count 4·s²·d·H per layer, and ×4 when s doubles,
  // while the linear terms only double.
  void attentionScaling() {
    const HfModelConfig m = qwen25_7b();
    for (const std::int64_t s : {4096, 16384, 32768}) {
      const StepFlops a = training_step_flops(m, s), b = training_step_flops(m, 2 * s);
      const double full_matrix = 28.0 * 4.0 * static_cast<double>(s) * static_cast<double>(s) * 128.0 * 28.0;
      QCOMPARE(a.attention_forward, 0.5 * full_matrix);
      QCOMPARE(b.attention_forward, 4.0 * a.attention_forward);
      QCOMPARE(b.linear_forward, 2.0 * a.linear_forward);
      // Attention backward is 2× its forward in both modes.
      FlopsOptions lora;
      lora.lora = true, lora.lora_rank = 16;
      const StepFlops l = training_step_flops(m, s, lora);
      QCOMPARE(l.attention_forward, a.attention_forward);
      QCOMPARE(a.backward - 2.0 * (a.linear_forward + a.lm_head_forward), 2.0 * a.attention_forward);
      QCOMPARE(l.backward - (l.linear_forward + l.lm_head_forward) - 2.0 * l.lora_forward, 2.0 * l.attention_forward);
    }
    // Attention's share of the model FLOPs of full tuning: ~0.7% at 512, ~32% at 32K on 7B.
    const StepFlops s512 = training_step_flops(m, 512), s32k = training_step_flops(m, 32768);
    QVERIFY(3.0 * s512.attention_forward / s512.model < 0.01);
    QVERIFY(near(3.0 * s32k.attention_forward / s32k.model, 0.317, 0.01));
  }

  // 6·N·T at a short sequence. Kaplan et al.'s N counts the weights that multiply: all of
  // parameter_count() except the input embedding (a lookup), norms and biases. Within 1%
  // of that; the total parameter count (7.616 B, embedding included) overstates by ~7%.
  void sixNT() {
    const HfModelConfig m = qwen25_7b();
    const double t = 512.0;
    const StepFlops f = training_step_flops(m, 512);
    const double n = static_cast<double>(m.parameter_count());
    const double n_matmul = n - 152064.0 * 3584.0 - 28.0 * 2 * 3584 - 3584.0 - 28.0 * (3584 + 2 * 512);
    QVERIFY(near(f.model, 6.0 * n_matmul * t, 0.01));
    QVERIFY(near(f.model, 6.0 * n * t, 0.08));
    QVERIFY(f.model < 6.0 * n * t);
    // LoRA at a short sequence: 4·N·T (forward + input gradients), +1.9% adapters and attention.
    FlopsOptions o;
    o.lora = true, o.lora_rank = 16;
    QVERIFY(near(training_step_flops(m, 512, o).model, 4.0 * n_matmul * t, 0.03));
  }

  // The reference numbers tests/bench/hf_bench.py --self-test asserts (Qwen2.5-7B at 32K):
  // LoRA r=16 all seven with all 28 layers checkpointed (HF's gradient checkpointing), and
  // full tuning.
  void referenceNumbers() {
    const HfModelConfig m = qwen25_7b();
    FlopsOptions o;
    o.lora = true, o.lora_rank = 16, o.checkpointed_layers = 28;
    const StepFlops l = training_step_flops(m, 32768, o);
    QCOMPARE(l.linear_forward, 427641303728128.0);
    QCOMPARE(l.lm_head_forward, 35716948033536.0);
    QCOMPARE(l.lora_forward, 2645699854336.0);
    QCOMPARE(l.attention_forward, 215504279044096.0);
    QCOMPARE(l.model, 1581166440218624.0);
    QCOMPARE(l.hardware, 2226957722845184.0);
    QCOMPARE(training_step_flops(m, 32768).model, 2036587592417280.0);
  }

  void mfu() {
    QCOMPARE(model_flops_utilization(989e12, 1.0), 1.0);
    QCOMPARE(model_flops_utilization(989e12, 2.0), 0.5);
    QCOMPARE(model_flops_utilization(1e12, 1.0, 1e12), 1.0);
    QCOMPARE(model_flops_utilization(1e12, 0.0), 0.0);
    // docs/model.md's 7B full forward+backward at 32K, 5.23 s per step: 389 TFLOP/s of
    // model FLOPs, MFU 39% (that benchmark has no optimizer step and counts attention ×3.5).
    const double u = model_flops_utilization(training_step_flops(qwen25_7b(), 32768).model, 5.23);
    QVERIFY(near(u, 0.394, 0.01));
  }
};

QTEST_APPLESS_MAIN(TestFlops)
#include "tst_flops.moc"
