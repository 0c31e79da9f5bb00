// The fused linear cross-entropy (kernels/linear_ce.h) against its reference
// (linear_cross_entropy_reference: full logits, cross_entropy(sum), autograd) on the CPU,
// where the wrapper runs the row step in ATen ops; the CUDA kernel is checked on a GPU by
// `odyssey-train selftest`.
//
// Oracle: the reference evaluated in float64 on the same inputs (16-bit inputs upcast
// exactly). Error = max|got − want| / max|want| over the tensor.
//  * fp32: 2e-6 (≈ 34 u, u = 2^-24 ≈ 6e-8). The fused path adds the same fp32 terms in
//    another order (chunked GEMMs, per-row logsumexp, dweight summed chunk by chunk). The
//    fp32 reference itself lands up to 5e-7 from the oracle on these shapes (dhidden at
//    V = 1000, printed), the fused path up to 9e-7; 2e-6 keeps 2× headroom over that and
//    is still four orders below what a real defect gives (a dropped row, a missed scale,
//    a wrong chunk boundary: ≥ 1e-2).
//  * bf16 (8 significand bits, u = 2^-8) and f16 (11 bits, u = 2^-11): both the fused path
//    and the reference round the logits to the dtype (error ≤ u·|logit| each), and the
//    fused path rounds the gradient softmax − onehot to the dtype once, then the g·W and
//    gᵀ·h products round once more. Bounds: loss 2u (a row's loss moves by at most
//    |δlse| + |δlogit_t| ≤ 2u·max|logit| and |logit| ≲ log V-sized loss here), gradients
//    8u relative to the largest entry (two roundings of g and one of the product, and the
//    softmax's sensitivity to the rounded logits, about 2u·max|logit| ≈ 4u). The fused
//    error must also be no worse than twice the reference's own error in that dtype + u
//    (the fused path must not be less accurate than what it replaces).
#define QT_NO_KEYWORDS
#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <QtTest>

#include <atomic>
#include <cmath>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/linear_ce.h"

using namespace odyssey::kernels;
using torch::Tensor;

namespace {

constexpr double kFp32Tolerance = 2e-6;

double rel_err(const Tensor& got, const Tensor& want) {
  const Tensor w = want.to(torch::kFloat64);
  const double scale = w.abs().max().item<double>();
  const double abs = (got.to(torch::kFloat64) - w).abs().max().item<double>();
  return scale > 0 ? abs / scale : abs;
}

struct Inputs {
  Tensor hidden, weight, targets;
};

// hidden ~ N(0, 1), weight ~ N(0, 4/H): logits of standard deviation about 2.
// Targets uniform in [0, V); the rows listed in `ignored` get ignore_index.
Inputs make_inputs(std::int64_t t, std::int64_t h, std::int64_t v, torch::ScalarType dtype, std::uint64_t seed,
                   const std::vector<std::int64_t>& ignored = {}, std::int64_t ignore_index = -100) {
  torch::manual_seed(seed);
  Inputs in;
  in.hidden = torch::randn({t, h}, torch::kFloat64).to(dtype);
  in.weight = (torch::randn({v, h}, torch::kFloat64) * (2.0 / std::sqrt(static_cast<double>(h)))).to(dtype);
  in.targets = torch::randint(0, v, {t}, torch::kInt64);
  for (const std::int64_t i : ignored) in.targets[i] = ignore_index;
  return in;
}

struct Grads {
  Tensor loss, dhidden, dweight;
};

// Runs `f` on fresh leaves (copies of hidden / weight in `dtype`) and backpropagates
// scale · loss. A leaf that does not train gets no gradient (undefined).
Grads run(const std::function<Tensor(const Tensor&, const Tensor&)>& f, const Inputs& in, torch::ScalarType dtype,
          bool hidden_trains = true, bool weight_trains = true, double scale = 1.0) {
  const Tensor h = in.hidden.to(dtype).detach().clone().requires_grad_(hidden_trains);
  const Tensor w = in.weight.to(dtype).detach().clone().requires_grad_(weight_trains);
  Grads g;
  g.loss = f(h, w);
  if (hidden_trains || weight_trains) (g.loss * scale).backward();
  g.loss = g.loss.detach();
  g.dhidden = h.grad();
  g.dweight = w.grad();
  return g;
}

Grads fused(const Inputs& in, torch::ScalarType dtype, const LinearCeOptions& o, bool hidden_trains = true,
            bool weight_trains = true, double scale = 1.0) {
  return run([&](const Tensor& h, const Tensor& w) { return linear_cross_entropy(h, w, in.targets, o); }, in, dtype,
             hidden_trains, weight_trains, scale);
}

Grads oracle(const Inputs& in, std::int64_t ignore_index = -100, bool hidden_trains = true, bool weight_trains = true,
             double scale = 1.0) {
  return run(
      [&](const Tensor& h, const Tensor& w) { return linear_cross_entropy_reference(h, w, in.targets, ignore_index); },
      in, torch::kFloat64, hidden_trains, weight_trains, scale);
}

LinearCeOptions chunked(std::int64_t chunk, std::int64_t ignore_index = -100) {
  LinearCeOptions o;
  o.chunk_tokens = chunk;
  o.ignore_index = ignore_index;
  return o;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

// A CPU allocator that forwards to LibTorch's and records, while armed, every allocation's
// size, the largest one, and the peak of live bytes above the level at arming. Every CPU
// tensor's storage comes from c10::GetCPUAllocator(), so a [T, V] logits tensor anywhere in
// the op (ours or an ATen op's) shows up here as an allocation of T·V·elem bytes.
class TrackingAllocator final : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* record = new Record{std::move(inner), n, this};
    const auto now = live_.fetch_add(static_cast<std::int64_t>(n)) + static_cast<std::int64_t>(n);
    if (armed_.load()) {
      std::int64_t peak = peak_.load();
      while (now > peak && !peak_.compare_exchange_weak(peak, now)) {}
      const std::lock_guard<std::mutex> lock(mutex_);
      sizes_.push_back(n);
    }
    return {data, record, &release, device};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  void arm() {
    const std::lock_guard<std::mutex> lock(mutex_);
    sizes_.clear();
    base_ = live_.load();
    peak_ = base_;
    armed_ = true;
  }
  void disarm() { armed_ = false; }
  std::int64_t peak_above_base() const { return peak_.load() - base_; }
  std::vector<size_t> sizes() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return sizes_;
  }
  size_t largest() {
    size_t m = 0;
    for (const size_t s : sizes()) m = std::max(m, s);
    return m;
  }
  bool saw(size_t n) {
    for (const size_t s : sizes())
      if (s == n) return true;
    return false;
  }

 private:
  struct Record {
    c10::DataPtr inner;
    size_t n;
    TrackingAllocator* owner;
  };
  static void release(void* ctx) {
    auto* r = static_cast<Record*>(ctx);
    r->owner->live_.fetch_sub(static_cast<std::int64_t>(r->n));
    delete r;
  }

  c10::Allocator* inner_;
  std::atomic<std::int64_t> live_{0};
  std::atomic<std::int64_t> peak_{0};
  std::int64_t base_ = 0;
  std::atomic<bool> armed_{false};
  std::mutex mutex_;
  std::vector<size_t> sizes_;
};

}  // namespace

class TstLinearCe : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void fp32_matches_reference_data() {
    QTest::addColumn<qint64>("t");
    QTest::addColumn<qint64>("h");
    QTest::addColumn<qint64>("v");
    QTest::addColumn<qint64>("chunk");
    QTest::newRow("chunk 1") << qint64{13} << qint64{16} << qint64{37} << qint64{1};
    QTest::newRow("chunk 3 (does not divide T = 13)") << qint64{13} << qint64{16} << qint64{37} << qint64{3};
    QTest::newRow("chunk 4") << qint64{13} << qint64{16} << qint64{37} << qint64{4};
    QTest::newRow("chunk = T") << qint64{13} << qint64{16} << qint64{37} << qint64{13};
    QTest::newRow("chunk > T") << qint64{13} << qint64{16} << qint64{37} << qint64{100};
    QTest::newRow("chunk 0 (automatic)") << qint64{13} << qint64{16} << qint64{37} << qint64{0};
    QTest::newRow("V 1000, chunk 7") << qint64{40} << qint64{32} << qint64{1000} << qint64{7};
  }
  void fp32_matches_reference() {
    QFETCH(qint64, t);
    QFETCH(qint64, h);
    QFETCH(qint64, v);
    QFETCH(qint64, chunk);
    // Rows 2 and 5..7 ignored: with chunk 1 and 3 some chunks are ignored entirely.
    const Inputs in = make_inputs(t, h, v, torch::kFloat32, 1, {2, 5, 6, 7});
    const Grads want = oracle(in);
    const Grads got = fused(in, torch::kFloat32, chunked(chunk));
    const Grads ref =
        run([&](const Tensor& hh, const Tensor& ww) { return linear_cross_entropy_reference(hh, ww, in.targets); }, in,
            torch::kFloat32);
    qInfo("reference in fp32: loss %.3g  dhidden %.3g  dweight %.3g", rel_err(ref.loss, want.loss),
          rel_err(ref.dhidden, want.dhidden), rel_err(ref.dweight, want.dweight));
    QCOMPARE(got.loss.scalar_type(), torch::kFloat32);
    QCOMPARE(got.loss.dim(), std::int64_t{0});
    QCOMPARE(got.dhidden.scalar_type(), torch::kFloat32);
    QCOMPARE(got.dweight.scalar_type(), torch::kFloat32);
    const double el = rel_err(got.loss, want.loss), eh = rel_err(got.dhidden, want.dhidden),
                 ew = rel_err(got.dweight, want.dweight);
    qInfo("loss %.3g  dhidden %.3g  dweight %.3g", el, eh, ew);
    QVERIFY2(el <= kFp32Tolerance, qPrintable(QString::number(el)));
    QVERIFY2(eh <= kFp32Tolerance, qPrintable(QString::number(eh)));
    QVERIFY2(ew <= kFp32Tolerance, qPrintable(QString::number(ew)));
    // Ignored rows get exactly zero gradient.
    for (const std::int64_t i : {2, 5, 6, 7}) QCOMPARE(got.dhidden[i].abs().max().item<float>(), 0.0f);
  }

  void ignored_targets() {
    // Custom ignore_index 7 (a valid vocabulary id): rows whose target is 7 add nothing.
    {
      Inputs in = make_inputs(12, 8, 20, torch::kFloat32, 2, {0, 1, 2, 3, 4, 5}, 7);
      in.targets[9] = 7;
      const Grads want = oracle(in, 7);
      const Grads got = fused(in, torch::kFloat32, chunked(3, 7));
      QVERIFY(rel_err(got.loss, want.loss) <= kFp32Tolerance);
      QVERIFY(rel_err(got.dhidden, want.dhidden) <= kFp32Tolerance);
      QVERIFY(rel_err(got.dweight, want.dweight) <= kFp32Tolerance);
      QCOMPARE(got.dhidden.narrow(0, 0, 6).abs().max().item<float>(), 0.0f);  // chunks 0 and 1: all ignored
      // -100 is an ordinary (bad) target when ignore_index is 7.
      in.targets[10] = -100;
      const std::string err = error_of([&] { fused(in, torch::kFloat32, chunked(3, 7)); });
      QVERIFY2(err.find("targets[10] = -100") != std::string::npos, err.c_str());
    }
    // All ignored: loss exactly 0, gradients exactly 0 (defined, as the reference's).
    {
      std::vector<std::int64_t> all(9);
      for (std::int64_t i = 0; i < 9; ++i) all[static_cast<size_t>(i)] = i;
      const Inputs in = make_inputs(9, 8, 20, torch::kFloat32, 3, all);
      for (const std::int64_t chunk : {0, 1, 4}) {
        const Grads got = fused(in, torch::kFloat32, chunked(chunk));
        QCOMPARE(got.loss.item<float>(), 0.0f);
        QVERIFY(got.dhidden.defined() && got.dweight.defined());
        QCOMPARE(got.dhidden.abs().max().item<float>(), 0.0f);
        QCOMPARE(got.dweight.abs().max().item<float>(), 0.0f);
      }
      const Grads want = oracle(in);
      QCOMPARE(want.loss.item<double>(), 0.0);
    }
    // No tokens at all.
    {
      const Inputs in = make_inputs(0, 8, 20, torch::kFloat32, 4);
      const Grads got = fused(in, torch::kFloat32, chunked(0));
      QCOMPARE(got.loss.item<float>(), 0.0f);
      QCOMPARE(got.dhidden.size(0), std::int64_t{0});
      QCOMPARE(got.dweight.abs().max().item<float>(), 0.0f);
    }
  }

  void frozen_weight_or_hidden() {
    const Inputs in = make_inputs(11, 16, 50, torch::kFloat32, 5, {3});
    const Grads want = oracle(in);
    // Frozen weight: hidden still gets its gradient, the weight none.
    const Grads frozen = fused(in, torch::kFloat32, chunked(4), true, false);
    QVERIFY(!frozen.dweight.defined());
    QVERIFY(rel_err(frozen.dhidden, want.dhidden) <= kFp32Tolerance);
    QVERIFY(rel_err(frozen.loss, want.loss) <= kFp32Tolerance);
    // Trained weight, hidden a constant: only the weight's gradient.
    const Grads weight_only = fused(in, torch::kFloat32, chunked(4), false, true);
    QVERIFY(!weight_only.dhidden.defined());
    QVERIFY(rel_err(weight_only.dweight, want.dweight) <= kFp32Tolerance);
    // Both train.
    const Grads both = fused(in, torch::kFloat32, chunked(4));
    QVERIFY(rel_err(both.dweight, want.dweight) <= kFp32Tolerance);
    QVERIFY(rel_err(both.dhidden, want.dhidden) <= kFp32Tolerance);
  }

  void low_precision_data() {
    QTest::addColumn<int>("dtype");
    QTest::addColumn<qint64>("t");
    QTest::addColumn<qint64>("h");
    QTest::addColumn<qint64>("v");
    QTest::addColumn<qint64>("chunk");
    QTest::addColumn<double>("u");
    const int bf16 = static_cast<int>(torch::kBFloat16), f16 = static_cast<int>(torch::kFloat16);
    QTest::newRow("bf16, chunk 5") << bf16 << qint64{24} << qint64{32} << qint64{300} << qint64{5}
                                   << std::ldexp(1.0, -8);
    QTest::newRow("bf16, chunk 1") << bf16 << qint64{6} << qint64{32} << qint64{300} << qint64{1}
                                   << std::ldexp(1.0, -8);
    // V·H = 4.5M > 2^22: backward scales dweight in two fp32 slices.
    QTest::newRow("bf16, V·H over one backward slice")
        << bf16 << qint64{8} << qint64{1100} << qint64{4096} << qint64{3} << std::ldexp(1.0, -8);
    QTest::newRow("f16, chunk 5") << f16 << qint64{24} << qint64{32} << qint64{300} << qint64{5}
                                  << std::ldexp(1.0, -11);
  }
  void low_precision() {
    QFETCH(int, dtype);
    QFETCH(qint64, t);
    QFETCH(qint64, h);
    QFETCH(qint64, v);
    QFETCH(qint64, chunk);
    QFETCH(double, u);
    const auto dt = static_cast<torch::ScalarType>(dtype);
    const double scale = 3.7;  // also exercises backward's fp32 scaling and single rounding
    const Inputs in = make_inputs(t, h, v, dt, 6, {1});
    const Grads want = oracle(in, -100, true, true, scale);
    const Grads got = fused(in, dt, chunked(chunk), true, true, scale);
    const Grads ref =
        run([&](const Tensor& hh, const Tensor& ww) { return linear_cross_entropy_reference(hh, ww, in.targets); }, in,
            dt, true, true, scale);
    QCOMPARE(got.dhidden.scalar_type(), dt);
    QCOMPARE(got.dweight.scalar_type(), dt);
    const double el = rel_err(got.loss, want.loss), eh = rel_err(got.dhidden, want.dhidden),
                 ew = rel_err(got.dweight, want.dweight);
    const double rl = rel_err(ref.loss, want.loss), rh = rel_err(ref.dhidden, want.dhidden),
                 rw = rel_err(ref.dweight, want.dweight);
    qInfo("fused: loss %.3g dhidden %.3g dweight %.3g | reference in this dtype: %.3g %.3g %.3g (u = %.3g)", el, eh, ew,
          rl, rh, rw, u);
    QVERIFY2(el <= 2 * u, qPrintable(QString::number(el)));
    QVERIFY2(eh <= 8 * u, qPrintable(QString::number(eh)));
    QVERIFY2(ew <= 8 * u, qPrintable(QString::number(ew)));
    QVERIFY2(el <= 2 * rl + u, "fused loss less accurate than the reference in the same dtype");
    QVERIFY2(eh <= 2 * rh + u, "fused dhidden less accurate than the reference in the same dtype");
    QVERIFY2(ew <= 2 * rw + u, "fused dweight less accurate than the reference in the same dtype");
  }

  void incoming_grad_scales_both() {
    const Inputs in = make_inputs(10, 16, 40, torch::kFloat32, 7, {4});
    const Grads want = oracle(in, -100, true, true, 3.7);
    const Grads unit = oracle(in);
    const Grads got = fused(in, torch::kFloat32, chunked(3), true, true, 3.7);
    QVERIFY(rel_err(got.dhidden, want.dhidden) <= kFp32Tolerance);
    QVERIFY(rel_err(got.dweight, want.dweight) <= kFp32Tolerance);
    // ... and the scale really is there (3.7× the unit gradients, not equal to them).
    QVERIFY(rel_err(got.dhidden, unit.dhidden) > 1.0);
  }

  void inside_a_bigger_graph() {
    torch::manual_seed(8);
    const std::int64_t t = 9, k = 6, h = 12, v = 30;
    const Tensor x0 = torch::randn({t, k}, torch::kFloat64);
    const Tensor a0 = torch::randn({k, h}, torch::kFloat64) / std::sqrt(6.0);
    const Tensor w0 = torch::randn({v, h}, torch::kFloat64) * (2.0 / std::sqrt(12.0));
    Tensor targets = torch::randint(0, v, {t}, torch::kInt64);
    targets[0] = -100;
    auto go = [&](torch::ScalarType dt, bool use_fused) {
      const Tensor x = x0.to(dt).detach().clone().requires_grad_(true);
      const Tensor a = a0.to(dt).detach().clone().requires_grad_(true);
      const Tensor w = w0.to(dt).detach().clone().requires_grad_(true);
      const Tensor hidden = torch::tanh(x.mm(a));
      const Tensor loss = use_fused ? linear_cross_entropy(hidden, w, targets, chunked(2))
                                    : linear_cross_entropy_reference(hidden, w, targets);
      (loss * 0.5).backward();
      return std::vector<Tensor>{loss.detach(), x.grad(), a.grad(), w.grad()};
    };
    const auto want = go(torch::kFloat64, false);
    const auto got = go(torch::kFloat32, true);
    for (size_t i = 0; i < want.size(); ++i) {
      QVERIFY(got[i].defined());
      const double e = rel_err(got[i], want[i]);
      QVERIFY2(e <= kFp32Tolerance, qPrintable(QStringLiteral("tensor %1: %2").arg(i).arg(e)));
    }
  }

  void no_grad_same_loss() {
    const Inputs in = make_inputs(13, 16, 37, torch::kFloat32, 9, {0});
    const Tensor h = in.hidden.clone().requires_grad_(true);
    const Tensor w = in.weight.clone().requires_grad_(true);
    const Tensor with_grad = linear_cross_entropy(h, w, in.targets, chunked(4));
    QVERIFY(with_grad.requires_grad());
    Tensor without;
    {
      const torch::NoGradGuard guard;
      without = linear_cross_entropy(h, w, in.targets, chunked(4));
    }
    QVERIFY(!without.requires_grad());
    QCOMPARE(without.item<float>(), with_grad.item<float>());  // the same row step, the same order
    const Tensor constants = linear_cross_entropy(in.hidden, in.weight, in.targets, chunked(4));
    QVERIFY(!constants.requires_grad());
    QCOMPARE(constants.item<float>(), with_grad.item<float>());
    QVERIFY(rel_err(without, oracle(in).loss) <= kFp32Tolerance);
  }

  void bad_inputs() {
    const Inputs in = make_inputs(5, 8, 11, torch::kFloat32, 10);
    const auto expect = [](const std::function<void()>& f, const std::string& needle) {
      const std::string err = error_of(f);
      QVERIFY2(!err.empty(), ("no error; expected one naming: " + needle).c_str());
      QVERIFY2(err.find(needle) != std::string::npos, ("expected '" + needle + "' in: " + err).c_str());
    };
    Tensor t = in.targets.clone();
    t[3] = 11;  // = V
    expect([&] { linear_cross_entropy(in.hidden, in.weight, t); }, "targets[3] = 11 is outside [0, 11)");
    t[3] = -5;
    expect([&] { linear_cross_entropy(in.hidden, in.weight, t); }, "targets[3] = -5 is outside [0, 11)");
    {
      const torch::NoGradGuard guard;  // also when no gradient is wanted
      t[3] = 12;
      expect([&] { linear_cross_entropy(in.hidden, in.weight, t); }, "targets[3] = 12");
    }
    expect([&] { linear_cross_entropy(in.hidden.unsqueeze(0), in.weight, in.targets); }, "hidden must be 2-D [T, H]");
    expect([&] { linear_cross_entropy(in.hidden, in.weight.flatten(), in.targets); }, "weight must be 2-D [V, H]");
    expect([&] { linear_cross_entropy(in.hidden, in.weight.narrow(1, 0, 7), in.targets); }, "disagree on H");
    expect([&] { linear_cross_entropy(in.hidden, in.weight, in.targets.narrow(0, 0, 4)); },
           "targets has 4 entries but hidden has 5 rows");
    expect([&] { linear_cross_entropy(in.hidden, in.weight, in.targets.unsqueeze(0)); }, "targets must be 1-D [T]");
    expect([&] { linear_cross_entropy(in.hidden, in.weight.to(torch::kBFloat16), in.targets); },
           "weight dtype BFloat16 differs from hidden dtype Float");
    expect([&] { linear_cross_entropy(in.hidden.to(torch::kFloat64), in.weight.to(torch::kFloat64), in.targets); },
           "hidden dtype must be float32, bfloat16 or float16");
    expect([&] { linear_cross_entropy(in.hidden, in.weight, in.targets.to(torch::kInt32)); },
           "targets dtype must be int64");
    expect([&] { linear_cross_entropy(in.hidden, in.weight.to(torch::kMeta), in.targets); }, "must be on one device");
    expect([&] { linear_cross_entropy(in.hidden, in.weight, in.targets, chunked(-1)); }, "chunk_tokens must be >= 0");
  }

  // T·V is large relative to the chunk: the fused op must never allocate a [T, V] logits
  // tensor, and holds no dweight when the weight is frozen, nothing [T, H] under no_grad.
  void memory_shape() {
    const std::int64_t t = 256, h = 9, v = 2048, chunk = 16;
    const auto bytes = [](std::int64_t n) { return static_cast<size_t>(n) * sizeof(float); };
    const Inputs in = make_inputs(t, h, v, torch::kFloat32, 11, {7});
    c10::Allocator* const original = c10::GetCPUAllocator();
    static TrackingAllocator tracker(original);  // static: storages it made may outlive this test
    c10::SetCPUAllocator(&tracker, 200);
    struct Restore {
      c10::Allocator* a;
      ~Restore() { c10::SetCPUAllocator(a, 201); }
    } restore{original};

    // Leaves are made before arming, so only what the call and its backward allocate counts.
    struct Leaves {
      Tensor h, w;
    };
    const auto leaves = [&](bool hidden_trains, bool weight_trains) {
      return Leaves{in.hidden.clone().requires_grad_(hidden_trains), in.weight.clone().requires_grad_(weight_trains)};
    };

    // The probe sees the reference's full logits (so it would see them in the fused op).
    {
      const Leaves l = leaves(true, true);
      tracker.arm();
      linear_cross_entropy_reference(l.h, l.w, in.targets).backward();
      tracker.disarm();
      QVERIFY2(tracker.largest() >= bytes(t * v), qPrintable(QString::number(tracker.largest())));
    }

    // Fused, both train: the largest buffer is one chunk of logits (its fp32 softmax in the
    // ATen row step is the same size); the live peak stays far below one [T, V] tensor.
    {
      const Leaves l = leaves(true, true);
      tracker.arm();
      linear_cross_entropy(l.h, l.w, in.targets, chunked(chunk)).backward();
      tracker.disarm();
      const std::int64_t peak = tracker.peak_above_base();
      // chunk logits + softmax + a temporary of that size; dweight, its scaled copy and the
      // leaf's .grad; the same three of dhidden; 64 KiB of small tensors.
      const auto bound = static_cast<std::int64_t>(3 * bytes(chunk * v) + 3 * bytes(v * h) + 3 * bytes(t * h) + 65536);
      qInfo("fused: largest allocation %zu B, live peak %lld B (bound %lld B, [T, V] = %zu B)", tracker.largest(),
            static_cast<long long>(peak), static_cast<long long>(bound), bytes(t * v));
      QVERIFY(bound < static_cast<std::int64_t>(bytes(t * v)));
      QVERIFY2(tracker.largest() <= bytes(chunk * v), qPrintable(QString::number(tracker.largest())));
      QVERIFY2(peak <= bound, qPrintable(QString::number(peak)));
      QVERIFY(tracker.saw(bytes(v * h)));  // dweight fp32 [V, H]: what the frozen case must not make
      QVERIFY(tracker.saw(bytes(t * h)));  // dhidden [T, H]: what the no-grad case must not make
      QVERIFY(rel_err(l.w.grad(), oracle(in).dweight) <= kFp32Tolerance);
    }

    // Frozen weight: no fp32 [V, H] buffer at all.
    {
      const Leaves l = leaves(true, false);
      tracker.arm();
      linear_cross_entropy(l.h, l.w, in.targets, chunked(chunk)).backward();
      tracker.disarm();
      QVERIFY(!tracker.saw(bytes(v * h)));
      QVERIFY(tracker.largest() <= bytes(chunk * v));
      QVERIFY(!l.w.grad().defined());
    }

    // No gradient wanted: no [T, H] dhidden, no [V, H] dweight.
    {
      const Leaves l = leaves(true, true);
      const torch::NoGradGuard guard;
      tracker.arm();
      linear_cross_entropy(l.h, l.w, in.targets, chunked(chunk));
      tracker.disarm();
      QVERIFY(!tracker.saw(bytes(t * h)));
      QVERIFY(!tracker.saw(bytes(v * h)));
      QVERIFY(tracker.largest() <= bytes(chunk * v));
    }
  }
};

QTEST_APPLESS_MAIN(TstLinearCe)
#include "tst_linear_ce.moc"
