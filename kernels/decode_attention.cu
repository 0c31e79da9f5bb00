// Decode-attention CUDA kernels (decode_attention.h, decode_attention_launch.h). No LibTorch.
//
// One new query per row against a KV cache, as a decode step asks: the work is reading the
// cache once, so it is split along the cache (split-KV, as FlashDecoding does it): each warp
// takes a run of slots of one (row, KV head) and keeps, for every query head of that KV head's
// group, an online softmax (running max m, sum l, and the weighted sum of values acc) over the
// kept slots of its run; a second kernel merges the runs of each (row, query head):
//   M = max_s m_s, out = sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) l_s.
// Each lane holds D / 32 features of the query, key and value rows (one vector load per row);
// a score is a warp sum. Everything in fp32, out rounded once to the dtype.
//
// Tolerance: `odyssey-train selftest` ("decode_attention") evaluates the kernels, their
// reference (decode_attention_ref.cpp) in the same dtype and the reference in float64; out
// must be within 2 x the reference's own error plus one unit roundoff of the dtype of the
// float64 result.
#include "kernels/cuda_common.cuh"
#include "kernels/decode_attention_launch.h"

#include <algorithm>
#include <cmath>

namespace odyssey::kernels::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block; each warp is one run of slots
constexpr int kU = 4;      // slots a warp loads before it computes their scores

// Runs per (row, KV head): enough warps for every SM several times over, each run at least
// 16 slots, at most 128 runs.
std::int64_t runs_for(const DecodeShape& s, int sms) {
  const std::int64_t pairs = s.batch * s.kv_heads;
  const std::int64_t want = (static_cast<std::int64_t>(sms) * 16 + pairs - 1) / pairs;
  const std::int64_t by_length = (s.length + 15) / 16;
  return std::max<std::int64_t>(1, std::min<std::int64_t>({want, by_length, 128}));
}

// E features per lane (D = 32 E), up to G query heads per KV head.
template <typename T, int E, int G>
__global__ void __launch_bounds__(kWarps * 32)
    decode_partial_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                          const bool* __restrict__ keep, float* __restrict__ ws, DecodeShape s, std::int64_t runs,
                          int group) {
  const int lane = threadIdx.x & 31;
  const std::int64_t w = static_cast<std::int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (w >= s.batch * s.kv_heads * runs) return;
  const std::int64_t run = w % runs, hk = (w / runs) % s.kv_heads, b = w / (runs * s.kv_heads);
  const std::int64_t per = (s.length + runs - 1) / runs, j0 = run * per, j1 = min(s.length, j0 + per);
  float qr[G][E], acc[G][E], m[G], l[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      qr[g][e] = 0.f;
      acc[g][e] = 0.f;
    }
    if (g < group) {
      const Vec<T, E> x = load<T, E>(q + b * s.q_b + (hk * group + g) * s.q_h + lane * E);
#pragma unroll
      for (int e = 0; e < E; ++e) qr[g][e] = to_f(x.v[e]);
    }
  }
  const T* kp = k + b * s.k_b + hk * s.k_h + lane * E;
  const T* vp = v + b * s.v_b + hk * s.v_h + lane * E;
  const bool* kept = keep + b * s.keep_b;
  // kU slots at a time: their loads are issued together (the first version took one slot per
  // step and waited on each load: on an H100 its 7B decode step ran at half of cuDNN's rate), and
  // one online-softmax correction covers the group. A slot past the run or not kept scores -inf.
  for (std::int64_t j = j0; j < j1; j += kU) {
    Vec<T, E> kv[kU], vv[kU];
    bool on[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      on[u] = j + u < j1 && kept[(j + u) * s.keep_l];  // the same slot for the whole warp
      if (on[u]) {
        kv[u] = load<T, E>(kp + (j + u) * s.k_l);
        vv[u] = load<T, E>(vp + (j + u) * s.v_l);
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (g >= group) break;
      float x[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        float d = 0.f;
        if (on[u]) {
#pragma unroll
          for (int e = 0; e < E; ++e) d = fmaf(qr[g][e], to_f(kv[u].v[e]), d);
        }
        x[u] = d;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
        for (int u = 0; u < kU; ++u) x[u] += __shfl_xor_sync(0xffffffffu, x[u], o);
      }
      float mn = m[g];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        x[u] = on[u] ? x[u] * s.scale : -INFINITY;
        mn = fmaxf(mn, x[u]);
      }
      if (mn == -INFINITY) continue;  // nothing kept so far (uniform across the warp)
      const float corr = __expf(m[g] - mn);
      float p[kU];
      l[g] *= corr;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        p[u] = __expf(x[u] - mn);
        l[g] += p[u];
      }
#pragma unroll
      for (int e = 0; e < E; ++e) {
        float a = acc[g][e] * corr;
#pragma unroll
        for (int u = 0; u < kU; ++u)
          if (on[u]) a = fmaf(p[u], to_f(vv[u].v[e]), a);
        acc[g][e] = a;
      }
      m[g] = mn;
    }
  }
  // The run's partial result: ws [B, Hq, runs, D] of acc (vector-aligned), then [B, Hq, runs]
  // of (m, l).
  const std::int64_t heads = s.batch * s.q_heads;
  float* av = ws;
  float* ml = ws + heads * runs * s.head_dim;
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g >= group) break;
    const std::int64_t slot = (b * s.q_heads + hk * group + g) * runs + run;
    if (lane == 0) {
      ml[2 * slot] = m[g];
      ml[2 * slot + 1] = l[g];
    }
    Vec<float, E> out;
#pragma unroll
    for (int e = 0; e < E; ++e) out.v[e] = acc[g][e];
    store<float, E>(av + slot * s.head_dim + lane * E, out);
  }
}

// A block's threads reduce v (max or sum); every thread gets the result. blockDim.x is a
// multiple of 32, at most 1024.
template <bool Max>
__device__ float block_reduce(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = Max ? fmaxf(v, w) : v + w;
  }
  const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // scratch may still be read from a previous reduction
  if ((threadIdx.x & 31) == 0) scratch[warp] = v;
  __syncthreads();
  v = Max ? -INFINITY : 0.f;
  for (int i = 0; i < warps; ++i) v = Max ? fmaxf(v, scratch[i]) : v + scratch[i];
  return v;
}

// One block per (row, query head): the runs' coefficients exp(m_s - M) once, in parallel over
// the runs (at most 128: runs_for), then one thread per feature sums the runs' acc with them
// (independent loads; the first version walked the runs one dependent load at a time in every
// thread).
template <typename T>
__global__ void decode_merge_kernel(const float* __restrict__ ws, T* __restrict__ out, DecodeShape s,
                                    std::int64_t runs) {
  __shared__ float coef[128];
  __shared__ float scratch[32];
  const std::int64_t h = blockIdx.x;  // b * Hq + query head
  const std::int64_t heads = s.batch * s.q_heads;
  const float* av = ws + h * runs * s.head_dim;
  const float* ml = ws + heads * runs * s.head_dim + 2 * h * runs;
  float mx = -INFINITY;
  for (std::int64_t r = threadIdx.x; r < runs; r += blockDim.x) mx = fmaxf(mx, ml[2 * r]);
  mx = block_reduce<true>(mx, scratch);
  float den = 0.f;
  for (std::int64_t r = threadIdx.x; r < runs; r += blockDim.x) {
    // A run that kept no slot has m = -inf, l = 0: its coefficient is 0.
    const float c = mx == -INFINITY ? 0.f : __expf(ml[2 * r] - mx);
    coef[r] = c;
    den = fmaf(c, ml[2 * r + 1], den);
  }
  den = block_reduce<false>(den, scratch);  // its barriers also publish coef
  for (std::int64_t d = threadIdx.x; d < s.head_dim; d += blockDim.x) {
    float num = 0.f;
#pragma unroll 8
    for (std::int64_t r = 0; r < runs; ++r) num = fmaf(coef[r], av[r * s.head_dim + d], num);
    out[h * s.head_dim + d] = from_f<T>(den > 0.f ? num / den : 0.f);
  }
}

template <typename T, int E>
void launch_e(const T* q, const T* k, const T* v, const bool* keep, T* out, float* ws, const DecodeShape& s,
              std::int64_t runs, cudaStream_t stream) {
  const std::int64_t warps = s.batch * s.kv_heads * runs;
  const auto blocks = static_cast<unsigned>((warps + kWarps - 1) / kWarps);
  const int group = static_cast<int>(s.q_heads / s.kv_heads);
  if (group <= 4) decode_partial_kernel<T, E, 4><<<blocks, kWarps * 32, 0, stream>>>(q, k, v, keep, ws, s, runs, group);
  else if (group <= 8)
    decode_partial_kernel<T, E, 8><<<blocks, kWarps * 32, 0, stream>>>(q, k, v, keep, ws, s, runs, group);
  else decode_partial_kernel<T, E, 16><<<blocks, kWarps * 32, 0, stream>>>(q, k, v, keep, ws, s, runs, group);
  check(cudaGetLastError(), "decode_partial_kernel launch");
  const int threads = static_cast<int>(std::min<std::int64_t>(s.head_dim, 256));
  decode_merge_kernel<T><<<static_cast<unsigned>(s.batch * s.q_heads), threads, 0, stream>>>(ws, out, s, runs);
  check(cudaGetLastError(), "decode_merge_kernel launch");
}

template <typename T>
void launch(const void* q, const void* k, const void* v, const bool* keep, void* out, float* ws, const DecodeShape& s,
            cudaStream_t stream) {
  const std::int64_t runs = runs_for(s, sm_count("decode_attention"));
  const auto* qt = static_cast<const T*>(q);
  const auto* kt = static_cast<const T*>(k);
  const auto* vt = static_cast<const T*>(v);
  auto* ot = static_cast<T*>(out);
  switch (s.head_dim) {
    case 64: return launch_e<T, 2>(qt, kt, vt, keep, ot, ws, s, runs, stream);
    case 128: return launch_e<T, 4>(qt, kt, vt, keep, ot, ws, s, runs, stream);
    case 256: return launch_e<T, 8>(qt, kt, vt, keep, ot, ws, s, runs, stream);
    default:
      throw std::runtime_error("decode_attention: head_dim " + std::to_string(s.head_dim) + " is not 64, 128 or 256");
  }
}

}  // namespace

bool decode_attention_fits(std::int64_t head_dim, std::int64_t group) {
  return (head_dim == 64 || head_dim == 128 || head_dim == 256) && group >= 1 && group <= 16;
}

std::int64_t decode_attention_workspace(const DecodeShape& s, int sms) {
  const std::int64_t runs = runs_for(s, sms);
  return s.batch * s.q_heads * runs * (2 + s.head_dim) * static_cast<std::int64_t>(sizeof(float));
}

void decode_attention_fwd(const void* q, const void* k, const void* v, const bool* keep, void* out, float* workspace,
                          const DecodeShape& s, int dtype, void* stream) {
  if (s.batch == 0 || s.q_heads == 0) return;
  const auto st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0: return launch<float>(q, k, v, keep, out, workspace, s, st);
    case 1: return launch<__nv_bfloat16>(q, k, v, keep, out, workspace, s, st);
    case 2: return launch<__half>(q, k, v, keep, out, workspace, s, st);
    default: throw std::runtime_error("decode_attention: unsupported dtype code " + std::to_string(dtype));
  }
}

}  // namespace odyssey::kernels::cuda
