// The reference of decode_attention (decode_attention.h): the formula in ATen ops.
#include "kernels/decode_attention.h"

namespace odyssey::kernels {

torch::Tensor decode_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const torch::Tensor& keep, double scale) {
  const std::int64_t b = q.size(0), hq = q.size(1), d = q.size(2), hkv = k.size(1), len = k.size(2);
  const torch::ScalarType acc = q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat32;
  // The query heads of a KV head as that head's rows: [B, Hkv, G, D] against [B, Hkv, L, D].
  const torch::Tensor qg = q.to(acc).reshape({b, hkv, hq / hkv, d});
  torch::Tensor s = torch::matmul(qg, k.to(acc).transpose(-1, -2)) * scale;  // [B, Hkv, G, L]
  s = s.masked_fill(keep.view({keep.size(0), 1, 1, len}).logical_not(), -std::numeric_limits<double>::infinity());
  const torch::Tensor out = torch::matmul(s.softmax(-1), v.to(acc));  // [B, Hkv, G, D]
  return out.reshape({b, hq, d}).to(q.scalar_type());
}

}  // namespace odyssey::kernels
