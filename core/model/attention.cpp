#include "model/attention.h"

#include <ATen/Context.h>
#include <ATen/SDPBackend.h>

#include <atomic>
#include <cstdio>
#include <limits>
#include <optional>
#include <vector>

#include "kernels/attention_tile.h"

namespace odyssey::model {

std::string sdp_backend_name(std::int64_t backend) {
  if (backend == kDecodeKernelRan) return "decode_kernel";
  switch (static_cast<at::SDPBackend>(backend)) {
    case at::SDPBackend::math: return "math";
    case at::SDPBackend::flash_attention: return "flash";
    case at::SDPBackend::efficient_attention: return "efficient";
    case at::SDPBackend::cudnn_attention: return "cudnn";
    case at::SDPBackend::overrideable: return "overrideable";
    case at::SDPBackend::error: return "error";
  }
  return "unknown";
}

const char* attention_backend_name(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::Auto: return "auto";
    case AttentionBackend::CuDNN: return "cudnn";
    case AttentionBackend::Flash: return "flash";
    case AttentionBackend::Efficient: return "efficient";
    case AttentionBackend::Math: return "math";
  }
  return "auto";
}

torch::Tensor repeat_kv(const torch::Tensor& x, std::int64_t n) {
  if (n == 1) return x;
  const auto b = x.size(0), h = x.size(1), s = x.size(2), d = x.size(3);
  return x.unsqueeze(2).expand({b, h, n, s, d}).reshape({b, h * n, s, d});
}

torch::Tensor causal_padding_mask(const torch::Tensor& attention_mask, std::int64_t seq_len) {
  if (!attention_mask.defined()) return {};
  const torch::Tensor pad = attention_mask.to(torch::kBool);
  if (pad.all().item<bool>()) return {};  // HF's _ignore_causal_mask_sdpa: is_causal instead
  const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(attention_mask.device());
  const torch::Tensor q = torch::arange(seq_len, opts).view({seq_len, 1});
  const torch::Tensor k = torch::arange(seq_len, opts).view({1, seq_len});
  const torch::Tensor causal = k.le(q).view({1, 1, seq_len, seq_len});
  return causal.logical_and(pad.view({pad.size(0), 1, 1, seq_len}));
}

torch::Tensor window_mask(const torch::Tensor& keep, std::int64_t seq_len, std::int64_t window,
                          const torch::Device& device) {
  const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const torch::Tensor q = torch::arange(seq_len, opts).view({seq_len, 1});
  const torch::Tensor k = torch::arange(seq_len, opts).view({1, seq_len});
  const torch::Tensor in_window = k.gt(q - window).logical_and(k.le(q)).view({1, 1, seq_len, seq_len});
  return keep.defined() ? keep.logical_and(in_window) : in_window;
}

torch::Tensor masked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& keep, double scale, double softcap, AttentionBackend prefer,
                               std::int64_t* ran) {
  const std::int64_t s = q.size(2);
  torch::Tensor mask = keep;
  if (!mask.defined()) mask = window_mask({}, s, s + 1, q.device());  // plain causal
  if (softcap <= 0) return causal_attention(q, k, v, mask, scale, prefer, ran);
  const std::int64_t groups = q.size(1) / k.size(1);
  const torch::Tensor kk = repeat_kv(k, groups), vv = repeat_kv(v, groups);
  torch::Tensor w = torch::matmul(q, kk.transpose(2, 3)) * scale;
  w = kernels::soft_cap(w, softcap);
  // HF adds the dtype's lowest value where masked: a fully masked row (left padding) then
  // averages all keys, as transformers' does.
  double lowest = std::numeric_limits<float>::lowest();
  if (w.scalar_type() == torch::kBFloat16) lowest = static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
  if (w.scalar_type() == torch::kHalf) lowest = static_cast<double>(std::numeric_limits<c10::Half>::lowest());
  if (w.scalar_type() == torch::kDouble) lowest = std::numeric_limits<double>::lowest();
  // Added, not filled: as in transformers, the masked scores' gradient passes through (it
  // matters for a fully masked row whose output is trained, e.g. the last left padding
  // position, which predicts the first real token).
  w = w + torch::where(mask, torch::zeros({}, w.options()), torch::full({}, lowest, w.options()));
  const torch::Tensor p = torch::softmax(w, -1, torch::kFloat32).to(q.scalar_type());
  if (ran) *ran = static_cast<std::int64_t>(at::SDPBackend::math);
  return torch::matmul(p, vv);
}

namespace {

void put_first(AttentionBackend prefer) {
  at::SDPBackend first = at::SDPBackend::cudnn_attention;
  switch (prefer) {
    case AttentionBackend::Auto: return;
    case AttentionBackend::CuDNN: first = at::SDPBackend::cudnn_attention; break;
    case AttentionBackend::Flash: first = at::SDPBackend::flash_attention; break;
    case AttentionBackend::Efficient: first = at::SDPBackend::efficient_attention; break;
    case AttentionBackend::Math: first = at::SDPBackend::math; break;
  }
  std::vector<std::int64_t> order{static_cast<std::int64_t>(first)};
  for (at::SDPBackend b : {at::SDPBackend::flash_attention, at::SDPBackend::efficient_attention, at::SDPBackend::math,
                           at::SDPBackend::cudnn_attention, at::SDPBackend::overrideable})
    if (b != first) order.push_back(static_cast<std::int64_t>(b));
  at::globalContext().setSDPPriorityOrder(order);
}

bool is_preferred(std::int64_t choice, AttentionBackend prefer) {
  switch (prefer) {
    case AttentionBackend::Auto: return true;
    case AttentionBackend::CuDNN: return choice == static_cast<std::int64_t>(at::SDPBackend::cudnn_attention);
    case AttentionBackend::Flash: return choice == static_cast<std::int64_t>(at::SDPBackend::flash_attention);
    case AttentionBackend::Efficient: return choice == static_cast<std::int64_t>(at::SDPBackend::efficient_attention);
    case AttentionBackend::Math: return choice == static_cast<std::int64_t>(at::SDPBackend::math);
  }
  return true;
}

}  // namespace

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& keep, double scale, AttentionBackend prefer, std::int64_t* ran) {
  const std::int64_t groups = q.size(1) / k.size(1);
  const bool masked = keep.defined();
  std::optional<torch::Tensor> mask;
  if (masked) mask = keep;
  torch::Tensor kk = masked ? repeat_kv(k, groups) : k;
  torch::Tensor vv = masked ? repeat_kv(v, groups) : v;
  bool gqa = !masked && groups > 1;
  const bool causal = !masked;
  if (q.is_cuda()) put_first(prefer);
  std::int64_t choice = at::_fused_sdp_choice(q, kk, vv, mask, 0.0, causal, scale, gqa);
  if (q.is_cuda() && gqa && !is_preferred(choice, prefer)) {
    // Some backends take no enable_gqa; with the KV heads repeated they may run.
    torch::Tensor k2 = repeat_kv(k, groups), v2 = repeat_kv(v, groups);
    const std::int64_t c2 = at::_fused_sdp_choice(q, k2, v2, mask, 0.0, causal, scale, false);
    if (is_preferred(c2, prefer)) {
      kk = k2;
      vv = v2;
      gqa = false;
      choice = c2;
    }
  }
  if (ran) *ran = choice;
  return at::scaled_dot_product_attention(q, kk, vv, mask, 0.0, causal, scale, gqa);
}

torch::Tensor sequence_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        double scale, AttentionBackend prefer, std::int64_t* ran) {
  return causal_attention(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                          v.transpose(0, 1).unsqueeze(0), {}, scale, prefer, ran)
      .squeeze(0)
      .transpose(0, 1);
}

// ---- attention with its log-sum-exp -------------------------------------------------------

namespace {

std::atomic<bool> g_cudnn_gqa{true};

// A cuDNN (or PyTorch) that refuses K/V with fewer heads than the queries: repeat them from now on.
void refuse_cudnn_gqa(const c10::Error& e) {
  if (g_cudnn_gqa.exchange(false))
    std::fprintf(stderr,
                 "odyssey: cuDNN attention refused grouped-query K/V heads; repeating them to the query heads "
                 "from now on (%s)\n",
                 e.what_without_backtrace());
}

torch::Tensor heads_first(const torch::Tensor& x) { return x.transpose(0, 1).unsqueeze(0); }  // [n,H,D] -> [1,H,n,D]
torch::Tensor rows_first(const torch::Tensor& x) { return x.squeeze(0).transpose(0, 1); }     // and back

// keep[i, j]: query row i may see key row j (same sample pair; causal top-left aligned).
torch::Tensor pair_mask(const torch::Tensor& cu_q, const torch::Tensor& cu_k, std::int64_t nq, std::int64_t nk,
                        bool causal, const torch::Device& device, std::int64_t window = 0) {
  const torch::Tensor cq = cu_q.to(torch::kCPU, torch::kInt64), ck = cu_k.to(torch::kCPU, torch::kInt64);
  const std::int64_t n = cq.numel() - 1;
  TORCH_CHECK(n >= 1 && ck.numel() == n + 1 && cq[n].item<std::int64_t>() == nq && ck[n].item<std::int64_t>() == nk,
              "attention: sample boundaries must cover ", nq, " query and ", nk,
              " key rows in the same number of samples");
  auto segment = [&](const torch::Tensor& cu, std::int64_t rows) {
    const torch::Tensor len = cu.narrow(0, 1, n) - cu.narrow(0, 0, n);
    const torch::Tensor seg = torch::repeat_interleave(torch::arange(n, torch::kInt64), len);
    const torch::Tensor local = torch::arange(rows, torch::kInt64) - cu.index_select(0, seg);
    return std::make_pair(seg.to(device), local.to(device));
  };
  const auto [sq, lq] = segment(cq, nq);
  const auto [sk, lk] = segment(ck, nk);
  torch::Tensor keep = sq.view({nq, 1}).eq(sk.view({1, nk}));
  if (causal) keep = keep.logical_and(lk.view({1, nk}).le(lq.view({nq, 1})));
  if (window > 0) keep = keep.logical_and(lk.view({1, nk}).gt(lq.view({nq, 1}) - window));
  return keep;
}

}  // namespace

bool window_on_flash(const torch::Device& device, torch::ScalarType dtype, std::int64_t head_dim, double softcap,
                     AttentionBackend prefer) {
  const bool half = dtype == torch::kBFloat16 || dtype == torch::kFloat16;
  return device.is_cuda() && half && head_dim <= 256 && softcap <= 0 && prefer != AttentionBackend::Efficient &&
         prefer != AttentionBackend::Math;
}

void set_cudnn_gqa(bool on) { g_cudnn_gqa = on; }
bool cudnn_gqa() { return g_cudnn_gqa.load(); }

bool LseAttention::fused_supported(const torch::Tensor& q) {
  const bool half = q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kFloat16;
  return q.is_cuda() && half && q.size(-1) <= 256;
}

LseAttention::Kind LseAttention::choose(const torch::Tensor& q, bool one_sample, AttentionBackend prefer,
                                        std::int64_t window) {
  if (!fused_supported(q)) return Kind::Math;
  return one_sample && window <= 0 && prefer != AttentionBackend::Flash ? Kind::CuDNN : Kind::Flash;
}

std::int64_t LseAttention::sdp_backend(Kind kind) {
  switch (kind) {
    case Kind::CuDNN: return static_cast<std::int64_t>(at::SDPBackend::cudnn_attention);
    case Kind::Flash: return static_cast<std::int64_t>(at::SDPBackend::flash_attention);
    case Kind::Math: break;
  }
  return static_cast<std::int64_t>(at::SDPBackend::math);
}

torch::Tensor LseAttention::repeat(const torch::Tensor& x) const {
  return hq_ == hkv_ ? x : x.repeat_interleave(hq_ / hkv_, 1);
}

// [n, Hq, D] gradient of repeated heads -> [n, Hkv, D], summed in fp32 without an fp32 copy of
// the repeated gradient (at 512K tokens that copy alone is 7 GiB for the 7B shape).
torch::Tensor LseAttention::fold(const torch::Tensor& g) const {
  if (hq_ == hkv_) return g;
  return g.reshape({g.size(0), hkv_, hq_ / hkv_, g.size(2)}).sum(2, /*keepdim=*/false, torch::kFloat32);
}

std::pair<torch::Tensor, torch::Tensor> LseAttention::forward(const torch::Tensor& q, const torch::Tensor& k,
                                                              const torch::Tensor& v, const torch::Tensor& cu_q,
                                                              const torch::Tensor& cu_k, std::int64_t max_q,
                                                              std::int64_t max_k, bool causal, double scale) {
  const std::int64_t nq = q.size(0);
  if (kind_ == Kind::CuDNN) {
    auto run = [&](bool grouped) {
      return at::_scaled_dot_product_cudnn_attention(
          heads_first(q), heads_first(grouped ? k : repeat(k)), heads_first(grouped ? v : repeat(v)), std::nullopt,
          /*compute_log_sumexp=*/true, 0.0, causal, /*return_debug_mask=*/false, scale);
    };
    grouped_ = hq_ != hkv_ && cudnn_gqa();
    std::optional<decltype(run(false))> got;
    if (grouped_) {
      try {
        got.emplace(run(true));
      } catch (const c10::Error& e) {
        refuse_cudnn_gqa(e);
        grouped_ = false;
      }
    }
    if (!got) got.emplace(run(false));
    auto& r = *got;
    const torch::Tensor lse = std::get<1>(r);
    TORCH_CHECK(lse.numel() == hq_ * nq && lse.dim() >= 3 && lse.size(0) == 1 && lse.size(1) == hq_,
                "attention: cuDNN returned a log-sum-exp of shape ", lse.sizes(), " for ", hq_, " heads x ", nq,
                " rows");
    lse_shape_ = lse.sizes().vec();
    aux_a_ = std::get<6>(r);
    aux_b_ = std::get<7>(r);
    aux_c_ = std::get<2>(r);
    aux_d_ = std::get<3>(r);
    return {rows_first(std::get<0>(r)), lse.reshape({hq_, nq}).to(torch::kFloat32)};
  }
  if (kind_ == Kind::Flash) {
    // A window is flash's local band: window - 1 keys behind the query (kv > q - window).
    auto r = at::_flash_attention_forward(q, k, v, cu_q.to(torch::kInt32), cu_k.to(torch::kInt32), max_q, max_k, 0.0,
                                          causal, /*return_debug_mask=*/false, scale, band_left(), band_right());
    const torch::Tensor lse = std::get<1>(r);
    aux_a_ = std::get<2>(r);
    aux_b_ = std::get<3>(r);
    lse_3d_ = lse.dim() == 3;
    // Varlen flash's log-sum-exp is [H, total_q] (older flash-attention: [1, H, >= total_q]).
    if (lse.dim() == 2 && lse.size(1) == nq) return {std::get<0>(r), lse};
    TORCH_CHECK(lse.dim() == 3 && lse.size(0) == 1 && lse.size(2) >= nq, "attention: unexpected log-sum-exp shape ",
                lse.sizes(), " from flash attention for ", nq, " rows");
    return {std::get<0>(r), lse[0].narrow(1, 0, nq)};
  }
  const torch::Tensor qh = q.to(torch::kFloat32).transpose(0, 1);
  const torch::Tensor kh = repeat(k).to(torch::kFloat32).transpose(0, 1),
                      vh = repeat(v).to(torch::kFloat32).transpose(0, 1);
  torch::Tensor scores = torch::matmul(qh, kh.transpose(1, 2)) * scale;  // [H, nq, nk]
  scores.masked_fill_(pair_mask(cu_q, cu_k, nq, k.size(0), causal, q.device(), window_).logical_not().unsqueeze(0),
                      -std::numeric_limits<double>::infinity());
  torch::Tensor lse = torch::logsumexp(scores, -1);
  const torch::Tensor safe = torch::where(torch::isinf(lse), torch::zeros_like(lse), lse);
  const torch::Tensor out = torch::matmul(torch::exp(scores - safe.unsqueeze(-1)), vh).transpose(0, 1);
  return {out.to(q.scalar_type()), lse};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> LseAttention::backward(
    const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, const torch::Tensor& cu_q, const torch::Tensor& cu_k,
    std::int64_t max_q, std::int64_t max_k, bool causal, double scale) const {
  if (kind_ == Kind::CuDNN) {
    std::vector<std::int64_t> shape = lse_shape_;
    shape[2] = q.size(0);  // the kernel's own shape, with these rows
    auto run = [&](bool grouped) {
      return at::_scaled_dot_product_cudnn_attention_backward(
          heads_first(dout), heads_first(q), heads_first(grouped ? k : repeat(k)), heads_first(grouped ? v : repeat(v)),
          heads_first(out), lse.contiguous().view(shape), aux_a_, aux_b_, torch::Tensor(), aux_c_, aux_d_, q.size(0),
          k.size(0), 0.0, causal, scale);
    };
    // The forward's grouped call says nothing of the backward's: it may still refuse them, and the
    // repeated heads give the same gradients (the forward's outputs do not depend on the choice).
    if (grouped_ && cudnn_gqa()) {
      try {
        auto g = run(true);
        return {rows_first(std::get<0>(g)), rows_first(std::get<1>(g)), rows_first(std::get<2>(g))};
      } catch (const c10::Error& e) {
        refuse_cudnn_gqa(e);
      }
    }
    auto g = run(false);
    return {rows_first(std::get<0>(g)), fold(rows_first(std::get<1>(g))), fold(rows_first(std::get<2>(g)))};
  }
  if (kind_ == Kind::Flash) {
    torch::Tensor l = lse.contiguous();
    if (lse_3d_) l = l.unsqueeze(0);
    auto g = at::_flash_attention_backward(dout, q, k, v, out, l, cu_q.to(torch::kInt32), cu_k.to(torch::kInt32), max_q,
                                           max_k, 0.0, causal, aux_a_, aux_b_, scale, band_left(), band_right());
    return {std::get<0>(g), std::get<1>(g), std::get<2>(g)};
  }
  // d scores = p (dp - rowsum(dout · out)), with p = exp(scores - lse) the final softmax.
  const torch::Tensor qh = q.to(torch::kFloat32).transpose(0, 1);
  const torch::Tensor kh = repeat(k).to(torch::kFloat32).transpose(0, 1),
                      vh = repeat(v).to(torch::kFloat32).transpose(0, 1);
  const torch::Tensor doh = dout.to(torch::kFloat32).transpose(0, 1), oh = out.to(torch::kFloat32).transpose(0, 1);
  torch::Tensor scores = torch::matmul(qh, kh.transpose(1, 2)) * scale;
  scores.masked_fill_(
      pair_mask(cu_q, cu_k, q.size(0), k.size(0), causal, q.device(), window_).logical_not().unsqueeze(0),
      -std::numeric_limits<double>::infinity());
  const torch::Tensor p = torch::exp(scores - lse.unsqueeze(-1));
  const torch::Tensor delta = (doh * oh).sum(-1, true);
  const torch::Tensor ds = p * (torch::matmul(doh, vh.transpose(1, 2)) - delta);
  const torch::Tensor dq = torch::matmul(ds, kh) * scale;
  const torch::Tensor dk = torch::matmul(ds.transpose(1, 2), qh) * scale;
  const torch::Tensor dv = torch::matmul(p.transpose(1, 2), doh);
  return {dq.transpose(0, 1), fold(dk.transpose(0, 1)), fold(dv.transpose(0, 1))};
}

std::vector<std::int64_t> LseAttention::saved_ints() const {
  std::vector<std::int64_t> v{static_cast<std::int64_t>(kind_), hq_, hkv_, lse_3d_ ? 1 : 0, window_, grouped_ ? 1 : 0};
  v.insert(v.end(), lse_shape_.begin(), lse_shape_.end());
  return v;
}

LseAttention LseAttention::restore(const std::vector<torch::Tensor>& tensors, const std::vector<std::int64_t>& ints) {
  TORCH_CHECK(tensors.size() == 4 && ints.size() >= 6, "LseAttention::restore: not a saved state");
  LseAttention a(static_cast<Kind>(ints[0]), ints[1], ints[2], ints[4]);
  a.lse_3d_ = ints[3] != 0;
  a.grouped_ = ints[5] != 0;
  a.lse_shape_.assign(ints.begin() + 6, ints.end());
  a.aux_a_ = tensors[0];
  a.aux_b_ = tensors[1];
  a.aux_c_ = tensors[2];
  a.aux_d_ = tensors[3];
  return a;
}

torch::Tensor block_causal_mask(const torch::Tensor& cu_seqlens, std::int64_t total, const torch::Device& device) {
  const torch::Tensor cu = cu_seqlens.to(torch::kCPU, torch::kInt64);
  const std::int64_t n = cu.numel() - 1;
  TORCH_CHECK(n >= 1 && cu[n].item<std::int64_t>() == total, "cu_seqlens must end at the row length ", total);
  const torch::Tensor lengths = cu.narrow(0, 1, n) - cu.narrow(0, 0, n);
  const torch::Tensor segment = torch::repeat_interleave(torch::arange(n, torch::kInt64), lengths).to(device);
  const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const torch::Tensor idx = torch::arange(total, opts);
  const torch::Tensor keep =
      segment.view({total, 1}).eq(segment.view({1, total})).logical_and(idx.view({1, total}).le(idx.view({total, 1})));
  return keep.view({1, 1, total, total});
}

torch::Tensor varlen_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& cu_seqlens, std::int64_t max_seqlen, double scale,
                                      std::int64_t* ran, std::int64_t window) {
  const std::int64_t t = q.size(0);
  if (window >= max_seqlen) window = 0;  // a window at least the longest sample hides nothing
  if (LseAttention::fused_supported(q)) {
    const torch::Tensor cu = cu_seqlens.to(q.device(), torch::kInt32);
    // Flash attention's local band: keys at most window_size_left rows behind the query, none
    // after it; transformers' window keeps kv > q - window, so the band is window - 1. The
    // autograd node of _flash_attention_forward hands the band to its backward.
    std::optional<std::int64_t> left, right;
    if (window > 0) {
      left = window - 1;
      right = 0;
    }
    auto out = at::_flash_attention_forward(q, k, v, cu, cu, max_seqlen, max_seqlen, 0.0, /*is_causal=*/true,
                                            /*return_debug_mask=*/false, scale, left, right);
    if (ran) *ran = static_cast<std::int64_t>(at::SDPBackend::flash_attention);
    return std::get<0>(out);
  }
  // [T, H, D] -> [1, H, T, D] with the block-diagonal mask (and the window's band).
  torch::Tensor keep = block_causal_mask(cu_seqlens, t, q.device());
  if (window > 0) keep = window_mask(keep, t, window, q.device());
  const torch::Tensor out = causal_attention(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                                             v.transpose(0, 1).unsqueeze(0), keep, scale, AttentionBackend::Auto, ran);
  return out.squeeze(0).transpose(0, 1);
}

namespace {

// The recomputed layer's attention: the output kept by its forward, and a backward from it.
struct StashedAttentionFn : public torch::autograd::Function<StashedAttentionFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& cu, std::int64_t max_seqlen, double scale,
                               std::int64_t stash_ptr) {
    auto* st = reinterpret_cast<AttentionStash*>(stash_ptr);
    const torch::Tensor out = std::move(st->out), lse = std::move(st->lse);
    std::vector<torch::Tensor> keep{q, k, v, out, lse, cu};
    keep.insert(keep.end(), st->kernel_tensors.begin(), st->kernel_tensors.end());
    ctx->save_for_backward(keep);
    ctx->saved_data["kernel"] = st->kernel_ints;
    ctx->saved_data["max"] = max_seqlen;
    ctx->saved_data["scale"] = scale;
    st->kernel_tensors.clear();  // the node holds them now; freed with it after its backward
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const LseAttention kernel =
        LseAttention::restore({saved.begin() + 6, saved.end()}, ctx->saved_data.at("kernel").toIntVector());
    const std::int64_t max = ctx->saved_data.at("max").toInt();
    auto [dq, dk, dv] =
        kernel.backward(grads[0].contiguous(), saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], saved[5],
                        max, max, /*causal=*/true, ctx->saved_data.at("scale").toDouble());
    return {dq.to(saved[0].scalar_type()),
            dk.to(saved[1].scalar_type()),
            dv.to(saved[2].scalar_type()),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

void AttentionStash::park(const std::shared_ptr<kernels::OffloadChain>& host) {
  if (!host || !out.defined() || !lse.defined()) return;
  host_ = host;
  slot_ = host->push(out);
  host->push(lse);
  out = torch::Tensor();
  lse = torch::Tensor();
}

bool AttentionStash::recomputing() {
  if (!torch::GradMode::is_enabled()) return false;
  if (host_) {
    out = host_->take(slot_);
    lse = host_->take(slot_ + 1);
    if (slot_ >= 2) {  // the stash of the next layer backward recomputes
      host_->prefetch(slot_ - 2);
      host_->prefetch(slot_ - 1);
    }
    host_.reset();
  }
  TORCH_CHECK(out.defined(),
              "kept attention: the layer's recomputation found no kept output (was its forward run "
              "without recording, as a checkpoint does?)");
  return true;
}

torch::Tensor kept_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& cu_seqlens, std::int64_t max_seqlen, bool one_sample,
                                    AttentionBackend prefer, AttentionStash& st, double scale, std::int64_t* ran,
                                    std::int64_t window) {
  if (!st.recomputing()) {
    LseAttention kernel(LseAttention::choose(q, one_sample, prefer, window), q.size(1), k.size(1), window);
    auto [out, lse] = kernel.forward(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, true, scale);
    st.out = out;
    st.lse = lse;
    st.kernel_tensors = kernel.saved_tensors();
    st.kernel_ints = kernel.saved_ints();
    if (ran) *ran = LseAttention::sdp_backend(kernel.kind());
    return out;
  }
  if (ran) *ran = LseAttention::sdp_backend(static_cast<LseAttention::Kind>(st.kernel_ints.at(0)));
  return StashedAttentionFn::apply(q, k, v, cu_seqlens, max_seqlen, scale,
                                   static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(&st)));
}

}  // namespace odyssey::model
