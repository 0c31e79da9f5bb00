// Host launchers of the fused residual-add + RMSNorm CUDA kernels (rmsnorm.cu). Raw
// pointers, no LibTorch: rmsnorm.cpp calls them for CUDA tensors on the current device.
// dtype: 0 = f32, 1 = bf16, 2 = f16 (every tensor argument except rstd/workspace, which are
// fp32). All tensors are contiguous [rows, hidden]. Errors throw std::runtime_error naming
// the kernel.
#pragma once

#include <cstdint>

namespace odyssey::kernels::cuda {

// Forward. residual may be null: then the sum is x itself and `sum` is not written (may be
// null). Writes y [rows, hidden], sum [rows, hidden] (when residual is given) and
// rstd [rows] (fp32, 1 / sqrt(mean(sum^2) + eps)).
void add_rms_norm_fwd(const void* x, const void* residual, const void* weight, void* y, void* sum, float* rstd,
                      std::int64_t rows, std::int64_t hidden, float eps, int dtype, void* stream);

// Rows of the fp32 [rows, hidden] workspace add_rms_norm_bwd needs for the weight gradient's
// per-block partial sums on the current device (a few per SM).
std::int64_t add_rms_norm_bwd_workspace_rows();

// Backward. dsum = rmsnorm_input_grad(sum, rstd, weight, dy) + dsum_out (dsum_out may be
// null), rounded once to the dtype. When dweight is non-null, also
// dweight = Σ_rows dy * to_dtype(sum * rstd) (fp32 accumulation: per-block partial sums in
// `workspace` [workspace_rows, hidden], then a column reduction; rounded once).
void add_rms_norm_bwd(const void* dy, const void* sum, const float* rstd, const void* weight, const void* dsum_out,
                      void* dsum, void* dweight, float* workspace, std::int64_t workspace_rows, std::int64_t rows,
                      std::int64_t hidden, int dtype, void* stream);

}  // namespace odyssey::kernels::cuda
