// Quantization for Q-GaLore (docs/optimizers.md): the projection matrices in int4 with one
// scale and offset per group, and Adam's moments in 8 bits with one absmax per block.
//
//  - Group-wise uniform: per group of `group` consecutive values, lo = min, s = (max − min) /
//    (2^bits − 1) (at least 1e-8), code = clamp(round((x − lo) / s), 0, 2^bits − 1), value =
//    lo + s·code. The error of every element is at most s/2 (plus fp32 rounding). Two 4-bit
//    codes share a byte.
//  - Block-wise 8-bit moments: x / absmax(block) is rounded to the nearest of 256 code values
//    that are dense near zero (a small float format), so small moments keep their relative
//    precision: signed codes (sign, 4 exponent and 3 mantissa bits) for the first moment,
//    unsigned codes (5 exponent and 3 mantissa bits) for the second, whose values span many
//    orders of magnitude. Ours, not bitsandbytes' map; same idea.
//
// All on ATen ops: the same code on CPU and CUDA.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace odyssey::train {

struct GroupQuantized {
  torch::Tensor codes;  // uint8; bits 4: two codes per byte (low nibble first)
  torch::Tensor lo;     // fp32 [groups]
  torch::Tensor scale;  // fp32 [groups]
  std::vector<std::int64_t> shape;
  int bits = 4;
  std::int64_t group = 256;
  std::int64_t numel() const;
  std::int64_t nbytes() const;
};

// bits in [2, 8]; group > 0. The last group may be shorter.
GroupQuantized quantize_groupwise(const torch::Tensor& x, int bits, std::int64_t group);
torch::Tensor dequantize_groupwise(const GroupQuantized& q);  // fp32, q.shape

// The 256 code values of the 8-bit moment formats, ascending, fp32 on `device`.
torch::Tensor moment_codebook(bool is_signed, const torch::Device& device);

struct BlockQuantized {
  torch::Tensor codes;   // uint8, x's number of elements
  torch::Tensor absmax;  // fp32 [blocks]
  std::vector<std::int64_t> shape;
  bool is_signed = true;
  std::int64_t block = 256;
  std::int64_t nbytes() const;
};

BlockQuantized quantize_blockwise(const torch::Tensor& x, bool is_signed, std::int64_t block);
torch::Tensor dequantize_blockwise(const BlockQuantized& q);  // fp32, q.shape
// Requantizes `x` into `q`'s existing storage (same shape).
void requantize_blockwise(BlockQuantized& q, const torch::Tensor& x);

}  // namespace odyssey::train
