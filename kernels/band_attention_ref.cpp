// The reference of band_attention.h: the dense formula in ATen ops (transformers'
// eager_attention_forward of Gemma-2 with the band as its mask). 16-bit inputs are computed in
// fp32 and the output rounded to their dtype; float64 stays float64 (the exact runs).
#include "kernels/attention_tile.h"
#include "kernels/band_attention.h"

#include <limits>

namespace odyssey::kernels {

std::pair<torch::Tensor, torch::Tensor> band_attention_reference(const torch::Tensor& q, const torch::Tensor& k,
                                                                 const torch::Tensor& v, const torch::Tensor& first_key,
                                                                 double scale, double softcap) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.sizes() == k.sizes() && q.size(0) == k.size(0) &&
                  q.size(2) == k.size(2) && q.size(1) % k.size(1) == 0,
              "band attention reference: q ", q.sizes(), ", k ", k.sizes(), " and v ", v.sizes(), " do not fit");
  const torch::ScalarType acc = q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat32;
  const std::int64_t t = q.size(0), group = q.size(1) / k.size(1);
  const torch::Tensor qh = q.to(acc).permute({1, 0, 2});                              // [Hq, T, D]
  const torch::Tensor kh = k.to(acc).repeat_interleave(group, 1).permute({1, 2, 0});  // [Hq, D, T]
  const torch::Tensor vh = v.to(acc).repeat_interleave(group, 1).permute({1, 0, 2});  // [Hq, T, D]
  const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(q.device());
  const torch::Tensor keys = torch::arange(t, opts).view({1, t});
  const torch::Tensor seen =
      keys.ge(first_key.to(q.device(), torch::kInt64).view({t, 1})).logical_and(keys.le(keys.view({t, 1})));
  const torch::Tensor x = soft_cap(at::matmul(qh, kh) * scale, softcap)
                              .masked_fill(seen.logical_not(), -std::numeric_limits<double>::infinity());
  const torch::Tensor lse = at::logsumexp(x, -1);  // [Hq, T]
  const torch::Tensor out = at::matmul(torch::exp(x - lse.unsqueeze(-1)), vh).permute({1, 0, 2});
  return {out.to(q.scalar_type()), lse.to(acc)};
}

}  // namespace odyssey::kernels
