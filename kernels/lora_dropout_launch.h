// Host launcher of the LoRA dropout kernel (lora_dropout.cu). Raw pointers, no LibTorch:
// linear.cpp calls it for CUDA tensors on the current device. dtype: 0 = f32, 1 = bf16, 2 = f16.
// Errors throw std::runtime_error naming the kernel.
#pragma once

#include <cstdint>

namespace odyssey::kernels::cuda {

// Rows row0 … row0 + rows - 1 of an [n, in] input under a dropout mask (lora_dropout_bits.h:
// `seed`, `threshold`): x and out [rows, in], rows ld_x and ld_out elements apart, the last
// dimension contiguous. row_index: null (row r's position is row0 + r), or the rows' positions
// ([rows] int64 on the device: a shard's tokens' indices in the whole row).
//   accumulate = false: out = x where kept, 0 where dropped (out may be x: in place);
//   accumulate = true:  out += scale x where kept, in fp32, rounded once (out is left where
//                       dropped).
void lora_dropout_apply(const void* x, std::int64_t ld_x, void* out, std::int64_t ld_out, std::int64_t rows,
                        std::int64_t in, std::int64_t row0, const std::int64_t* row_index, std::uint64_t seed,
                        std::uint64_t threshold, bool accumulate, float scale, int dtype, void* stream);

}  // namespace odyssey::kernels::cuda
