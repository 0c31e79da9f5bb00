// Band-attention CUDA kernels (band_attention.h, band_attention_launch.h). No LibTorch.
//
// Exact attention where query i sees keys first_key[i]..i (causal rows, packed samples and a
// sliding window in one rule), with an optional score transform x = cap * tanh(s * scale / cap)
// (Gemma-2's attention-logit soft-capping) that flash attention as LibTorch ships it lacks.
// FlashAttention-2's scheme (Dao 2023) written with the warp-level tensor-core instruction
// mma.sync m16n8k16 (bf16/f16 in, fp32 accumulate) and ldmatrix from shared memory:
//
//   forward   one CTA of 4 warps per 64 query rows of one head; each warp owns 16 rows and
//             walks the key blocks its rows reach with an online softmax, P rounded to the
//             dtype for P.V (as flash attention rounds it); out and the natural-log lse.
//   backward  delta = rowsum(dO * O) (one warp per row and head); dQ: one CTA per 64 query rows
//             of a head, S and dP recomputed per key block, dS = P * (dP - delta) * dx/ds, dQ +=
//             dS.K in registers; dK and dV: one CTA per 64 keys of a KV head, each warp owning
//             16 keys, walking the query rows (of every query head of the group) that see them
//             with S^T = K.Q^T, dV += P^T.dO, dP^T = V.dO^T, dK += dS^T.Q, all in registers, so
//             neither needs atomics. With head dim 256, dV and dK take two passes (registers).
//
// Key or row blocks outside a block's band are skipped; a mask is applied only to blocks the
// band's edge crosses. Rows and keys past T load as zeros and are masked.
//
// Tolerance: `odyssey-train selftest` ("band_attention") evaluates these kernels, the dense
// reference (band_attention_ref.cpp) in the same dtype and the reference in float64; out, lse
// and the gradients must be within 2 x the reference's own error plus one unit roundoff of the
// dtype of the float64 result.
#include "kernels/band_attention_launch.h"
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

constexpr int kThreads = 128;  // 4 warps
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zeros when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// c += a (16x16, row) . b (16x8, col), fp32 accumulators.
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 values rounded to T, the lower index in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// The A operand (16 rows x 16 columns) of an m16n8k16 from C fragments of two adjacent n8
// tiles (columns 0-7 and 8-15), rounded to T: P or dS from registers into the next product.
template <typename T>
__device__ __forceinline__ void a_from_c(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack<T>(c0[0], c0[1]);
  a[1] = pack<T>(c0[2], c0[3]);
  a[2] = pack<T>(c1[0], c1[1]);
  a[3] = pack<T>(c1[2], c1[3]);
}

// Shared-memory rows are padded by 8 elements (16 bytes) so that ldmatrix's 8 row reads fall in
// distinct banks.
template <int D>
constexpr int row_ld() {
  return D + 8;
}

// ldmatrix addresses (lane l) for a tile stored row-major [row][col] with leading dimension LD:
//  A operand, rows r0..r0+15 x cols c0..c0+15 (non-transposed):
template <int LD, typename T>
__device__ __forceinline__ const T* a_addr(const T* s, int r0, int c0, int lane) {
  return s + (r0 + (lane & 15)) * LD + c0 + (lane >> 4) * 8;
}
//  B operands of two n8 tiles whose n index is the stored row (n0..n0+15) and whose k index is
//  the stored column (k0..k0+15): K for S = Q.K^T, V for dP = dO.V^T, Q / dO for S^T, dP^T.
//  Registers: {b0, b1} of rows n0..n0+7, {b2, b3} of rows n0+8..n0+15.
template <int LD, typename T>
__device__ __forceinline__ const T* bn_addr(const T* s, int n0, int k0, int lane) {
  return s + (n0 + (lane & 7) + (lane >> 4) * 8) * LD + k0 + ((lane >> 3) & 1) * 8;
}
//  B operands (transposed load) of two n8 tiles whose k index is the stored row (k0..k0+15)
//  and whose n index the stored column (n0..n0+15): V for P.V, K for dS.K, dO / Q for
//  P^T.dO and dS^T.Q. {b0, b1} of columns n0..n0+7, {b2, b3} of n0+8..n0+15.
template <int LD, typename T>
__device__ __forceinline__ const T* bt_addr(const T* s, int k0, int n0, int lane) {
  return s + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + n0 + (lane >> 4) * 8;
}

// The two warp-level products every kernel here is made of, over 16 rows that the warp owns:
//  c[n] += A . B^T, A the 16 stored rows a0..a0+15 of As and B the stored rows 0..8*N-1 of Bs,
//  both K values wide (S = Q.K^T, dP = dO.V^T, S^T = K.Q^T, dP^T = V.dO^T);
template <typename T, int LD, int K, int N>
__device__ __forceinline__ void warp_abt(float (&c)[N][4], const T* As, int a0, const T* Bs, int lane) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t a[4];
    ldsm4(a, a_addr<LD>(As, a0, kk * 16, lane));
#pragma unroll
    for (int np = 0; np < N / 2; ++np) {
      uint32_t b[4];
      ldsm4(b, bn_addr<LD>(Bs, np * 16, kk * 16, lane));
      mma<T>(c[2 * np], a, b[0], b[1]);
      mma<T>(c[2 * np + 1], a, b[2], b[3]);
    }
  }
}
//  c[d] += P . B, P the warp's 16 x 8*N fp32 fragments (rounded to T) and B the stored rows
//  0..8*N-1 of Bs, D wide (O += P.V, dQ += dS.K, dV += P^T.dO, dK += dS^T.Q).
template <typename T, int LD, int D, int N>
__device__ __forceinline__ void warp_pb(float (&c)[D / 8][4], const float (&p)[N][4], const T* Bs, int lane) {
#pragma unroll
  for (int kk = 0; kk < N / 2; ++kk) {
    uint32_t a[4];
    a_from_c<T>(a, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4];
      ldsm4t(b, bt_addr<LD>(Bs, kk * 16, dp * 16, lane));
      mma<T>(c[2 * dp], a, b[0], b[1]);
      mma<T>(c[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// Rows r0..r0+ROWS of one head of a [T, H, D] tensor (base at the head, row stride st) into
// shared [ROWS][LD], asynchronously; rows >= T as zeros.
template <int ROWS, int D, typename T>
__device__ __forceinline__ void load_rows(T* s, const T* base, std::int64_t st, std::int64_t r0, std::int64_t T_) {
  constexpr int C = D / 8;  // 16-byte chunks a row
  for (int c = threadIdx.x; c < ROWS * C; c += kThreads) {
    const int r = c / C, col = (c % C) * 8;
    const std::int64_t row = r0 + r;
    const bool ok = row < T_;
    cp_async16(s + r * row_ld<D>() + col, base + (ok ? row : 0) * st + col, ok);
  }
}

// The transformed score in log2 units; th = tanh(s * scale / cap) when capped: tanhf and the
// division as transformers computes them, or (s.fast_tanh) the hardware's tanh.approx (relative
// error about 2^-11, what FlashAttention-2's soft-capping uses) and a product with 1 / cap.
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float score2(float s, float scale, float cap, float* th, bool fast = false,
                                        float inv_cap = 0.f) {
  const float u = __fmul_rn(s, scale);
  if (cap > 0.f) {
    *th = fast ? tanh_approx(u * inv_cap) : tanhf(__fdiv_rn(u, cap));
    return __fmul_rn(*th, cap) * kLog2e;
  }
  *th = 0.f;
  return u * kLog2e;
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- forward ------------------------------------------------------------------------------

template <typename T, int D, int BC>
__global__ void __launch_bounds__(kThreads)
    band_fwd_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out,
                    float* __restrict__ lse, const std::int64_t* __restrict__ fk, BandShape s) {
  constexpr int BR = 64, LD = row_ld<D>();
  extern __shared__ __align__(16) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem);
  T* Ks = Qs + BR * LD;
  T* Vs = Ks + BC * LD;
  const std::int64_t T_ = s.T;
  const int h = blockIdx.y, kvh = h / (s.hq / s.hkv);
  const std::int64_t i0 = static_cast<std::int64_t>(gridDim.x - 1 - blockIdx.x) * BR;  // long blocks first
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const T* kh = k + kvh * s.k_sh;
  const T* vh = v + kvh * s.v_sh;
  load_rows<BR, D>(Qs, q + h * s.q_sh, s.q_st, i0, T_);
  cp_commit();
  const std::int64_t last = min(i0 + BR, T_) - 1;
  const std::int64_t fk_last = fk[last];
  std::int64_t row[2], first[2];
  row[0] = i0 + warp * 16 + g;
  row[1] = row[0] + 8;
  for (int i = 0; i < 2; ++i) first[i] = row[i] < T_ ? fk[row[i]] : 0;
  const float scale = s.scale, cap = s.softcap, inv_cap = cap > 0.f ? 1.f / cap : 0.f;
  const bool fast = s.fast_tanh != 0;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[D / 8][4];
#pragma unroll
  for (int d = 0; d < D / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  // Loads overlap compute as in FlashAttention-2: V of a block lands while S is computed, K of
  // the next block while the softmax and P.V run. Commit groups: Q, K_0, then V_j, K_j+1 a block.
  std::int64_t j0 = fk[i0] / BC * BC;
  load_rows<BC, D>(Ks, kh, s.k_st, j0, T_);
  cp_commit();
  for (; j0 <= last; j0 += BC) {
    const bool more = j0 + BC <= last;
    load_rows<BC, D>(Vs, vh, s.v_st, j0, T_);
    cp_commit();
    cp_wait<1>();  // Q and K_j are in
    __syncthreads();
    float sc[BC / 8][4];
#pragma unroll
    for (int n = 0; n < BC / 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
    warp_abt<T, LD, D>(sc, Qs, warp * 16, Ks, lane);
    __syncthreads();  // every warp has read K_j
    if (more) load_rows<BC, D>(Ks, kh, s.k_st, j0 + BC, T_);
    cp_commit();  // (empty on the last block)
    const bool masked = j0 + BC - 1 > i0 || j0 < fk_last || i0 + BR > T_;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < BC / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float th;
        float x = score2(sc[n][e], scale, cap, &th, fast, inv_cap);
        if (masked) {
          const std::int64_t j = j0 + n * 8 + 2 * t4 + (e & 1);
          const int r = e >> 1;
          if (row[r] >= T_ || j < first[r] || j > row[r]) x = -INFINITY;
        }
        sc[n][e] = x;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mn = fmaxf(m[r], quad_max(mx[r]));
      base[r] = mn == -INFINITY ? 0.f : mn;
      const float alpha = exp2f(m[r] - base[r]);
      m[r] = mn;
      l[r] *= alpha;
#pragma unroll
      for (int d = 0; d < D / 8; ++d) {
        o[d][2 * r] *= alpha;
        o[d][2 * r + 1] *= alpha;
      }
    }
#pragma unroll
    for (int n = 0; n < BC / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(sc[n][e] - base[e >> 1]);
        sc[n][e] = p;
        l[e >> 1] += p;
      }
    cp_wait<1>();  // V_j is in (K_j+1 may still be on its way)
    __syncthreads();
    warp_pb<T, LD, D>(o, sc, Vs, lane);
    __syncthreads();  // every warp has read V_j
  }
  const std::int64_t ost = static_cast<std::int64_t>(s.hq) * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(l[r]);
    if (row[r] >= T_) continue;
    const float inv = 1.f / sum;
    T* orow = out + row[r] * ost + static_cast<std::int64_t>(h) * D + 2 * t4;
#pragma unroll
    for (int d = 0; d < D / 8; ++d)
      *reinterpret_cast<uint32_t*>(orow + d * 8) = pack<T>(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    if (t4 == 0) lse[static_cast<std::int64_t>(h) * T_ + row[r]] = m[r] * kLn2 + logf(sum);
  }
}

// ---- backward -----------------------------------------------------------------------------

// delta[h, i] = sum_d dout[i, h, d] * out[i, h, d] in fp32: one warp per (row, head).
template <typename T>
__global__ void band_delta_kernel(const T* __restrict__ out, const T* __restrict__ dout, float* __restrict__ delta,
                                  std::int64_t T_, int hq, int d) {
  const std::int64_t w = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (w >= T_ * hq) return;
  const std::int64_t i = w / hq;
  const int h = static_cast<int>(w % hq);
  const T* o = out + w * d;
  const T* g = dout + w * d;
  float acc = 0.f;
  for (int c = lane * 8; c < d; c += 256) {
    const Vec<T, 8> a = load<T, 8>(o + c), b = load<T, 8>(g + c);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc += to_f(a.v[e]) * to_f(b.v[e]);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) delta[static_cast<std::int64_t>(h) * T_ + i] = acc;
}

// dQ: 64 query rows of one head a CTA, each warp 16 of them, over the key blocks they reach.
template <typename T, int D, int BC>
__global__ void __launch_bounds__(kThreads)
    band_dq_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   const T* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
                   T* __restrict__ dq, const std::int64_t* __restrict__ fk, BandShape s) {
  constexpr int BR = 64, LD = row_ld<D>();
  extern __shared__ __align__(16) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem);
  T* Gs = Qs + BR * LD;  // dO
  T* Ks = Gs + BR * LD;
  T* Vs = Ks + BC * LD;
  const std::int64_t T_ = s.T;
  const int h = blockIdx.y, kvh = h / (s.hq / s.hkv);
  const std::int64_t i0 = static_cast<std::int64_t>(gridDim.x - 1 - blockIdx.x) * BR;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const std::int64_t ost = static_cast<std::int64_t>(s.hq) * D;
  const T* kh = k + kvh * s.k_sh;
  const T* vh = v + kvh * s.v_sh;
  load_rows<BR, D>(Qs, q + h * s.q_sh, s.q_st, i0, T_);
  load_rows<BR, D>(Gs, dout + static_cast<std::int64_t>(h) * D, ost, i0, T_);
  cp_commit();
  const std::int64_t last = min(i0 + BR, T_) - 1;
  const std::int64_t fk_last = fk[last];
  std::int64_t row[2], first[2];
  float lse2[2], dl[2];
  row[0] = i0 + warp * 16 + g;
  row[1] = row[0] + 8;
  for (int r = 0; r < 2; ++r) {
    const bool ok = row[r] < T_;
    first[r] = ok ? fk[row[r]] : 0;
    lse2[r] = ok ? lse[static_cast<std::int64_t>(h) * T_ + row[r]] * kLog2e : 0.f;
    dl[r] = ok ? delta[static_cast<std::int64_t>(h) * T_ + row[r]] : 0.f;
  }
  const float scale = s.scale, cap = s.softcap, inv_cap = cap > 0.f ? 1.f / cap : 0.f;
  const bool fast = s.fast_tanh != 0;
  float acc[D / 8][4];
#pragma unroll
  for (int d = 0; d < D / 8; ++d) acc[d][0] = acc[d][1] = acc[d][2] = acc[d][3] = 0.f;
  // Loads overlap compute: V of the next block lands while S, dS and dQ run, K of the next block
  // while dP runs. Commit groups: Q and dO, V_0, K_0, then V_j+1, K_j+1 a block.
  std::int64_t j0 = fk[i0] / BC * BC;
  load_rows<BC, D>(Vs, vh, s.v_st, j0, T_);
  cp_commit();
  load_rows<BC, D>(Ks, kh, s.k_st, j0, T_);
  cp_commit();
  for (; j0 <= last; j0 += BC) {
    const bool more = j0 + BC <= last;
    cp_wait<1>();  // Q, dO and V_j are in
    __syncthreads();
    float sc[BC / 8][4], dp[BC / 8][4];
#pragma unroll
    for (int n = 0; n < BC / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[n][e] = dp[n][e] = 0.f;
    warp_abt<T, LD, D>(dp, Gs, warp * 16, Vs, lane);
    cp_wait<0>();     // K_j is in
    __syncthreads();  // and every warp has read V_j
    if (more) load_rows<BC, D>(Vs, vh, s.v_st, j0 + BC, T_);
    cp_commit();
    warp_abt<T, LD, D>(sc, Qs, warp * 16, Ks, lane);
    const bool masked = j0 + BC - 1 > i0 || j0 < fk_last || i0 + BR > T_;
#pragma unroll
    for (int n = 0; n < BC / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float th;
        const float x = score2(sc[n][e], scale, cap, &th, fast, inv_cap);
        bool seen = true;
        if (masked) {
          const std::int64_t j = j0 + n * 8 + 2 * t4 + (e & 1);
          seen = row[r] < T_ && j >= first[r] && j <= row[r];
        }
        const float p = seen ? exp2f(x - lse2[r]) : 0.f;
        const float chain = cap > 0.f ? (1.f - th * th) * scale : scale;
        sc[n][e] = p * (dp[n][e] - dl[r]) * chain;
      }
    warp_pb<T, LD, D>(acc, sc, Ks, lane);
    __syncthreads();  // every warp has read K_j
    if (more) load_rows<BC, D>(Ks, kh, s.k_st, j0 + BC, T_);
    cp_commit();
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= T_) continue;
    T* drow = dq + row[r] * ost + static_cast<std::int64_t>(h) * D + 2 * t4;
#pragma unroll
    for (int d = 0; d < D / 8; ++d)
      *reinterpret_cast<uint32_t*>(drow + d * 8) = pack<T>(acc[d][2 * r], acc[d][2 * r + 1]);
  }
}

// dK and/or dV: 64 keys of one KV head a CTA, each warp 16 of them, over the query rows of every
// query head of the group that see them, BR rows at a time.
template <typename T, int D, int BR, bool DV, bool DK, int STAGES>
__global__ void __launch_bounds__(kThreads)
    band_dkv_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                    const T* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
                    T* __restrict__ dk, T* __restrict__ dv, const std::int64_t* __restrict__ fk, BandShape s) {
  constexpr int BK = 64, LD = row_ld<D>();
  extern __shared__ __align__(16) unsigned char smem[];
  // K, V (only for dK), then STAGES buffers of query rows: Q, dO, first keys, lse and delta.
  T* Ks = reinterpret_cast<T*>(smem);
  T* Vs = Ks + BK * LD;
  T* Qb = Vs + (DK ? BK * LD : 0);
  T* Gb = Qb + STAGES * BR * LD;  // dO
  auto* fkb = reinterpret_cast<std::int64_t*>(Gb + STAGES * BR * LD);
  float* lsb = reinterpret_cast<float*>(fkb + STAGES * BR);
  float* dlb = lsb + STAGES * BR;
  const std::int64_t T_ = s.T;
  const int kvh = blockIdx.y, group = s.hq / s.hkv;
  const std::int64_t j0 = static_cast<std::int64_t>(blockIdx.x) * BK;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const std::int64_t ost = static_cast<std::int64_t>(s.hq) * D;
  load_rows<BK, D>(Ks, k + kvh * s.k_sh, s.k_st, j0, T_);
  if constexpr (DK) load_rows<BK, D>(Vs, v + kvh * s.v_sh, s.v_st, j0, T_);
  cp_commit();
  const std::int64_t jlast = min(j0 + BK, T_) - 1;
  std::int64_t key[2];
  key[0] = j0 + warp * 16 + g;
  key[1] = key[0] + 8;
  const float scale = s.scale, cap = s.softcap, inv_cap = cap > 0.f ? 1.f / cap : 0.f;
  const bool fast = s.fast_tanh != 0;
  float gv[DV ? D / 8 : 1][4], gk[DK ? D / 8 : 1][4];
#pragma unroll
  for (int d = 0; d < (DV ? D / 8 : 1); ++d) gv[d][0] = gv[d][1] = gv[d][2] = gv[d][3] = 0.f;
#pragma unroll
  for (int d = 0; d < (DK ? D / 8 : 1); ++d) gk[d][0] = gk[d][1] = gk[d][2] = gk[d][3] = 0.f;
  // The (query head, row block) pairs that see these keys, walked in one sequence: every head of
  // the group, and in each the row blocks from the one holding j0 while their first key <= jlast
  // (the first of a head always qualifies: fk[i0] <= i0 <= j0). With two stages, the next pair's
  // rows land while this pair's products run.
  const std::int64_t start = j0 / BR * BR;
  auto load_stage = [&](int stage, int hh, std::int64_t i0) {
    const int h = kvh * group + hh;
    load_rows<BR, D>(Qb + stage * BR * LD, q + h * s.q_sh, s.q_st, i0, T_);
    load_rows<BR, D>(Gb + stage * BR * LD, dout + static_cast<std::int64_t>(h) * D, ost, i0, T_);
    for (int r = threadIdx.x; r < BR; r += kThreads) {
      const std::int64_t i = i0 + r;
      const bool ok = i < T_;
      fkb[stage * BR + r] = ok ? fk[i] : INT64_MAX;
      lsb[stage * BR + r] = ok ? lse[static_cast<std::int64_t>(h) * T_ + i] * kLog2e : 0.f;
      dlb[stage * BR + r] = ok ? delta[static_cast<std::int64_t>(h) * T_ + i] : 0.f;
    }
  };
  int hh = 0, cur = 0;
  std::int64_t i0 = start;
  if constexpr (STAGES == 2) {
    load_stage(0, hh, i0);
    cp_commit();
  }
  while (hh < group) {
    int nh = hh;
    std::int64_t ni0 = i0 + BR;
    if (ni0 >= T_ || fk[ni0] > jlast) {
      ++nh;
      ni0 = start;
    }
    if constexpr (STAGES == 2) {
      if (nh < group) load_stage(cur ^ 1, nh, ni0);
      cp_commit();   // (empty after the last pair)
      cp_wait<1>();  // K, V and this pair's rows are in
    } else {
      load_stage(0, hh, i0);
      cp_commit();
      cp_wait<0>();
    }
    __syncthreads();
    {
      const T* Qs = Qb + cur * BR * LD;
      const T* Gs = Gb + cur * BR * LD;
      const std::int64_t* fks = fkb + cur * BR;
      const float* lse2s = lsb + cur * BR;
      const float* dls = dlb + cur * BR;
      float st[BR / 8][4], dpt[DK ? BR / 8 : 1][4];
#pragma unroll
      for (int n = 0; n < BR / 8; ++n) st[n][0] = st[n][1] = st[n][2] = st[n][3] = 0.f;
#pragma unroll
      for (int n = 0; n < (DK ? BR / 8 : 1); ++n) dpt[n][0] = dpt[n][1] = dpt[n][2] = dpt[n][3] = 0.f;
      warp_abt<T, LD, D>(st, Ks, warp * 16, Qs, lane);
      if constexpr (DK) warp_abt<T, LD, D>(dpt, Vs, warp * 16, Gs, lane);
      const std::int64_t ilast = min(i0 + BR, T_) - 1;
      const bool masked = j0 + BK - 1 > i0 || j0 < fk[ilast] || i0 + BR > T_;
#pragma unroll
      for (int n = 0; n < BR / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int rl = n * 8 + 2 * t4 + (e & 1);  // the query row (column of S^T)
          const std::int64_t j = key[e >> 1];
          float th;
          const float x = score2(st[n][e], scale, cap, &th, fast, inv_cap);
          const bool seen = !masked || (j >= fks[rl] && j <= i0 + rl);
          const float p = seen ? exp2f(x - lse2s[rl]) : 0.f;
          if constexpr (DK) {
            const float chain = cap > 0.f ? (1.f - th * th) * scale : scale;
            dpt[n][e] = p * (dpt[n][e] - dls[rl]) * chain;
          }
          st[n][e] = p;
        }
      if constexpr (DV) warp_pb<T, LD, D>(gv, st, Gs, lane);
      if constexpr (DK) warp_pb<T, LD, D>(gk, dpt, Qs, lane);
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
    hh = nh;
    i0 = ni0;
    if constexpr (STAGES == 2) cur ^= 1;
  }
  const std::int64_t kst = static_cast<std::int64_t>(s.hkv) * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] > jlast) continue;
    const std::int64_t off = key[r] * kst + static_cast<std::int64_t>(kvh) * D + 2 * t4;
    if constexpr (DV) {
#pragma unroll
      for (int d = 0; d < D / 8; ++d)
        *reinterpret_cast<uint32_t*>(dv + off + d * 8) = pack<T>(gv[d][2 * r], gv[d][2 * r + 1]);
    }
    if constexpr (DK) {
#pragma unroll
      for (int d = 0; d < D / 8; ++d)
        *reinterpret_cast<uint32_t*>(dk + off + d * 8) = pack<T>(gk[d][2 * r], gk[d][2 * r + 1]);
    }
  }
}

// ---- launchers ----------------------------------------------------------------------------

template <typename K>
void set_smem(K kernel, int bytes, const char* name) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), name);
}

// Tiles by head dim: forward key block, dQ key block, dK/dV row block.
template <int D>
struct Tiles;
template <>
struct Tiles<64> {
  static constexpr int fwd = 64, dq = 64, dkv = 64;
};
template <>
struct Tiles<128> {
  static constexpr int fwd = 64, dq = 64, dkv = 32;
};
template <>
struct Tiles<256> {
  static constexpr int fwd = 64, dq = 32, dkv = 32;
};

template <typename T, int D>
void fwd(const void* q, const void* k, const void* v, void* out, float* lse, const std::int64_t* fk, const BandShape& s,
         cudaStream_t st) {
  constexpr int BC = Tiles<D>::fwd;
  const int bytes = (64 + 2 * BC) * row_ld<D>() * static_cast<int>(sizeof(T));
  auto kernel = band_fwd_kernel<T, D, BC>;
  set_smem(kernel, bytes, "band_fwd_kernel shared memory");
  const dim3 grid(static_cast<unsigned>((s.T + 63) / 64), static_cast<unsigned>(s.hq));
  kernel<<<grid, kThreads, bytes, st>>>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                                        static_cast<T*>(out), lse, fk, s);
  check(cudaGetLastError(), "band_fwd_kernel launch");
}

template <typename T, int D, bool DV, bool DK>
void dkv(const void* q, const void* k, const void* v, const void* dout, const float* lse, const float* delta, void* dk,
         void* dv, const std::int64_t* fk, const BandShape& s, cudaStream_t st) {
  constexpr int BR = Tiles<D>::dkv;
  // Two stages of query rows where two CTAs of them still fit an SM (all but head dim 256's dK pass).
  constexpr int stages = (D == 256 && DK) ? 1 : 2;
  const int bytes =
      ((DK ? 2 : 1) * 64 + stages * 2 * BR) * row_ld<D>() * static_cast<int>(sizeof(T)) + stages * BR * 16;
  auto kernel = band_dkv_kernel<T, D, BR, DV, DK, stages>;
  set_smem(kernel, bytes, "band_dkv_kernel shared memory");
  const dim3 grid(static_cast<unsigned>((s.T + 63) / 64), static_cast<unsigned>(s.hkv));
  kernel<<<grid, kThreads, bytes, st>>>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                                        static_cast<const T*>(dout), lse, delta, static_cast<T*>(dk),
                                        static_cast<T*>(dv), fk, s);
  check(cudaGetLastError(), "band_dkv_kernel launch");
}

template <typename T, int D>
void bwd(const void* q, const void* k, const void* v, const void* out, const void* dout, const float* lse, float* delta,
         void* dq, void* dk, void* dv, const std::int64_t* fk, const BandShape& s, cudaStream_t st) {
  const std::int64_t warps = s.T * s.hq;
  band_delta_kernel<T><<<static_cast<unsigned>((warps + 7) / 8), 256, 0, st>>>(
      static_cast<const T*>(out), static_cast<const T*>(dout), delta, s.T, s.hq, s.d);
  check(cudaGetLastError(), "band_delta_kernel launch");
  constexpr int BC = Tiles<D>::dq;
  const int bytes = (2 * 64 + 2 * BC) * row_ld<D>() * static_cast<int>(sizeof(T));
  auto kernel = band_dq_kernel<T, D, BC>;
  set_smem(kernel, bytes, "band_dq_kernel shared memory");
  const dim3 grid(static_cast<unsigned>((s.T + 63) / 64), static_cast<unsigned>(s.hq));
  kernel<<<grid, kThreads, bytes, st>>>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                                        static_cast<const T*>(dout), lse, delta, static_cast<T*>(dq), fk, s);
  check(cudaGetLastError(), "band_dq_kernel launch");
  if constexpr (D <= 128) {
    dkv<T, D, true, true>(q, k, v, dout, lse, delta, dk, dv, fk, s, st);
  } else {
    dkv<T, D, true, false>(q, k, v, dout, lse, delta, dk, dv, fk, s, st);
    dkv<T, D, false, true>(q, k, v, dout, lse, delta, dk, dv, fk, s, st);
  }
}

template <typename T>
void fwd_d(const void* q, const void* k, const void* v, void* out, float* lse, const std::int64_t* fk,
           const BandShape& s, cudaStream_t st) {
  switch (s.d) {
    case 64: return fwd<T, 64>(q, k, v, out, lse, fk, s, st);
    case 128: return fwd<T, 128>(q, k, v, out, lse, fk, s, st);
    case 256: return fwd<T, 256>(q, k, v, out, lse, fk, s, st);
    default: throw std::runtime_error("band_fwd_kernel: unsupported head dim " + std::to_string(s.d));
  }
}

template <typename T>
void bwd_d(const void* q, const void* k, const void* v, const void* out, const void* dout, const float* lse,
           float* delta, void* dq, void* dk, void* dv, const std::int64_t* fk, const BandShape& s, cudaStream_t st) {
  switch (s.d) {
    case 64: return bwd<T, 64>(q, k, v, out, dout, lse, delta, dq, dk, dv, fk, s, st);
    case 128: return bwd<T, 128>(q, k, v, out, dout, lse, delta, dq, dk, dv, fk, s, st);
    case 256: return bwd<T, 256>(q, k, v, out, dout, lse, delta, dq, dk, dv, fk, s, st);
    default: throw std::runtime_error("band_dq_kernel: unsupported head dim " + std::to_string(s.d));
  }
}

}  // namespace

void band_attention_fwd(const void* q, const void* k, const void* v, void* out, float* lse,
                        const std::int64_t* first_key, const BandShape& s, int dtype, void* stream) {
  if (s.T == 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 1: return fwd_d<__nv_bfloat16>(q, k, v, out, lse, first_key, s, st);
    case 2: return fwd_d<__half>(q, k, v, out, lse, first_key, s, st);
    default: throw std::runtime_error("band_fwd_kernel: unsupported dtype code " + std::to_string(dtype));
  }
}

void band_attention_bwd(const void* q, const void* k, const void* v, const void* out, const void* dout,
                        const float* lse, float* delta, void* dq, void* dk, void* dv, const std::int64_t* first_key,
                        const BandShape& s, int dtype, void* stream) {
  if (s.T == 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 1: return bwd_d<__nv_bfloat16>(q, k, v, out, dout, lse, delta, dq, dk, dv, first_key, s, st);
    case 2: return bwd_d<__half>(q, k, v, out, dout, lse, delta, dq, dk, dv, first_key, s, st);
    default: throw std::runtime_error("band_dq_kernel: unsupported dtype code " + std::to_string(dtype));
  }
}

}  // namespace odyssey::kernels::cuda
