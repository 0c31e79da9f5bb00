// In-place rotary embedding CUDA kernel (rope.h, rope_launch.h). No LibTorch here. The
// rotation of q may instead be written to q_out (same strides): the backward's way to rotate
// a gradient it may not overwrite without first copying it.
//
// One launch rotates q and k: the work units are (token, head of q then k, group of N
// feature pairs), flattened and walked grid-stride; N pairs per unit with 128-bit accesses
// when head_dim / 2, the strides and the pointers allow it (N = 1 otherwise). cos/sin rows
// are re-read per head from L1/L2 (they are [tokens, head_dim], a small fraction of q and k).
//
// Tolerance: `odyssey-train selftest` (kernels/selftest.cpp) evaluates this kernel, its reference
// (kernels/rope_ref.cpp) in the same dtype and the reference on float64 inputs; every output and
// gradient must be within 2 × the reference's own error plus one unit roundoff of the dtype (2^-8
// bf16, 2^-24 fp32) of the float64 result. The bound is derived from the reference's rounding on
// each shape, not chosen.
// Source of the formula: Hugging Face's apply_rotary_pos_emb with rotate_half, q · cos +
// rotate_half(q) · sin (Su et al. 2021, RoFormer).
#include "kernels/rope_launch.h"
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

template <typename T, int N, bool kInverse>
__global__ void rope_kernel(T* q, std::int64_t qst, std::int64_t qsh, int hq, T* k, std::int64_t kst, std::int64_t ksh,
                            int hk, const T* __restrict__ cos, const T* __restrict__ sin, std::int64_t tokens, int half,
                            T* q_out) {
  using V = Vec<T, N>;
  const int pv = half / N;                                             // units per head
  const std::int64_t units = static_cast<std::int64_t>(hq + hk) * pv;  // per token
  const std::int64_t total = tokens * units;
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = idx / units;
    const int u = static_cast<int>(idx - t * units);
    const int h = u / pv;
    const int c = (u - h * pv) * N;
    const std::int64_t off =
        h < hq ? t * qst + static_cast<std::int64_t>(h) * qsh : t * kst + static_cast<std::int64_t>(h - hq) * ksh;
    const T* x = h < hq ? q + off : k + off;
    T* y = h < hq ? (q_out != nullptr ? q_out : q) + off : k + off;
    const T* ct = cos + t * 2 * half;
    const T* st = sin + t * 2 * half;
    const V x1 = load<T, N>(x + c);
    const V x2 = load<T, N>(x + half + c);
    const V c1 = load<T, N>(ct + c);
    const V c2 = load<T, N>(ct + half + c);
    const V s1 = load<T, N>(st + c);
    const V s2 = load<T, N>(st + half + c);
    V o1, o2;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float a1 = to_f(x1.v[i]), a2 = to_f(x2.v[i]);
      if constexpr (kInverse) {
        o1.v[i] = from_f<T>(a1 * to_f(c1.v[i]) + a2 * to_f(s2.v[i]));
        o2.v[i] = from_f<T>(a2 * to_f(c2.v[i]) - a1 * to_f(s1.v[i]));
      } else {
        // HF: (x * cos) + (rotate_half(x) * sin), every product and sum rounded to T; the
        // _rn intrinsics keep fp32 from being contracted into FMAs (which would not match).
        const float p1 = rnd<T>(__fmul_rn(a1, to_f(c1.v[i])));
        const float p2 = rnd<T>(__fmul_rn(a2, to_f(s1.v[i])));
        const float p3 = rnd<T>(__fmul_rn(a2, to_f(c2.v[i])));
        const float p4 = rnd<T>(__fmul_rn(a1, to_f(s2.v[i])));
        o1.v[i] = from_f<T>(__fsub_rn(p1, p2));
        o2.v[i] = from_f<T>(__fadd_rn(p3, p4));
      }
    }
    store<T, N>(y + c, o1);
    store<T, N>(y + half + c, o2);
  }
}

template <typename T, int N>
void launch(void* q, std::int64_t qst, std::int64_t qsh, int hq, void* k, std::int64_t kst, std::int64_t ksh, int hk,
            const void* cos, const void* sin, std::int64_t tokens, int half, bool inverse, cudaStream_t stream,
            void* q_out) {
  const std::int64_t total = tokens * (hq + hk) * (half / N);
  constexpr int kThreads = 256;
  const std::int64_t max_blocks = static_cast<std::int64_t>(sm_count("rope_kernel: SM count")) * (2048 / kThreads);
  const int grid = static_cast<int>(std::min((total + kThreads - 1) / kThreads, max_blocks));
  auto* qp = static_cast<T*>(q);
  auto* kp = static_cast<T*>(k);
  auto* op = static_cast<T*>(q_out);
  const auto* cp = static_cast<const T*>(cos);
  const auto* sp = static_cast<const T*>(sin);
  if (inverse)
    rope_kernel<T, N, true>
        <<<grid, kThreads, 0, stream>>>(qp, qst, qsh, hq, kp, kst, ksh, hk, cp, sp, tokens, half, op);
  else
    rope_kernel<T, N, false>
        <<<grid, kThreads, 0, stream>>>(qp, qst, qsh, hq, kp, kst, ksh, hk, cp, sp, tokens, half, op);
  check(cudaGetLastError(), inverse ? "rope_kernel (inverse) launch" : "rope_kernel launch");
}

template <typename T>
void dispatch(void* q, std::int64_t qst, std::int64_t qsh, int hq, void* k, std::int64_t kst, std::int64_t ksh, int hk,
              const void* cos, const void* sin, std::int64_t tokens, int half, bool inverse, cudaStream_t stream,
              void* q_out) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const bool vec = half % kVec == 0 && qst % kVec == 0 && qsh % kVec == 0 && aligned16(q) && aligned16(q_out) &&
                   aligned16(cos) && aligned16(sin) &&
                   (hk == 0 || (kst % kVec == 0 && ksh % kVec == 0 && aligned16(k)));
  if (vec) launch<T, kVec>(q, qst, qsh, hq, k, kst, ksh, hk, cos, sin, tokens, half, inverse, stream, q_out);
  else launch<T, 1>(q, qst, qsh, hq, k, kst, ksh, hk, cos, sin, tokens, half, inverse, stream, q_out);
}

}  // namespace

void rope_apply(void* q, std::int64_t q_stride_t, std::int64_t q_stride_h, std::int64_t hq, void* k,
                std::int64_t k_stride_t, std::int64_t k_stride_h, std::int64_t hk, const void* cos, const void* sin,
                std::int64_t tokens, std::int64_t head_dim, bool inverse, int dtype, void* stream, void* q_out) {
  if (head_dim < 2 || head_dim % 2 != 0 || head_dim > 65536)
    throw std::runtime_error("rope_kernel: head_dim " + std::to_string(head_dim) + " must be even and in [2, 65536]");
  if (hq < 0 || hk < 0 || hq + hk > (1 << 20)) throw std::runtime_error("rope_kernel: head counts out of range");
  if (hk > 0 && k == nullptr) throw std::runtime_error("rope_kernel: k is null but hk > 0");
  if (tokens <= 0 || hq + hk == 0) return;
  const int half = static_cast<int>(head_dim / 2);
  const auto s = static_cast<cudaStream_t>(stream);
  const int nq = static_cast<int>(hq), nk = static_cast<int>(hk);
  switch (dtype) {
    case 0:
      return dispatch<float>(q, q_stride_t, q_stride_h, nq, k, k_stride_t, k_stride_h, nk, cos, sin, tokens, half,
                             inverse, s, q_out);
    case 1:
      return dispatch<__nv_bfloat16>(q, q_stride_t, q_stride_h, nq, k, k_stride_t, k_stride_h, nk, cos, sin, tokens,
                                     half, inverse, s, q_out);
    case 2:
      return dispatch<__half>(q, q_stride_t, q_stride_h, nq, k, k_stride_t, k_stride_h, nk, cos, sin, tokens, half,
                              inverse, s, q_out);
    default: throw std::runtime_error("rope_kernel: unsupported dtype code " + std::to_string(dtype));
  }
}

}  // namespace odyssey::kernels::cuda
