#include "dist/sequence_parallel.h"

#include <ATen/SDPBackend.h>

#include <numeric>
#include <tuple>
#include <stdexcept>

#include "config/validate.h"
#include "kernels/attention_tile.h"
#include "model/attention.h"
#include "model/tiled_attention.h"

namespace odyssey::dist {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- layout --------------------------------------------------------------------------------

SpLayout plan_sp_layout(const std::vector<std::int32_t>& cu, std::int64_t tokens, int ulysses, int ring) {
  if (ulysses < 1 || ring < 1) throw std::invalid_argument("ulysses and ring degrees must be at least 1");
  if (cu.size() < 2 || cu.front() != 0 || cu.back() != tokens)
    throw std::invalid_argument("cu_seqlens must run from 0 to the row length " + std::to_string(tokens));
  SpLayout L;
  L.ulysses = ulysses;
  L.ring = ring;
  L.tokens = tokens;
  const std::int64_t two_r = 2 * static_cast<std::int64_t>(ring);
  L.cu_seqlens.push_back(0);
  auto add_sample = [&](std::int64_t first, std::int64_t real, std::int64_t padded_len) {
    const auto id = static_cast<std::int64_t>(L.cu_seqlens.size()) - 1;
    for (std::int64_t i = 0; i < padded_len; ++i) {
      L.source.push_back(i < real && first >= 0 ? first + i : -1);
      L.sample.push_back(id);
      L.position.push_back(i);
    }
    L.cu_seqlens.push_back(static_cast<std::int32_t>(L.source.size()));
    L.max_seqlen = std::max(L.max_seqlen, padded_len);
  };
  for (std::size_t d = 0; d + 1 < cu.size(); ++d) {
    const std::int64_t len = cu[d + 1] - cu[d];
    if (len <= 0) throw std::invalid_argument("cu_seqlens has an empty sample");
    const std::int64_t padded = ring > 1 ? (len + two_r - 1) / two_r * two_r : len;
    add_sample(cu[d], len, padded);
  }
  const auto total = static_cast<std::int64_t>(L.source.size());
  const std::int64_t multiple =
      ring > 1 ? std::lcm(two_r, static_cast<std::int64_t>(ring) * ulysses) : static_cast<std::int64_t>(ulysses);
  const std::int64_t pad = (multiple - total % multiple) % multiple;
  if (pad > 0) add_sample(-1, 0, pad);
  L.padded = static_cast<std::int64_t>(L.source.size());
  L.shard_order.assign(static_cast<std::size_t>(ring), {});
  if (ring == 1) {
    L.shard_order[0].resize(static_cast<std::size_t>(L.padded));
    std::iota(L.shard_order[0].begin(), L.shard_order[0].end(), std::int64_t{0});
    return L;
  }
  for (std::size_t s = 0; s + 1 < L.cu_seqlens.size(); ++s) {
    const std::int64_t off = L.cu_seqlens[s], len = L.cu_seqlens[s + 1] - L.cu_seqlens[s];
    const std::int64_t c = len / two_r;
    for (int r = 0; r < ring; ++r) {
      auto& o = L.shard_order[static_cast<std::size_t>(r)];
      for (std::int64_t i = 0; i < c; ++i) o.push_back(off + r * c + i);
      for (std::int64_t i = 0; i < c; ++i) o.push_back(off + (two_r - 1 - r) * c + i);
    }
  }
  return L;
}

bool heads_fit_ulysses(std::int64_t q_heads, std::int64_t kv_heads, int ulysses, std::string* why) {
  const std::string problem = ulysses_heads_problem(q_heads, kv_heads, ulysses);  // validate's rule
  if (!problem.empty() && why) *why = problem;
  return problem.empty();
}

// ---- the Ulysses all-to-all --------------------------------------------------------------------

namespace {

// A pointer as the integer an autograd function's arguments and context can carry.
template <typename T>
std::int64_t address(const T* p) {
  return static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(p));
}

Group* group_of(const AutogradContext* ctx) { return reinterpret_cast<Group*>(ctx->saved_data.at("group").toInt()); }

struct AllToAllFn : public torch::autograd::Function<AllToAllFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t group) {
    ctx->saved_data["group"] = group;
    return reinterpret_cast<Group*>(group)->all_to_all(x.contiguous());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // Slice j went to rank j and came back as its slice `rank`: the same exchange, reversed,
    // is the same exchange.
    return {group_of(ctx)->all_to_all(grads[0].contiguous()), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor all_to_all_autograd(Group* group, const torch::Tensor& x) {
  if (group->size() == 1) return x;
  return AllToAllFn::apply(x, address(group));
}

// ---- ring attention ------------------------------------------------------------------------

namespace {

// [n, Hkv, D] -> [H, n, D] fp32, each KV head repeated for its query heads.
torch::Tensor heads_first(const torch::Tensor& x, std::int64_t groups) {
  torch::Tensor t = x.to(torch::kFloat32);
  if (groups > 1) t = t.repeat_interleave(groups, 1);
  return t.transpose(0, 1);
}

// [H, n, D] gradient of the repeated heads -> [n, Hkv, D], summed over each KV head's group.
torch::Tensor fold_heads(const torch::Tensor& g, std::int64_t groups) {
  const torch::Tensor t = g.transpose(0, 1);  // [n, H, D]
  if (groups == 1) return t;
  return t.reshape({t.size(0), t.size(1) / groups, groups, t.size(2)}).sum(2);
}

// keep[i, j]: query i of rank qr sees key j of rank kr: same sample, not later, and with a
// sliding window (window > 0) fewer than `window` positions behind (transformers' kv > q - w).
torch::Tensor block_keep(const torch::Tensor& sample_ids, const torch::Tensor& positions, std::int64_t qr,
                         std::int64_t kr, std::int64_t window) {
  const torch::Tensor qs = sample_ids[qr], ks = sample_ids[kr], qp = positions[qr], kp = positions[kr];
  torch::Tensor keep = qs.unsqueeze(1).eq(ks.unsqueeze(0)).logical_and(kp.unsqueeze(0).le(qp.unsqueeze(1)));
  if (window > 0) keep = keep.logical_and(kp.unsqueeze(0).gt(qp.unsqueeze(1) - window));
  return keep;
}

// A block's scores [H, n, n] in fp32: q k^T * scale, soft-capped as Gemma-2's
// (tanh(s / cap) * cap) when softcap > 0, -inf where not kept. *tanh_out gets tanh(s / cap) for
// the backward's chain factor 1 - tanh^2.
torch::Tensor block_scores(const torch::Tensor& qh, const torch::Tensor& kb, const torch::Tensor& keep, double scale,
                           double softcap, torch::Tensor* tanh_out = nullptr) {
  torch::Tensor scores = kernels::soft_cap(torch::matmul(qh, kb.transpose(1, 2)) * scale, softcap, tanh_out);
  scores.masked_fill_(keep.logical_not().unsqueeze(0), -std::numeric_limits<double>::infinity());
  return scores;
}

struct RingAttentionFn : public torch::autograd::Function<RingAttentionFn> {
  // stash_ptr: a model::AttentionStash of a layer that keeps its attention output, else 0;
  // from_stash: the layer's recomputation, which takes the output and LSE kept by its forward
  // instead of running the ring again (the checkpoint's forward fills the stash).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& sample_ids, const torch::Tensor& positions,
                               double scale, std::int64_t window, double softcap, std::int64_t group,
                               std::int64_t stash_ptr, bool from_stash) {
    auto* st = reinterpret_cast<model::AttentionStash*>(stash_ptr);
    torch::Tensor out, lse;  // fp32 [H, n, D] and [H, n]
    if (from_stash) {
      out = std::move(st->out);
      lse = std::move(st->lse);
    } else {
      std::tie(out, lse) = run(q, k, v, sample_ids, positions, scale, window, softcap, reinterpret_cast<Group*>(group));
      if (st) st->out = out, st->lse = lse;
    }
    ctx->save_for_backward({q, k, v, sample_ids, positions, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["window"] = window;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["group"] = group;
    return out.transpose(0, 1).to(q.scalar_type());
  }

  static std::pair<torch::Tensor, torch::Tensor> run(const torch::Tensor& q, const torch::Tensor& k,
                                                     const torch::Tensor& v, const torch::Tensor& sample_ids,
                                                     const torch::Tensor& positions, double scale, std::int64_t window,
                                                     double softcap, Group* ring) {
    const int R = ring->size(), r = ring->rank();
    const std::int64_t hk = k.size(1), groups = q.size(1) / hk;
    const torch::Tensor qh = q.to(torch::kFloat32).transpose(0, 1);  // [H, n, D]
    torch::Tensor out = torch::zeros_like(qh);
    torch::Tensor lse = torch::full({qh.size(0), qh.size(1)}, -std::numeric_limits<double>::infinity(), qh.options());
    torch::Tensor kv = torch::cat({k, v}, 1).contiguous();
    for (int s = 0; s < R; ++s) {
      const int src = (r - s + R) % R;
      // The next block is requested before this one is computed (a transport that runs
      // asynchronously overlaps the two; the store transport does not).
      torch::Tensor next;
      if (s + 1 < R) next = ring->send_recv(kv, (r + 1) % R, (r - 1 + R) % R);
      // A block wholly outside every query's sample, causal reach or window is skipped.
      const torch::Tensor keep = block_keep(sample_ids, positions, r, src, window);
      if (keep.any().item<bool>()) {
        const torch::Tensor kb = heads_first(kv.narrow(1, 0, hk), groups);
        const torch::Tensor vb = heads_first(kv.narrow(1, hk, hk), groups);
        const torch::Tensor scores = block_scores(qh, kb, keep, scale, softcap);
        const torch::Tensor blse = torch::logsumexp(scores, -1);  // [H, n], -inf where nothing is kept
        const torch::Tensor safe = torch::where(torch::isinf(blse), torch::zeros_like(blse), blse);
        const torch::Tensor ob = torch::matmul(torch::exp(scores - safe.unsqueeze(-1)), vb);
        const torch::Tensor merged = torch::logaddexp(lse, blse);
        const torch::Tensor merged_safe = torch::where(torch::isinf(merged), torch::zeros_like(merged), merged);
        out = out * torch::exp(lse - merged_safe).unsqueeze(-1) + ob * torch::exp(blse - merged_safe).unsqueeze(-1);
        lse = merged;
      }
      if (next.defined()) kv = next;
    }
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &sample_ids = saved[3], &positions = saved[4];
    const torch::Tensor &out = saved[5], &lse = saved[6];
    const double scale = ctx->saved_data.at("scale").toDouble();
    const std::int64_t window = ctx->saved_data.at("window").toInt();
    const double softcap = ctx->saved_data.at("softcap").toDouble();
    Group* ring = group_of(ctx);
    const int R = ring->size(), r = ring->rank();
    const std::int64_t hk = k.size(1), groups = q.size(1) / hk;
    const torch::Tensor qh = q.to(torch::kFloat32).transpose(0, 1);
    const torch::Tensor dout = grads[0].to(torch::kFloat32).transpose(0, 1);  // [H, n, D]
    const torch::Tensor delta = (dout * out).sum(-1, true);                   // [H, n, 1]
    torch::Tensor dq = torch::zeros_like(qh);
    torch::Tensor kv = torch::cat({k, v}, 1).contiguous();
    torch::Tensor dkv = torch::zeros(kv.sizes(), kv.options().dtype(torch::kFloat32));
    for (int s = 0; s < R; ++s) {
      const int src = (r - s + R) % R;
      torch::Tensor next;
      if (s + 1 < R) next = ring->send_recv(kv, (r + 1) % R, (r - 1 + R) % R);
      const torch::Tensor keep = block_keep(sample_ids, positions, r, src, window);
      if (keep.any().item<bool>()) {
        const torch::Tensor kb = heads_first(kv.narrow(1, 0, hk), groups);
        const torch::Tensor vb = heads_first(kv.narrow(1, hk, hk), groups);
        torch::Tensor capped_tanh;
        const torch::Tensor scores = block_scores(qh, kb, keep, scale, softcap, &capped_tanh);
        const torch::Tensor p = torch::exp(scores - lse.unsqueeze(-1));  // the final softmax, this block's columns
        const torch::Tensor dv = torch::matmul(p.transpose(1, 2), dout);
        const torch::Tensor dp = torch::matmul(dout, vb.transpose(1, 2));
        torch::Tensor ds = p * (dp - delta);                         // d loss / d (capped) score
        if (softcap > 0) ds = ds * (1 - capped_tanh * capped_tanh);  // d(cap tanh(s / cap)) / ds
        dq = dq + torch::matmul(ds, kb) * scale;
        const torch::Tensor dk = torch::matmul(ds.transpose(1, 2), qh) * scale;
        dkv = dkv + torch::cat({fold_heads(dk, groups), fold_heads(dv, groups)}, 1);
      }
      // The gradient travels with its block; after `ring` hops it is back with its owner.
      dkv = ring->send_recv(dkv.contiguous(), (r + 1) % R, (r - 1 + R) % R);
      if (next.defined()) kv = next;
    }
    return {dq.transpose(0, 1).to(q.scalar_type()),
            dkv.narrow(1, 0, hk).to(k.scalar_type()),
            dkv.narrow(1, hk, hk).to(v.scalar_type()),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

// ---- ring attention on fused kernels (cuDNN or varlen flash blocks) ---------------------------

struct ZigzagRows {
  // Which rows of the shard a step uses: all, the first halves or the second halves of every
  // sample (narrow views when there is one sample, gathered rows otherwise).
  struct Rows {
    torch::Tensor index;  // int64 row indices; undefined = rows [offset, offset + count)
    std::int64_t offset = 0, count = 0;
    torch::Tensor cu;  // int32 [samples + 1]
    std::int64_t max = 0;
    torch::Tensor take(const torch::Tensor& x) const {
      return index.defined() ? x.index_select(0, index) : x.narrow(0, offset, count);
    }
    // x[rows] += y (rows of x along dim `dim`)
    void add(torch::Tensor& x, const torch::Tensor& y, int dim = 0) const {
      if (index.defined()) x.index_add_(dim, index, y.to(x.scalar_type()));
      else x.narrow(dim, offset, count).add_(y);
    }
  };
  Rows all, first, second;
};

namespace {

ZigzagRows zigzag_rows(const std::vector<std::int64_t>& half, const torch::Device& device) {
  ZigzagRows z;
  std::vector<std::int32_t> cu_all{0}, cu_half{0};
  std::vector<std::int64_t> first, second;
  std::int64_t at = 0, max_half = 0;
  for (std::int64_t c : half) {
    for (std::int64_t i = 0; i < c; ++i) first.push_back(at + i);
    for (std::int64_t i = 0; i < c; ++i) second.push_back(at + c + i);
    at += 2 * c;
    cu_all.push_back(static_cast<std::int32_t>(at));
    cu_half.push_back(static_cast<std::int32_t>(cu_half.back() + c));
    max_half = std::max(max_half, c);
  }
  auto cu = [&](const std::vector<std::int32_t>& v) {
    return torch::tensor(torch::ArrayRef<std::int32_t>(v), torch::kInt32).to(device);
  };
  z.all = ZigzagRows::Rows{{}, 0, at, cu(cu_all), 2 * max_half};
  z.first = ZigzagRows::Rows{{}, 0, at / 2, cu(cu_half), max_half};
  z.second = ZigzagRows::Rows{{}, at / 2, at / 2, z.first.cu, max_half};
  if (half.size() == 1) {
    z.second.offset = half[0];
  } else {
    z.first.index = torch::tensor(first, torch::kInt64).to(device);
    z.second.index = torch::tensor(second, torch::kInt64).to(device);
  }
  return z;
}

// Which part of a step's block is visible to this rank's queries, by the zigzag layout:
// the own block causally; a block from an earlier rank whole, for all queries but only its
// first halves of K/V; a block from a later rank whole, for the second halves of Q only.
struct StepRows {
  const ZigzagRows::Rows& q;   // the queries that see the block
  const ZigzagRows::Rows& kv;  // the rows of the block they see
  bool causal;                 // the diagonal block
};
StepRows step_rows(const ZigzagRows& z, int src, int rank) {
  if (src == rank) return {z.all, z.all, true};
  if (src < rank) return {z.all, z.first, false};
  return {z.second, z.all, false};
}

struct RingFlashFn : public torch::autograd::Function<RingFlashFn> {
  // stash_ptr / from_stash: as RingAttentionFn's (kept attention).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale, std::int64_t group, std::int64_t rows_ptr,
                               bool cudnn, std::int64_t stash_ptr, bool from_stash) {
    auto* st = reinterpret_cast<model::AttentionStash*>(stash_ptr);
    model::AttentionStash done;
    if (from_stash) {
      done.out = std::move(st->out);
      done.lse = std::move(st->lse);
      done.kernel_tensors = std::move(st->kernel_tensors);
      done.kernel_ints = std::move(st->kernel_ints);
    } else {
      done =
          run(q, k, v, scale, reinterpret_cast<Group*>(group), *reinterpret_cast<const ZigzagRows*>(rows_ptr), cudnn);
      if (st) *st = done;
    }
    std::vector<torch::Tensor> keep{q, k, v, done.out, done.lse};
    keep.insert(keep.end(), done.kernel_tensors.begin(), done.kernel_tensors.end());
    ctx->save_for_backward(keep);
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["group"] = group;
    ctx->saved_data["rows"] = rows_ptr;
    ctx->saved_data["kernel"] = done.kernel_ints;
    return done.out;
  }

  // The ring's forward: the output in q's dtype, the merged fp32 LSE, and what the kernel hands
  // its backward.
  static model::AttentionStash run(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                                   Group* ring, const ZigzagRows& z, bool cudnn) {
    const int R = ring->size(), r = ring->rank();
    const std::int64_t hk = k.size(1);
    // cuDNN's SDPA when the shard is one sample (1.7x flash on an H200, docs/benchmarks.md);
    // its blocks are then plain rectangles.
    model::LseAttention kernel(cudnn ? model::LseAttention::Kind::CuDNN : model::LseAttention::Kind::Flash, q.size(1),
                               hk);
    torch::Tensor out, lse;  // fp32 [n, H, D] and [H, n]
    torch::Tensor kv = torch::cat({k, v}, 1);
    for (int s = 0; s < R; ++s) {
      const int src = (r - s + R) % R;
      std::unique_ptr<PendingExchange> next;
      if (s + 1 < R) next = ring->start_send_recv(kv, (r + 1) % R, (r - 1 + R) % R);
      const StepRows rows = step_rows(z, src, r);
      const ZigzagRows::Rows &qrows = rows.q, &krows = rows.kv;
      const torch::Tensor kb = krows.take(kv);
      auto [ob16, lb] = kernel.forward(qrows.take(q), kb.narrow(1, 0, hk), kb.narrow(1, hk, hk), qrows.cu, krows.cu,
                                       qrows.max, krows.max, rows.causal, scale);
      const torch::Tensor ob = ob16.to(torch::kFloat32);
      if (s == 0) {  // the diagonal block: every query sees at least itself
        out = ob.contiguous();
        lse = lb.contiguous();
      } else {
        // Merge by log-sum-exp in fp32: new = log(e^lse + e^lb); out = out·e^(lse-new) + ob·e^(lb-new).
        const torch::Tensor old_lse = qrows.take(lse.transpose(0, 1)).transpose(0, 1);  // [H, nq]
        const torch::Tensor merged = torch::logaddexp(old_lse, lb);
        const torch::Tensor keep_old = torch::exp(old_lse - merged).transpose(0, 1).unsqueeze(-1);
        const torch::Tensor take_new = torch::exp(lb - merged).transpose(0, 1).unsqueeze(-1);
        const torch::Tensor mixed = qrows.take(out) * keep_old + ob * take_new;
        if (qrows.index.defined()) {
          out.index_copy_(0, qrows.index, mixed);
          lse.index_copy_(1, qrows.index, merged);
        } else {
          out.narrow(0, qrows.offset, qrows.count).copy_(mixed);
          lse.narrow(1, qrows.offset, qrows.count).copy_(merged);
        }
      }
      if (next) kv = next->wait();
    }
    model::AttentionStash result;
    result.out = out.to(q.scalar_type());
    result.lse = lse;
    result.kernel_tensors = kernel.saved_tensors();
    result.kernel_ints = kernel.saved_ints();
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const double scale = ctx->saved_data.at("scale").toDouble();
    Group* ring = group_of(ctx);
    const ZigzagRows& z = *reinterpret_cast<const ZigzagRows*>(ctx->saved_data.at("rows").toInt());
    const int R = ring->size(), r = ring->rank();
    const std::int64_t hk = k.size(1);
    const model::LseAttention kernel =
        model::LseAttention::restore({saved.begin() + 5, saved.end()}, ctx->saved_data.at("kernel").toIntVector());
    const torch::Tensor dout = grads[0].contiguous();
    torch::Tensor dq = torch::zeros(q.sizes(), q.options().dtype(torch::kFloat32));
    torch::Tensor kv = torch::cat({k, v}, 1);
    std::unique_ptr<PendingExchange> dkv_in;  // dK/dV of the block held, accumulated by the ranks before
    for (int s = 0; s < R; ++s) {
      const int src = (r - s + R) % R;
      std::unique_ptr<PendingExchange> next;
      if (s + 1 < R) next = ring->start_send_recv(kv, (r + 1) % R, (r - 1 + R) % R);
      const StepRows rows = step_rows(z, src, r);
      const ZigzagRows::Rows &qrows = rows.q, &krows = rows.kv;
      const torch::Tensor kb = krows.take(kv);
      // The block's share of the gradient, with the final output and log-sum-exp of these
      // queries (the softmax over every block): exactly this block's terms.
      auto [dqb, dkb, dvb] = kernel.backward(qrows.take(dout), qrows.take(q), kb.narrow(1, 0, hk), kb.narrow(1, hk, hk),
                                             qrows.take(out), qrows.take(lse.transpose(0, 1)).transpose(0, 1), qrows.cu,
                                             krows.cu, qrows.max, krows.max, rows.causal, scale);
      qrows.add(dq, dqb);
      torch::Tensor dkv = torch::zeros(kv.sizes(), kv.options().dtype(torch::kFloat32));
      krows.add(dkv, torch::cat({dkb, dvb.to(dkb.scalar_type())}, 1));
      if (dkv_in) dkv.add_(dkv_in->wait());
      // On to the next rank, which holds this block next step; after R hops it is home.
      dkv_in = ring->start_send_recv(dkv, (r + 1) % R, (r - 1 + R) % R);
      if (next) kv = next->wait();
    }
    const torch::Tensor dkv = dkv_in->wait();
    return {dq.to(q.scalar_type()),
            dkv.narrow(1, 0, hk).to(k.scalar_type()),
            dkv.narrow(1, hk, hk).to(v.scalar_type()),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

std::int64_t RingSegments::tokens() const {
  std::int64_t t = 0;
  for (std::int64_t c : half) t += 2 * c;
  return t;
}

RingSegments ring_segments(std::vector<std::int64_t> half, const torch::Device& device) {
  RingSegments seg;
  seg.rows = std::make_shared<ZigzagRows>(zigzag_rows(half, device));
  seg.half = std::move(half);
  return seg;
}

RingSegments ring_segments(const torch::Tensor& shard_sample_ids) {
  const torch::Tensor ids = shard_sample_ids.reshape({-1}).to(torch::kCPU, torch::kInt64).contiguous();
  const std::int64_t* p = ids.data_ptr<std::int64_t>();
  std::vector<std::int64_t> half;
  for (std::int64_t i = 0, n = ids.numel(); i < n;) {
    std::int64_t j = i;
    while (j < n && p[j] == p[i]) ++j;
    TORCH_CHECK((j - i) % 2 == 0, "ring attention: sample ", p[i], " holds ", j - i,
                " tokens on this shard; the zigzag layout needs an even count");
    half.push_back((j - i) / 2);
    i = j;
  }
  return ring_segments(std::move(half), shard_sample_ids.device());
}

torch::Tensor ring_flash_attention(Group* ring, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const RingSegments& segments, double scale, model::AttentionBackend prefer,
                                   std::int64_t* ran, model::AttentionStash* stash) {
  TORCH_CHECK(model::LseAttention::fused_supported(q),
              "ring flash attention needs CUDA bf16/fp16 with head dim <= 256");
  TORCH_CHECK(segments.tokens() == q.size(0), "ring attention: segments cover ", segments.tokens(),
              " tokens, the shard has ", q.size(0));
  TORCH_CHECK(q.size(1) % k.size(1) == 0, "ring_attention: ", q.size(1), " query heads over ", k.size(1), " KV heads");
  TORCH_CHECK(segments.rows && segments.rows->all.cu.device() == q.device(), "ring attention: segments made for ",
              segments.rows ? segments.rows->all.cu.device().str() : std::string("no device"), ", the shard is on ",
              q.device().str());
  const model::LseAttention::Kind kind = model::LseAttention::choose(q, segments.half.size() == 1, prefer);
  if (ran) *ran = model::LseAttention::sdp_backend(kind);
  const bool cudnn = kind == model::LseAttention::Kind::CuDNN;
  return RingFlashFn::apply(q.contiguous(), k.contiguous(), v.contiguous(), scale, address(ring),
                            address(segments.rows.get()), cudnn, address(stash), stash && stash->recomputing());
}

torch::Tensor ring_attention(Group* ring, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& sample_ids, const torch::Tensor& positions, double scale,
                             model::AttentionStash* stash, std::int64_t window, double softcap) {
  TORCH_CHECK(sample_ids.dim() == 2 && sample_ids.size(0) == ring->size() && sample_ids.size(1) == q.size(0),
              "ring_attention: sample ids must be [ring, n] = [", ring->size(), ", ", q.size(0), "], got ",
              sample_ids.sizes());
  TORCH_CHECK(q.size(1) % k.size(1) == 0, "ring_attention: ", q.size(1), " query heads over ", k.size(1), " KV heads");
  return RingAttentionFn::apply(q, k, v, sample_ids, positions, scale, window, softcap, address(ring), address(stash),
                                stash && stash->recomputing());
}

// ---- a sharded row -----------------------------------------------------------------------

namespace {

class SpAttention final : public model::AttentionOverride {
 public:
  SpAttention(Group* ulysses, Group* ring, torch::Tensor cu, std::int64_t max_seqlen, bool one_sequence,
              torch::Tensor sample_ids, torch::Tensor positions, RingSegments segments, torch::Tensor token_weight)
      : ulysses_(ulysses),
        ring_(ring),
        cu_(std::move(cu)),
        plans_(model::make_tile_plans(cu_)),
        max_seqlen_(max_seqlen),
        one_sequence_(one_sequence),
        sample_ids_(std::move(sample_ids)),
        positions_(std::move(positions)),
        segments_(std::move(segments)),
        token_weight_(std::move(token_weight)) {}

  torch::Tensor token_weight() const override { return token_weight_; }

  torch::Tensor attend_masked(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                              std::int64_t window, double softcap, model::AttentionBackend prefer,
                              std::int64_t* ran) override {
    auto [qq, kk, vv] = gather(q, k, v);
    if (ring_->size() > 1) {  // the reference ring masks each block by window and caps its scores
      if (ran) *ran = -1;
      return scatter(ring_attention(ring_, qq, kk, vv, sample_ids_, positions_, scale, nullptr, window, softcap),
                     q.size(0), q.size(1), q.size(2));
    }
    if (window > 0 && model::window_on_flash(qq.device(), qq.scalar_type(), qq.size(2), softcap, prefer))
      return scatter(model::varlen_causal_attention(qq, kk, vv, cu_, max_seqlen_, scale, ran, window), q.size(0),
                     q.size(1), q.size(2));
    // The gathered row: samples (with their padding at their ends) by cu_, consecutive positions
    // within each, so the window is an index distance there; tiles of exact attention.
    if (ran) *ran = static_cast<std::int64_t>(at::SDPBackend::math);
    return scatter(model::tiled_causal_attention(qq, kk, vv, cu_, scale, window, softcap, 0, plans_.get()), q.size(0),
                   q.size(1), q.size(2));
  }

  // Ulysses: this rank's tokens of all heads -> all tokens of this rank's heads (identity at u = 1).
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> gather(const torch::Tensor& q, const torch::Tensor& k,
                                                                 const torch::Tensor& v) {
    const int u = ulysses_->size();
    const std::int64_t n = q.size(0), hq = q.size(1), d = q.size(2);
    torch::Tensor qq = q, kk = k, vv = v;
    if (u > 1) {
      std::string why;
      TORCH_CHECK(heads_fit_ulysses(hq, k.size(1), u, &why), why);
      if (kk.size(1) < u) {  // fewer KV heads than ranks: each rank gets a copy of its head
        kk = kk.repeat_interleave(u / kk.size(1), 1);
        vv = vv.repeat_interleave(u / vv.size(1), 1);
      }
      const std::int64_t qh = hq / u, kh = kk.size(1) / u;
      // Rank dimension outermost: [n, H, D] -> [u, n, H/u, D], Q, K and V in one message.
      torch::Tensor packed =
          torch::cat({qq.reshape({n, u, qh, d}), kk.reshape({n, u, kh, d}), vv.reshape({n, u, kh, d})}, 2)
              .transpose(0, 1)
              .contiguous();
      packed = all_to_all_autograd(ulysses_, packed).reshape({u * n, qh + 2 * kh, d});
      qq = packed.narrow(1, 0, qh).contiguous();
      kk = packed.narrow(1, qh, kh).contiguous();
      vv = packed.narrow(1, qh + kh, kh).contiguous();
    }
    return {qq, kk, vv};
  }

  // And back: [u·n, H/u, D] -> [n, H, D].
  torch::Tensor scatter(torch::Tensor out, std::int64_t n, std::int64_t hq, std::int64_t d) {
    const int u = ulysses_->size();
    if (u == 1) return out;
    out = all_to_all_autograd(ulysses_, out.reshape({u, n, hq / u, d}).contiguous());
    return out.transpose(0, 1).reshape({n, hq, d});
  }

  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                       model::AttentionBackend prefer, std::int64_t* ran, model::AttentionStash* stash) override {
    auto [qq, kk, vv] = gather(q, k, v);
    torch::Tensor out;
    // A layer keeping its attention output keeps this rank's share: under Ulysses the gathered
    // row's heads of this rank, under ring attention its queries' merged output; with the LSE.
    if (ring_->size() > 1) {
      if (model::LseAttention::fused_supported(qq)) {
        out = ring_flash_attention(ring_, qq, kk, vv, segments_, scale, prefer, ran, stash);
      } else {
        out = ring_attention(ring_, qq, kk, vv, sample_ids_, positions_, scale, stash);
        if (ran) *ran = -1;
      }
    } else if (stash) {
      out = model::kept_causal_attention(qq, kk, vv, cu_, max_seqlen_, one_sequence_, prefer, *stash, scale, ran);
    } else if (one_sequence_ && prefer != model::AttentionBackend::Flash) {
      // The gathered row is one sample, perhaps followed by padding: plain causal SDPA is exact
      // (padding comes last, so no real query sees it) and lets cuDNN run, as on one GPU.
      out = model::sequence_causal_attention(qq, kk, vv, scale, prefer, ran);
    } else {
      out = model::varlen_causal_attention(qq, kk, vv, cu_, max_seqlen_, scale, ran);
    }
    return scatter(out, q.size(0), q.size(1), q.size(2));
  }

 private:
  Group* ulysses_;
  Group* ring_;
  torch::Tensor cu_;
  std::shared_ptr<model::TilePlans> plans_;  // the gathered row's tile plans, made once
  std::int64_t max_seqlen_;
  bool one_sequence_;
  torch::Tensor sample_ids_, positions_;
  RingSegments segments_;       // ring > 1: the zigzag segments of this rank's ring shard
  torch::Tensor token_weight_;  // fp32 [T]: 1 a token of the row, 0 padding
};

std::vector<std::int64_t> to_vector(const torch::Tensor& t) {
  const torch::Tensor c = t.reshape({-1}).to(torch::kCPU, torch::kInt64).contiguous();
  return std::vector<std::int64_t>(c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel());
}

torch::Tensor long_tensor(const std::vector<std::int64_t>& v, const torch::Device& device) {
  return torch::tensor(torch::ArrayRef<std::int64_t>(v), torch::kInt64).to(device);
}

}  // namespace

train::PackedRow shard_row(const train::PackedRow& row, Group* ulysses, Group* ring, std::int64_t pad_token_id) {
  const int u = ulysses->size(), rr = ring->size();
  const torch::Device device = row.input_ids.device();
  const std::vector<std::int64_t> ids = to_vector(row.input_ids), labels = to_vector(row.labels);
  const std::int64_t t = static_cast<std::int64_t>(ids.size());
  std::vector<std::int32_t> cu;
  for (std::int64_t c : to_vector(row.cu_seqlens)) cu.push_back(static_cast<std::int32_t>(c));
  const SpLayout L = plan_sp_layout(cu, t, u, rr);

  // Targets shifted once over the whole row (pitfall: a per-shard shift loses a target at
  // every shard boundary).
  auto target_at = [&](std::int64_t src) {
    return src >= 0 && src + 1 < t ? labels[static_cast<std::size_t>(src + 1)] : -100;
  };

  const auto& order = L.shard_order[static_cast<std::size_t>(ring->rank())];
  const auto m = static_cast<std::int64_t>(order.size()) / u;
  std::vector<std::int64_t> local_ids, local_targets, local_pos, local_rows;
  std::vector<float> weight;
  std::int64_t real = 0;
  for (std::int64_t i = ulysses->rank() * m; i < (ulysses->rank() + 1) * m; ++i) {
    const std::int64_t p = order[static_cast<std::size_t>(i)];
    const std::int64_t src = L.source[static_cast<std::size_t>(p)];
    local_ids.push_back(src >= 0 ? ids[static_cast<std::size_t>(src)] : pad_token_id);
    real += src >= 0;
    weight.push_back(src >= 0 ? 1.0f : 0.0f);
    local_targets.push_back(target_at(src));
    local_pos.push_back(L.position[static_cast<std::size_t>(p)]);
    local_rows.push_back(src >= 0 ? src : t + p);  // padding: past the row, never a real token's bits
  }

  train::PackedRow out;
  out.input_ids = long_tensor(local_ids, device).view({1, -1});
  out.targets = long_tensor(local_targets, device).view({1, -1});
  out.labels = out.targets;
  out.position_ids = long_tensor(local_pos, device).view({1, -1});
  out.cu_seqlens = torch::tensor({0, static_cast<std::int32_t>(m)}, torch::kInt32).to(device);
  out.max_seqlen = m;
  // Counted once over the group: samples on its first rank, tokens where they are.
  out.samples = ulysses->rank() == 0 && ring->rank() == 0 ? row.samples : 0;
  out.real_tokens = real;
  out.token_rows = long_tensor(local_rows, device);

  torch::Tensor cu_gathered = torch::tensor(torch::ArrayRef<std::int32_t>(L.cu_seqlens), torch::kInt32).to(device);
  torch::Tensor sample_ids, positions;
  RingSegments segments;
  if (rr > 1) {
    const auto n = static_cast<std::int64_t>(L.shard_order[0].size());
    std::vector<std::int64_t> s, p;
    for (const auto& o : L.shard_order)
      for (std::int64_t idx : o) {
        s.push_back(L.sample[static_cast<std::size_t>(idx)]);
        p.push_back(L.position[static_cast<std::size_t>(idx)]);
      }
    sample_ids = long_tensor(s, device).view({rr, n});
    std::vector<std::int64_t> half;
    for (std::size_t i = 0; i + 1 < L.cu_seqlens.size(); ++i)
      half.push_back((L.cu_seqlens[i + 1] - L.cu_seqlens[i]) / (2 * rr));
    segments = ring_segments(std::move(half), device);
    positions = long_tensor(p, device).view({rr, n});
  }
  out.attention = std::make_shared<SpAttention>(
      ulysses, ring, cu_gathered, L.max_seqlen,
      /*one_sequence=*/rr == 1 && cu.size() == 2, sample_ids, positions, std::move(segments),
      torch::tensor(torch::ArrayRef<float>(weight), torch::kFloat32).to(device));
  return out;
}

}  // namespace odyssey::dist
