// The in-place RoPE (kernels/rope.h: apply_rope_) against the references (the Hugging Face formulas differentiated by
// autograd) on the CPU: there the fused ops run the same hand-written forward/backward math as the CUDA kernels, in
// ATen ops (the CUDA code itself is checked on a GPU by `odyssey-train selftest`). Error measure and tolerances:
// tests/support/kernel_checks.h.
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

class TstRope : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() { torch::manual_seed(1234); }

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
    for (const auto& [got, want, what] :
         {std::tuple{f32.dx, f64.dx, "dx"}, std::tuple{f32.dwq, f64.dwq, "dWq"}, std::tuple{f32.dwk, f64.dwk, "dWk"}}) {
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
      QVERIFY2(
          rel(got, truth) <= rel(want, truth) + kBf16Slack,
          qPrintable(QString("bf16 %1 error %2 vs reference %3").arg(what).arg(rel(got, truth)).arg(rel(want, truth))));
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
    QVERIFY2(rel(got.second, truth.second) < kF32, qPrintable(QString("dW rel %1").arg(rel(got.second, truth.second))));
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

QTEST_GUILESS_MAIN(TstRope)
#include "tst_rope.moc"
