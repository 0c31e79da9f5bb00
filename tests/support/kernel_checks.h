// Shared by the fused-op tests (tests/kernels/tst_rmsnorm.cpp, tst_swiglu.cpp, tst_rope.cpp):
// the error measure, the tolerances, leaf tensors, the fused-vs-layers check, a 4-bit base
// and Hugging Face's RoPE tables.
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
#pragma once

#include <torch/torch.h>

#include <QtTest>

#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/quant4.h"

namespace odyssey::testing::kernel_checks {

using torch::Tensor;
using namespace odyssey::kernels;
inline constexpr double kF32 = 1e-6;
inline constexpr double kBf16 = 1.0 / 128;       // 2^-7
inline constexpr double kBf16Slack = 1.0 / 512;  // 2^-9
inline constexpr double kEps = 1e-6;

inline double rel(const Tensor& got, const Tensor& want) {
  const Tensor g = got.detach().to(torch::kFloat64);
  const Tensor w = want.detach().to(torch::kFloat64);
  const double scale = w.abs().max().item<double>();
  const double err = (g - w).abs().max().item<double>();
  const double r = scale > 0 ? err / scale : err;
  if (std::getenv("FUSED_OPS_VERBOSE")) qInfo("rel error %.3g (max|want| %.3g)", r, scale);
  return r;
}

// Runs fn and returns the exception message ("" when nothing was thrown).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

// A 4-bit (NF4, double-quantized) copy of the float64 weight w, and w replaced by what it
// dequantizes to: the layers then compute with exactly the base the fused op dequantizes.
inline c10::intrusive_ptr<Quant4Weight> quantize_in_place(Tensor& w) {
  auto q = quantize_4bit(w.to(torch::kFloat32), Quant4Type::NF4, 64, /*double_quant=*/true);
  w = dequantize_4bit(*q, torch::kFloat32).to(torch::kFloat64);
  return q;
}

inline Tensor leaf(const Tensor& t, torch::ScalarType dtype, bool grad = true) {
  return t.to(dtype).detach().clone().requires_grad_(grad);
}

// A fused op's outputs/gradients `f` against the layers it replaces, `ref`, run in the same
// dtype, both measured from the float64 truth: fp32 within kF32, bf16 no further than twice
// the layers' own error plus 2^-9. `names` label the entries (their index when empty). QTest
// failures return from here: callers check QTest::currentTestFailed().
inline void expect_like_layers(const std::vector<Tensor>& f, const std::vector<Tensor>& ref,
                               const std::vector<Tensor>& truth, torch::ScalarType dtype,
                               const std::vector<std::string>& names = {}) {
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

// HF's cos/sin for explicit (restarting) position ids, [T, D] in fp64.
inline std::pair<Tensor, Tensor> cos_sin(const std::vector<int64_t>& pos, int64_t d) {
  const Tensor inv = 1.0 / torch::pow(10000.0, torch::arange(0, d, 2, torch::kFloat64) / static_cast<double>(d));
  const Tensor p = torch::tensor(pos, torch::kInt64).to(torch::kFloat64);
  const Tensor f = p.unsqueeze(1) * inv.unsqueeze(0);
  const Tensor emb = torch::cat({f, f}, -1);
  return {emb.cos(), emb.sin()};
}

inline std::vector<int64_t> positions(int64_t t) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < t; ++i) p.push_back(i);
  return p;
}

}  // namespace odyssey::testing::kernel_checks
