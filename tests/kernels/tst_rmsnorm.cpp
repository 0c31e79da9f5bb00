// The fused RMSNorm ops (kernels/rmsnorm.h: add_rms_norm, rms_norm_linear) against the references (the Hugging Face
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

#include "kernels/quant4.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "tests/support/autograd_graph.h"
#include "tests/support/kernel_checks.h"

using namespace odyssey::kernels;
using namespace odyssey::testing::kernel_checks;
using torch::Tensor;

namespace {

struct RmsRun {
  Tensor y, sum, dx, dres, dw;
};

// gy / gs: upstream gradients of y and sum (float64), either may be undefined (output unused).
RmsRun run_rms(bool fused, const Tensor& x0, const Tensor& r0, const Tensor& w0, bool w_grad, const Tensor& gy,
               const Tensor& gs, torch::ScalarType dtype) {
  const Tensor x = leaf(x0, dtype);
  const Tensor r = r0.defined() ? leaf(r0, dtype) : Tensor();
  const Tensor w = leaf(w0, dtype, w_grad);
  auto [y, sum] = fused ? add_rms_norm(x, r, w, kEps) : add_rms_norm_reference(x, r, w, kEps);
  Tensor loss = torch::zeros({}, torch::kFloat64);
  if (gy.defined()) loss = loss + (y.to(torch::kFloat64) * gy).sum();
  if (gs.defined()) loss = loss + (sum.to(torch::kFloat64) * gs).sum();
  loss.backward();
  return {y.detach(), sum.detach(), x.grad(), r.defined() ? r.grad() : Tensor(), w.grad()};
}

}  // namespace

class TstRmsNorm : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() { torch::manual_seed(1234); }

  // ---------------------------------------------------------------------------------------
  void rmsnorm_vs_reference_data() {
    QTest::addColumn<QString>("shape");
    QTest::addColumn<bool>("residual");
    QTest::addColumn<bool>("w_grad");
    QTest::addColumn<int>("outputs");  // 1: y only, 2: sum only, 3: both
    QTest::newRow("single row H=13, residual, y+sum") << "1,13" << true << true << 3;
    QTest::newRow("single row H=13, no residual, y") << "1,13" << false << true << 1;
    QTest::newRow("257x129, residual, y+sum") << "257,129" << true << true << 3;
    QTest::newRow("257x129, residual, frozen weight") << "257,129" << true << false << 3;
    QTest::newRow("257x129, no residual, y+sum") << "257,129" << false << true << 3;
    QTest::newRow("257x129, residual, sum only") << "257,129" << true << true << 2;
    QTest::newRow("qk-norm [7,5,40], no residual") << "7,5,40" << false << true << 1;
    QTest::newRow("2x1000, residual, y only, frozen") << "2,1000" << true << false << 1;
    QTest::newRow("64x64 (H multiple of 8), residual") << "64,64" << true << true << 3;
  }

  void rmsnorm_vs_reference() {
    QFETCH(QString, shape);
    QFETCH(bool, residual);
    QFETCH(bool, w_grad);
    QFETCH(int, outputs);
    std::vector<int64_t> sizes;
    for (const QString& p : shape.split(',')) sizes.push_back(p.toLongLong());
    const Tensor x = torch::randn(sizes, torch::kFloat64) * 2;
    const Tensor r = residual ? torch::randn(sizes, torch::kFloat64) : Tensor();
    const Tensor w = 1 + 0.5 * torch::randn({sizes.back()}, torch::kFloat64);
    const Tensor gy = (outputs & 1) ? torch::randn(sizes, torch::kFloat64) : Tensor();
    const Tensor gs = (outputs & 2) ? torch::randn(sizes, torch::kFloat64) : Tensor();

    // fp32 fused against the reference in float64.
    const RmsRun f32 = run_rms(true, x, r, w, w_grad, gy, gs, torch::kFloat32);
    const RmsRun f64 = run_rms(false, x, r, w, w_grad, gy, gs, torch::kFloat64);
    const RmsRun r32 = run_rms(false, x, r, w, w_grad, gy, gs, torch::kFloat32);
    QVERIFY2(torch::equal(f32.y, r32.y), "fp32 y differs from the fp32 reference (must be bit-identical)");
    QVERIFY2(torch::equal(f32.sum, r32.sum), "fp32 sum differs from the fp32 reference");
    QVERIFY2(rel(f32.y, f64.y) < kF32, qPrintable(QString("fp32 y rel %1").arg(rel(f32.y, f64.y))));
    QVERIFY2(rel(f32.dx, f64.dx) < kF32, qPrintable(QString("fp32 dx rel %1").arg(rel(f32.dx, f64.dx))));
    if (residual) {
      QVERIFY(f32.dres.defined());
      QVERIFY2(rel(f32.dres, f64.dres) < kF32, qPrintable(QString("fp32 dres rel %1").arg(rel(f32.dres, f64.dres))));
    }
    QCOMPARE(f32.dw.defined(), w_grad);
    const bool dw_flows = w_grad && (outputs & 1);  // without y in the loss the reference has no dw
    if (w_grad && !dw_flows) QVERIFY2(f32.dw.abs().max().item<double>() == 0, "dw must be zero when y is unused");
    if (dw_flows) QVERIFY2(rel(f32.dw, f64.dw) < kF32, qPrintable(QString("fp32 dw rel %1").arg(rel(f32.dw, f64.dw))));

    // bf16 fused against the bf16 reference: identical forward roundings, gradients within
    // kBf16 of the reference and no further from the float64 truth than it.
    const RmsRun fb = run_rms(true, x, r, w, w_grad, gy, gs, torch::kBFloat16);
    const RmsRun rb = run_rms(false, x, r, w, w_grad, gy, gs, torch::kBFloat16);
    QVERIFY2(torch::equal(fb.y, rb.y), "bf16 y differs from the bf16 reference (must be bit-identical)");
    QVERIFY2(torch::equal(fb.sum, rb.sum), "bf16 sum differs from the bf16 reference");
    auto check_bf16 = [&](const Tensor& got, const Tensor& ref, const Tensor& truth, const char* what) {
      const double e = rel(got, ref);
      QVERIFY2(e <= kBf16, qPrintable(QString("bf16 %1 rel to reference %2 > %3").arg(what).arg(e).arg(kBf16)));
      const double ef = rel(got, truth), er = rel(ref, truth);
      QVERIFY2(ef <= er + kBf16Slack,
               qPrintable(QString("bf16 %1: fused error %2 vs reference error %3").arg(what).arg(ef).arg(er)));
    };
    check_bf16(fb.dx, rb.dx, f64.dx, "dx");
    if (residual) check_bf16(fb.dres, rb.dres, f64.dres, "dres");
    QCOMPARE(fb.dw.defined(), w_grad);
    if (dw_flows) check_bf16(fb.dw, rb.dw, f64.dw, "dw");

    // f16 runs and agrees with its reference as bf16 does (f16 has 3 more mantissa bits).
    const RmsRun fh = run_rms(true, x, r, w, w_grad, gy, gs, torch::kFloat16);
    const RmsRun rh = run_rms(false, x, r, w, w_grad, gy, gs, torch::kFloat16);
    QVERIFY(torch::equal(fh.y, rh.y));
    QVERIFY2(rel(fh.dx, rh.dx) <= kBf16 / 8, qPrintable(QString("f16 dx rel %1").arg(rel(fh.dx, rh.dx))));
  }

  void rmsnorm_without_residual_returns_x() {
    const Tensor x = torch::randn({3, 8});
    const Tensor w = torch::ones({8});
    auto [y, sum] = add_rms_norm(x, {}, w, kEps);
    QVERIFY(sum.data_ptr() == x.data_ptr());  // no copy
    const Tensor y2 = rms_norm(x, w, kEps);
    QVERIFY(torch::equal(y, y2));
  }

  void rmsnorm_errors() {
    const Tensor x = torch::randn({4, 16});
    const Tensor w = torch::ones({16});
    auto has = [](const std::string& msg, const char* needle) { return msg.find(needle) != std::string::npos; };
    std::string e = error_of([&] { add_rms_norm(x, {}, torch::ones({15}), kEps); });
    QVERIFY2(has(e, "weight must be [H] = [16]"), e.c_str());
    e = error_of([&] { add_rms_norm(x, {}, w.to(torch::kBFloat16), kEps); });
    QVERIFY2(has(e, "weight dtype"), e.c_str());
    e = error_of([&] { add_rms_norm(x, torch::randn({4, 15}), w, kEps); });
    QVERIFY2(has(e, "residual shape"), e.c_str());
    e = error_of([&] { add_rms_norm(x, x.to(torch::kFloat16), w, kEps); });
    QVERIFY2(has(e, "residual dtype"), e.c_str());
    e = error_of([&] { add_rms_norm(x.to(torch::kFloat64), {}, w.to(torch::kFloat64), kEps); });
    QVERIFY2(has(e, "must be float32, bfloat16 or float16"), e.c_str());
    e = error_of([&] { add_rms_norm(torch::randn({4, 0}), {}, torch::ones({0}), kEps); });
    QVERIFY2(has(e, "H > 0"), e.c_str());
  }

  // ---------------------------------------------------------------------------------------
  // rms_norm_linear (a projection of a norm's output that recomputes the output in backward
  // instead of keeping it) inside the graph the decoder builds: add_rms_norm(x, residual), then
  // two projections of its output (as q and k, or gate and up, share one), against the same
  // graph with plain linear layers, every input's gradient through the norm included.
  // The full row shares one recomputation between the two projections (NormShare), the LoRA
  // row lets each recompute its own.
  void rms_norm_linear_vs_layers_data() {
    QTest::addColumn<QString>("mode");
    QTest::newRow("full, bias, residual, shared recomputation") << "full";
    QTest::newRow("LoRA r4 on frozen weights, no residual") << "lora";
    QTest::newRow("LoRA r4 on 4-bit NF4 bases, shared recomputation") << "qlora";
  }

  void rms_norm_linear_vs_layers() {
    QFETCH(QString, mode);
    const bool full = mode == "full", lora = mode == "lora" || mode == "qlora", quant = mode == "qlora";
    const int64_t tokens = 29, hidden = 40, out = 24, r = 4;
    // Its own generator: the tests after it keep the random draws they were tuned with.
    at::Generator gen = at::detail::createCPUGenerator(20261130);
    auto randn = [&](std::vector<int64_t> sizes) { return torch::randn(sizes, gen, torch::kFloat64); };
    const Tensor x0 = randn({1, tokens, hidden});
    const Tensor res0 = randn({1, tokens, hidden});
    const Tensor nw0 = 1.0 + 0.1 * randn({hidden});
    std::vector<Tensor> w0, b0, a0, bb0, gy;
    std::vector<c10::intrusive_ptr<Quant4Weight>> q0(2);
    for (int p = 0; p < 2; ++p) {
      w0.push_back(randn({out, hidden}) / std::sqrt(double(hidden)));
      b0.push_back(randn({out}));
      a0.push_back(randn({r, hidden}) / std::sqrt(double(hidden)));
      bb0.push_back(randn({out, r}));
      gy.push_back(randn({1, tokens, out}));
      if (quant) q0[p] = quantize_in_place(w0[p]);
    }
    const double scaling = 0.5;
    bool share_released = true;
    auto run = [&](bool fused, torch::ScalarType dtype) {
      const Tensor x = leaf(x0, dtype), res = full ? leaf(res0, dtype) : Tensor(), nw = leaf(nw0, dtype);
      const auto adt = dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
      auto [n, sum] = fused ? add_rms_norm(x, res, nw, kEps) : add_rms_norm_reference(x, res, nw, kEps);
      const auto share = fused && (full || quant) ? c10::make_intrusive<NormShare>() : c10::intrusive_ptr<NormShare>();
      std::vector<Tensor> leaves{x, nw};
      if (full) leaves.push_back(res);
      Tensor loss = torch::zeros({}, torch::kFloat64);
      for (int p = 0; p < 2; ++p) {
        LinearWeights w;
        w.weight = leaf(w0[p], dtype, full);
        w.bias = full ? leaf(b0[p], dtype) : Tensor();
        if (lora) w.lora_a = leaf(a0[p], adt), w.lora_b = leaf(bb0[p], adt), w.lora_scaling = scaling;
        Tensor y;
        if (fused) {
          LinearWeights fw = w;
          if (quant) fw.weight = Tensor(), fw.quant = q0[p];
          y = rms_norm_linear(n, sum, nw, kEps, fw, share);
        } else {
          y = at::linear(n, w.weight, w.bias.defined() ? std::optional<Tensor>(w.bias) : std::nullopt);
          if (lora) y = y + at::linear(at::linear(n, w.lora_a.to(dtype)), w.lora_b.to(dtype)) * scaling;
        }
        loss = loss + (y.to(torch::kFloat64) * gy[p]).sum();
        for (const Tensor& t : {w.weight, w.bias, w.lora_a, w.lora_b})
          if (t.defined() && t.requires_grad()) leaves.push_back(t);
      }
      // The norm's sum feeds the residual stream too (h + mlp(n) in the decoder).
      loss = loss + (sum.to(torch::kFloat64) * x0).sum();
      const int pending_before = share ? share->pending : 2;
      loss.backward();
      // Both projections registered; once both backward ran, the shared output is released.
      // Their gradients of n were summed in the share and handed over by the second.
      if (share && (pending_before != 2 || share->pending != 0 || share->output.defined() || share->summed != 0 ||
                    share->input_grad.defined()))
        share_released = false;
      std::vector<Tensor> g;
      for (const Tensor& t : leaves) g.push_back(t.grad());
      return g;
    };
    const auto truth = run(false, torch::kFloat64);
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      const auto f = run(true, dtype), ref = run(false, dtype);
      QVERIFY2(share_released, "the shared recomputation was not registered twice and released");
      expect_like_layers(f, ref, truth, dtype);  // each leaf's gradient
      if (QTest::currentTestFailed()) return;
    }
  }

  // The decoder rotates views of the q and k projections in place (apply_rope_): a custom
  // Function's output that autograd tracks as a view would refuse that ("Output 0 of
  // ViewBackward0 is a view ... created inside a custom Function"), as at::linear's output
  // for a 3-d input is. The gradient then goes through the rotation.
  void rms_norm_linear_output_rotates_in_place() {
    const int64_t t = 7, heads = 2, d = 8, hidden = 12;
    const Tensor s = torch::randn({1, t, hidden}, torch::kFloat32).requires_grad_(true);
    const Tensor nw = torch::ones({hidden}, torch::kFloat32);
    LinearWeights w;
    w.weight = torch::randn({heads * d, hidden}, torch::kFloat32).requires_grad_(true);
    w.bias = torch::randn({heads * d}, torch::kFloat32).requires_grad_(true);
    const auto [cos64, sin64] = cos_sin(positions(t), d);
    const Tensor cos = cos64.to(torch::kFloat32), sin = sin64.to(torch::kFloat32);
    auto rotated = [&](bool fused) {
      const Tensor n = fused ? rms_norm(s, nw, kEps) : add_rms_norm_reference(s, {}, nw, kEps).first;
      Tensor q = fused ? rms_norm_linear(n, s, nw, kEps, w) : at::linear(n, w.weight, std::optional<Tensor>(w.bias));
      Tensor k = fused ? rms_norm_linear(n, s, nw, kEps, w) : at::linear(n, w.weight, std::optional<Tensor>(w.bias));
      return fused ? apply_rope_(q.view({t, heads, d}), k.view({t, heads, d}), cos, sin)
                   : apply_rope_reference(q.view({t, heads, d}), k.view({t, heads, d}), cos, sin);
    };
    std::vector<Tensor> grads[2];
    for (int fused = 0; fused < 2; ++fused) {
      auto [q, k] = rotated(fused == 1);
      const Tensor loss = q.sum() + 2 * k.sum();
      if (fused == 1) {
        // The views cover the projections' whole outputs: those are marked dirty, so autograd
        // keeps no view bookkeeping (no CopySlices, no as_strided backward) for the rotation.
        for (const std::string& name : odyssey::test::graph_node_names(loss))
          QVERIFY2(name.find("CopySlices") == std::string::npos && name.find("AsStrided") == std::string::npos,
                   name.c_str());
      }
      loss.backward();
      grads[fused] = {s.grad().clone(), w.weight.grad().clone(), w.bias.grad().clone()};
      for (const Tensor& p : {s, w.weight, w.bias}) p.grad().zero_();
    }
    for (int i = 0; i < 3; ++i) QVERIFY2(rel(grads[1][i], grads[0][i]) < kF32, qPrintable(QString::number(i)));
  }

  // Three projections sharing one NormShare (q, k and v): their gradients of the norm output
  // are summed in the share and handed over by whichever backward runs last, in every backward
  // through a retained graph (the second doubles the first), against the layers' autograd sum.
  void rms_norm_linear_shared_gradient_sum() {
    const int64_t t = 6, hidden = 10;
    const Tensor x0 = torch::randn({1, t, hidden}, torch::kFloat32);
    const Tensor nw = torch::randn({hidden}, torch::kFloat32);
    std::vector<LinearWeights> ws(3);
    for (int p = 0; p < 3; ++p) ws[p].weight = torch::randn({4 + 2 * p, hidden}, torch::kFloat32);
    Tensor grads[2];
    for (int fused = 0; fused < 2; ++fused) {
      const Tensor x = x0.clone().requires_grad_(true);
      const auto share = c10::make_intrusive<NormShare>();
      const Tensor n = fused ? rms_norm(x, nw, kEps) : add_rms_norm_reference(x, {}, nw, kEps).first;
      Tensor loss = torch::zeros({}, torch::kFloat32);
      for (int p = 0; p < 3; ++p) {
        const Tensor y = fused ? rms_norm_linear(n, x, nw, kEps, ws[p], share) : at::linear(n, ws[p].weight);
        loss = loss + (y * (p + 1)).pow(2).sum();
      }
      loss.backward({}, /*retain_graph=*/true);
      const Tensor once = x.grad().clone();
      loss.backward();
      QVERIFY2(rel(x.grad(), 2 * once) < 1e-6, "the second backward did not give the same gradient");
      QVERIFY2(!fused || (share->summed == 0 && !share->input_grad.defined() && share->projections == 3),
               "the share kept a partial sum");
      grads[fused] = once;
    }
    QVERIFY2(rel(grads[1], grads[0]) < kF32, qPrintable(QString::number(rel(grads[1], grads[0]))));
  }

  // The recomputed output must be the one the caller computed: a norm of the same input.
  void rms_norm_linear_errors() {
    const Tensor s = torch::randn({5, 8}), nw = torch::ones({8});
    LinearWeights w;
    w.weight = torch::randn({3, 8});
    std::string e = error_of([&] { rms_norm_linear(torch::randn({5, 7}), s, nw, kEps, w); });
    QVERIFY2(e.find("the norm output must have the input's shape") != std::string::npos, e.c_str());
    w.weight = torch::randn({3, 7});
    e = error_of([&] { rms_norm_linear(torch::randn({5, 8}), s, nw, kEps, w); });
    QVERIFY2(e.find("rms_norm_linear: the weight must be [out, 8]") != std::string::npos, e.c_str());
  }
};

QTEST_GUILESS_MAIN(TstRmsNorm)
#include "tst_rmsnorm.moc"
