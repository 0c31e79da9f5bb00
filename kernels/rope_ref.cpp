// The reference for apply_rope_: Hugging Face's apply_rotary_pos_emb on [T, H, D] (as
// core/model/rope.cpp's apply_rope): q * cos + rotate_half(q) * sin, out of place, autograd.
#include "kernels/rope.h"

namespace odyssey::kernels {
namespace {

torch::Tensor rotate_half(const torch::Tensor& x) {
  const std::int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, x.size(-1) - half), x.narrow(-1, 0, half)}, -1);
}

torch::Tensor rope_one(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const torch::Tensor c = cos.unsqueeze(1);
  const torch::Tensor s = sin.unsqueeze(1);
  return (x * c) + (rotate_half(x) * s);
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> apply_rope_reference(const torch::Tensor& q, const torch::Tensor& k,
                                                             const torch::Tensor& cos, const torch::Tensor& sin) {
  return {rope_one(q, cos, sin), rope_one(k, cos, sin)};
}

}  // namespace odyssey::kernels
