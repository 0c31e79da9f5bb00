// Rotary position embedding exactly as transformers 5.17 computes it (modeling_rope_utils.py
// and the *RotaryEmbedding / apply_rotary_pos_emb of the decoder families): inverse
// frequencies in fp32 from rope_theta, adjusted per RoPE kind (linear, dynamic NTK, yarn,
// longrope, llama3), angles as an fp32 outer product with the position ids, cos/sin in fp32
// times the kind's attention factor (yarn, longrope) then cast to the activations' dtype, and
// rotate_half on the two halves of the rotated part of each head (all of it, or the first
// head_dim x partial_rotary_factor channels: Phi-3).
//
// The kinds that depend on the sequence (dynamic, longrope) take it as transformers' dynamic
// update does, from max(position_ids) + 1 of the forward: dynamic scales the base when that
// exceeds max_position_embeddings, longrope uses long_factor past
// original_max_position_embeddings. transformers keeps the longest dynamic scaling it has seen
// until a short sequence resets it (a cache in the module); Odyssey computes each forward's
// from its own length (stateless), which is what a fresh transformers model computes.
#pragma once

#include <torch/torch.h>

#include <utility>

#include "model/decoder_config.h"

namespace odyssey::model {

// [int(head_dim x partial_rotary_factor) / 2] fp32 on the CPU for a sequence of `seq_len` positions (0: the value at
// construction, i.e. max_position_embeddings for dynamic, the short factors for longrope).
torch::Tensor rope_inv_freq(const RopeParams& rope, std::int64_t head_dim, std::int64_t seq_len = 0);

// Whether rope_inv_freq depends on seq_len.
bool rope_depends_on_length(const RopeParams& rope);

// cos and sin, each [P, S, rotary_dim] in `dtype`, for position_ids [P, S] (P = 1 or batch),
// multiplied by attention_factor. The frequencies repeat as [f0 .. fn, f0 .. fn], or with
// interleaved as [f0, f0, f1, f1, ...] (GLM-4's layout).
std::pair<torch::Tensor, torch::Tensor> rope_cos_sin(const torch::Tensor& inv_freq, const torch::Tensor& position_ids,
                                                     torch::ScalarType dtype, double attention_factor = 1.0,
                                                     bool interleaved = false);

// x [B, H, S, D] rotated by cos/sin [P, S, R] (broadcast over heads and, when P = 1, batch);
// with R < D the last D - R channels pass unrotated.
// interleaved (GLM-4): the rotated channels pair as (0, 1), (2, 3), ... with cos / sin laid out
// to match (rope_cos_sin's interleaved); else the first half pairs with the second (rotate_half).
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                         bool interleaved = false);

}  // namespace odyssey::model
