// Fused residual add + RMSNorm CUDA kernels (rmsnorm.h, rmsnorm_launch.h). No LibTorch here.
//
// Layout: each row of `hidden` elements is handled by a row group of `tpr` threads (a power
// of two, 32..512, warp aligned, the fewest that cache the row: config()); a block of
// max(tpr, 256) threads holds blockDim / tpr row
// groups and walks the rows grid-stride. Each thread owns the 128-bit vectors j = t, t + tpr,
// ... of its row (scalar fallback when hidden or a pointer is not 16-byte aligned) and keeps
// the first kCache of them in registers between the statistics pass and the output pass
// (every row up to hidden 8192 fits; longer rows re-read their tail from L2).
//
// Tolerance: `odyssey-train selftest` (kernels/selftest.cpp) evaluates this kernel, its reference
// (kernels/rmsnorm_ref.cpp) in the same dtype and the reference on float64 inputs; every output and
// gradient must be within 2 × the reference's own error plus one unit roundoff of the dtype (2^-8
// bf16, 2^-24 fp32) of the float64 result. The bound is derived from the reference's rounding on
// each shape, not chosen.
// Source of the formula: Hugging Face transformers' LlamaRMSNorm / Qwen2RMSNorm forward (statistic
// in fp32, weight applied after rounding to the input dtype), with the residual add of the decoder
// layer.
#include "kernels/rmsnorm_launch.h"
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

constexpr int kCache = 4;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum of v over the tpr threads of each row group; every thread of the group gets it (same
// order of additions in every thread). Called by all threads of the block.
__device__ __forceinline__ float group_sum(float v, int tpr, float* red) {
  v = warp_sum(v);
  if (tpr <= 32) return v;
  const int warp = static_cast<int>(threadIdx.x >> 5);
  __syncthreads();  // red may still be read by a previous call
  if ((threadIdx.x & 31) == 0) red[warp] = v;
  __syncthreads();
  const int wpr = tpr >> 5;
  const int first = (warp / wpr) * wpr;
  float s = 0.f;
  for (int i = 0; i < wpr; ++i) s += red[first + i];
  return s;
}

// One vector of the row at element `at`: x (+ res, rounded once to T and stored to sum when
// there is a residual), its squares added to ss in fp32.
template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_sum_squares(const T* __restrict__ x, const T* __restrict__ res, T* sum,
                                                      std::int64_t at, float& ss) {
  Vec<T, N> s = load<T, N>(x + at);
  if (res != nullptr) {
    const Vec<T, N> r = load<T, N>(res + at);
#pragma unroll
    for (int i = 0; i < N; ++i) s.v[i] = from_f<T>(__fadd_rn(to_f(s.v[i]), to_f(r.v[i])));
    store<T, N>(sum + at, s);
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float f = to_f(s.v[i]);
    ss += f * f;
  }
  return s;
}

template <typename T, int N>
__global__ void __launch_bounds__(512)
    add_rms_norm_fwd_kernel(const T* __restrict__ x, const T* __restrict__ res, const T* __restrict__ w,
                            T* __restrict__ y, T* sum, float* __restrict__ rstd, std::int64_t rows, int hidden, int tpr,
                            float eps) {
  using V = Vec<T, N>;
  __shared__ float red[32];
  const int nvec = hidden / N;
  const int rpb = static_cast<int>(blockDim.x) / tpr;
  const int group = static_cast<int>(threadIdx.x) / tpr;
  const int t = static_cast<int>(threadIdx.x) % tpr;
  const float inv_h = 1.f / static_cast<float>(hidden);
  // The rounded sum is re-read from here past the cached vectors.
  const T* src = res != nullptr ? sum : x;
  for (std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * rpb; base < rows;
       base += static_cast<std::int64_t>(gridDim.x) * rpb) {
    const std::int64_t row = base + group;
    const bool active = row < rows;
    const std::int64_t off = row * hidden;
    V cache[kCache];
    float ss = 0.f;
    if (active) {
#pragma unroll
      for (int c = 0; c < kCache; ++c) {
        const int j = t + c * tpr;
        if (j < nvec) cache[c] = load_sum_squares<T, N>(x, res, sum, off + static_cast<std::int64_t>(j) * N, ss);
      }
      for (int j = t + kCache * tpr; j < nvec; j += tpr)
        (void)load_sum_squares<T, N>(x, res, sum, off + static_cast<std::int64_t>(j) * N, ss);
    }
    const float total = group_sum(ss, tpr, red);
    const float r = rsqrtf(__fadd_rn(__fmul_rn(total, inv_h), eps));
    if (!active) continue;
    if (t == 0) rstd[row] = r;
#pragma unroll
    for (int c = 0; c < kCache; ++c) {
      const int j = t + c * tpr;
      if (j < nvec) {
        const V wv = load<T, N>(w + static_cast<std::int64_t>(j) * N);
        V o;
#pragma unroll
        for (int i = 0; i < N; ++i) {
          const T n = from_f<T>(__fmul_rn(to_f(cache[c].v[i]), r));
          o.v[i] = from_f<T>(__fmul_rn(to_f(wv.v[i]), to_f(n)));
        }
        store<T, N>(y + off + static_cast<std::int64_t>(j) * N, o);
      }
    }
    for (int j = t + kCache * tpr; j < nvec; j += tpr) {
      const V s = load<T, N>(src + off + static_cast<std::int64_t>(j) * N);
      const V wv = load<T, N>(w + static_cast<std::int64_t>(j) * N);
      V o;
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const T n = from_f<T>(__fmul_rn(to_f(s.v[i]), r));
        o.v[i] = from_f<T>(__fmul_rn(to_f(wv.v[i]), to_f(n)));
      }
      store<T, N>(y + off + static_cast<std::int64_t>(j) * N, o);
    }
  }
}

// dsum = r*g - (r^3/H) * (Σ g*s) * s + dsum_out with g = dy * w; optional per-block partial
// sums of dy * to_dtype(s * r) in dynamic shared memory (one [hidden] fp32 slice per row
// group, stored as [N][nvec] so consecutive threads hit consecutive banks), written to
// partial[blockIdx.x] at the end.
template <typename T, int N>
__global__ void __launch_bounds__(512)
    add_rms_norm_bwd_kernel(const T* __restrict__ dy, const T* __restrict__ sum, const float* __restrict__ rstd,
                            const T* __restrict__ w, const T* __restrict__ dsum_out, T* __restrict__ dsum,
                            float* __restrict__ partial, std::int64_t rows, int hidden, int tpr) {
  using V = Vec<T, N>;
  extern __shared__ float acc_all[];
  __shared__ float red[32];
  const int nvec = hidden / N;
  const int rpb = static_cast<int>(blockDim.x) / tpr;
  const int group = static_cast<int>(threadIdx.x) / tpr;
  const int t = static_cast<int>(threadIdx.x) % tpr;
  const float inv_h = 1.f / static_cast<float>(hidden);
  const bool want_dw = partial != nullptr;
  float* acc = acc_all + static_cast<std::int64_t>(group) * hidden;
  if (want_dw) {
    for (int i = static_cast<int>(threadIdx.x); i < rpb * hidden; i += static_cast<int>(blockDim.x)) acc_all[i] = 0.f;
    __syncthreads();
  }
  for (std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * rpb; base < rows;
       base += static_cast<std::int64_t>(gridDim.x) * rpb) {
    const std::int64_t row = base + group;
    const bool active = row < rows;
    const std::int64_t off = row * hidden;
    const float r = active ? rstd[row] : 0.f;
    V cs[kCache];
    V cd[kCache];
    float dot = 0.f;
    if (active) {
#pragma unroll
      for (int c = 0; c < kCache; ++c) {
        const int j = t + c * tpr;
        if (j < nvec) {
          cs[c] = load<T, N>(sum + off + static_cast<std::int64_t>(j) * N);
          cd[c] = load<T, N>(dy + off + static_cast<std::int64_t>(j) * N);
          const V wv = load<T, N>(w + static_cast<std::int64_t>(j) * N);
#pragma unroll
          for (int i = 0; i < N; ++i) {
            const float s = to_f(cs[c].v[i]);
            const float d = to_f(cd[c].v[i]);
            dot += d * to_f(wv.v[i]) * s;
            if (want_dw) acc[i * nvec + j] += d * to_f(from_f<T>(__fmul_rn(s, r)));
          }
        }
      }
      for (int j = t + kCache * tpr; j < nvec; j += tpr) {
        const V sv = load<T, N>(sum + off + static_cast<std::int64_t>(j) * N);
        const V dv = load<T, N>(dy + off + static_cast<std::int64_t>(j) * N);
        const V wv = load<T, N>(w + static_cast<std::int64_t>(j) * N);
#pragma unroll
        for (int i = 0; i < N; ++i) {
          const float s = to_f(sv.v[i]);
          const float d = to_f(dv.v[i]);
          dot += d * to_f(wv.v[i]) * s;
          if (want_dw) acc[i * nvec + j] += d * to_f(from_f<T>(__fmul_rn(s, r)));
        }
      }
    }
    dot = group_sum(dot, tpr, red);
    if (!active) continue;
    const float coef = r * r * r * dot * inv_h;
#pragma unroll
    for (int c = 0; c < kCache; ++c) {
      const int j = t + c * tpr;
      if (j < nvec) {
        const std::int64_t e = off + static_cast<std::int64_t>(j) * N;
        const V wv = load<T, N>(w + static_cast<std::int64_t>(j) * N);
        V o;
        if (dsum_out != nullptr) {
          const V so = load<T, N>(dsum_out + e);
#pragma unroll
          for (int i = 0; i < N; ++i)
            o.v[i] = from_f<T>(r * to_f(cd[c].v[i]) * to_f(wv.v[i]) - coef * to_f(cs[c].v[i]) + to_f(so.v[i]));
        } else {
#pragma unroll
          for (int i = 0; i < N; ++i)
            o.v[i] = from_f<T>(r * to_f(cd[c].v[i]) * to_f(wv.v[i]) - coef * to_f(cs[c].v[i]));
        }
        store<T, N>(dsum + e, o);
      }
    }
    for (int j = t + kCache * tpr; j < nvec; j += tpr) {
      const std::int64_t e = off + static_cast<std::int64_t>(j) * N;
      const V sv = load<T, N>(sum + e);
      const V dv = load<T, N>(dy + e);
      const V wv = load<T, N>(w + static_cast<std::int64_t>(j) * N);
      V o;
#pragma unroll
      for (int i = 0; i < N; ++i) {
        float v = r * to_f(dv.v[i]) * to_f(wv.v[i]) - coef * to_f(sv.v[i]);
        if (dsum_out != nullptr) v += to_f(dsum_out[e + i]);
        o.v[i] = from_f<T>(v);
      }
      store<T, N>(dsum + e, o);
    }
  }
  if (want_dw) {
    __syncthreads();
    for (int col = static_cast<int>(threadIdx.x); col < hidden; col += static_cast<int>(blockDim.x)) {
      const int idx = (col % N) * nvec + col / N;
      float v = 0.f;
      for (int g = 0; g < rpb; ++g) v += acc_all[static_cast<std::int64_t>(g) * hidden + idx];
      partial[static_cast<std::int64_t>(blockIdx.x) * hidden + col] = v;
    }
  }
}

// dweight[c] = Σ_p partial[p, c]: 32 columns x 16 partial-row lanes per block.
template <typename T>
__global__ void rms_norm_dw_reduce_kernel(const float* __restrict__ partial, std::int64_t nparts, int hidden,
                                          T* __restrict__ dw) {
  __shared__ float tile[16][33];
  const int col = static_cast<int>(blockIdx.x) * 32 + static_cast<int>(threadIdx.x);
  float v = 0.f;
  if (col < hidden)
    for (std::int64_t p = threadIdx.y; p < nparts; p += 16) v += partial[p * hidden + col];
  tile[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0) {
    for (int i = 1; i < 16; ++i) v += tile[i][threadIdx.x];
    if (col < hidden) dw[col] = from_f<T>(v);
  }
}

struct Config {
  int tpr = 32, block = 256, rpb = 8;
  std::int64_t row_blocks = 0;
};

Config config(std::int64_t rows, int nvec) {
  Config c;
  // The fewest threads per row that still keep the whole row in registers (kCache vectors
  // each): more loads in flight per thread and, for rows of at most 32·kCache vectors, a warp
  // per row with no barrier in the reduction. (A thread per vector, as before, ran Qwen2.5-
  // 0.5B's 896-wide rows on 128-thread groups, 16 of them idle, with two block barriers per
  // row: 8.5 ms of norms in a 600 ms step where the bytes take about 4.)
  int tpr = 32;
  while (tpr * kCache < nvec && tpr < 512) tpr *= 2;
  c.tpr = tpr;
  c.block = std::max(tpr, 256);
  c.rpb = c.block / tpr;
  c.row_blocks = (rows + c.rpb - 1) / c.rpb;
  return c;
}

template <typename T, int N>
void fwd_typed(const void* x, const void* res, const void* w, void* y, void* sum, float* rstd, std::int64_t rows,
               int hidden, float eps, cudaStream_t stream) {
  const Config c = config(rows, hidden / N);
  const std::int64_t max_blocks = static_cast<std::int64_t>(sm_count("add_rms_norm: SM count")) * (2048 / c.block);
  const int grid = static_cast<int>(std::min(c.row_blocks, max_blocks));
  add_rms_norm_fwd_kernel<T, N><<<grid, c.block, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(res),
                                                              static_cast<const T*>(w), static_cast<T*>(y),
                                                              static_cast<T*>(sum), rstd, rows, hidden, c.tpr, eps);
  check(cudaGetLastError(), "add_rms_norm_fwd_kernel launch");
}

template <typename T, int N>
void bwd_typed(const void* dy, const void* sum, const float* rstd, const void* w, const void* dsum_out, void* dsum,
               void* dw, float* workspace, std::int64_t workspace_rows, std::int64_t rows, int hidden,
               cudaStream_t stream) {
  const Config c = config(rows, hidden / N);
  std::int64_t grid =
      std::min(c.row_blocks, static_cast<std::int64_t>(sm_count("add_rms_norm: SM count")) * (2048 / c.block));
  std::size_t smem = 0;
  auto kernel = add_rms_norm_bwd_kernel<T, N>;
  if (dw != nullptr) {
    if (workspace == nullptr || workspace_rows < 1)
      throw std::runtime_error("add_rms_norm_bwd_kernel: the weight gradient needs a workspace");
    grid = std::min(grid, workspace_rows);
    smem = static_cast<std::size_t>(c.rpb) * static_cast<std::size_t>(hidden) * sizeof(float);
    if (smem > 48 * 1024) {
      int dev = 0, optin = 0;
      check(cudaGetDevice(&dev), "add_rms_norm_bwd_kernel: cudaGetDevice");
      check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
            "add_rms_norm_bwd_kernel: shared memory limit");
      if (smem > static_cast<std::size_t>(optin))
        throw std::runtime_error("add_rms_norm_bwd_kernel: hidden " + std::to_string(hidden) +
                                 " needs more shared memory than the device has");
      check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
            "add_rms_norm_bwd_kernel: shared memory opt-in");
    }
  }
  kernel<<<static_cast<int>(grid), c.block, smem, stream>>>(
      static_cast<const T*>(dy), static_cast<const T*>(sum), rstd, static_cast<const T*>(w),
      static_cast<const T*>(dsum_out), static_cast<T*>(dsum), dw != nullptr ? workspace : nullptr, rows, hidden, c.tpr);
  check(cudaGetLastError(), "add_rms_norm_bwd_kernel launch");
  if (dw != nullptr) {
    const dim3 block(32, 16);
    const int cols = (hidden + 31) / 32;
    rms_norm_dw_reduce_kernel<T><<<cols, block, 0, stream>>>(workspace, grid, hidden, static_cast<T*>(dw));
    check(cudaGetLastError(), "rms_norm_dw_reduce_kernel launch");
  }
}

template <typename T>
void fwd_dispatch(const void* x, const void* res, const void* w, void* y, void* sum, float* rstd, std::int64_t rows,
                  int hidden, float eps, cudaStream_t stream) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const bool vec = hidden % kVec == 0 && aligned16(x) && aligned16(res) && aligned16(w) && aligned16(y) &&
                   (res == nullptr || aligned16(sum));
  if (vec) fwd_typed<T, kVec>(x, res, w, y, sum, rstd, rows, hidden, eps, stream);
  else fwd_typed<T, 1>(x, res, w, y, sum, rstd, rows, hidden, eps, stream);
}

template <typename T>
void bwd_dispatch(const void* dy, const void* sum, const float* rstd, const void* w, const void* dsum_out, void* dsum,
                  void* dw, float* workspace, std::int64_t workspace_rows, std::int64_t rows, int hidden,
                  cudaStream_t stream) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const bool vec =
      hidden % kVec == 0 && aligned16(dy) && aligned16(sum) && aligned16(w) && aligned16(dsum_out) && aligned16(dsum);
  if (vec) bwd_typed<T, kVec>(dy, sum, rstd, w, dsum_out, dsum, dw, workspace, workspace_rows, rows, hidden, stream);
  else bwd_typed<T, 1>(dy, sum, rstd, w, dsum_out, dsum, dw, workspace, workspace_rows, rows, hidden, stream);
}

int checked_hidden(std::int64_t hidden, const char* what) {
  if (hidden < 1 || hidden > (std::int64_t{1} << 24))
    throw std::runtime_error(std::string(what) + ": hidden size " + std::to_string(hidden) + " out of range");
  return static_cast<int>(hidden);
}

}  // namespace

void add_rms_norm_fwd(const void* x, const void* residual, const void* weight, void* y, void* sum, float* rstd,
                      std::int64_t rows, std::int64_t hidden, float eps, int dtype, void* stream) {
  const int h = checked_hidden(hidden, "add_rms_norm_fwd_kernel");
  if (rows <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0: return fwd_dispatch<float>(x, residual, weight, y, sum, rstd, rows, h, eps, s);
    case 1: return fwd_dispatch<__nv_bfloat16>(x, residual, weight, y, sum, rstd, rows, h, eps, s);
    case 2: return fwd_dispatch<__half>(x, residual, weight, y, sum, rstd, rows, h, eps, s);
    default: throw std::runtime_error("add_rms_norm_fwd_kernel: unsupported dtype code " + std::to_string(dtype));
  }
}

std::int64_t add_rms_norm_bwd_workspace_rows() {
  return static_cast<std::int64_t>(sm_count("add_rms_norm: SM count")) * 2;
}

void add_rms_norm_bwd(const void* dy, const void* sum, const float* rstd, const void* weight, const void* dsum_out,
                      void* dsum, void* dweight, float* workspace, std::int64_t workspace_rows, std::int64_t rows,
                      std::int64_t hidden, int dtype, void* stream) {
  const int h = checked_hidden(hidden, "add_rms_norm_bwd_kernel");
  if (rows <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0:
      return bwd_dispatch<float>(dy, sum, rstd, weight, dsum_out, dsum, dweight, workspace, workspace_rows, rows, h, s);
    case 1:
      return bwd_dispatch<__nv_bfloat16>(dy, sum, rstd, weight, dsum_out, dsum, dweight, workspace, workspace_rows,
                                         rows, h, s);
    case 2:
      return bwd_dispatch<__half>(dy, sum, rstd, weight, dsum_out, dsum, dweight, workspace, workspace_rows, rows, h,
                                  s);
    default: throw std::runtime_error("add_rms_norm_bwd_kernel: unsupported dtype code " + std::to_string(dtype));
  }
}

}  // namespace odyssey::kernels::cuda
