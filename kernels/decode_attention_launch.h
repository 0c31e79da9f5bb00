// Host launchers of the decode-attention kernels (decode_attention.cu). Raw pointers, no
// LibTorch: decode_attention.cpp calls them for CUDA tensors on the current device. dtype of q,
// k, v and out: 0 = f32, 1 = bf16, 2 = f16. Strides are in elements; every tensor's last
// dimension is contiguous. Errors throw std::runtime_error naming the kernel.
#pragma once

#include <cstdint>

namespace odyssey::kernels::cuda {

struct DecodeShape {
  std::int64_t batch, q_heads, kv_heads, length, head_dim;
  std::int64_t q_b, q_h;        // q [B, Hq, D]
  std::int64_t k_b, k_h, k_l;   // k [B, Hkv, L, D]
  std::int64_t v_b, v_h, v_l;   // v likewise
  std::int64_t keep_b, keep_l;  // keep [B (or stride 0), L], bytes (bool)
  float scale;
};

// Whether the kernels take this head_dim and group size (query heads per KV head).
bool decode_attention_fits(std::int64_t head_dim, std::int64_t group);

// Bytes of fp32 workspace decode_attention_fwd needs for the shape.
std::int64_t decode_attention_workspace(const DecodeShape& s, int sms);

// out [B, Hq, D] contiguous = softmax over the kept slots of scale * q . k, times v.
void decode_attention_fwd(const void* q, const void* k, const void* v, const bool* keep, void* out, float* workspace,
                          const DecodeShape& s, int dtype, void* stream);

}  // namespace odyssey::kernels::cuda
