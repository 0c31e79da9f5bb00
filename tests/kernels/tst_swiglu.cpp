// The fused SwiGLU ops (kernels/swiglu.h: swiglu, swiglu_down, rms_norm_mlp) against the references (the Hugging Face
// formulas differentiated by autograd) on the CPU: there the fused ops run the same hand-written forward/backward math
// as the CUDA kernels, in ATen ops (the CUDA code itself is checked on a GPU by `odyssey-train selftest`). Error
// measure and tolerances: tests/support/kernel_checks.h.
#define QT_NO_KEYWORDS

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <QtTest>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/lora_dropout_bits.h"
#include "kernels/quant4.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "tests/support/autograd_graph.h"
#include "tests/support/kernel_checks.h"

using namespace odyssey::kernels;
using namespace odyssey::testing::kernel_checks;
using torch::Tensor;

class TstSwiglu : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() { torch::manual_seed(1234); }

  // ---------------------------------------------------------------------------------------
  void swiglu_vs_reference_data() {
    QTest::addColumn<QString>("shape");
    QTest::newRow("single row I=37") << "1,37";
    QTest::newRow("129x100") << "129,100";
    QTest::newRow("[3,5,24]") << "3,5,24";
  }

  // gate and up are the two halves of one projection output [..., 2I] (strided views).
  void swiglu_vs_reference() {
    QFETCH(QString, shape);
    std::vector<int64_t> sizes;
    for (const QString& p : shape.split(',')) sizes.push_back(p.toLongLong());
    const int64_t inter = sizes.back();
    std::vector<int64_t> big_sizes = sizes;
    big_sizes.back() = 2 * inter;
    const Tensor big0 = torch::randn(big_sizes, torch::kFloat64) * 3;
    const Tensor gy = torch::randn(sizes, torch::kFloat64);
    struct Run {
      Tensor y, dbig;
    };
    auto run = [&](bool fused, torch::ScalarType dtype, bool packed = false) {
      const Tensor big = leaf(big0, dtype);
      const Tensor gate = big.narrow(-1, 0, inter), up = big.narrow(-1, inter, inter);
      const Tensor y = packed ? swiglu_packed(big) : fused ? swiglu(gate, up) : swiglu_reference(gate, up);
      (y.to(torch::kFloat64) * gy).sum().backward();
      return Run{y.detach(), big.grad()};
    };
    const Run f64 = run(false, torch::kFloat64);
    const Run f32 = run(true, torch::kFloat32), r32 = run(false, torch::kFloat32);
    QVERIFY2(torch::equal(f32.y, r32.y), "fp32 y differs from the fp32 reference (must be bit-identical)");
    QVERIFY2(rel(f32.y, f64.y) < kF32, qPrintable(QString("fp32 y rel %1").arg(rel(f32.y, f64.y))));
    QVERIFY2(rel(f32.dbig, f64.dbig) < kF32, qPrintable(QString("fp32 grad rel %1").arg(rel(f32.dbig, f64.dbig))));
    // swiglu_packed (one [..., 2I] gradient written directly) computes what swiglu on the halves does.
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      const Run p = run(true, dtype, true), h = run(true, dtype);
      QVERIFY2(torch::equal(p.y, h.y) && torch::equal(p.dbig, h.dbig),
               "swiglu_packed differs from swiglu on the halves");
    }
    const Run fb = run(true, torch::kBFloat16), rb = run(false, torch::kBFloat16);
    QVERIFY2(torch::equal(fb.y, rb.y), "bf16 y differs from the bf16 reference (must be bit-identical)");
    for (int64_t half = 0; half < 2; ++half) {
      const Tensor got = fb.dbig.narrow(-1, half * inter, inter), ref = rb.dbig.narrow(-1, half * inter, inter);
      const Tensor truth = f64.dbig.narrow(-1, half * inter, inter);
      const double e = rel(got, ref);
      QVERIFY2(e <= kBf16, qPrintable(QString("bf16 %1 rel %2").arg(half ? "dup" : "dgate").arg(e)));
      QVERIFY2(rel(got, truth) <= rel(ref, truth) + kBf16Slack, qPrintable(QString("bf16 %1 error %2 vs reference %3")
                                                                               .arg(half ? "dup" : "dgate")
                                                                               .arg(rel(got, truth))
                                                                               .arg(rel(ref, truth))));
    }
  }

  void swiglu_errors() {
    const Tensor g = torch::randn({4, 6});
    auto has = [](const std::string& msg, const char* needle) { return msg.find(needle) != std::string::npos; };
    std::string e = error_of([&] { swiglu(g, torch::randn({4, 5})); });
    QVERIFY2(has(e, "differs from up shape"), e.c_str());
    e = error_of([&] { swiglu(g, g.to(torch::kBFloat16)); });
    QVERIFY2(has(e, "up dtype"), e.c_str());
    e = error_of([&] { swiglu(torch::randn({6, 4}).t(), g); });
    QVERIFY2(has(e, "last dimension must be contiguous"), e.c_str());
    e = error_of([&] { swiglu(g.to(torch::kInt32), g.to(torch::kInt32)); });
    QVERIFY2(has(e, "must be float32, bfloat16 or float16"), e.c_str());
    e = error_of([&] { swiglu_packed(torch::randn({4, 7})); });
    QVERIFY2(has(e, "gate_up must be [..., 2I]"), e.c_str());
  }

  // ---------------------------------------------------------------------------------------
  // swiglu_down (the MLP's SwiGLU + down projection, activation recomputed in backward)
  // against the layers it replaces: swiglu_reference, then the down projection as
  // core/model/decoder.cpp's LinearImpl computes it (base weight + bias, LoRA adapters in fp32
  // cast to the activation's dtype, scaled), differentiated by autograd. Every input's
  // gradient: gate and up, the down weight and bias when trained (full fine-tuning), the
  // adapters when the weight is frozen (LoRA), none of the weights (the activation is then not
  // recomputed at all).
  void swiglu_down_vs_layers_data() {
    QTest::addColumn<QString>("mode");
    QTest::newRow("full, bias") << "full";
    QTest::newRow("LoRA r4 on a frozen weight") << "lora";
    QTest::newRow("frozen, no adapter") << "frozen";
    QTest::newRow("LoRA r4 on a 4-bit NF4 base") << "qlora";
  }

  void swiglu_down_vs_layers() {
    QFETCH(QString, mode);
    const bool full = mode == "full", lora = mode == "lora" || mode == "qlora";
    const int64_t tokens = 37, inter = 48, out = 20, r = 4;
    const Tensor big0 = torch::randn({1, tokens, 2 * inter}, torch::kFloat64) * 2;
    Tensor w0 = torch::randn({out, inter}, torch::kFloat64) / std::sqrt(double(inter));
    const auto q = mode == "qlora" ? quantize_in_place(w0) : c10::intrusive_ptr<Quant4Weight>();
    const Tensor b0 = torch::randn({out}, torch::kFloat64);
    const Tensor a0 = torch::randn({r, inter}, torch::kFloat64) / std::sqrt(double(inter));
    const Tensor bb0 = torch::randn({out, r}, torch::kFloat64);  // nonzero so both adapters get gradients
    const Tensor gy = torch::randn({1, tokens, out}, torch::kFloat64);
    const double scaling = 2.0;
    struct Run {
      Tensor y, dbig, dw, db, da, dbb;
    };
    auto run = [&](bool fused, torch::ScalarType dtype) {
      const Tensor big = leaf(big0, dtype);
      const Tensor w = leaf(w0, dtype, full), b = full ? leaf(b0, dtype) : Tensor();
      // Adapters are fp32 (float64 for the truth), as LinearImpl keeps them.
      const auto adt = dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
      const Tensor a = lora ? leaf(a0, adt) : Tensor(), bb = lora ? leaf(bb0, adt) : Tensor();
      const Tensor gate = big.narrow(-1, 0, inter), up = big.narrow(-1, inter, inter);
      Tensor y;
      if (fused) {
        LinearWeights down;
        if (q) down.quant = q;
        else down.weight = w;
        down.bias = b;
        down.lora_a = a;
        down.lora_b = bb;
        down.lora_scaling = scaling;
        y = swiglu_down(gate, up, down);
      } else {
        const Tensor act = swiglu_reference(gate, up);
        y = at::linear(act, w, b.defined() ? std::optional<Tensor>(b) : std::nullopt);
        if (lora) y = y + at::linear(at::linear(act, a.to(dtype)), bb.to(dtype)) * scaling;
      }
      (y.to(torch::kFloat64) * gy).sum().backward();
      auto grad = [](const Tensor& t) { return t.defined() ? t.grad() : Tensor(); };
      return Run{y.detach(), big.grad(), grad(w), grad(b), grad(a), grad(bb)};
    };
    const Run truth = run(false, torch::kFloat64);
    const std::vector<std::string> names = {"y", "d gate|up", "d weight", "d bias", "d lora_a", "d lora_b"};
    auto fields = [](const Run& x) { return std::vector<Tensor>{x.y, x.dbig, x.dw, x.db, x.da, x.dbb}; };
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      expect_like_layers(fields(run(true, dtype)), fields(run(false, dtype)), fields(truth), dtype, names);
      if (QTest::currentTestFailed()) return;
    }
  }

  void swiglu_down_errors() {
    const Tensor g = torch::randn({4, 6});
    LinearWeights down;
    down.weight = torch::randn({3, 5});
    std::string e = error_of([&] { swiglu_down(g, g, down); });
    QVERIFY2(e.find("swiglu_down: the weight must be [out, 6]") != std::string::npos, e.c_str());
    down.weight = torch::randn({3, 6});
    down.lora_a = torch::randn({2, 6});
    e = error_of([&] { swiglu_down(g, g, down); });
    QVERIFY2(e.find("come together") != std::string::npos, e.c_str());
  }

  // ---------------------------------------------------------------------------------------
  // rms_norm_mlp (the whole MLP of a norm's output, keeping none of its intermediates) inside
  // the graph the decoder builds: add_rms_norm(x, residual) then the MLP of its output, against
  // the layers (add_rms_norm_reference, three projections as LinearImpl computes them,
  // swiglu_reference), differentiated by autograd. Every gradient: x, the residual, the norm
  // weight, and each projection's weight and bias (full) or adapters (LoRA on frozen weights).
  // With LoRA dropout (LoraDropout, a draw per projection) the layers drop each adapter's input
  // by the mask the draw gives (lora_dropout_mask: the same bits in every dtype), as PEFT's
  // nn.Dropout before lora_A: the fused op must use that one mask in
  // forward and in both halves of backward, without keeping it.
  void rms_norm_mlp_vs_layers_data() {
    QTest::addColumn<QString>("mode");
    QTest::newRow("full, biases") << "full";
    QTest::newRow("LoRA r4 on frozen weights") << "lora";
    QTest::newRow("LoRA r4 on 4-bit NF4 bases") << "qlora";
    QTest::newRow("LoRA r4, dropout 0.3") << "lora-dropout";
    QTest::newRow("LoRA r4 on 4-bit NF4 bases, dropout 0.3") << "qlora-dropout";
  }

  void rms_norm_mlp_vs_layers() {
    QFETCH(QString, mode);
    const bool full = mode == "full", lora = !full, quant = mode.startsWith("qlora");
    const bool dropout = mode.endsWith("dropout");
    const int64_t tokens = 29, hidden = 24, inter = 40, r = 4;
    // Its own generator: the tests after it keep the random draws they were tuned with.
    at::Generator gen = at::detail::createCPUGenerator(20261201);
    auto randn = [&](std::vector<int64_t> sizes) { return torch::randn(sizes, gen, torch::kFloat64); };
    const Tensor x0 = randn({1, tokens, hidden});
    const Tensor res0 = randn({1, tokens, hidden});
    const Tensor nw0 = 1 + 0.1 * randn({hidden});
    const int64_t in[3] = {hidden, hidden, inter}, outs[3] = {inter, inter, hidden};
    std::vector<Tensor> w0, b0, a0, bb0;
    std::vector<c10::intrusive_ptr<Quant4Weight>> q0(3);
    for (int p = 0; p < 3; ++p) {
      w0.push_back(randn({outs[p], in[p]}) / std::sqrt(double(in[p])));
      b0.push_back(randn({outs[p]}));
      a0.push_back(randn({r, in[p]}) / std::sqrt(double(in[p])));
      bb0.push_back(randn({outs[p], r}));
      if (quant) q0[p] = quantize_in_place(w0[p]);
    }
    const Tensor gy = randn({1, tokens, hidden});
    const double scaling = 0.5;
    c10::intrusive_ptr<LoraDropout> drops[3];
    if (dropout)
      for (int p = 0; p < 3; ++p) {
        drops[p] = c10::make_intrusive<LoraDropout>();
        drops[p]->p = 0.3;
        drops[p]->seed = 77 + static_cast<std::uint64_t>(p);
        // Each draw drops some and keeps most of its [tokens, in] input.
        const double kept = lora_dropout_mask(*drops[p], tokens, in[p], torch::kFloat32).mean().item<double>();
        QVERIFY2(kept > 0.5 && kept < 0.9, std::to_string(kept).c_str());
      }
    auto run = [&](bool fused, torch::ScalarType dtype, bool skip_output = false) {
      const Tensor x = leaf(x0, dtype), res = leaf(res0, dtype), nw = leaf(nw0, dtype);
      const auto adt = dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
      auto [n, sum] = fused ? add_rms_norm(x, res, nw, kEps) : add_rms_norm_reference(x, res, nw, kEps);
      std::vector<Tensor> leaves{x, res, nw};
      LinearWeights w[3];
      for (int p = 0; p < 3; ++p) {
        w[p].weight = leaf(w0[p], dtype, full);
        w[p].bias = full ? leaf(b0[p], dtype) : Tensor();
        if (lora) w[p].lora_a = leaf(a0[p], adt), w[p].lora_b = leaf(bb0[p], adt), w[p].lora_scaling = scaling;
        for (const Tensor& t : {w[p].weight, w[p].bias, w[p].lora_a, w[p].lora_b})
          if (t.defined() && t.requires_grad()) leaves.push_back(t);
      }
      auto layer = [&](const Tensor& v, const LinearWeights& lw, int p) {
        Tensor y = at::linear(v, lw.weight, lw.bias.defined() ? std::optional<Tensor>(lw.bias) : std::nullopt);
        Tensor va = v;
        if (drops[p]) {
          const Tensor mask = lora_dropout_mask(*drops[p], tokens, v.size(-1), torch::TensorOptions().dtype(dtype));
          va = v * mask.view(v.sizes()) * (1.0 / (1.0 - drops[p]->p));
        }
        if (lora) y = y + at::linear(at::linear(va, lw.lora_a.to(dtype)), lw.lora_b.to(dtype)) * scaling;
        return y;
      };
      LinearWeights fw[3] = {w[0], w[1], w[2]};  // the fused op's: 4-bit bases in place of the weights
      for (int p = 0; p < 3; ++p) {
        if (quant) fw[p].weight = Tensor(), fw[p].quant = q0[p];
        fw[p].dropout = drops[p];
      }
      const Tensor y = fused ? rms_norm_mlp(n, sum, nw, kEps, fw[0], fw[1], fw[2], skip_output)
                             : layer(swiglu_reference(layer(n, w[0], 0), layer(n, w[1], 1)), w[2], 2);
      // The norm's sum feeds the residual stream too (h + mlp(n) in the decoder).
      ((y.to(torch::kFloat64) * gy).sum() + (sum.to(torch::kFloat64) * x0).sum()).backward();
      std::vector<Tensor> g{y.detach()};
      for (const Tensor& t : leaves) g.push_back(t.grad());
      return g;
    };
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      const auto truth = run(false, torch::kFloat64);
      const auto fused = run(true, dtype);
      expect_like_layers(fused, run(false, dtype), truth, dtype);  // y, then each leaf's gradient
      if (QTest::currentTestFailed()) return;
      // skip_output (a checkpointed layer's recomputation): no value, zeros; every gradient
      // bit for bit the computed run's (backward recomputes the adapters' r-wide outputs).
      const auto skipped = run(true, dtype, true);
      QCOMPARE(skipped.size(), fused.size());
      QVERIFY(torch::equal(skipped[0], torch::zeros_like(fused[0])));
      for (std::size_t k = 1; k < fused.size(); ++k)
        QVERIFY2(torch::equal(skipped[k], fused[k]), qPrintable(QString("skip_output: gradient %1 differs").arg(k)));
    }
  }

  // The generator under the LoRA dropout mask (kernels/lora_dropout_bits.h): Philox4x32-10
  // against the known-answer vectors Random123 publishes for it (kat_vectors: counter and key
  // zero, all ones, and the digits of pi).
  void lora_dropout_bits_are_philox() {
    using dropout_bits::philox4x32_10;
    auto words = [](const dropout_bits::Words& w) { return std::vector<std::uint32_t>(w.w, w.w + 4); };
    QCOMPARE(words(philox4x32_10(0, 0, 0, 0, 0, 0)),
             (std::vector<std::uint32_t>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
    QCOMPARE(words(philox4x32_10(~0u, ~0u, ~0u, ~0u, ~0u, ~0u)),
             (std::vector<std::uint32_t>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
    QCOMPARE(words(philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u)),
             (std::vector<std::uint32_t>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
    QCOMPARE(dropout_bits::keep_threshold(0.5), std::uint64_t{1} << 31);
    QCOMPARE(dropout_bits::keep_threshold(0.05), std::uint64_t{4080218931});  // round(0.95 * 2^32)
  }

  // The LoRA dropout mask (kernels/linear.h, LoraDropout): Bernoulli(1 - p) per element, the
  // same bits from the same seed in every dtype (forward and backward rely on it), other bits
  // from another seed or another row, each element's bit word e % 4 of the Philox call for
  // e / 4 (e = row · in + column, so a 4-element call straddles rows when in is not a multiple
  // of 4), and a longer input's mask starts with a shorter one's (blocks of rows do not move
  // the bits).
  void lora_dropout_mask_is_bernoulli() {
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
    for (const double p : {0.3, 0.05}) {
      const int64_t in = int64_t{1} << 16, n = 300;
      LoraDropout d;
      d.p = p;
      d.seed = 5;
      const Tensor m = lora_dropout_mask(d, n, in, f32);
      QVERIFY(torch::equal(m, lora_dropout_mask(d, n, in, f32)));
      QVERIFY(torch::equal(
          m, lora_dropout_mask(d, n, in, torch::TensorOptions().dtype(torch::kBFloat16)).to(torch::kFloat32)));
      QVERIFY(m.eq(0).logical_or(m.eq(1)).all().item<bool>());
      // Kept fraction 1 - p within 6 standard deviations of n·in draws.
      const double count = static_cast<double>(m.numel()), kept = m.sum(torch::kFloat64).item<double>();
      QVERIFY2(std::abs(kept - (1 - p) * count) < 6 * std::sqrt(count * p * (1 - p)), std::to_string(kept).c_str());
      // Another seed, or another row, disagrees where independent draws would: 2p(1 - p).
      LoraDropout e = d;
      e.seed = 6;
      const double expected = 2 * p * (1 - p);
      const double differ =
          m.ne(lora_dropout_mask(e, n, in, f32)).sum(torch::kFloat64).item<double>() / static_cast<double>(m.numel());
      QVERIFY2(std::abs(differ - expected) < 0.005, std::to_string(differ).c_str());
      const double across = m[0].ne(m[1]).sum(torch::kFloat64).item<double>() / static_cast<double>(in);
      QVERIFY2(std::abs(across - expected) < 0.02, std::to_string(across).c_str());
    }
    // Element by element, on a width that is not a multiple of 4; a prefix of rows.
    LoraDropout d;
    d.p = 0.3;
    d.seed = (std::uint64_t{0x9e3779b9} << 32) | 0x7f4a7c15u;
    const int64_t in = 37, n = 50;
    const Tensor m = lora_dropout_mask(d, n, in, f32);
    QVERIFY(torch::equal(lora_dropout_mask(d, 17, in, f32), m.narrow(0, 0, 17)));
    const auto threshold = static_cast<std::uint64_t>(std::llround(0.7 * 4294967296.0));
    const auto acc = m.accessor<float, 2>();
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < in; ++c) {
        const auto e = static_cast<std::uint64_t>(r * in + c);
        const dropout_bits::Words w =
            dropout_bits::philox4x32_10(static_cast<std::uint32_t>(e >> 2), static_cast<std::uint32_t>(e >> 34), 0, 0,
                                        static_cast<std::uint32_t>(d.seed), static_cast<std::uint32_t>(d.seed >> 32));
        QCOMPARE(acc[r][c], w.w[e & 3] < threshold ? 1.0f : 0.0f);
      }
  }

  void rms_norm_mlp_errors() {
    const Tensor s = torch::randn({5, 8}), nw = torch::ones({8});
    LinearWeights g, u, d;
    g.weight = torch::randn({6, 8});
    u.weight = torch::randn({7, 8});
    d.weight = torch::randn({8, 6});
    std::string e = error_of([&] { rms_norm_mlp(torch::randn({5, 7}), s, nw, kEps, g, u, d); });
    QVERIFY2(e.find("the norm output must have the input's shape") != std::string::npos, e.c_str());
    e = error_of([&] { rms_norm_mlp(torch::randn({5, 8}), s, nw, kEps, g, u, d); });
    QVERIFY2(e.find("gate and up must have one width, got 6 and 7") != std::string::npos, e.c_str());
    u.weight = torch::randn({6, 8});
    d.weight = torch::randn({8, 5});
    e = error_of([&] { rms_norm_mlp(torch::randn({5, 8}), s, nw, kEps, g, u, d); });
    QVERIFY2(e.find("rms_norm_mlp (down): the weight must be [out, 6]") != std::string::npos, e.c_str());
  }
};

QTEST_GUILESS_MAIN(TstSwiglu)
#include "tst_swiglu.moc"
