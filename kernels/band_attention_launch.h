// Host launchers of the band-attention kernels (band_attention.cu). Raw pointers, no LibTorch:
// band_attention.cpp calls them for CUDA tensors on the current device. dtype: 1 = bf16,
// 2 = f16 (q, k, v, out, dout, dq, dk, dv all of it); head_dim 64, 128 or 256. Errors throw
// std::runtime_error naming the kernel.
#pragma once

#include <cstdint>

namespace odyssey::kernels::cuda {

// q [T, hq, d] and k, v [T, hkv, d] with the given row and head strides (elements; the last
// dimension contiguous, strides multiples of 8, pointers 16-byte aligned); out, dout and dq
// contiguous [T, hq, d]; dk, dv contiguous [T, hkv, d]; lse and delta fp32 [hq, T];
// first_key int64 [T], non-decreasing, first_key[i] <= i.
struct BandShape {
  std::int64_t T = 0;
  int hq = 0, hkv = 0, d = 0;
  std::int64_t q_st = 0, q_sh = 0, k_st = 0, k_sh = 0, v_st = 0, v_sh = 0;
  float scale = 1.f, softcap = 0.f;
  int fast_tanh = 0;  // the soft-cap's tanh by tanh.approx.f32 instead of tanhf (band_attention.cu)
};

// out and lse (natural log) of attention where query i sees keys first_key[i]..i.
void band_attention_fwd(const void* q, const void* k, const void* v, void* out, float* lse,
                        const std::int64_t* first_key, const BandShape& s, int dtype, void* stream);

// dq, dk, dv from dout, out and the forward's lse. delta (fp32 [hq, T]) is scratch the launcher
// fills with rowsum(dout * out).
void band_attention_bwd(const void* q, const void* k, const void* v, const void* out, const void* dout,
                        const float* lse, float* delta, void* dq, void* dk, void* dv, const std::int64_t* first_key,
                        const BandShape& s, int dtype, void* stream);

}  // namespace odyssey::kernels::cuda
