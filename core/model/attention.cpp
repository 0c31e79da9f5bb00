#include "model/attention.h"

#include <ATen/Context.h>
#include <ATen/SDPBackend.h>

#include <vector>

namespace odyssey::model {

std::string sdp_backend_name(std::int64_t backend) {
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
  for (at::SDPBackend b : {at::SDPBackend::flash_attention, at::SDPBackend::efficient_attention,
                           at::SDPBackend::math, at::SDPBackend::cudnn_attention, at::SDPBackend::overrideable})
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
                               const torch::Tensor& keep, double scale, AttentionBackend prefer,
                               std::int64_t* ran) {
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

torch::Tensor block_causal_mask(const torch::Tensor& cu_seqlens, std::int64_t total, const torch::Device& device) {
  const torch::Tensor cu = cu_seqlens.to(torch::kCPU, torch::kInt64);
  const std::int64_t n = cu.numel() - 1;
  TORCH_CHECK(n >= 1 && cu[n].item<std::int64_t>() == total, "cu_seqlens must end at the row length ", total);
  const torch::Tensor lengths = cu.narrow(0, 1, n) - cu.narrow(0, 0, n);
  const torch::Tensor segment =
      torch::repeat_interleave(torch::arange(n, torch::kInt64), lengths).to(device);
  const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const torch::Tensor idx = torch::arange(total, opts);
  const torch::Tensor keep =
      segment.view({total, 1}).eq(segment.view({1, total})).logical_and(idx.view({1, total}).le(idx.view({total, 1})));
  return keep.view({1, 1, total, total});
}

torch::Tensor varlen_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& cu_seqlens, std::int64_t max_seqlen, double scale,
                                      std::int64_t* ran) {
  const std::int64_t t = q.size(0);
  const bool half = q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kFloat16;
  if (q.is_cuda() && half && q.size(2) <= 256) {
    const torch::Tensor cu = cu_seqlens.to(q.device(), torch::kInt32);
    auto out = at::_flash_attention_forward(q, k, v, cu, cu, max_seqlen, max_seqlen, 0.0, /*is_causal=*/true,
                                            /*return_debug_mask=*/false, scale);
    if (ran) *ran = static_cast<std::int64_t>(at::SDPBackend::flash_attention);
    return std::get<0>(out);
  }
  // [T, H, D] -> [1, H, T, D] with the block-diagonal mask.
  const torch::Tensor keep = block_causal_mask(cu_seqlens, t, q.device());
  const torch::Tensor out = causal_attention(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                                             v.transpose(0, 1).unsqueeze(0), keep, scale, AttentionBackend::Auto, ran);
  return out.squeeze(0).transpose(0, 1);
}

}  // namespace odyssey::model
