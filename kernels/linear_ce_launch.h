// Host launchers of the fused linear cross-entropy's CUDA row kernel (kernels/linear_ce.cu).
// Raw pointers, sizes and a stream only: this header is seen by nvcc and by the LibTorch
// wrapper (kernels/linear_ce.cpp), and must stay free of LibTorch and CUDA headers.
#pragma once

#include <cstdint>

namespace odyssey::kernels::launch {

// Element type of the logits: 0 fp32, 1 bf16, 2 f16.
enum LinearCeDtype : int { kLinearCeF32 = 0, kLinearCeBf16 = 1, kLinearCeF16 = 2 };

// One chunk's row step. logits: device pointer to `rows` × `vocab` elements, row-major,
// contiguous (row r starts at logits + r·vocab, any alignment of the element type).
// targets: device int64 [rows]. loss: device fp32 [rows].
// For each row, in fp32: loss[r] = logsumexp(logits[r]) − logits[r][targets[r]], or 0 when
// targets[r] == ignore_index. When write_grad, row r of logits is overwritten in place
// with softmax(logits[r]) − onehot(targets[r]) rounded to the element type (all zeros for
// ignored rows). The caller validates the targets first (the wrapper does, once per call):
// a target outside [0, vocab) that is not ignore_index gives loss NaN and a zero gradient
// row, never an out-of-bounds access. Asynchronous on `stream` (a cudaStream_t).
// variant: kLinearCeAuto takes the one-read cluster kernel when the row qualifies (a gradient
// is written, rows 16-byte aligned, at most 8 packs of 16 bytes per thread: 262,144 16-bit or
// 131,072 fp32 logits), else the two-pass kernel; kLinearCeTwoPass always the two-pass one
// (the selftest and the benchmark compare them).
// Returns nullptr on success, else a static message (bad arguments or the launch error).
enum LinearCeVariant : int { kLinearCeAuto = 0, kLinearCeTwoPass = 1 };
const char* linear_ce_rows(void* logits, const std::int64_t* targets, float* loss, std::int64_t rows,
                           std::int64_t vocab, std::int64_t ignore_index, int dtype, bool write_grad, void* stream,
                           int variant = kLinearCeAuto);

}  // namespace odyssey::kernels::launch
