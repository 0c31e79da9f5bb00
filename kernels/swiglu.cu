// SwiGLU CUDA kernels (swiglu.h, swiglu_launch.h). No LibTorch here.
//
// Elementwise over [rows, cols]: a block of `threads` (whole warps: the row's width in
// vectors up to 1024, else 256) covers one tile of threads * N consecutive columns of one row (N elements per 128-bit
// access, 1 when cols, a row stride or a pointer is not 16-byte aligned), walking the tiles grid-stride, so there is
// one 64-bit division per tile, not per element. gate and up keep their own row strides (e.g. the two halves of one [T,
// 2I] projection).
//
// Tolerance: `odyssey-train selftest` (kernels/selftest.cpp) evaluates this kernel, its reference
// (kernels/swiglu_ref.cpp) in the same dtype and the reference on float64 inputs; every output and
// gradient must be within 2 × the reference's own error plus one unit roundoff of the dtype (2^-8
// bf16, 2^-24 fp32) of the float64 result. The bound is derived from the reference's rounding on
// each shape, not chosen.
// Source of the formula: the MLP activation of Hugging Face's LlamaMLP / Qwen2MLP, silu(gate) · up
// (Shazeer 2020, "GLU Variants Improve Transformer").
#include "kernels/swiglu_launch.h"
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

// As ATen's CUDA silu: x / (1 + exp(-x)) in fp32 (IEEE division, precise expf).
__device__ __forceinline__ float silu(float g) { return __fdiv_rn(g, __fadd_rn(1.f, expf(-g))); }

// One output element as HF rounds it: silu(gate) rounded to T, then the product rounded.
template <typename T>
__device__ __forceinline__ T swiglu_value(T g, T u) {
  const T a = from_f<T>(silu(to_f(g)));
  return from_f<T>(__fmul_rn(to_f(a), to_f(u)));
}

template <typename T, int N>
__global__ void swiglu_fwd_kernel(const T* __restrict__ gate, std::int64_t gs, const T* __restrict__ up,
                                  std::int64_t us, T* __restrict__ y, std::int64_t rows, std::int64_t cols,
                                  std::int64_t tiles_per_row) {
  using V = Vec<T, N>;
  const std::int64_t tiles = rows * tiles_per_row;
  for (std::int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::int64_t row = tile / tiles_per_row;
    const std::int64_t col = ((tile - row * tiles_per_row) * blockDim.x + threadIdx.x) * N;
    if (col >= cols) continue;
    const V g = load<T, N>(gate + row * gs + col);
    const V u = load<T, N>(up + row * us + col);
    V o;
#pragma unroll
    for (int i = 0; i < N; ++i) o.v[i] = swiglu_value(g.v[i], u.v[i]);
    store<T, N>(y + row * cols + col, o);
  }
}

// With y set, also y = swiglu(gate, up) rounded as the forward kernel rounds it (the
// activation a backward recomputes instead of keeping); y may be dy itself (each element is
// read before it is overwritten, by the same thread), so neither carries __restrict__.
template <typename T, int N>
__global__ void swiglu_bwd_kernel(const T* dy, const T* __restrict__ gate, std::int64_t gs, const T* __restrict__ up,
                                  std::int64_t us, T* __restrict__ dgate, T* __restrict__ dup, std::int64_t ds, T* y,
                                  std::int64_t rows, std::int64_t cols, std::int64_t tiles_per_row) {
  using V = Vec<T, N>;
  const std::int64_t tiles = rows * tiles_per_row;
  for (std::int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::int64_t row = tile / tiles_per_row;
    const std::int64_t col = ((tile - row * tiles_per_row) * blockDim.x + threadIdx.x) * N;
    if (col >= cols) continue;
    const V d = load<T, N>(dy + row * cols + col);
    const V g = load<T, N>(gate + row * gs + col);
    const V u = load<T, N>(up + row * us + col);
    V dg, du;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float x = to_f(g.v[i]);
      const float sig = __fdiv_rn(1.f, __fadd_rn(1.f, expf(-x)));
      const float dyf = to_f(d.v[i]);
      du.v[i] = from_f<T>(dyf * x * sig);
      dg.v[i] = from_f<T>(dyf * to_f(u.v[i]) * sig * (1.f + x * (1.f - sig)));
    }
    store<T, N>(dgate + row * ds + col, dg);
    store<T, N>(dup + row * ds + col, du);
    if (y != nullptr) {
      V o;
#pragma unroll
      for (int i = 0; i < N; ++i) o.v[i] = swiglu_value(g.v[i], u.v[i]);
      store<T, N>(y + row * cols + col, o);
    }
  }
}

struct Launch {
  int threads = 256;
  int grid = 1;
  std::int64_t tiles_per_row = 1;
};

Launch plan(std::int64_t rows, std::int64_t cols, int n, const char* what) {
  Launch l;
  const std::int64_t nvec = (cols + n - 1) / n;
  if (nvec <= 1024) {
    // One tile per row, of the row's own width rounded up to whole warps: Qwen's 4864-wide
    // (608 vectors) rows would leave a fifth of the threads of three 256-wide tiles idle.
    l.threads = static_cast<int>(std::max<std::int64_t>(64, (nvec + 31) / 32 * 32));
  } else {
    l.threads = 256;
  }
  l.tiles_per_row = (nvec + l.threads - 1) / l.threads;
  const std::int64_t max_blocks = static_cast<std::int64_t>(sm_count(what)) * (2048 / l.threads);
  l.grid = static_cast<int>(std::min(rows * l.tiles_per_row, max_blocks));
  return l;
}

template <typename T>
void fwd_typed(const void* gate, std::int64_t gs, const void* up, std::int64_t us, void* y, std::int64_t rows,
               std::int64_t cols, cudaStream_t stream) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const bool vec =
      cols % kVec == 0 && gs % kVec == 0 && us % kVec == 0 && aligned16(gate) && aligned16(up) && aligned16(y);
  const auto* g = static_cast<const T*>(gate);
  const auto* u = static_cast<const T*>(up);
  auto* o = static_cast<T*>(y);
  if (vec) {
    const Launch l = plan(rows, cols, kVec, "swiglu_fwd_kernel");
    swiglu_fwd_kernel<T, kVec><<<l.grid, l.threads, 0, stream>>>(g, gs, u, us, o, rows, cols, l.tiles_per_row);
  } else {
    const Launch l = plan(rows, cols, 1, "swiglu_fwd_kernel");
    swiglu_fwd_kernel<T, 1><<<l.grid, l.threads, 0, stream>>>(g, gs, u, us, o, rows, cols, l.tiles_per_row);
  }
  check(cudaGetLastError(), "swiglu_fwd_kernel launch");
}

template <typename T>
void bwd_typed(const void* dy, const void* gate, std::int64_t gs, const void* up, std::int64_t us, void* dgate,
               void* dup, std::int64_t ds, void* y, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const bool vec = cols % kVec == 0 && gs % kVec == 0 && us % kVec == 0 && ds % kVec == 0 && aligned16(dy) &&
                   aligned16(gate) && aligned16(up) && aligned16(dgate) && aligned16(dup) && aligned16(y);
  const auto* d = static_cast<const T*>(dy);
  const auto* g = static_cast<const T*>(gate);
  const auto* u = static_cast<const T*>(up);
  auto* dg = static_cast<T*>(dgate);
  auto* du = static_cast<T*>(dup);
  auto* o = static_cast<T*>(y);
  if (vec) {
    const Launch l = plan(rows, cols, kVec, "swiglu_bwd_kernel");
    swiglu_bwd_kernel<T, kVec>
        <<<l.grid, l.threads, 0, stream>>>(d, g, gs, u, us, dg, du, ds, o, rows, cols, l.tiles_per_row);
  } else {
    const Launch l = plan(rows, cols, 1, "swiglu_bwd_kernel");
    swiglu_bwd_kernel<T, 1>
        <<<l.grid, l.threads, 0, stream>>>(d, g, gs, u, us, dg, du, ds, o, rows, cols, l.tiles_per_row);
  }
  check(cudaGetLastError(), "swiglu_bwd_kernel launch");
}

}  // namespace

void swiglu_fwd(const void* gate, std::int64_t gate_row_stride, const void* up, std::int64_t up_row_stride, void* y,
                std::int64_t rows, std::int64_t cols, int dtype, void* stream) {
  if (rows <= 0 || cols <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0: return fwd_typed<float>(gate, gate_row_stride, up, up_row_stride, y, rows, cols, s);
    case 1: return fwd_typed<__nv_bfloat16>(gate, gate_row_stride, up, up_row_stride, y, rows, cols, s);
    case 2: return fwd_typed<__half>(gate, gate_row_stride, up, up_row_stride, y, rows, cols, s);
    default: throw std::runtime_error("swiglu_fwd_kernel: unsupported dtype code " + std::to_string(dtype));
  }
}

void swiglu_bwd(const void* dy, const void* gate, std::int64_t gate_row_stride, const void* up,
                std::int64_t up_row_stride, void* dgate, void* dup, std::int64_t grad_row_stride, void* y,
                std::int64_t rows, std::int64_t cols, int dtype, void* stream) {
  if (rows <= 0 || cols <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0:
      return bwd_typed<float>(dy, gate, gate_row_stride, up, up_row_stride, dgate, dup, grad_row_stride, y, rows, cols,
                              s);
    case 1:
      return bwd_typed<__nv_bfloat16>(dy, gate, gate_row_stride, up, up_row_stride, dgate, dup, grad_row_stride, y,
                                      rows, cols, s);
    case 2:
      return bwd_typed<__half>(dy, gate, gate_row_stride, up, up_row_stride, dgate, dup, grad_row_stride, y, rows, cols,
                               s);
    default: throw std::runtime_error("swiglu_bwd_kernel: unsupported dtype code " + std::to_string(dtype));
  }
}

}  // namespace odyssey::kernels::cuda
