// Host launcher of the 4-bit dequantization kernel (quant4.cu). Raw pointers, no LibTorch:
// quant4.cpp calls it for CUDA weights on the current device. dtype of `out`: 0 = f32,
// 1 = bf16, 2 = f16. Errors throw std::runtime_error naming the kernel.
#pragma once

#include <cstdint>

namespace odyssey::kernels::cuda {

// out[i] = code[nibble i] * absmax(i / blocksize), rounded once to the dtype; nibble 2j is
// packed[j] >> 4, nibble 2j + 1 is packed[j] & 15. absmax(b) is absmax_f32[b], or, when
// absmax_f32 is null (double quantization), nested_code[absmax_q8[b]] * nested_absmax[b /
// nested_blocksize] + offset, all in fp32 (bitsandbytes' order of operations).
void dequantize_4bit(const std::uint8_t* packed, const float* code, const float* absmax_f32,
                     const std::uint8_t* absmax_q8, const float* nested_code, const float* nested_absmax, float offset,
                     std::int64_t nested_blocksize, std::int64_t n, std::int64_t blocksize, void* out, int dtype,
                     void* stream);

}  // namespace odyssey::kernels::cuda
