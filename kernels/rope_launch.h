// Host launcher of the in-place rotary embedding CUDA kernel (rope.cu). Raw pointers, no
// LibTorch: rope.cpp calls it for CUDA tensors on the current device. dtype: 0 = f32,
// 1 = bf16, 2 = f16. Errors throw std::runtime_error naming the kernel.
#pragma once

#include <cstdint>

namespace odyssey::kernels::cuda {

// Rotates q [tokens, hq, head_dim] and k [tokens, hk, head_dim] in place in one launch
// (strides in elements, last dimension contiguous; k may be null with hk = 0). cos, sin:
// contiguous [tokens, head_dim]. With x1, x2 the halves of a head and c1, c2, s1, s2 those
// of cos and sin:
//   inverse = false (forward, HF's roundings): x1' = r(r(x1*c1) - r(x2*s1)),
//                                             x2' = r(r(x2*c2) + r(x1*s2))
//   inverse = true (backward on gradients, fp32, rounded once): x1' = x1*c1 + x2*s2,
//                                                               x2' = x2*c2 - x1*s1
// q_out: null (q rotated in place), or where q's rotation goes, with q's strides (q is only
// read then; must not overlap q).
void rope_apply(void* q, std::int64_t q_stride_t, std::int64_t q_stride_h, std::int64_t hq, void* k,
                std::int64_t k_stride_t, std::int64_t k_stride_h, std::int64_t hk, const void* cos, const void* sin,
                std::int64_t tokens, std::int64_t head_dim, bool inverse, int dtype, void* stream,
                void* q_out = nullptr);

}  // namespace odyssey::kernels::cuda
