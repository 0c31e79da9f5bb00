// Where the engine can keep attention outputs (keep_attention, docs/training.md): the one rule
// the memory planner's terms and the trainer's memory policy share. No LibTorch.
#pragma once

#include "config/model_config.h"
#include "config/train_config.h"

namespace odyssey {

// Whether the engine can keep attention outputs (keep_attention) for this model and job at
// all: its kept path runs plain causal attention, or a sliding window on flash's band (CUDA,
// 16-bit, not eager) or the CPU kernel's mask. Soft-capped scores (Gemma-2's
// attn_logit_softcapping) and a window under sequence parallelism or eager attention take the
// general attention path, which keeps nothing: the planner counts no kept layer then, and the
// memory policy marks none (model::AttentionImpl::forward makes the same choice per layer).
bool attention_keepable(const TrainConfig& c, const HfModelConfig& m, bool cuda);

}  // namespace odyssey
