// The LoRA dropout kernel (lora_dropout_launch.h): the mask computed where each element is read,
// from the counter-based bits of lora_dropout_bits.h (the CPU loop in linear.cpp computes the
// same), so nothing of it is stored and a pass over the input is the only memory traffic: a
// masked copy reads x and writes out; the masked gradient update reads x and out and writes out.
//
// Work unit: N consecutive elements of a row (N = 8 for 16-bit types, 4 for fp32: one 128-bit
// access; two or one Philox calls) when `in` is a multiple of N and the pointers and row
// strides allow 128-bit accesses, else one element (its own Philox call: four times the
// arithmetic, for shapes no model has). Units are walked grid-stride.
//
// Checked by `odyssey-train selftest` (kernels/selftest.cpp): the mask bit for bit against the
// CPU loop, and the fused projections with dropout against their layers.
#include "kernels/cuda_common.cuh"
#include "kernels/lora_dropout_bits.h"
#include "kernels/lora_dropout_launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace odyssey::kernels::cuda {
namespace {

template <typename T, int N, bool kAccumulate>
__global__ void lora_dropout_kernel(const T* x, std::int64_t ld_x, T* out, std::int64_t ld_out, std::int64_t rows,
                                    std::int64_t in, std::int64_t row0, const std::int64_t* row_index,
                                    std::uint64_t seed, std::uint64_t threshold, float scale) {
  const std::int64_t per_row = in / N;
  const std::int64_t total = rows * per_row;
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = idx / per_row;
    const std::int64_t c = (idx - r * per_row) * N;
    const std::int64_t position = row_index != nullptr ? row_index[r] : row0 + r;
    const std::uint64_t e = static_cast<std::uint64_t>(position) * static_cast<std::uint64_t>(in) + c;
    std::uint32_t words[N < 4 ? 4 : N];
    if constexpr (N >= 4) {
      // e is a multiple of 4 (in and c are multiples of N): N / 4 whole quads.
#pragma unroll
      for (int q = 0; q < N / 4; ++q) {
        const dropout_bits::Words w = dropout_bits::quad(seed, (e >> 2) + q);
#pragma unroll
        for (int i = 0; i < 4; ++i) words[4 * q + i] = w.w[i];
      }
    } else {
      words[0] = dropout_bits::quad(seed, e >> 2).w[e & 3];
    }
    const T* xp = x + r * ld_x + c;
    T* op = out + r * ld_out + c;
    Vec<T, N> xv = load<T, N>(xp);
    Vec<T, N> ov;
    if constexpr (kAccumulate) ov = load<T, N>(op);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const bool keep = dropout_bits::kept(words[i], threshold);
      if constexpr (kAccumulate) {
        if (keep) ov.v[i] = from_f<T>(to_f(ov.v[i]) + scale * to_f(xv.v[i]));
      } else {
        ov.v[i] = keep ? xv.v[i] : from_f<T>(0.0f);
      }
    }
    store<T, N>(op, ov);
  }
}

template <typename T, int N>
void launch(const void* x, std::int64_t ld_x, void* out, std::int64_t ld_out, std::int64_t rows, std::int64_t in,
            std::int64_t row0, const std::int64_t* row_index, std::uint64_t seed, std::uint64_t threshold,
            bool accumulate, float scale, cudaStream_t stream) {
  const std::int64_t total = rows * (in / N);
  constexpr int kThreads = 256;
  const std::int64_t max_blocks =
      static_cast<std::int64_t>(sm_count("lora_dropout_kernel: SM count")) * (2048 / kThreads);
  const int grid = static_cast<int>(std::max<std::int64_t>(1, std::min((total + kThreads - 1) / kThreads, max_blocks)));
  const auto* xp = static_cast<const T*>(x);
  auto* op = static_cast<T*>(out);
  if (accumulate)
    lora_dropout_kernel<T, N, true>
        <<<grid, kThreads, 0, stream>>>(xp, ld_x, op, ld_out, rows, in, row0, row_index, seed, threshold, scale);
  else
    lora_dropout_kernel<T, N, false>
        <<<grid, kThreads, 0, stream>>>(xp, ld_x, op, ld_out, rows, in, row0, row_index, seed, threshold, scale);
  check(cudaGetLastError(), "lora_dropout_kernel launch");
}

template <typename T>
void dispatch(const void* x, std::int64_t ld_x, void* out, std::int64_t ld_out, std::int64_t rows, std::int64_t in,
              std::int64_t row0, const std::int64_t* row_index, std::uint64_t seed, std::uint64_t threshold,
              bool accumulate, float scale, cudaStream_t stream) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const bool vec = in % kVec == 0 && ld_x % kVec == 0 && ld_out % kVec == 0 && aligned16(x) && aligned16(out);
  if (vec) launch<T, kVec>(x, ld_x, out, ld_out, rows, in, row0, row_index, seed, threshold, accumulate, scale, stream);
  else launch<T, 1>(x, ld_x, out, ld_out, rows, in, row0, row_index, seed, threshold, accumulate, scale, stream);
}

}  // namespace

void lora_dropout_apply(const void* x, std::int64_t ld_x, void* out, std::int64_t ld_out, std::int64_t rows,
                        std::int64_t in, std::int64_t row0, const std::int64_t* row_index, std::uint64_t seed,
                        std::uint64_t threshold, bool accumulate, float scale, int dtype, void* stream) {
  if (rows < 0 || in < 0 || row0 < 0) throw std::runtime_error("lora_dropout_kernel: negative rows, in or row0");
  if (rows == 0 || in == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0:
      return dispatch<float>(x, ld_x, out, ld_out, rows, in, row0, row_index, seed, threshold, accumulate, scale, s);
    case 1:
      return dispatch<__nv_bfloat16>(x, ld_x, out, ld_out, rows, in, row0, row_index, seed, threshold, accumulate,
                                     scale, s);
    case 2:
      return dispatch<__half>(x, ld_x, out, ld_out, rows, in, row0, row_index, seed, threshold, accumulate, scale, s);
    default: throw std::runtime_error("lora_dropout_kernel: unsupported dtype code " + std::to_string(dtype));
  }
}

}  // namespace odyssey::kernels::cuda
