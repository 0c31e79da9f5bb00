#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace odyssey::model {

namespace {

// arange(0, dim, 2) as fp32 over dim: the exponent of every kind.
torch::Tensor exponent(std::int64_t dim) {
  return torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(dim);
}

torch::Tensor llama3_adjust(const RopeParams& rope, const torch::Tensor& inv_freq) {
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

torch::Tensor yarn(const RopeParams& rope, std::int64_t dim) {
  // _compute_yarn_parameters: interpolated (divided by factor) below the correction range,
  // extrapolated (unchanged) above it, a linear ramp between.
  const double base = rope.theta;
  const torch::Tensor pos_freqs = torch::pow(base, exponent(dim));
  const torch::Tensor extrapolation = pos_freqs.reciprocal() * 1.0;
  const torch::Tensor interpolation = (pos_freqs * rope.factor).reciprocal() * 1.0;
  const double omax = static_cast<double>(rope.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(omax / (rotations * 2 * std::numbers::pi))) / (2 * std::log(base));
  };
  double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // linear_ramp_factor's guard
  const torch::Tensor ramp = ((torch::arange(dim / 2, torch::kFloat32) - low) / (high - low)).clamp(0, 1);
  const torch::Tensor extrapolation_factor = 1 - ramp;
  return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
}

}  // namespace

bool rope_depends_on_length(const RopeParams& rope) { return rope.type == "dynamic" || rope.type == "longrope"; }

// Python's `scalar / tensor` is `tensor.reciprocal() * scalar` (torch/_tensor.py __rdiv__);
// it is written that way here so fp32 results match bit for bit.
torch::Tensor rope_inv_freq(const RopeParams& rope, std::int64_t head_dim, std::int64_t seq_len) {
  const auto dim = static_cast<std::int64_t>(static_cast<double>(head_dim) * rope.partial_rotary_factor);
  if (rope.type == "yarn") return yarn(rope, dim);
  if (rope.type == "longrope") {
    const bool long_ctx = seq_len > rope.original_max_position_embeddings;
    const std::vector<double>& f = long_ctx ? rope.long_factor : rope.short_factor;
    const torch::Tensor ext = torch::tensor(f, torch::kFloat64).to(torch::kFloat32);
    return (ext * torch::pow(rope.theta, exponent(dim))).reciprocal() * 1.0;
  }
  if (rope.type == "dynamic" && seq_len > rope.max_position_embeddings) {
    // _compute_dynamic_ntk_parameters with seq_len a tensor: the base is scaled in fp32.
    const torch::Tensor len = torch::tensor(seq_len, torch::kInt64);
    const double d = static_cast<double>(dim);
    const torch::Tensor base =
        ((len * rope.factor) / static_cast<double>(rope.max_position_embeddings) - (rope.factor - 1)).pow(d / (d - 2)) *
        rope.theta;
    return torch::pow(base, exponent(dim)).reciprocal() * 1.0;
  }
  torch::Tensor inv_freq = torch::pow(rope.theta, exponent(dim)).reciprocal() * 1.0;
  if (rope.type == "linear") return inv_freq / rope.factor;
  if (rope.type == "llama3") return llama3_adjust(rope, inv_freq);
  return inv_freq;
}

std::pair<torch::Tensor, torch::Tensor> rope_cos_sin(const torch::Tensor& inv_freq, const torch::Tensor& position_ids,
                                                     torch::ScalarType dtype, double attention_factor,
                                                     bool interleaved) {
  const std::int64_t p = position_ids.size(0);
  // [P, D/2, 1] @ [P, 1, S] in fp32, as the HF rotary module (autocast disabled there).
  const torch::Tensor f = inv_freq.to(position_ids.device(), torch::kFloat32).view({1, -1, 1}).expand({p, -1, 1});
  const torch::Tensor pos = position_ids.unsqueeze(1).to(torch::kFloat32);
  const torch::Tensor freqs = torch::matmul(f, pos).transpose(1, 2);
  const torch::Tensor emb = interleaved ? freqs.repeat_interleave(2, -1) : torch::cat({freqs, freqs}, -1);
  return {(emb.cos() * attention_factor).to(dtype), (emb.sin() * attention_factor).to(dtype)};
}

namespace {
torch::Tensor rotate_half(const torch::Tensor& x) {
  const std::int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, x.size(-1) - half), x.narrow(-1, 0, half)}, -1);
}
// (x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...): each pair rotated by 90 degrees.
torch::Tensor rotate_pairs(const torch::Tensor& x) {
  using torch::indexing::Slice;
  const torch::Tensor even = x.index({"...", Slice(0, torch::indexing::None, 2)});
  const torch::Tensor odd = x.index({"...", Slice(1, torch::indexing::None, 2)});
  return torch::stack({-odd, even}, -1).flatten(-2);
}
}  // namespace

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool interleaved) {
  const torch::Tensor c = cos.unsqueeze(1);
  const torch::Tensor s = sin.unsqueeze(1);
  const std::int64_t r = cos.size(-1);
  auto rotate = [&](const torch::Tensor& t) { return interleaved ? rotate_pairs(t) : rotate_half(t); };
  // cos/sin wider than x (OLMo's fp32): computed in their dtype, rounded once to x's (HF's .to(q_type)).
  if (r == x.size(-1)) return ((x * c) + (rotate(x) * s)).to(x.scalar_type());
  const torch::Tensor rot = x.narrow(-1, 0, r), pass = x.narrow(-1, r, x.size(-1) - r);
  return torch::cat({((rot * c) + (rotate(rot) * s)).to(x.scalar_type()), pass}, -1);
}

}  // namespace odyssey::model
