// Tiled exact attention (model/tiled_attention.h) against the dense formula it replaces,
// written here in float64 the plain way (transformers' eager_attention_forward of Gemma-2:
// the [H, T, T] scores, soft-capped, masked by sample, causality and window, a softmax, times
// V; its gradients by autograd through those ops): output and the gradients of q, k and v for
// rows of several samples, GQA, windows shorter and longer than a sample, soft-capping, and
// tiles of 1 row, odd sizes and the whole row. Whole models against transformers (Gemma-2's
// soft-capped packed rows, Mistral's window on the CPU) are tst_decoder_parity's.
#define QT_NO_KEYWORDS
#include <torch/torch.h>

#include <QtTest>

#include <cmath>
#include <limits>
#include <memory>
#include <tuple>
#include <vector>

#include "kernels/band_attention.h"
#include "kernels/cudnn_attention.h"
#include "model/attention_tiles.h"
#include "model/tiled_attention.h"

using namespace odyssey::model;

namespace {

struct Case {
  std::vector<std::int64_t> lengths;  // samples of the row
  std::int64_t hq = 4, hkv = 2, d = 8;
  std::int64_t window = 0;
  double softcap = 0;
};

// The dense reference: keep[i, j] = same sample, j <= i, and j > i - window (window > 0).
torch::Tensor dense(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                    const std::vector<std::int64_t>& lengths, double scale, std::int64_t window, double softcap) {
  const std::int64_t t = q.size(0), g = q.size(1) / k.size(1);
  std::vector<std::int64_t> sample;
  for (std::size_t s = 0; s < lengths.size(); ++s) sample.insert(sample.end(), lengths[s], std::int64_t(s));
  const torch::Tensor id = torch::tensor(sample, torch::kInt64);
  const torch::Tensor pos = torch::arange(t, torch::kInt64);
  torch::Tensor keep = id.view({t, 1}).eq(id.view({1, t})).logical_and(pos.view({1, t}).le(pos.view({t, 1})));
  if (window > 0) keep = keep.logical_and(pos.view({1, t}).gt(pos.view({t, 1}) - window));
  const torch::Tensor qh = q.transpose(0, 1);                          // [Hq, T, D]
  const torch::Tensor kh = k.transpose(0, 1).repeat_interleave(g, 0);  // [Hq, T, D]
  const torch::Tensor vh = v.transpose(0, 1).repeat_interleave(g, 0);
  torch::Tensor s = torch::matmul(qh, kh.transpose(1, 2)) * scale;
  if (softcap > 0) s = torch::tanh(s / softcap) * softcap;
  s = s.masked_fill(keep.logical_not(), -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(s, -1), vh).transpose(0, 1);  // [T, Hq, D]
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

// out and the gradients of q, k and v (from sum(out * dout)) of attend against want's, both from
// copies of q0, k0 and v0: each whose largest difference reaches 1e-12 (float64 on both sides, in
// another order of additions: a few ulps), as "name difference"; empty when all are within it.
template <typename Want, typename Attend>
QString against_dense(const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0,
                      const torch::Tensor& dout, Want want_fn, Attend attend) {
  const torch::Tensor q1 = q0.clone().requires_grad_(), k1 = k0.clone().requires_grad_(),
                      v1 = v0.clone().requires_grad_();
  const torch::Tensor want = want_fn(q1, k1, v1);
  (want * dout).sum().backward();
  const torch::Tensor q2 = q0.clone().requires_grad_(), k2 = k0.clone().requires_grad_(),
                      v2 = v0.clone().requires_grad_();
  const torch::Tensor got = attend(q2, k2, v2);
  (got * dout).sum().backward();
  const std::pair<const char*, std::pair<torch::Tensor, torch::Tensor>> pairs[] = {{"out", {got, want}},
                                                                                   {"dq", {q2.grad(), q1.grad()}},
                                                                                   {"dk", {k2.grad(), k1.grad()}},
                                                                                   {"dv", {v2.grad(), v1.grad()}}};
  QString bad;
  for (const auto& [name, p] : pairs) {
    const double diff = max_diff(p.first, p.second);
    if (!(diff < 1e-12)) bad += QString("%1 %2; ").arg(name).arg(diff);
  }
  return bad;
}
// One part of a causal row for kernels::levels, written densely in float64: queries q [n, Hq, D]
// on keys k, v [m, Hkv, D] where keep [n, m] is true, scores soft-capped (cap > 0): {out, lse
// [Hq, n]}; and the part's share of the whole row's gradients from the whole row's out, lse and
// dout (FlashAttention's backward formula: P = exp(x - lse) on the part's pairs, dS = P (dP -
// rowsum(dO * O)), through the cap's tanh and the scale).
struct Part {
  double scale = 1, cap = 0;
  torch::Tensor scores(const torch::Tensor& q, const torch::Tensor& k, torch::Tensor* th) const {
    const std::int64_t g = q.size(1) / k.size(1);
    const torch::Tensor u = torch::matmul(q.transpose(0, 1), k.transpose(0, 1).repeat_interleave(g, 0).transpose(1, 2));
    if (cap <= 0) return u * scale;
    *th = torch::tanh(u * scale / cap);
    return *th * cap;
  }
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v, const torch::Tensor& keep) const {
    const std::int64_t g = q.size(1) / k.size(1);
    torch::Tensor th;
    const torch::Tensor x = scores(q, k, &th).masked_fill(keep.logical_not(), -INFINITY);
    const torch::Tensor lse = torch::logsumexp(x, -1);
    const torch::Tensor out = torch::matmul((x - lse.unsqueeze(-1)).exp(), v.transpose(0, 1).repeat_interleave(g, 0));
    return {out.transpose(0, 1).contiguous(), lse};
  }
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> backward(const torch::Tensor& dout, const torch::Tensor& q,
                                                                   const torch::Tensor& k, const torch::Tensor& v,
                                                                   const torch::Tensor& out, const torch::Tensor& lse,
                                                                   const torch::Tensor& keep) const {
    const std::int64_t hkv = k.size(1), g = q.size(1) / hkv, m = k.size(0), d = q.size(2);
    torch::Tensor th;
    const torch::Tensor x = scores(q, k, &th);
    const torch::Tensor p = (x - lse.unsqueeze(-1)).exp().masked_fill(keep.logical_not(), 0.0);  // [Hq, n, m]
    const torch::Tensor dO = dout.transpose(0, 1), o = out.transpose(0, 1);
    const torch::Tensor kh = k.transpose(0, 1).repeat_interleave(g, 0), vh = v.transpose(0, 1).repeat_interleave(g, 0);
    const torch::Tensor dv = torch::matmul(p.transpose(1, 2), dO).view({hkv, g, m, d}).sum(1);
    torch::Tensor ds = p * (torch::matmul(dO, vh.transpose(1, 2)) - (dO * o).sum(-1, true));
    if (cap > 0) ds = ds * (1 - th * th);
    ds = ds * scale;
    const torch::Tensor dq = torch::matmul(ds, kh), dk = torch::matmul(ds.transpose(1, 2), q.transpose(0, 1));
    return {dq.transpose(0, 1), dk.view({hkv, g, m, d}).sum(1).transpose(0, 1), dv.transpose(0, 1)};
  }
  // Both under a fixed keep: a cut's diagonal part.
  odyssey::kernels::levels::DiagonalForward masked_forward(const torch::Tensor& keep) const {
    return [this, keep](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
      return forward(q, k, v, keep);
    };
  }
  odyssey::kernels::levels::DiagonalBackward masked_backward(const torch::Tensor& keep) const {
    return [this, keep](const torch::Tensor& g, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& o, const torch::Tensor& l) { return backward(g, q, k, v, o, l, keep); };
  }
  // Both over a batch of parts, q [c, n, Hq, D] on k, v [c, m, Hkv, D], each under keep [n, m]
  // (undefined: every pair): a cut's rectangles.
  odyssey::kernels::levels::RectangleForward batched_forward(const torch::Tensor& keep = {}) const {
    return [this, keep](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
      const torch::Tensor kept = keep.defined() ? keep : torch::ones({q.size(1), k.size(1)}, torch::kBool);
      std::vector<torch::Tensor> outs, lses;
      for (std::int64_t c = 0; c < q.size(0); ++c) {
        auto [o, l] = forward(q[c], k[c], v[c], kept);
        outs.push_back(o);
        lses.push_back(l);
      }
      return std::make_pair(torch::stack(outs), torch::stack(lses));
    };
  }
  odyssey::kernels::levels::RectangleBackward batched_backward(const torch::Tensor& keep = {}) const {
    return [this, keep](const torch::Tensor& g, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& o, const torch::Tensor& l) {
      const torch::Tensor kept = keep.defined() ? keep : torch::ones({q.size(1), k.size(1)}, torch::kBool);
      std::vector<torch::Tensor> dq, dk, dv;
      for (std::int64_t c = 0; c < q.size(0); ++c) {
        auto [a, b, e] = backward(g[c], q[c], k[c], v[c], o[c], l[c], kept);
        dq.push_back(a);
        dk.push_back(b);
        dv.push_back(e);
      }
      return std::make_tuple(torch::stack(dq), torch::stack(dk), torch::stack(dv));
    };
  }
};

}  // namespace

class TstTiledAttention : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void matchesTheDenseFormula_data() {
    QTest::addColumn<int>("which");
    QTest::addColumn<int>("tile_rows");
    const char* names[] = {"one sample",
                           "three samples, GQA 2",
                           "window 5 (shorter than a sample)",
                           "soft-capping 1.5",
                           "window 4 and soft-capping 2, GQA 4",
                           "window longer than every sample",
                           "MHA, one-token samples"};
    for (int which = 0; which < 7; ++which)
      for (int rows : {1, 3, 7, 64, 0})
        QTest::newRow(
            (std::string(names[which]) + ", tiles of " + (rows ? std::to_string(rows) : "auto") + " rows").c_str())
            << which << rows;
  }
  void matchesTheDenseFormula() {
    QFETCH(int, which);
    QFETCH(int, tile_rows);
    const std::vector<Case> cases = {
        {{23}},
        {{9, 1, 13}, 4, 2, 8},
        {{17, 11}, 4, 2, 8, 5},
        {{12, 10}, 6, 3, 16, 0, 1.5},
        {{19, 6, 8}, 8, 2, 8, 4, 2.0},
        {{7, 9}, 4, 4, 8, 50},
        {{1, 1, 5, 1}, 2, 2, 4},
    };
    const Case& c = cases.at(static_cast<std::size_t>(which));
    std::int64_t t = 0;
    std::vector<std::int64_t> cu{0};
    for (std::int64_t n : c.lengths) cu.push_back(t += n);
    torch::manual_seed(7 + which);
    const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
    // Scores of a few units, so the cap (1.5, 2) bends them.
    const torch::Tensor q0 = torch::randn({t, c.hq, c.d}, f64) * 1.5, k0 = torch::randn({t, c.hkv, c.d}, f64) * 1.5;
    const torch::Tensor v0 = torch::randn({t, c.hkv, c.d}, f64), dout = torch::randn({t, c.hq, c.d}, f64);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));

    // float64 on both sides, in a different order of additions: a few ulps of the values.
    const QString bad = against_dense(
        q0, k0, v0, dout,
        [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
          return dense(q, k, v, c.lengths, scale, c.window, c.softcap);
        },
        [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
          return tiled_causal_attention(q, k, v, torch::tensor(cu, torch::kInt32), scale, c.window, c.softcap,
                                        tile_rows);
        });
    QVERIFY2(bad.isEmpty(), qPrintable(bad));
  }

  // The band kernels' reference (kernels/band_attention.h, the selftest's oracle for the CUDA
  // kernels): out, lse and the gradients of q, k and v equal this file's dense formula in
  // float64, per-query first keys built from samples and a window as the tiles plan them; and
  // off a GPU, band_attention() is that reference.
  void bandReferenceMatchesTheDenseFormula() {
    torch::manual_seed(11);
    const std::vector<std::int64_t> lengths{13, 6, 18};
    const std::int64_t t = 37, hq = 6, hkv = 2, d = 8, window = 7;
    const double scale = 0.35, cap = 2.0;
    std::vector<std::int64_t> first;
    for (std::int64_t s = 0, start = 0; s < 3; start += lengths[static_cast<std::size_t>(s)], ++s)
      for (std::int64_t i = start; i < start + lengths[static_cast<std::size_t>(s)]; ++i)
        first.push_back(std::max(start, i - window + 1));
    const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
    const torch::Tensor q0 = torch::randn({t, hq, d}, f64) * 1.5, k0 = torch::randn({t, hkv, d}, f64) * 1.5;
    const torch::Tensor v0 = torch::randn({t, hkv, d}, f64), dout = torch::randn({t, hq, d}, f64);
    const torch::Tensor fk = torch::tensor(first, torch::kInt64);
    QVERIFY(!odyssey::kernels::band_kernels_take(q0, k0, v0));  // CPU: the reference
    torch::Tensor lse;
    const QString bad = against_dense(
        q0, k0, v0, dout,
        [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
          return dense(q, k, v, lengths, scale, window, cap);
        },
        [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
          auto r = odyssey::kernels::band_attention(q, k, v, fk, scale, cap);
          lse = r.second;
          return r.first;
        });
    QVERIFY2(bad.isEmpty(), qPrintable(bad));
    // lse [Hq, T]: log sum exp of the capped, masked scores, from the same formula written out.
    const torch::Tensor kh = k0.transpose(0, 1).repeat_interleave(hq / hkv, 0);
    torch::Tensor x = torch::tanh(torch::matmul(q0.transpose(0, 1), kh.transpose(1, 2)) * scale / cap) * cap;
    const torch::Tensor pos = torch::arange(t, torch::kInt64);
    const torch::Tensor seen = pos.view({1, t}).ge(fk.view({t, 1})).logical_and(pos.view({1, t}).le(pos.view({t, 1})));
    x = x.masked_fill(seen.logical_not(), -std::numeric_limits<double>::infinity());
    QVERIFY(max_diff(lse, torch::logsumexp(x, -1)) < 1e-12);
    QCOMPARE(lse.sizes(), (std::vector<std::int64_t>{hq, t}));
  }

  // fp32 inputs that are strided views (the decoder's rotated projections), as the engine calls it.
  void takesStridedFp32Views() {
    torch::manual_seed(3);
    const std::int64_t t = 21, hq = 4, hkv = 2, d = 8;
    const torch::Tensor proj = torch::randn({1, t, (hq + 2 * hkv) * d});
    const torch::Tensor q = proj.narrow(2, 0, hq * d).view({t, hq, d});
    const torch::Tensor k = proj.narrow(2, hq * d, hkv * d).view({t, hkv, d});
    const torch::Tensor v = proj.narrow(2, (hq + hkv) * d, hkv * d).view({t, hkv, d});
    const torch::Tensor got = tiled_causal_attention(q, k, v, torch::tensor({0, 8, 21}, torch::kInt32), 0.3, 6, 1.0, 5);
    const torch::Tensor want =
        dense(q.to(torch::kDouble), k.to(torch::kDouble), v.to(torch::kDouble), {8, 13}, 0.3, 6, 1.0);
    QCOMPARE(got.scalar_type(), torch::kFloat32);
    QVERIFY2(max_diff(got.to(torch::kDouble), want) < 1e-5,
             qPrintable(QString::number(max_diff(got.to(torch::kDouble), want))));
  }

  // A row's shared plans (make_tile_plans, as the decoder's layers share them) give what each
  // call planning on its own gives, bit for bit, for layers of different windows and head
  // counts asking in turn, forward and backward.
  void sharedPlansEqualPlanningEachCall() {
    torch::manual_seed(11);
    const torch::Tensor cu = torch::tensor({0, 9, 30, 37}, torch::kInt32);
    const std::shared_ptr<TilePlans> plans = make_tile_plans(cu);
    for (int round = 0; round < 2; ++round) {  // the second round reuses every plan
      for (const auto& [hq, window, softcap] :
           std::vector<std::tuple<std::int64_t, std::int64_t, double>>{{4, 0, 2.0}, {4, 6, 2.0}, {8, 6, 0.0}}) {
        const torch::Tensor q0 = torch::randn({37, hq, 8}), k0 = torch::randn({37, 2, 8}),
                            v0 = torch::randn({37, 2, 8});
        const torch::Tensor dout = torch::randn({37, hq, 8});
        std::vector<torch::Tensor> results;
        for (TilePlans* p : {static_cast<TilePlans*>(nullptr), plans.get()}) {
          const torch::Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(),
                              v = v0.clone().requires_grad_();
          const torch::Tensor out = tiled_causal_attention(q, k, v, cu, 0.35, window, softcap, 4, p);
          (out * dout).sum().backward();
          results.insert(results.end(), {out.detach(), q.grad(), k.grad(), v.grad()});
        }
        for (std::size_t i = 0; i < 4; ++i)
          QVERIFY2(
              results[i].equal(results[i + 4]),
              qPrintable(
                  QString("round %1, %2 heads, window %3: tensor %4 differs").arg(round).arg(hq).arg(window).arg(i)));
      }
    }
  }

  // kernels/cudnn_attention.h cuts a causal row into 2^L rectangles levels and diagonal blocks of
  // t / 2^L rows: the largest L whose blocks are whole, at least 1,024 rows and multiples of 64.
  void cudnnDiagonalBlocks() {
    using odyssey::kernels::softcap_diagonal_block;
    QCOMPARE(softcap_diagonal_block(16384), std::int64_t(1024));
    QCOMPARE(softcap_diagonal_block(32768), std::int64_t(1024));
    QCOMPARE(softcap_diagonal_block(2048), std::int64_t(1024));
    QCOMPARE(softcap_diagonal_block(12288), std::int64_t(1536));
    QCOMPARE(softcap_diagonal_block(1024000), std::int64_t(8000));
    QCOMPARE(softcap_diagonal_block(1024), std::int64_t(0));  // no level: the caller's own path
    QCOMPARE(softcap_diagonal_block(2047), std::int64_t(0));
    QCOMPARE(softcap_diagonal_block(3000), std::int64_t(0));  // 1,500 is no multiple of 64
    QCOMPARE(softcap_diagonal_block(16384, 4096), std::int64_t(4096));
    for (std::int64_t t = 1; t <= 70000; t += 61) {
      const std::int64_t b = softcap_diagonal_block(t);
      if (b == 0) continue;
      QVERIFY(t % b == 0 && b >= 1024 && b % 64 == 0);
      QVERIFY(((t / b) & (t / b - 1)) == 0 && t / b >= 2);     // 2^L blocks, L >= 1
      QVERIFY(b < 2048 || (b % 2 != 0) || (b / 2) % 64 != 0);  // no smaller whole block was left
    }
  }

  // The cut of kernels/cudnn_attention.h (2^L rectangle levels, the diagonal's blocks, merged by
  // log-sum-exp; backward per part from the whole row's output and log-sum-exp, summed) with each
  // part written densely (Part above), against one dense causal row in float64 through autograd.
  void levelsMatchTheDenseFormula_data() {
    QTest::addColumn<int>("t");
    QTest::addColumn<int>("block");
    QTest::addColumn<int>("hq");
    QTest::addColumn<int>("hkv");
    QTest::addColumn<int>("d");
    QTest::addColumn<double>("cap");
    QTest::newRow("3 levels, GQA, bent cap") << 48 << 6 << 4 << 2 << 8 << 2.0;
    QTest::newRow("1 level, one KV head, no cap") << 64 << 32 << 3 << 1 << 5 << 0.0;
    QTest::newRow("4 levels of odd blocks, cap 50") << 80 << 5 << 2 << 2 << 7 << 50.0;
  }
  void levelsMatchTheDenseFormula() {
    QFETCH(int, t);
    QFETCH(int, block);
    QFETCH(int, hq);
    QFETCH(int, hkv);
    QFETCH(int, d);
    QFETCH(double, cap);
    namespace lv = odyssey::kernels::levels;
    torch::manual_seed(7);
    const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
    const double scale = 1.0 / std::sqrt(double(d));
    const torch::Tensor q0 = 2 * torch::randn({t, hq, d}, f64), k0 = 2 * torch::randn({t, hkv, d}, f64),
                        v0 = torch::randn({t, hkv, d}, f64), dout = torch::randn({t, hq, d}, f64);
    // The oracle: one causal row, its out and gradients by autograd; its lse from the same scores.
    const torch::Tensor q1 = q0.clone().requires_grad_(), k1 = k0.clone().requires_grad_(),
                        v1 = v0.clone().requires_grad_();
    const torch::Tensor want = dense(q1, k1, v1, {t}, scale, 0, cap);
    (want * dout).sum().backward();
    const Part part{scale, cap};
    const torch::Tensor pos = torch::arange(t, torch::kInt64);
    const torch::Tensor causal = pos.view({1, t}).le(pos.view({t, 1}));
    const torch::Tensor want_lse = part.forward(q0, k0, v0, causal).second;
    // The diagonal's blocks and the rectangles (every pair), each written densely.
    const torch::Tensor diag_keep =
        causal.logical_and(pos.view({1, t}).ge(pos.view({t, 1}).div(block, "floor") * block));
    const auto diag_fwd = part.masked_forward(diag_keep);
    const auto rect_fwd = part.batched_forward();
    const auto diag_bwd = part.masked_backward(diag_keep);
    const auto rect_bwd = part.batched_backward();
    const auto [out, lse] = lv::forward(q0, k0, v0, block, diag_fwd, rect_fwd);
    QVERIFY2(max_diff(out, want.detach()) < 1e-12, qPrintable(QString::number(max_diff(out, want.detach()))));
    QVERIFY2(max_diff(lse, want_lse) < 1e-12, qPrintable(QString::number(max_diff(lse, want_lse))));
    const auto [dq, dk, dv] = lv::backward(dout, q0, k0, v0, out, lse, block, diag_bwd, rect_bwd);
    for (const auto& [name, got, ref] : {std::make_tuple("dq", dq, q1.grad()), std::make_tuple("dk", dk, k1.grad()),
                                         std::make_tuple("dv", dv, v1.grad())})
      QVERIFY2(max_diff(got, ref) < 1e-11, qPrintable(QString("%1 %2").arg(name).arg(max_diff(got, ref))));
    // A cut that is not 2^L whole blocks is refused.
    QVERIFY_THROWS_EXCEPTION(c10::Error, lv::forward(q0, k0, v0, t / 3 + 1, diag_fwd, rect_fwd));
  }

  // kernels/cudnn_attention.h cuts a windowed row by blocks dividing the row and the window: the
  // largest multiple of 64 of at most 1,024 rows (and the window), at least 256.
  void cudnnWindowBlocks() {
    using odyssey::kernels::softcap_window_block;
    QCOMPARE(softcap_window_block(16384, 4096), std::int64_t(1024));  // Gemma-2's local layers
    QCOMPARE(softcap_window_block(32768, 4096), std::int64_t(1024));
    QCOMPARE(softcap_window_block(6144, 1536), std::int64_t(768));
    QCOMPARE(softcap_window_block(4096, 512), std::int64_t(512));
    QCOMPARE(softcap_window_block(16000, 4096), std::int64_t(0));  // 128 divides both: too small
    QCOMPARE(softcap_window_block(4096, 4096), std::int64_t(0));   // no shorter window: a causal row
    QCOMPARE(softcap_window_block(4096, 0), std::int64_t(0));
    for (std::int64_t t = 2048; t <= 40000; t += 509)
      for (std::int64_t w : {300, 1024, 2000, 3072, 4096}) {
        const std::int64_t b = softcap_window_block(t, w);
        if (b == 0) continue;
        QVERIFY(t % b == 0 && w % b == 0 && b % 64 == 0 && b >= 256 && b <= 1024 && w < t);
      }
  }

  // The windowed cut of kernels/cudnn_attention.h (the diagonal's blocks, full rectangles at each
  // block distance, the window's edge as a rectangle masked to keys above its diagonal; merged by
  // log-sum-exp, backward per part) with each part written densely, against one dense windowed
  // row in float64 through autograd. The edge's last row sees no key (NaN from the dense part):
  // the cut must leave it out.
  void windowedMatchesTheDenseFormula_data() {
    QTest::addColumn<int>("t");
    QTest::addColumn<int>("window");
    QTest::addColumn<int>("block");
    QTest::addColumn<int>("hq");
    QTest::addColumn<int>("hkv");
    QTest::addColumn<int>("d");
    QTest::addColumn<double>("cap");
    QTest::newRow("4 blocks back, GQA, bent cap") << 48 << 24 << 6 << 4 << 2 << 8 << 2.0;
    QTest::newRow("the edge alone, one KV head, no cap") << 30 << 10 << 10 << 3 << 1 << 5 << 0.0;
    QTest::newRow("2 blocks back, odd sizes, cap 50") << 35 << 14 << 7 << 2 << 2 << 7 << 50.0;
  }
  void windowedMatchesTheDenseFormula() {
    QFETCH(int, t);
    QFETCH(int, window);
    QFETCH(int, block);
    QFETCH(int, hq);
    QFETCH(int, hkv);
    QFETCH(int, d);
    QFETCH(double, cap);
    namespace lv = odyssey::kernels::levels;
    namespace wd = odyssey::kernels::windowed;
    torch::manual_seed(11);
    const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
    const double scale = 1.0 / std::sqrt(double(d));
    const torch::Tensor q0 = 2 * torch::randn({t, hq, d}, f64), k0 = 2 * torch::randn({t, hkv, d}, f64),
                        v0 = torch::randn({t, hkv, d}, f64), dout = torch::randn({t, hq, d}, f64);
    const torch::Tensor q1 = q0.clone().requires_grad_(), k1 = k0.clone().requires_grad_(),
                        v1 = v0.clone().requires_grad_();
    const torch::Tensor want = dense(q1, k1, v1, {t}, scale, window, cap);
    (want * dout).sum().backward();
    const Part part{scale, cap};
    const torch::Tensor pos = torch::arange(t, torch::kInt64);
    const torch::Tensor row = pos.view({t, 1}), col = pos.view({1, t});
    const torch::Tensor band = col.le(row).logical_and(col.gt(row - window));
    const torch::Tensor want_lse = part.forward(q0, k0, v0, band).second;
    const torch::Tensor diag_keep = col.le(row).logical_and(col.ge(row.div(block, "floor") * block));
    const torch::Tensor r = torch::arange(block, torch::kInt64);
    const torch::Tensor above = r.view({1, block}).gt(r.view({block, 1}));  // key s > query r
    const auto diag_fwd = part.masked_forward(diag_keep);
    const auto diag_bwd = part.masked_backward(diag_keep);
    const lv::RectangleForward rect_fwd = part.batched_forward(), edge_fwd = part.batched_forward(above);
    const lv::RectangleBackward rect_bwd = part.batched_backward(), edge_bwd = part.batched_backward(above);
    const auto [out, lse] = wd::forward(q0, k0, v0, window, block, diag_fwd, rect_fwd, edge_fwd);
    QVERIFY2(max_diff(out, want.detach()) < 1e-12, qPrintable(QString::number(max_diff(out, want.detach()))));
    QVERIFY2(max_diff(lse, want_lse) < 1e-12, qPrintable(QString::number(max_diff(lse, want_lse))));
    const auto [dq, dk, dv] = wd::backward(dout, q0, k0, v0, out, lse, window, block, diag_bwd, rect_bwd, edge_bwd);
    for (const auto& [name, got, ref] : {std::make_tuple("dq", dq, q1.grad()), std::make_tuple("dk", dk, k1.grad()),
                                         std::make_tuple("dv", dv, v1.grad())})
      QVERIFY2(max_diff(got, ref) < 1e-11, qPrintable(QString("%1 %2").arg(name).arg(max_diff(got, ref))));
    // The edge with every key kept (a rectangle where the window's triangle belongs) is wrong: the
    // comparison sees the mask.
    const auto wrong = wd::forward(q0, k0, v0, window, block, diag_fwd, rect_fwd, rect_fwd).first;
    QVERIFY(max_diff(wrong, want.detach()) > 1e-6);
    // Cuts that do not fit are refused: a block not dividing the window, a window as long as the row.
    QVERIFY_THROWS_EXCEPTION(c10::Error, wd::forward(q0, k0, v0, window + 1, block, diag_fwd, rect_fwd, edge_fwd));
    QVERIFY_THROWS_EXCEPTION(c10::Error, wd::forward(q0, k0, v0, t, block, diag_fwd, rect_fwd, edge_fwd));
  }

  void rejectsRowsThatDoNotFit() {
    const torch::Tensor q = torch::randn({10, 4, 8}), k = torch::randn({10, 3, 8});
    QVERIFY_THROWS_EXCEPTION(c10::Error, tiled_causal_attention(q, k, k, torch::tensor({0, 10}), 1.0, 0, 0));
    const torch::Tensor k2 = torch::randn({10, 2, 8});
    QVERIFY_THROWS_EXCEPTION(c10::Error, tiled_causal_attention(q, k2, k2, torch::tensor({0, 9}), 1.0, 0, 0));
  }

  // The tile sizing the planner shares: a tile's fp32 scores stay within kTiledScoreBytes,
  // rows are a multiple of 64 (or the whole row), and short rows are one tile.
  void tilesStayWithinTheirBudget() {
    struct Shape {
      std::int64_t total, reach, heads;
    };
    for (const Shape& s : {Shape{32768, 32768, 16}, Shape{131072, 131072, 32}, Shape{16384, 4096, 16},
                           Shape{65536, 8192, 64}, Shape{1 << 20, 1 << 20, 128}}) {
      const std::int64_t rows = tiled_attention_rows(s.total, s.reach, s.heads);
      QVERIFY(rows >= 64 && rows % 64 == 0);
      if (rows > 64) QVERIFY(tiled_attention_block_bytes(s.total, s.reach, s.heads) <= kTiledScoreBytes);
    }
    QCOMPARE(tiled_attention_rows(40, 40, 8), std::int64_t{40});
    QCOMPARE(tiled_attention_rows(2048, 2048, 8), std::int64_t{2048});  // 8 x 2048 x 4096 x 4 B = 256 MiB
    QCOMPARE(tiled_attention_block_bytes(2048, 2048, 8), std::int64_t{4} * 8 * 2048 * 2048);
  }
};

QTEST_APPLESS_MAIN(TstTiledAttention)
#include "tst_tiled_attention.moc"
