// Host launchers of the attention-tile softmax kernels (attention_tile.cu). Raw pointers, no
// LibTorch: attention_tile.cpp calls them for CUDA tensors on the current device. dtype of p and
// ds: 0 = f32, 1 = bf16, 2 = f16. s and dp are contiguous fp32 [R, m]; lse and delta fp32 [R];
// first_key int64 [T]. Errors throw std::runtime_error naming the kernel.
#pragma once

#include <cstdint>

namespace odyssey::kernels::cuda {

struct TileShape {
  std::int64_t R, m, rows, row0, key0;
  float scale, softcap;
};

// p = exp(x - lse) where seen, lse = log sum_seen exp(x) (attention_tile.h).
void tile_softmax_fwd(const float* s, void* p, float* lse, const std::int64_t* first_key, const TileShape& t, int dtype,
                      void* stream);

// p as above, ds = p * (dp - delta) * (1 - tanh^2 when capped) * scale.
void tile_softmax_bwd(const float* s, const float* dp, const float* lse, const float* delta, void* p, void* ds,
                      const std::int64_t* first_key, const TileShape& t, int dtype, void* stream);

}  // namespace odyssey::kernels::cuda
