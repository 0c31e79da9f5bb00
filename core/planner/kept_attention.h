// Where the engine can keep attention outputs (keep_attention, docs/training.md): the one rule
// the memory planner's terms and the trainer's memory policy share. No LibTorch.
#pragma once

#include "config/model_config.h"
#include "config/train_config.h"

namespace odyssey {

// Whether the engine can keep attention outputs (keep_attention) for this model and job at
// all: its kept path runs plain causal attention, a sliding window on flash's band (CUDA,
// 16-bit, not eager) or the CPU kernel's mask, or soft-capped scores (Gemma-2's
// attn_logit_softcapping) in tiles (model/tiled_attention.h) on one process. A window without
// soft-capping under sequence parallelism or eager attention, and soft-capping under sequence
// parallelism, take the general attention path, which keeps nothing: the planner counts no
// kept layer then, and the memory policy marks none (model::AttentionImpl::forward makes the
// same choice per layer).
bool attention_keepable(const TrainConfig& c, const HfModelConfig& m, bool cuda);

}  // namespace odyssey
