// Training FLOPs per step and MFU; flops.h states every formula.
#include "planner/flops.h"

#include <algorithm>

namespace odyssey::planner {

namespace {

struct Widths {
  double h = 0, i = 0, q = 0, kv = 0, d = 0, heads = 0, vocab = 0, layers = 0;
};

Widths widths_of(const HfModelConfig& m) {
  Widths w;
  const std::int64_t heads = std::max<std::int64_t>(m.num_attention_heads, 0);
  std::int64_t d = m.head_dim;
  if (d <= 0 && heads > 0) d = m.hidden_size / heads;
  const std::int64_t kv_heads = m.num_key_value_heads > 0 ? m.num_key_value_heads : heads;
  w.h = static_cast<double>(std::max<std::int64_t>(m.hidden_size, 0));
  w.i = static_cast<double>(std::max<std::int64_t>(m.intermediate_size, 0));
  // Mixture of experts: the MLP a token runs through (its k experts, the shared expert, the
  // router), as the width of a dense SwiGLU MLP of the same multiply-adds: FLOPs and MFU count
  // activated parameters.
  if (m.is_moe() && w.h > 0) w.i = m.activated_mlp_parameters() / (3.0 * w.h);
  w.d = static_cast<double>(std::max<std::int64_t>(d, 0));
  w.heads = static_cast<double>(heads);
  w.q = w.heads * w.d;
  w.kv = static_cast<double>(kv_heads) * w.d;
  w.vocab = static_cast<double>(std::max<std::int64_t>(m.vocab_size, 0));
  w.layers = static_cast<double>(std::max<std::int64_t>(m.num_hidden_layers, 0));
  return w;
}

// Multiply-adds per token of one block's seven projections.
double block_linear_macs(const Widths& w) { return w.h * w.q + 2.0 * w.h * w.kv + w.q * w.h + 3.0 * w.h * w.i; }

// Multiply-adds per token of one block's LoRA adapters: r·(in + out) per target.
double block_lora_macs(const Widths& w, const FlopsOptions& o) {
  if (!o.lora) return 0.0;
  const double r = static_cast<double>(std::max<std::int64_t>(o.lora_rank, 0));
  const LoraTargets& t = o.lora_targets;
  double s = 0.0;
  if (t.q) s += w.h + w.q;
  if (t.k) s += w.h + w.kv;
  if (t.v) s += w.h + w.kv;
  if (t.o) s += w.q + w.h;
  if (t.gate) s += w.h + w.i;
  if (t.up) s += w.h + w.i;
  if (t.down) s += w.i + w.h;
  return r * s;
}

}  // namespace

StepFlops padding_free_step_flops(const HfModelConfig& m, const std::vector<std::int64_t>& sample_lengths,
                                  const FlopsOptions& o) {
  const Widths w = widths_of(m);
  StepFlops f;
  double sum_sq = 0.0;
  for (const std::int64_t s : sample_lengths) {
    if (s <= 0) continue;
    f.tokens += s;
    sum_sq += static_cast<double>(s) * static_cast<double>(s);
  }
  const double t = static_cast<double>(f.tokens);
  f.attention_pairs = sum_sq / 2.0;

  const double layer_linear = 2.0 * t * block_linear_macs(w);
  const double layer_lora = 2.0 * t * block_lora_macs(w, o);
  // QKᵀ and PV: 2·s²·d FLOPs each per head on the full matrix; causal keeps half.
  const double layer_attention = 2.0 * 2.0 * w.d * w.heads * f.attention_pairs;

  f.linear_forward = w.layers * layer_linear;
  f.lm_head_forward = 2.0 * t * w.h * w.vocab;
  f.lora_forward = w.layers * layer_lora;
  f.attention_forward = w.layers * layer_attention;
  f.forward = f.linear_forward + f.lm_head_forward + f.lora_forward + f.attention_forward;
  f.layer_forward = layer_linear + layer_lora + layer_attention;

  const double frozen_or_trained = o.lora ? 1.0 : 2.0;  // input grads only, or input + weight
  f.backward =
      frozen_or_trained * (f.linear_forward + f.lm_head_forward) + 2.0 * f.lora_forward + 2.0 * f.attention_forward;
  f.model = f.forward + f.backward;

  const std::int64_t ckpt =
      std::clamp<std::int64_t>(o.checkpointed_layers, 0, std::max<std::int64_t>(m.num_hidden_layers, 0));
  f.recompute = static_cast<double>(ckpt) * f.layer_forward + (o.lm_head_recomputed ? f.lm_head_forward : 0.0);
  f.hardware = f.model + f.recompute;
  return f;
}

StepFlops training_step_flops(const HfModelConfig& m, std::int64_t seq_len, const FlopsOptions& o) {
  return padding_free_step_flops(m, std::vector<std::int64_t>{seq_len}, o);
}

double model_flops_utilization(double flops_per_step, double step_seconds, double peak_flops) {
  if (!(step_seconds > 0.0) || !(peak_flops > 0.0)) return 0.0;
  return flops_per_step / (step_seconds * peak_flops);
}

}  // namespace odyssey::planner
