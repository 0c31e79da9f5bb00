// Attention-tile softmax CUDA kernels (attention_tile.h, attention_tile_launch.h). No LibTorch.
//
// What it computes: for each row of a tile of raw attention scores s = q . k, the transformed
// score x = cap * tanh(s * scale / cap) (or s * scale), its log-sum-exp over the keys the row's
// query sees (its sample's or window's start to itself), the probabilities p = exp(x - lse)
// (0 where unseen), and in backward the raw score's gradient ds = p * (dp - delta) *
// (1 - tanh^2) * scale. One block per row: the forward reads the row twice (an online max/sum
// pass over the seen columns, then the write of p over all columns), the backward once.
//
// Tolerance: `odyssey-train selftest` (kernels/selftest.cpp, "attention_tile") evaluates these
// kernels, their reference (kernels/attention_tile_ref.cpp) in the same dtype and the reference
// in float64; p, lse and ds must be within 2 x the reference's own error plus one unit
// roundoff of the dtype (2^-8 bf16, 2^-24 fp32) of the float64 result.
// Source of the formula: transformers' eager_attention_forward of Gemma-2 (attention-logit
// soft-capping, Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical Size"),
// and FlashAttention-2's backward from the log-sum-exp (Dao 2023): dS = P * (dP - rowsum(dO * O)).
#include "kernels/attention_tile_launch.h"
#include "kernels/cuda_common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace odyssey::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// tanh(s * scale / cap) into *th, and the transformed score.
__device__ __forceinline__ float transform(float s, float scale, float cap, float* th) {
  const float u = __fmul_rn(s, scale);
  if (cap > 0.f) {
    *th = tanhf(__fdiv_rn(u, cap));
    return __fmul_rn(*th, cap);
  }
  *th = 0.f;
  return u;
}

// The seen columns [lo, hi] of row r.
__device__ __forceinline__ void seen_columns(const std::int64_t* first_key, const TileShape& t, std::int64_t r,
                                             std::int64_t* lo, std::int64_t* hi) {
  const std::int64_t i = t.row0 + r % t.rows;
  *lo = max(first_key[i] - t.key0, std::int64_t{0});
  *hi = min(i - t.key0, t.m - 1);
}

// (max, sum of exp(x - max)) pairs merged; a pair with max -inf holds nothing.
__device__ __forceinline__ void merge(float& mx, float& sum, float omx, float osum) {
  if (omx == -INFINITY) return;
  if (mx == -INFINITY) {
    mx = omx;
    sum = osum;
    return;
  }
  const float m = fmaxf(mx, omx);
  sum = sum * expf(mx - m) + osum * expf(omx - m);
  mx = m;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    tile_softmax_fwd_kernel(const float* __restrict__ s, T* __restrict__ p, float* __restrict__ lse,
                            const std::int64_t* __restrict__ first_key, TileShape t) {
  const std::int64_t r = blockIdx.x;
  std::int64_t lo, hi;
  seen_columns(first_key, t, r, &lo, &hi);
  const float* sr = s + r * t.m;
  T* pr = p + r * t.m;
  float mx = -INFINITY, sum = 0.f, th;
  for (std::int64_t c = lo + threadIdx.x; c <= hi; c += kThreads) {
    const float x = transform(sr[c], t.scale, t.softcap, &th);
    if (x > mx) {
      sum = (mx == -INFINITY ? 0.f : sum * expf(mx - x)) + 1.f;
      mx = x;
    } else {
      sum += expf(x - mx);
    }
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float omx = __shfl_xor_sync(0xffffffffu, mx, off), osum = __shfl_xor_sync(0xffffffffu, sum, off);
    merge(mx, sum, omx, osum);
  }
  __shared__ float wmx[kThreads / 32], wsum[kThreads / 32];
  __shared__ float row_lse;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) wmx[warp] = mx, wsum[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float M = wmx[0], S = wsum[0];
    for (int w = 1; w < kThreads / 32; ++w) merge(M, S, wmx[w], wsum[w]);
    row_lse = M + logf(S);
    lse[r] = row_lse;
  }
  __syncthreads();
  const float l = row_lse;
  for (std::int64_t c = threadIdx.x; c < t.m; c += kThreads) {
    float v = 0.f;
    if (c >= lo && c <= hi) v = expf(transform(sr[c], t.scale, t.softcap, &th) - l);
    pr[c] = from_f<T>(v);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    tile_softmax_bwd_kernel(const float* __restrict__ s, const float* __restrict__ dp, const float* __restrict__ lse,
                            const float* __restrict__ delta, T* __restrict__ p, T* __restrict__ ds,
                            const std::int64_t* __restrict__ first_key, TileShape t) {
  const std::int64_t r = blockIdx.x;
  std::int64_t lo, hi;
  seen_columns(first_key, t, r, &lo, &hi);
  const float l = lse[r], d = delta[r];
  const std::int64_t base = r * t.m;
  for (std::int64_t c = threadIdx.x; c < t.m; c += kThreads) {
    float pv = 0.f, g = 0.f;
    if (c >= lo && c <= hi) {
      float th;
      pv = expf(transform(s[base + c], t.scale, t.softcap, &th) - l);
      g = __fmul_rn(pv, __fsub_rn(dp[base + c], d));
      if (t.softcap > 0.f) g = __fmul_rn(g, __fsub_rn(1.f, __fmul_rn(th, th)));
      g = __fmul_rn(g, t.scale);
    }
    p[base + c] = from_f<T>(pv);
    ds[base + c] = from_f<T>(g);
  }
}

template <typename T>
void fwd(const float* s, void* p, float* lse, const std::int64_t* fk, const TileShape& t, cudaStream_t stream) {
  if (t.R == 0) return;
  tile_softmax_fwd_kernel<T><<<static_cast<unsigned>(t.R), kThreads, 0, stream>>>(s, static_cast<T*>(p), lse, fk, t);
  check(cudaGetLastError(), "tile_softmax_fwd_kernel launch");
}

template <typename T>
void bwd(const float* s, const float* dp, const float* lse, const float* delta, void* p, void* ds,
         const std::int64_t* fk, const TileShape& t, cudaStream_t stream) {
  if (t.R == 0) return;
  tile_softmax_bwd_kernel<T><<<static_cast<unsigned>(t.R), kThreads, 0, stream>>>(s, dp, lse, delta, static_cast<T*>(p),
                                                                                  static_cast<T*>(ds), fk, t);
  check(cudaGetLastError(), "tile_softmax_bwd_kernel launch");
}

}  // namespace

void tile_softmax_fwd(const float* s, void* p, float* lse, const std::int64_t* first_key, const TileShape& t, int dtype,
                      void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0: return fwd<float>(s, p, lse, first_key, t, st);
    case 1: return fwd<__nv_bfloat16>(s, p, lse, first_key, t, st);
    case 2: return fwd<__half>(s, p, lse, first_key, t, st);
    default: throw std::runtime_error("tile_softmax_fwd_kernel: unsupported dtype code " + std::to_string(dtype));
  }
}

void tile_softmax_bwd(const float* s, const float* dp, const float* lse, const float* delta, void* p, void* ds,
                      const std::int64_t* first_key, const TileShape& t, int dtype, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0: return bwd<float>(s, dp, lse, delta, p, ds, first_key, t, st);
    case 1: return bwd<__nv_bfloat16>(s, dp, lse, delta, p, ds, first_key, t, st);
    case 2: return bwd<__half>(s, dp, lse, delta, p, ds, first_key, t, st);
    default: throw std::runtime_error("tile_softmax_bwd_kernel: unsupported dtype code " + std::to_string(dtype));
  }
}

}  // namespace odyssey::kernels::cuda
