// The fused ops (kernels/rmsnorm.h, swiglu.h, rope.h) against their references, the Hugging
// Face formulas differentiated by autograd, on the CPU: there the fused ops run the same
// hand-written forward/backward math as the CUDA kernels, in ATen ops (the CUDA code itself
// is checked on a GPU by `odyssey-train selftest`).
//
// Error measure: rel(got, want) = max|got - want| / max|want| over the tensor.
// Tolerances:
//  - fp32 fused vs the reference run in float64: kF32 = 1e-6. fp32 carries 2^-24 = 6e-8
//    relative per rounding; the fused and reference paths round in different places (one
//    fp32 rounding per fused step, the reference's reductions in another order), which
//    leaves a few 1e-7 at most on these sizes; 1e-6 is an order above that and four below
//    any formula error (a wrong term moves the result by > 1e-3).
//  - bf16 fused vs the bf16 reference: forwards that round exactly as HF are compared bit for
//    bit. Gradients: the fused backward computes in fp32 and rounds once, the reference's
//    autograd rounds every intermediate to bf16 (e.g. dy * w, then dnorm, then dnorm + dsum),
//    so they differ by a few bf16 roundings (2^-9 relative each, at most 2^-8 = 1 ulp near
//    the top of a binade). kBf16 = 2^-7 = 1 ulp of the largest value's binade, i.e. "within
//    1-2 ulp of the maximum". The fused gradients must also be no further from the float64
//    truth than the bf16 reference is (plus 2^-9 slack): they round less.
#define QT_NO_KEYWORDS
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <QtTest>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kernels/quant4.h"
#include "kernels/rmsnorm.h"
#include "tests/support/autograd_graph.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

using namespace odyssey::kernels;
using torch::Tensor;

namespace {

constexpr double kF32 = 1e-6;
constexpr double kBf16 = 1.0 / 128;       // 2^-7
constexpr double kBf16Slack = 1.0 / 512;  // 2^-9
constexpr double kEps = 1e-6;

double rel(const Tensor& got, const Tensor& want) {
  const Tensor g = got.detach().to(torch::kFloat64);
  const Tensor w = want.detach().to(torch::kFloat64);
  const double scale = w.abs().max().item<double>();
  const double err = (g - w).abs().max().item<double>();
  const double r = scale > 0 ? err / scale : err;
  if (std::getenv("FUSED_OPS_VERBOSE")) qInfo("rel error %.3g (max|want| %.3g)", r, scale);
  return r;
}

// Runs fn and returns the exception message ("" when nothing was thrown).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

// A 4-bit (NF4, double-quantized) copy of the float64 weight w, and w replaced by what it
// dequantizes to: the layers then compute with exactly the base the fused op dequantizes.
c10::intrusive_ptr<Quant4Weight> quantize_in_place(Tensor& w) {
  auto q = quantize_4bit(w.to(torch::kFloat32), Quant4Type::NF4, 64, /*double_quant=*/true);
  w = dequantize_4bit(*q, torch::kFloat32).to(torch::kFloat64);
  return q;
}

Tensor leaf(const Tensor& t, torch::ScalarType dtype, bool grad = true) {
  return t.to(dtype).detach().clone().requires_grad_(grad);
}

// A fused op's outputs/gradients `f` against the layers it replaces, `ref`, run in the same
// dtype, both measured from the float64 truth: fp32 within kF32, bf16 no further than twice
// the layers' own error plus 2^-9. `names` label the entries (their index when empty). QTest
// failures return from here: callers check QTest::currentTestFailed().
void expect_like_layers(const std::vector<Tensor>& f, const std::vector<Tensor>& ref, const std::vector<Tensor>& truth,
                        torch::ScalarType dtype, const std::vector<std::string>& names = {}) {
  QCOMPARE(f.size(), truth.size());
  for (std::size_t i = 0; i < truth.size(); ++i) {
    const QString name = i < names.size() ? QString::fromStdString(names[i]) : QString::number(i);
    QVERIFY2(f[i].defined() == truth[i].defined(), qPrintable(name + ": defined differs from the truth"));
    if (!truth[i].defined()) continue;
    QCOMPARE(f[i].scalar_type(), ref[i].scalar_type());
    const double got = rel(f[i], truth[i]), reference = rel(ref[i], truth[i]);
    const QString what = QString("%1 %2: fused %3, layers %4")
                             .arg(dtype == torch::kFloat32 ? "fp32" : "bf16", name)
                             .arg(got)
                             .arg(reference);
    if (dtype == torch::kFloat32) QVERIFY2(got < kF32, qPrintable(what));
    else QVERIFY2(got <= 2 * reference + kBf16Slack, qPrintable(what));
  }
}

// --- RMSNorm -------------------------------------------------------------------------------

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

// --- RoPE ----------------------------------------------------------------------------------

// HF's cos/sin for explicit (restarting) position ids, [T, D] in fp64.
std::pair<Tensor, Tensor> cos_sin(const std::vector<int64_t>& pos, int64_t d) {
  const Tensor inv = 1.0 / torch::pow(10000.0, torch::arange(0, d, 2, torch::kFloat64) / static_cast<double>(d));
  const Tensor p = torch::tensor(pos, torch::kInt64).to(torch::kFloat64);
  const Tensor f = p.unsqueeze(1) * inv.unsqueeze(0);
  const Tensor emb = torch::cat({f, f}, -1);
  return {emb.cos(), emb.sin()};
}

std::vector<int64_t> positions(int64_t t) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < t; ++i) p.push_back(i);
  return p;
}

struct RopeRun {
  Tensor q, k, dx, dwq, dwk;
};

// q and k are views of linear projections of one input (as the attention computes them):
// fused: apply_rope_ in place; reference: HF's out-of-place formula. The loss weights the
// rotated q and k by fixed random tensors so every element's gradient differs.
RopeRun run_rope(bool fused, const Tensor& x0, const Tensor& wq0, const Tensor& wk0, int64_t hq, int64_t hk,
                 const Tensor& cos0, const Tensor& sin0, const Tensor& gq, const Tensor& gk, torch::ScalarType dtype) {
  const Tensor x = leaf(x0, dtype), wq = leaf(wq0, dtype), wk = leaf(wk0, dtype);
  const int64_t t = x0.size(0), d = cos0.size(1);
  Tensor q = torch::nn::functional::linear(x, wq).view({t, hq, d});
  Tensor k = torch::nn::functional::linear(x, wk).view({t, hk, d});
  const Tensor c = cos0.to(dtype), s = sin0.to(dtype);
  auto [qr, kr] = fused ? apply_rope_(q, k, c, s) : apply_rope_reference(q, k, c, s);
  const Tensor loss = (qr.to(torch::kFloat64) * gq).sum() + (kr.to(torch::kFloat64) * gk).sum();
  loss.backward();
  return {qr.detach(), kr.detach(), x.grad(), wq.grad(), wk.grad()};
}

}  // namespace

class TstFusedOps : public QObject {
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
    auto run = [&](bool fused, torch::ScalarType dtype) {
      const Tensor big = leaf(big0, dtype);
      const Tensor gate = big.narrow(-1, 0, inter), up = big.narrow(-1, inter, inter);
      const Tensor y = fused ? swiglu(gate, up) : swiglu_reference(gate, up);
      (y.to(torch::kFloat64) * gy).sum().backward();
      return Run{y.detach(), big.grad()};
    };
    const Run f64 = run(false, torch::kFloat64);
    const Run f32 = run(true, torch::kFloat32), r32 = run(false, torch::kFloat32);
    QVERIFY2(torch::equal(f32.y, r32.y), "fp32 y differs from the fp32 reference (must be bit-identical)");
    QVERIFY2(rel(f32.y, f64.y) < kF32, qPrintable(QString("fp32 y rel %1").arg(rel(f32.y, f64.y))));
    QVERIFY2(rel(f32.dbig, f64.dbig) < kF32, qPrintable(QString("fp32 grad rel %1").arg(rel(f32.dbig, f64.dbig))));
    const Run fb = run(true, torch::kBFloat16), rb = run(false, torch::kBFloat16);
    QVERIFY2(torch::equal(fb.y, rb.y), "bf16 y differs from the bf16 reference (must be bit-identical)");
    for (int64_t half = 0; half < 2; ++half) {
      const Tensor got = fb.dbig.narrow(-1, half * inter, inter), ref = rb.dbig.narrow(-1, half * inter, inter);
      const Tensor truth = f64.dbig.narrow(-1, half * inter, inter);
      const double e = rel(got, ref);
      QVERIFY2(e <= kBf16, qPrintable(QString("bf16 %1 rel %2").arg(half ? "dup" : "dgate").arg(e)));
      QVERIFY2(rel(got, truth) <= rel(ref, truth) + kBf16Slack,
               qPrintable(QString("bf16 %1 error %2 vs reference %3")
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
  void rms_norm_mlp_vs_layers_data() {
    QTest::addColumn<QString>("mode");
    QTest::newRow("full, biases") << "full";
    QTest::newRow("LoRA r4 on frozen weights") << "lora";
    QTest::newRow("LoRA r4 on 4-bit NF4 bases") << "qlora";
  }

  void rms_norm_mlp_vs_layers() {
    QFETCH(QString, mode);
    const bool full = mode == "full", lora = !full, quant = mode == "qlora";
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
    auto run = [&](bool fused, torch::ScalarType dtype) {
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
      auto layer = [&](const Tensor& v, const LinearWeights& lw) {
        Tensor y = at::linear(v, lw.weight, lw.bias.defined() ? std::optional<Tensor>(lw.bias) : std::nullopt);
        if (lora) y = y + at::linear(at::linear(v, lw.lora_a.to(dtype)), lw.lora_b.to(dtype)) * scaling;
        return y;
      };
      LinearWeights fw[3] = {w[0], w[1], w[2]};  // the fused op's: 4-bit bases in place of the weights
      if (quant)
        for (int p = 0; p < 3; ++p) fw[p].weight = Tensor(), fw[p].quant = q0[p];
      const Tensor y = fused ? rms_norm_mlp(n, sum, nw, kEps, fw[0], fw[1], fw[2])
                             : layer(swiglu_reference(layer(n, w[0]), layer(n, w[1])), w[2]);
      // The norm's sum feeds the residual stream too (h + mlp(n) in the decoder).
      ((y.to(torch::kFloat64) * gy).sum() + (sum.to(torch::kFloat64) * x0).sum()).backward();
      std::vector<Tensor> g{y.detach()};
      for (const Tensor& t : leaves) g.push_back(t.grad());
      return g;
    };
    const auto truth = run(false, torch::kFloat64);
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      expect_like_layers(run(true, dtype), run(false, dtype), truth, dtype);  // y, then each leaf's gradient
      if (QTest::currentTestFailed()) return;
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
      const auto share =
          fused && (full || quant) ? c10::make_intrusive<NormShare>() : c10::intrusive_ptr<NormShare>();
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
      Tensor q = fused ? rms_norm_linear(n, s, nw, kEps, w)
                       : at::linear(n, w.weight, std::optional<Tensor>(w.bias));
      Tensor k = fused ? rms_norm_linear(n, s, nw, kEps, w)
                       : at::linear(n, w.weight, std::optional<Tensor>(w.bias));
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

  // ---------------------------------------------------------------------------------------
  void rope_vs_reference_data() {
    QTest::addColumn<int>("tokens");
    QTest::addColumn<int>("hq");
    QTest::addColumn<int>("hk");
    QTest::addColumn<int>("dim");
    QTest::addColumn<bool>("packed");
    QTest::addColumn<bool>("random_cs");  // cos/sin with different halves: catches c1/c2, s1/s2 mix-ups
    QTest::newRow("single token, D=64") << 1 << 4 << 2 << 64 << false << false;
    QTest::newRow("T=37, Hq=6, Hk=2, D=128") << 37 << 6 << 2 << 128 << false << false;
    QTest::newRow("T=37, packed positions, D=80") << 37 << 3 << 1 << 80 << true << false;
    QTest::newRow("T=9, D=6 (half not a multiple of 8)") << 9 << 2 << 2 << 6 << true << false;
    QTest::newRow("T=13, D=32, random cos/sin halves") << 13 << 3 << 2 << 32 << false << true;
  }

  // q, k: views of linear outputs in a real graph; loss.backward() must reach the inputs
  // and the projection weights with the reference's gradients.
  void rope_vs_reference() {
    QFETCH(int, tokens);
    QFETCH(int, hq);
    QFETCH(int, hk);
    QFETCH(int, dim);
    QFETCH(bool, packed);
    QFETCH(bool, random_cs);
    const int64_t t = tokens, d = dim, hin = 24;
    std::vector<int64_t> pos;
    if (packed) {  // rows of 5, 11, then the rest: positions restart at 0
      for (int64_t i = 0; i < t; ++i) pos.push_back(i < 5 ? i : i < 16 ? i - 5 : i - 16);
    } else {
      pos = positions(t);
    }
    auto [c, s] = cos_sin(pos, d);
    if (random_cs) {
      c = torch::randn({t, d}, torch::kFloat64);
      s = torch::randn({t, d}, torch::kFloat64);
    }
    const Tensor x = torch::randn({t, hin}, torch::kFloat64);
    const Tensor wq = torch::randn({hq * d, hin}, torch::kFloat64) * 0.3;
    const Tensor wk = torch::randn({hk * d, hin}, torch::kFloat64) * 0.3;
    const Tensor gq = torch::randn({t, hq, d}, torch::kFloat64);
    const Tensor gk = torch::randn({t, hk, d}, torch::kFloat64);

    const RopeRun f64 = run_rope(false, x, wq, wk, hq, hk, c, s, gq, gk, torch::kFloat64);
    const RopeRun f32 = run_rope(true, x, wq, wk, hq, hk, c, s, gq, gk, torch::kFloat32);
    const RopeRun r32 = run_rope(false, x, wq, wk, hq, hk, c, s, gq, gk, torch::kFloat32);
    QVERIFY2(torch::equal(f32.q, r32.q) && torch::equal(f32.k, r32.k), "fp32 forward not bit-identical to HF");
    for (const auto& [got, want, what] : {std::tuple{f32.dx, f64.dx, "dx"}, std::tuple{f32.dwq, f64.dwq, "dWq"},
                                          std::tuple{f32.dwk, f64.dwk, "dWk"}}) {
      QVERIFY2(got.defined(), what);
      QVERIFY2(rel(got, want) < kF32, qPrintable(QString("fp32 %1 rel %2").arg(what).arg(rel(got, want))));
    }
    const RopeRun fb = run_rope(true, x, wq, wk, hq, hk, c, s, gq, gk, torch::kBFloat16);
    const RopeRun rb = run_rope(false, x, wq, wk, hq, hk, c, s, gq, gk, torch::kBFloat16);
    QVERIFY2(torch::equal(fb.q, rb.q) && torch::equal(fb.k, rb.k), "bf16 forward not bit-identical to HF");
    for (const auto& [got, want, truth, what] :
         {std::tuple{fb.dx, rb.dx, f64.dx, "dx"}, std::tuple{fb.dwq, rb.dwq, f64.dwq, "dWq"},
          std::tuple{fb.dwk, rb.dwk, f64.dwk, "dWk"}}) {
      QVERIFY2(rel(got, want) <= kBf16, qPrintable(QString("bf16 %1 rel %2").arg(what).arg(rel(got, want))));
      QVERIFY2(rel(got, truth) <= rel(want, truth) + kBf16Slack,
               qPrintable(
                   QString("bf16 %1 error %2 vs reference %3").arg(what).arg(rel(got, truth)).arg(rel(want, truth))));
    }
    if (packed) {
      // Each packed row rotates as if alone: positions 0 leave q unchanged (cos 1, sin 0) and
      // the second row equals the same tokens rotated with positions 0..10 on their own.
      const Tensor q0 = torch::nn::functional::linear(x.to(torch::kFloat32), wq.to(torch::kFloat32)).view({t, hq, d});
      QVERIFY(torch::equal(f32.q[0], q0[0]));
      if (t > 5) QVERIFY(torch::equal(f32.q[5], q0[5]));
      if (t >= 16) {
        auto [c2, s2] = cos_sin(positions(11), d);
        Tensor qs = q0.narrow(0, 5, 11).clone(), ks = torch::zeros({11, 1, d});
        apply_rope_(qs, ks, c2.to(torch::kFloat32), s2.to(torch::kFloat32));
        QVERIFY(torch::equal(qs, f32.q.narrow(0, 5, 11)));
      }
    }
  }

  // q and k as two views of one fused QKV projection (both rebased on the same base).
  void rope_views_of_one_projection() {
    const int64_t t = 11, hq = 4, hk = 2, d = 32, hin = 16;
    auto [c, s] = cos_sin(positions(t), d);
    const Tensor x0 = torch::randn({t, hin}, torch::kFloat64);
    const Tensor w0 = torch::randn({(hq + 2 * hk) * d, hin}, torch::kFloat64) * 0.3;
    const Tensor g = torch::randn({t, (hq + 2 * hk) * d}, torch::kFloat64);
    auto run = [&](bool fused, torch::ScalarType dtype) {
      const Tensor x = leaf(x0, dtype), w = leaf(w0, dtype);
      const Tensor qkv = torch::nn::functional::linear(x, w);
      Tensor q = qkv.narrow(1, 0, hq * d).view({t, hq, d});
      Tensor k = qkv.narrow(1, hq * d, hk * d).view({t, hk, d});
      const Tensor v = qkv.narrow(1, (hq + hk) * d, hk * d);
      const Tensor cc = c.to(dtype), ss = s.to(dtype);
      auto [qr, kr] = fused ? apply_rope_(q, k, cc, ss) : apply_rope_reference(q, k, cc, ss);
      const Tensor out = torch::cat({qr.reshape({t, -1}), kr.reshape({t, -1}), v}, 1);
      (out.to(torch::kFloat64) * g).sum().backward();
      return std::pair{x.grad(), w.grad()};
    };
    const auto truth = run(false, torch::kFloat64);
    const auto got = run(true, torch::kFloat32);
    QVERIFY2(rel(got.first, truth.first) < kF32, qPrintable(QString("dx rel %1").arg(rel(got.first, truth.first))));
    QVERIFY2(rel(got.second, truth.second) < kF32,
             qPrintable(QString("dW rel %1").arg(rel(got.second, truth.second))));
  }

  // The engine may give one gradient tensor to several nodes (here AddBackward hands dz to
  // both the rotation's backward and `extra`): the inverse rotation must not overwrite it.
  // Also sum() gives zero-stride (expanded) gradients, which cannot be rotated in place.
  void rope_shared_and_expanded_gradients() {
    const int64_t t = 5, h = 3, d = 16;
    auto [c64, s64] = cos_sin(positions(t), d);
    const Tensor c = c64.to(torch::kFloat32), s = s64.to(torch::kFloat32);
    const Tensor base0 = torch::randn({t, h, d});
    const Tensor gz = torch::randn({t, h, d});
    for (int order = 0; order < 2; ++order) {
      auto run = [&](bool fused) {
        const Tensor base = base0.clone().requires_grad_(true);
        const Tensor extra = torch::zeros({t, h, d}).requires_grad_(true);
        Tensor q = base * 1, k = torch::zeros({t, 1, d});
        Tensor qr = fused ? apply_rope_(q, k, c, s).first : apply_rope_reference(q, k, c, s).first;
        const Tensor z = order == 0 ? qr + extra : extra + qr;
        (z * gz).sum().backward();
        return std::pair{base.grad(), extra.grad()};
      };
      const auto got = run(true), want = run(false);
      QVERIFY2(torch::equal(got.second, gz), "the shared gradient was modified");
      QVERIFY2(rel(got.first, want.first) < kF32, qPrintable(QString("dq rel %1").arg(rel(got.first, want.first))));
    }
    auto run_sum = [&](bool fused) {
      const Tensor base = base0.clone().requires_grad_(true);
      Tensor q = base * 1, k = base.narrow(1, 0, 1) * 2;
      auto [qr, kr] = fused ? apply_rope_(q, k, c, s) : apply_rope_reference(q, k, c, s);
      (qr.sum() + kr.sum()).backward();
      return base.grad();
    };
    const Tensor gs = run_sum(true), ws = run_sum(false);
    QVERIFY2(rel(gs, ws) < kF32, qPrintable(QString("sum() grad rel %1").arg(rel(gs, ws))));
  }

  void rope_half_precision_and_no_grad() {
    const int64_t t = 7, d = 64;
    auto [c, s] = cos_sin(positions(t), d);
    const Tensor q0 = torch::randn({t, 4, d}).to(torch::kFloat16);
    const Tensor k0 = torch::randn({t, 2, d}).to(torch::kFloat16);
    Tensor q = q0.clone(), k = k0.clone();
    const auto ref = apply_rope_reference(q0, k0, c.to(torch::kFloat16), s.to(torch::kFloat16));
    const auto out = apply_rope_(q, k, c.to(torch::kFloat16), s.to(torch::kFloat16));
    QVERIFY(out.first.data_ptr() == q.data_ptr());  // in place
    QVERIFY(torch::equal(q, ref.first) && torch::equal(k, ref.second));
  }

  void rope_errors() {
    const Tensor q = torch::randn({4, 2, 8}), k = torch::randn({4, 1, 8});
    const Tensor c = torch::randn({4, 8}), s = torch::randn({4, 8});
    auto has = [](const std::string& msg, const char* needle) { return msg.find(needle) != std::string::npos; };
    std::string e = error_of([&] { apply_rope_(q.reshape({4, 16}), k, c, s); });
    QVERIFY2(has(e, "q must be [T, Hq, D]"), e.c_str());
    e = error_of([&] { apply_rope_(torch::randn({4, 2, 7}), torch::randn({4, 1, 7}), c, s); });
    QVERIFY2(has(e, "head_dim must be even"), e.c_str());
    e = error_of([&] { apply_rope_(q, torch::randn({3, 1, 8}), c, s); });
    QVERIFY2(has(e, "does not match q"), e.c_str());
    e = error_of([&] { apply_rope_(q, k, torch::randn({4, 6}), s); });
    QVERIFY2(has(e, "cos must be [T, D]"), e.c_str());
    e = error_of([&] { apply_rope_(q, k, c.to(torch::kBFloat16), s); });
    QVERIFY2(has(e, "must have q's dtype"), e.c_str());
    e = error_of([&] { apply_rope_(torch::randn({4, 8, 2}).transpose(1, 2), k, c, s); });
    QVERIFY2(has(e, "contiguous last dimension"), e.c_str());
    e = error_of([&] { apply_rope_(q.clone().requires_grad_(true), k, c, s); });
    QVERIFY2(has(e, "leaf that requires grad"), e.c_str());
  }
};

QTEST_GUILESS_MAIN(TstFusedOps)
#include "tst_fused_ops.moc"
