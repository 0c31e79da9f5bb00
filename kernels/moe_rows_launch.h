// Host launchers of the MoE row kernels (moe_rows.cu). Raw pointers, no LibTorch:
// moe_rows.cpp calls them for CUDA tensors on the current device. dtype: 0 = f32, 1 = bf16,
// 2 = f16 (rows, dy, y, d rows); weights and d weights are fp32. Every [·, h] matrix is
// contiguous. Errors throw std::runtime_error naming the kernel.
#pragma once

#include <cstdint>

namespace odyssey::kernels::cuda {

// y [tokens, h] = Σ_c rows[index[n·k + c]] · weights[n·k + c] (weights may be null: 1).
void combine_rows_fwd(const void* rows, const std::int64_t* index, const float* weights, void* y, std::int64_t tokens,
                      std::int64_t k, std::int64_t h, int dtype, void* stream);

// For each row j < m: p = order[j], n = p / k; d_rows[j] = dy[n] · weights[p] and, with
// d_weights not null, d_weights[p] = Σ_h dy[n, h] · rows[j, h].
void combine_rows_bwd(const void* dy, const void* rows, const std::int64_t* order, const float* weights, void* d_rows,
                      float* d_weights, std::int64_t m, std::int64_t k, std::int64_t h, int dtype, void* stream);

}  // namespace odyssey::kernels::cuda
