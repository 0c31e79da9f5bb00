// MoE row kernels (moe_rows.h, moe_rows_launch.h). No LibTorch here.
//
// Forward: a block of `threads` (whole warps, the row's width in vectors up to 1024, else 256)
// covers one tile of threads · N consecutive columns of one token's output (N elements per
// 128-bit access; 1 when h or a pointer is not 16-byte aligned), walking the tiles
// grid-stride; each thread reads its columns of the token's k rows and keeps the weighted sum
// in fp32 registers, then stores it rounded once.
// Backward: one block per sorted row (grid-stride), its threads walking the row's columns:
// the scaled gradient row is stored as it is read, and the dot product of dy's row with the
// kept row is reduced across the block (warp shuffles, then one shared slot per warp).
//
// Tolerance: `odyssey-train selftest` evaluates these kernels, their reference
// (combine_rows_reference in kernels/moe_rows_ref.cpp) in the same dtype and the reference on
// float64 inputs, under the rule every kernel there meets (2 × the reference's own error plus
// one unit roundoff of the dtype).
#include "kernels/moe_rows_launch.h"
#include "kernels/cuda_common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace odyssey::kernels::cuda {
namespace {

template <typename T, int N>
__global__ void combine_fwd_kernel(const T* __restrict__ rows, const std::int64_t* __restrict__ index,
                                   const float* __restrict__ weights, T* __restrict__ y, std::int64_t tokens,
                                   std::int64_t k, std::int64_t h, std::int64_t tiles_per_token) {
  using V = Vec<T, N>;
  const std::int64_t tiles = tokens * tiles_per_token;
  for (std::int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::int64_t n = tile / tiles_per_token;
    const std::int64_t col = ((tile - n * tiles_per_token) * blockDim.x + threadIdx.x) * N;
    if (col >= h) continue;
    float acc[N];
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = 0.f;
    for (std::int64_t c = 0; c < k; ++c) {
      const std::int64_t p = n * k + c;
      const float w = weights != nullptr ? weights[p] : 1.f;
      const V v = load<T, N>(rows + index[p] * h + col);
#pragma unroll
      for (int i = 0; i < N; ++i) acc[i] = fmaf(to_f(v.v[i]), w, acc[i]);
    }
    V o;
#pragma unroll
    for (int i = 0; i < N; ++i) o.v[i] = from_f<T>(acc[i]);
    store<T, N>(y + n * h + col, o);
  }
}

template <typename T, int N>
__global__ void combine_bwd_kernel(const T* __restrict__ dy, const T* __restrict__ rows,
                                   const std::int64_t* __restrict__ order, const float* __restrict__ weights,
                                   T* __restrict__ d_rows, float* __restrict__ d_weights, std::int64_t m,
                                   std::int64_t k, std::int64_t h) {
  using V = Vec<T, N>;
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  for (std::int64_t j = blockIdx.x; j < m; j += gridDim.x) {
    const std::int64_t p = order[j];
    const std::int64_t n = p / k;
    const float w = weights != nullptr ? weights[p] : 1.f;
    float dot = 0.f;
    for (std::int64_t col = static_cast<std::int64_t>(threadIdx.x) * N; col < h;
         col += static_cast<std::int64_t>(blockDim.x) * N) {
      const V d = load<T, N>(dy + n * h + col);
      V o;
#pragma unroll
      for (int i = 0; i < N; ++i) o.v[i] = from_f<T>(to_f(d.v[i]) * w);
      store<T, N>(d_rows + j * h + col, o);
      if (d_weights != nullptr) {
        const V r = load<T, N>(rows + j * h + col);
#pragma unroll
        for (int i = 0; i < N; ++i) dot = fmaf(to_f(d.v[i]), to_f(r.v[i]), dot);
      }
    }
    if (d_weights == nullptr) continue;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    if (lane == 0) partial[warp] = dot;
    __syncthreads();
    if (threadIdx.x == 0) {
      float s = 0.f;
      for (int i = 0; i < warps; ++i) s += partial[i];
      d_weights[p] = s;
    }
    __syncthreads();  // partial is rewritten by the next row
  }
}

int max_blocks(int threads, const char* what) { return sm_count(what) * (2048 / threads); }

// Threads for a row of nvec vectors: whole warps covering it, at least 64, at most 1024.
int threads_for(std::int64_t nvec) {
  return static_cast<int>(std::clamp<std::int64_t>((nvec + 31) / 32 * 32, 64, 1024));
}

template <typename T>
void fwd_typed(const void* rows, const std::int64_t* index, const float* weights, void* y, std::int64_t tokens,
               std::int64_t k, std::int64_t h, cudaStream_t stream) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const bool vec = h % kVec == 0 && aligned16(rows) && aligned16(y);
  const auto* r = static_cast<const T*>(rows);
  auto* o = static_cast<T*>(y);
  const int n = vec ? kVec : 1;
  const std::int64_t nvec = (h + n - 1) / n;
  const int threads = nvec <= 1024 ? threads_for(nvec) : 256;
  const std::int64_t tiles_per_token = (nvec + threads - 1) / threads;
  const int grid =
      static_cast<int>(std::min<std::int64_t>(tokens * tiles_per_token, max_blocks(threads, "combine_fwd_kernel")));
  if (vec)
    combine_fwd_kernel<T, kVec><<<grid, threads, 0, stream>>>(r, index, weights, o, tokens, k, h, tiles_per_token);
  else combine_fwd_kernel<T, 1><<<grid, threads, 0, stream>>>(r, index, weights, o, tokens, k, h, tiles_per_token);
  check(cudaGetLastError(), "combine_fwd_kernel launch");
}

template <typename T>
void bwd_typed(const void* dy, const void* rows, const std::int64_t* order, const float* weights, void* d_rows,
               float* d_weights, std::int64_t m, std::int64_t k, std::int64_t h, cudaStream_t stream) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const bool vec = h % kVec == 0 && aligned16(dy) && aligned16(rows) && aligned16(d_rows);
  const auto* d = static_cast<const T*>(dy);
  const auto* r = static_cast<const T*>(rows);
  auto* dr = static_cast<T*>(d_rows);
  const int n = vec ? kVec : 1;
  const int threads = threads_for((h + n - 1) / n);
  const int grid = static_cast<int>(std::min<std::int64_t>(m, max_blocks(threads, "combine_bwd_kernel")));
  if (vec) combine_bwd_kernel<T, kVec><<<grid, threads, 0, stream>>>(d, r, order, weights, dr, d_weights, m, k, h);
  else combine_bwd_kernel<T, 1><<<grid, threads, 0, stream>>>(d, r, order, weights, dr, d_weights, m, k, h);
  check(cudaGetLastError(), "combine_bwd_kernel launch");
}

}  // namespace

void combine_rows_fwd(const void* rows, const std::int64_t* index, const float* weights, void* y, std::int64_t tokens,
                      std::int64_t k, std::int64_t h, int dtype, void* stream) {
  if (tokens <= 0 || h <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0: return fwd_typed<float>(rows, index, weights, y, tokens, k, h, s);
    case 1: return fwd_typed<__nv_bfloat16>(rows, index, weights, y, tokens, k, h, s);
    case 2: return fwd_typed<__half>(rows, index, weights, y, tokens, k, h, s);
    default: throw std::runtime_error("combine_fwd_kernel: unsupported dtype code " + std::to_string(dtype));
  }
}

void combine_rows_bwd(const void* dy, const void* rows, const std::int64_t* order, const float* weights, void* d_rows,
                      float* d_weights, std::int64_t m, std::int64_t k, std::int64_t h, int dtype, void* stream) {
  if (m <= 0 || h <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0: return bwd_typed<float>(dy, rows, order, weights, d_rows, d_weights, m, k, h, s);
    case 1: return bwd_typed<__nv_bfloat16>(dy, rows, order, weights, d_rows, d_weights, m, k, h, s);
    case 2: return bwd_typed<__half>(dy, rows, order, weights, d_rows, d_weights, m, k, h, s);
    default: throw std::runtime_error("combine_bwd_kernel: unsupported dtype code " + std::to_string(dtype));
  }
}

}  // namespace odyssey::kernels::cuda
