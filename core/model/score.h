// Scoring text with a CausalLM: the mean next-token loss of one token sequence, exactly what
// transformers returns as model(ids, labels=ids).loss for a batch of that one sequence
// (shifted targets, fp32 log-softmax, mean over the len(ids) - 1 targets), or with labels
// (model(ids, labels=labels).loss), without materializing [S, vocab] logits (the lm_head runs
// chunk_tokens rows at a time).
#pragma once

#include <cstdint>
#include <span>

#include "model/decoder.h"

namespace odyssey::model {

struct SampleScore {
  std::int64_t tokens = 0;   // len(ids)
  std::int64_t targets = 0;  // predicted tokens: tokens - 1 (0 for fewer than 2 tokens)
  double loss_sum = 0;       // sum of the targets' negative log-likelihoods (nats)
  double mean() const { return targets ? loss_sum / static_cast<double>(targets) : 0.0; }
};

// Runs under NoGradGuard on the model's device and dtype.
SampleScore score_tokens(CausalLM& lm, std::span<const std::int32_t> ids, std::int64_t chunk_tokens = 4096);

// The same over the tokens `labels` marks (a conversation through its chat template: the
// trained tokens, -100 elsewhere, unshifted as the data module gives them; labels.size() ==
// ids.size()): targets = labels[1:] that are not -100, the loss of a trained run's eval.
SampleScore score_labelled(CausalLM& lm, std::span<const std::int32_t> ids, std::span<const std::int32_t> labels,
                           std::int64_t chunk_tokens = 4096);

}  // namespace odyssey::model
