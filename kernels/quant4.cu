// 4-bit dequantization on the GPU (quant4_launch.h, quant4.h). No LibTorch here.
//
// One thread per packed byte (two values, always in the same block: blocksizes are even),
// grid-stride; the 16 code values sit in shared memory. The per-block scale is looked up per
// byte (a 64-value block shares it over 32 threads, served from L1). Memory-bound: n/2 bytes
// read, n values written as pairs (a 2 x dtype store).
//
// Tolerance: none. `odyssey-train selftest` requires the dequantized weight to equal the ATen
// dequantizer's (kernels/quant4.cpp's reference path) bit for bit in fp32 and bf16: a code lookup
// and one multiply by the block's scale round the same way on both. The 4-bit linear built on it is
// held to 2 × the reference product's error plus one unit roundoff.
// Source of the format: bitsandbytes' blockwise 4-bit quantization (NF4 code table of Dettmers et
// al. 2023, "QLoRA"; FP4 e2m1; double quantization of the absmax in blocks of 256).
#include "kernels/cuda_common.cuh"
#include "kernels/quant4_launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace odyssey::kernels::cuda {
namespace {

template <typename T>
struct Pair {
  T a, b;
};

template <typename T>
__global__ void dequantize_4bit_kernel(const std::uint8_t* __restrict__ packed, const float* __restrict__ code,
                                       const float* __restrict__ absmax_f32, const std::uint8_t* __restrict__ absmax_q8,
                                       const float* __restrict__ nested_code, const float* __restrict__ nested_absmax,
                                       float offset, std::int64_t nested_blocksize, std::int64_t n,
                                       std::int64_t blocksize, T* __restrict__ out) {
  __shared__ float table[16];
  if (threadIdx.x < 16) table[threadIdx.x] = code[threadIdx.x];
  __syncthreads();
  const std::int64_t bytes = (n + 1) / 2;
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < bytes;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = 2 * j;
    const std::int64_t block = i / blocksize;
    float scale;
    if (absmax_f32 != nullptr) {
      scale = absmax_f32[block];
    } else {
      scale = __fadd_rn(__fmul_rn(nested_code[absmax_q8[block]], nested_absmax[block / nested_blocksize]), offset);
    }
    const std::uint8_t p = packed[j];
    const float v0 = __fmul_rn(table[p >> 4], scale);
    const float v1 = __fmul_rn(table[p & 15], scale);
    if (i + 1 < n) {
      Pair<T> pr{from_f<T>(v0), from_f<T>(v1)};
      *reinterpret_cast<Pair<T>*>(out + i) = pr;  // i is even: aligned for the pair
    } else {
      out[i] = from_f<T>(v0);
    }
  }
}

template <typename T>
void launch(const std::uint8_t* packed, const float* code, const float* absmax_f32, const std::uint8_t* absmax_q8,
            const float* nested_code, const float* nested_absmax, float offset, std::int64_t nested_blocksize,
            std::int64_t n, std::int64_t blocksize, void* out, cudaStream_t stream) {
  const std::int64_t bytes = (n + 1) / 2;
  const int threads = 256;
  const std::int64_t blocks = std::min<std::int64_t>((bytes + threads - 1) / threads, 132 * 32);
  dequantize_4bit_kernel<T><<<static_cast<unsigned>(std::max<std::int64_t>(blocks, 1)), threads, 0, stream>>>(
      packed, code, absmax_f32, absmax_q8, nested_code, nested_absmax, offset, nested_blocksize, n, blocksize,
      static_cast<T*>(out));
  check(cudaGetLastError(), "dequantize_4bit");
}

}  // namespace

void dequantize_4bit(const std::uint8_t* packed, const float* code, const float* absmax_f32,
                     const std::uint8_t* absmax_q8, const float* nested_code, const float* nested_absmax, float offset,
                     std::int64_t nested_blocksize, std::int64_t n, std::int64_t blocksize, void* out, int dtype,
                     void* stream) {
  if (n <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == 0)
    launch<float>(packed, code, absmax_f32, absmax_q8, nested_code, nested_absmax, offset, nested_blocksize, n,
                  blocksize, out, s);
  else if (dtype == 1)
    launch<__nv_bfloat16>(packed, code, absmax_f32, absmax_q8, nested_code, nested_absmax, offset, nested_blocksize, n,
                          blocksize, out, s);
  else
    launch<__half>(packed, code, absmax_f32, absmax_q8, nested_code, nested_absmax, offset, nested_blocksize, n,
                   blocksize, out, s);
}

}  // namespace odyssey::kernels::cuda
