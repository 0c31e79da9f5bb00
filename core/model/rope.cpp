#include "model/rope.h"

#include <cmath>
#include <numbers>

namespace odyssey::model {

// Python's `scalar / tensor` is `tensor.reciprocal() * scalar` (torch/_tensor.py __rdiv__);
// it is written that way here so fp32 results match bit for bit.
torch::Tensor rope_inv_freq(const RopeParams& rope, std::int64_t head_dim) {
  const double dim = static_cast<double>(head_dim);
  const torch::Tensor exponent = torch::arange(0, head_dim, 2, torch::kInt64).to(torch::kFloat32) / dim;
  torch::Tensor inv_freq = torch::pow(rope.theta, exponent).reciprocal() * 1.0;
  if (rope.type != "llama3") return inv_freq;

  // _compute_llama3_parameters: wavelengths longer than the original context are divided
  // by `factor`, shorter than original/high_freq_factor kept, the band between smoothed.
  const double old_len = static_cast<double>(rope.original_max_position_embeddings);
  const double low_wavelen = old_len / rope.low_freq_factor;
  const double high_wavelen = old_len / rope.high_freq_factor;
  const torch::Tensor wavelen = inv_freq.reciprocal() * (2.0 * std::numbers::pi);
  torch::Tensor scaled = torch::where(wavelen > low_wavelen, inv_freq / rope.factor, inv_freq);
  const torch::Tensor smooth =
      (wavelen.reciprocal() * old_len - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
  const torch::Tensor smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled;
  const torch::Tensor medium = (wavelen < high_wavelen).logical_not() * (wavelen > low_wavelen).logical_not();
  return torch::where(medium, smoothed, scaled);
}

std::pair<torch::Tensor, torch::Tensor> rope_cos_sin(const torch::Tensor& inv_freq,
                                                     const torch::Tensor& position_ids,
                                                     torch::ScalarType dtype) {
  const std::int64_t p = position_ids.size(0);
  // [P, D/2, 1] @ [P, 1, S] in fp32, as the HF rotary module (autocast disabled there).
  const torch::Tensor f = inv_freq.to(position_ids.device(), torch::kFloat32).view({1, -1, 1}).expand({p, -1, 1});
  const torch::Tensor pos = position_ids.unsqueeze(1).to(torch::kFloat32);
  const torch::Tensor freqs = torch::matmul(f, pos).transpose(1, 2);
  const torch::Tensor emb = torch::cat({freqs, freqs}, -1);
  // attention_scaling is 1.0 for both default and llama3 RoPE.
  return {(emb.cos() * 1.0).to(dtype), (emb.sin() * 1.0).to(dtype)};
}

namespace {
torch::Tensor rotate_half(const torch::Tensor& x) {
  const std::int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, x.size(-1) - half), x.narrow(-1, 0, half)}, -1);
}
}  // namespace

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const torch::Tensor c = cos.unsqueeze(1);
  const torch::Tensor s = sin.unsqueeze(1);
  return (x * c) + (rotate_half(x) * s);
}

}  // namespace odyssey::model
