// Rotary position embedding exactly as transformers 5.17 computes it (modeling_rope_utils.py
// and the *RotaryEmbedding / apply_rotary_pos_emb of Qwen2, Qwen3 and Llama): inverse
// frequencies in fp32 from rope_theta (with the llama3 frequency adjustment), angles as an
// fp32 outer product with the position ids, cos/sin in fp32 then cast to the activations'
// dtype, and rotate_half on the two halves of each head.
#pragma once

#include <torch/torch.h>

#include <utility>

#include "model/decoder_config.h"

namespace odyssey::model {

// [head_dim / 2] fp32 on the CPU: 1 / theta^(2i/d), adjusted per rope.type.
torch::Tensor rope_inv_freq(const RopeParams& rope, std::int64_t head_dim);

// cos and sin, each [P, S, head_dim] in `dtype`, for position_ids [P, S] (P = 1 or batch).
std::pair<torch::Tensor, torch::Tensor> rope_cos_sin(const torch::Tensor& inv_freq,
                                                     const torch::Tensor& position_ids,
                                                     torch::ScalarType dtype);

// x [B, H, S, D] rotated by cos/sin [P, S, D] (broadcast over heads and, when P = 1, batch).
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace odyssey::model
