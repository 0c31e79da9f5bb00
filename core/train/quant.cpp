#include "train/quant.h"

#include <cmath>
#include <map>
#include <string>
#include <stdexcept>

namespace odyssey::train {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// x flattened and zero-padded to blocks × block.
torch::Tensor as_blocks(const torch::Tensor& x, std::int64_t block) {
  torch::Tensor flat = x.detach().reshape({-1}).to(torch::kFloat32);
  const std::int64_t n = flat.numel(), blocks = std::max<std::int64_t>(1, ceil_div(n, block));
  if (blocks * block != n) flat = torch::constant_pad_nd(flat, {0, blocks * block - n});
  return flat.view({blocks, block});
}

// A small float format with `exp_bits` exponent and 3 mantissa bits (subnormals, no
// infinities), scaled so its largest value is 1.
std::vector<float> float_codes(int exp_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  std::vector<float> v;
  for (int e = 0; e < (1 << exp_bits); ++e)
    for (int m = 0; m < 8; ++m)
      v.push_back(e == 0 ? static_cast<float>(std::ldexp(m / 8.0, 1 - bias))
                         : static_cast<float>(std::ldexp(1.0 + m / 8.0, e - bias)));
  const float top = v.back();
  for (auto& x : v) x /= top;
  return v;
}

// Index of the nearest codebook value for every element of `normalized` (in [-1, 1]).
torch::Tensor nearest_code(const torch::Tensor& codebook, const torch::Tensor& normalized) {
  const std::int64_t n = codebook.numel();
  const torch::Tensor hi = torch::searchsorted(codebook, normalized.contiguous()).clamp(1, n - 1);
  const torch::Tensor lo = hi - 1;
  const torch::Tensor dlo = (normalized - codebook.index_select(0, lo.reshape({-1})).view_as(lo)).abs();
  const torch::Tensor dhi = (codebook.index_select(0, hi.reshape({-1})).view_as(hi) - normalized).abs();
  return torch::where(dhi < dlo, hi, lo).to(torch::kUInt8);
}

}  // namespace

std::int64_t GroupQuantized::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::int64_t GroupQuantized::nbytes() const {
  return static_cast<std::int64_t>(codes.nbytes() + lo.nbytes() + scale.nbytes());
}

GroupQuantized quantize_groupwise(const torch::Tensor& x, int bits, std::int64_t group) {
  if (bits < 2 || bits > 8) throw std::invalid_argument("quantize_groupwise: bits must be in [2, 8]");
  if (group <= 0) throw std::invalid_argument("quantize_groupwise: group must be positive");
  torch::NoGradGuard no_grad;
  GroupQuantized q;
  q.shape = x.sizes().vec();
  q.bits = bits;
  q.group = group;
  const std::int64_t n = x.numel();
  torch::Tensor g = as_blocks(x, group);
  // The padding of the last group must not widen its range: fill it with a real value.
  if (g.numel() != n) {
    torch::Tensor flat = g.view({-1});
    flat.narrow(0, n, flat.numel() - n).fill_(flat[n - 1]);
  }
  const torch::Tensor lo = std::get<0>(g.min(1)), hi = std::get<0>(g.max(1));
  const double levels = static_cast<double>((1 << bits) - 1);
  const torch::Tensor scale = ((hi - lo) / levels).clamp_min(1e-8);
  torch::Tensor codes = ((g - lo.unsqueeze(1)) / scale.unsqueeze(1)).round_().clamp_(0, levels).to(torch::kUInt8);
  codes = codes.view({-1}).narrow(0, 0, n);
  if (bits <= 4) {
    if (n % 2) codes = torch::constant_pad_nd(codes, {0, 1});
    const torch::Tensor pairs = codes.view({-1, 2});
    codes = pairs.select(1, 0).bitwise_or(pairs.select(1, 1).bitwise_left_shift(4));
  }
  q.codes = codes.contiguous();
  q.lo = lo.contiguous();
  q.scale = scale.contiguous();
  return q;
}

torch::Tensor dequantize_groupwise(const GroupQuantized& q) {
  torch::NoGradGuard no_grad;
  const std::int64_t n = q.numel();
  torch::Tensor codes = q.codes;
  if (q.bits <= 4) {
    const torch::Tensor low = codes.bitwise_and(15), high = codes.bitwise_right_shift(4);
    codes = torch::stack({low, high}, 1).view({-1}).narrow(0, 0, n);
  }
  const std::int64_t groups = q.lo.numel();
  torch::Tensor v = codes.to(torch::kFloat32);
  if (groups * q.group != n) v = torch::constant_pad_nd(v, {0, groups * q.group - n});
  v = v.view({groups, q.group}) * q.scale.unsqueeze(1) + q.lo.unsqueeze(1);
  return v.view({-1}).narrow(0, 0, n).view(q.shape);
}

torch::Tensor moment_codebook(bool is_signed, const torch::Device& device) {
  std::vector<float> v;
  if (is_signed) {
    const std::vector<float> pos = float_codes(4);  // 128 values, 0 first
    for (auto it = pos.rbegin(); it != pos.rend(); ++it) v.push_back(-*it);
    v.insert(v.end(), pos.begin(), pos.end());
  } else {
    v = float_codes(5);
  }
  return torch::tensor(v, torch::kFloat32).to(device);
}

std::int64_t BlockQuantized::nbytes() const { return static_cast<std::int64_t>(codes.nbytes() + absmax.nbytes()); }

BlockQuantized quantize_blockwise(const torch::Tensor& x, bool is_signed, std::int64_t block) {
  if (block <= 0) throw std::invalid_argument("quantize_blockwise: block must be positive");
  BlockQuantized q;
  q.shape = x.sizes().vec();
  q.is_signed = is_signed;
  q.block = block;
  q.codes = torch::empty({x.numel()}, torch::TensorOptions().dtype(torch::kUInt8).device(x.device()));
  q.absmax = torch::empty({std::max<std::int64_t>(1, ceil_div(x.numel(), block))},
                          torch::TensorOptions().dtype(torch::kFloat32).device(x.device()));
  requantize_blockwise(q, x);
  return q;
}

void requantize_blockwise(BlockQuantized& q, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  const std::int64_t n = x.numel();
  const torch::Tensor b = as_blocks(x, q.block);
  const torch::Tensor absmax = b.abs().amax(1);
  const torch::Tensor normalized = b / absmax.clamp_min(1e-30).unsqueeze(1);
  static thread_local std::map<std::pair<bool, std::string>, torch::Tensor> books;
  torch::Tensor& book = books[{q.is_signed, x.device().str()}];
  if (!book.defined()) book = moment_codebook(q.is_signed, x.device());
  q.codes.copy_(nearest_code(book, normalized).view({-1}).narrow(0, 0, n));
  q.absmax.copy_(absmax);
}

torch::Tensor dequantize_blockwise(const BlockQuantized& q) {
  torch::NoGradGuard no_grad;
  static thread_local std::map<std::pair<bool, std::string>, torch::Tensor> books;
  torch::Tensor& book = books[{q.is_signed, q.codes.device().str()}];
  if (!book.defined()) book = moment_codebook(q.is_signed, q.codes.device());
  const std::int64_t n = q.codes.numel(), blocks = q.absmax.numel();
  torch::Tensor v = book.index_select(0, q.codes.to(torch::kInt64));
  if (blocks * q.block != n) v = torch::constant_pad_nd(v, {0, blocks * q.block - n});
  v = v.view({blocks, q.block}) * q.absmax.unsqueeze(1);
  return v.view({-1}).narrow(0, 0, n).view(q.shape);
}

}  // namespace odyssey::train
