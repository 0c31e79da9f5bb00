// The reference of attention_tile.h: transformers' soft-capped scores and softmax as ATen ops.
#include "kernels/attention_tile.h"

#include <limits>
#include <utility>

namespace odyssey::kernels {

torch::Tensor soft_cap(const torch::Tensor& s, double cap, torch::Tensor* tanh_out) {
  if (cap <= 0) return s;
  torch::Tensor t = torch::tanh(s / cap);
  torch::Tensor capped = t * cap;
  if (tanh_out) *tanh_out = std::move(t);
  return capped;
}
namespace {

// Whether row r's query sees column c's key: [rows, m] bool, broadcast over the tile's groups.
torch::Tensor seen(const AttentionTile& t, std::int64_t m, const torch::Device& device) {
  const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const torch::Tensor keys = torch::arange(t.key0, t.key0 + m, opts).view({1, m});
  const torch::Tensor rows = torch::arange(t.row0, t.row0 + t.rows, opts).view({t.rows, 1});
  return keys.ge(t.first_key.narrow(0, t.row0, t.rows).view({t.rows, 1})).logical_and(keys.le(rows));
}

// x with -inf where not seen; *tanh_out gets tanh(s * scale / cap) when capped.
torch::Tensor transformed(const torch::Tensor& s, const AttentionTile& t, torch::Tensor* tanh_out) {
  const torch::Tensor x = soft_cap(s * t.scale, t.softcap, tanh_out);
  const std::int64_t m = s.size(1);
  return x.view({-1, t.rows, m})
      .masked_fill(seen(t, m, s.device()).logical_not(), -std::numeric_limits<double>::infinity())
      .view({-1, m});
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> tile_softmax_reference(const torch::Tensor& s, const AttentionTile& t,
                                                               torch::ScalarType out_dtype) {
  const torch::Tensor x = transformed(s, t, nullptr);
  const torch::Tensor lse = at::logsumexp(x, -1);
  return {torch::exp(x - lse.unsqueeze(-1)).to(out_dtype), lse};
}

std::pair<torch::Tensor, torch::Tensor> tile_softmax_backward_reference(const torch::Tensor& s, const torch::Tensor& dp,
                                                                        const torch::Tensor& lse,
                                                                        const torch::Tensor& delta,
                                                                        const AttentionTile& t,
                                                                        torch::ScalarType out_dtype) {
  torch::Tensor th;
  const torch::Tensor p = torch::exp(transformed(s, t, &th) - lse.unsqueeze(-1));
  torch::Tensor ds = p * (dp - delta.unsqueeze(-1));
  if (t.softcap > 0) ds = ds * (1 - th * th);  // d(cap tanh(u / cap)) / du
  return {p.to(out_dtype), (ds * t.scale).to(out_dtype)};
}

}  // namespace odyssey::kernels
