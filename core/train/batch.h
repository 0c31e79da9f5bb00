// One micro-batch as the engine computes it: a padding-free row of one or more samples
// (docs/training.md), and its loss.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "model/decoder.h"

namespace odyssey::train {

struct PackedRow {
  torch::Tensor input_ids;     // int64 [1, T]
  torch::Tensor labels;        // int64 [1, T], -100 = no target (the first token of every sample is -100)
  torch::Tensor position_ids;  // int64 [1, T], restarting at 0 per sample
  torch::Tensor cu_seqlens;    // int32 [n+1]
  std::int64_t max_seqlen = 0;
  std::int64_t samples = 0;
  // A shard of a sequence-parallel row (dist/sequence_parallel.h): next-token targets
  // already shifted over the whole row (int64 [1, T_local]), and the attention that spans
  // the ranks. Undefined / null for a whole row, whose labels are shifted here.
  torch::Tensor targets;
  std::shared_ptr<model::AttentionOverride> attention;
  std::int64_t real_tokens = -1;  // a shard: its tokens that are not padding
  // A shard: each token's index in the whole row (padding past its end; int64 [T_local]), the
  // positions its LoRA dropout masks are drawn for (kernels::LoraDropout::rows). Undefined for a
  // whole row.
  torch::Tensor token_rows;
  std::int64_t counted_tokens() const { return real_tokens >= 0 ? real_tokens : tokens(); }
  std::int64_t tokens() const { return input_ids.size(1); }
  // Targets after the shift: labels[1:] != -100 (or targets != -100 for a shard).
  std::int64_t target_tokens() const;
  PackedRow to(const torch::Device& device) const;
};

// A row from plain vectors; cu_seqlens derived when empty (from position_ids == 0).
PackedRow make_packed_row(const std::vector<std::int32_t>& input_ids, const std::vector<std::int32_t>& labels,
                          const std::vector<std::int32_t>& position_ids, std::vector<std::int32_t> cu_seqlens = {});
// The same from [1, T] tensors (the parity test's reference batches).
PackedRow make_packed_row(const torch::Tensor& input_ids, const torch::Tensor& labels,
                          const torch::Tensor& position_ids);

// Summed token cross-entropy (fp32 scalar) of a row: hidden states of the row, logits
// lm_head(h) a chunk of tokens at a time. Under autograd, chunks are checkpointed when the
// row's logits would exceed `max_logits_elements`, so the full [T, vocab] logits never exist.
// With the model's fused kernels on, kernels::linear_cross_entropy does it instead: chunks
// of planner::kFusedLossChunkTokens rows whose gradients are computed in the forward pass
// (no recomputation); `max_logits_elements` applies to the reference path only.
torch::Tensor row_loss_sum(model::CausalLM& lm, const PackedRow& row,
                           std::int64_t max_logits_elements = std::int64_t{1} << 26);

}  // namespace odyssey::train
