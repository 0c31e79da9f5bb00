// Scoring text with a CausalLM: the mean next-token loss of one token sequence, exactly what
// transformers returns as model(ids, labels=ids).loss for a batch of that one sequence
// (shifted targets, fp32 log-softmax, mean over the len(ids) - 1 targets), or with labels
// (model(ids, labels=labels).loss), without materializing [S, vocab] logits (the lm_head runs
// chunk_tokens rows at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

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

// One sample for score_samples: its ids, and the labels score_labelled takes (empty: every
// token after the first is a target, as score_tokens).
struct ScoreInput {
  std::span<const std::int32_t> ids;
  std::span<const std::int32_t> labels;
};

// Scores many samples, packing consecutive ones into rows of at most `row_tokens` tokens (a
// longer sample gets a row of its own) and running one forward per row: positions restart at
// each sample and attention never crosses a sample boundary (hidden_states_packed), so a
// sample's loss is the one score_tokens / score_labelled gives it alone, up to the summation
// order of the row's larger products. row_tokens <= 0 scores one sample per forward (those
// functions). `done` is called once per sample, in the samples' order, as soon as its row is
// scored. Throws std::invalid_argument for labels whose length differs from the ids'.
void score_samples(CausalLM& lm, std::span<const ScoreInput> samples, std::int64_t row_tokens,
                   const std::function<void(std::size_t, const SampleScore&)>& done, std::int64_t chunk_tokens = 4096);

}  // namespace odyssey::model
