// Host launchers of the SwiGLU CUDA kernels (swiglu.cu). Raw pointers, no LibTorch:
// swiglu.cpp calls them for CUDA tensors on the current device. dtype: 0 = f32, 1 = bf16,
// 2 = f16. gate and up are [rows, cols] with contiguous rows at any row stride (in
// elements); y and dy are contiguous [rows, cols]. Errors throw
// std::runtime_error naming the kernel.
#pragma once

#include <cstdint>

namespace odyssey::kernels::cuda {

// y = to_dtype(to_dtype(silu(gate)) * up).
void swiglu_fwd(const void* gate, std::int64_t gate_row_stride, const void* up, std::int64_t up_row_stride, void* y,
                std::int64_t rows, std::int64_t cols, int dtype, void* stream);

// dgate = dy * up * silu'(gate), dup = dy * silu(gate), in fp32, each rounded once; dgate and
// dup are [rows, cols] with contiguous rows at grad_row_stride (cols, or 2·cols for the two
// halves of one [rows, 2·cols] gradient). With y not null, also y = swiglu(gate, up) as
// swiglu_fwd rounds it (contiguous [rows, cols]); y may be dy itself, overwritten in place.
void swiglu_bwd(const void* dy, const void* gate, std::int64_t gate_row_stride, const void* up,
                std::int64_t up_row_stride, void* dgate, void* dup, std::int64_t grad_row_stride, void* y,
                std::int64_t rows, std::int64_t cols, int dtype, void* stream);

}  // namespace odyssey::kernels::cuda
