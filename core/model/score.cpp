#include "model/score.h"

#include <stdexcept>
#include <vector>

namespace odyssey::model {

namespace {

SampleScore score(CausalLM& lm, std::span<const std::int32_t> ids, const std::vector<std::int64_t>& labels,
                  std::int64_t targets, std::int64_t chunk_tokens) {
  SampleScore s;
  s.tokens = static_cast<std::int64_t>(ids.size());
  s.targets = targets;
  if (s.targets == 0) return s;
  torch::NoGradGuard no_grad;
  const torch::Device device = lm->options().device;
  const std::vector<std::int64_t> v(ids.begin(), ids.end());
  const torch::Tensor input = torch::tensor(v, torch::kInt64).view({1, s.tokens}).to(device);
  const torch::Tensor target = torch::tensor(labels, torch::kInt64).view({1, s.tokens}).to(device);
  const torch::Tensor hidden = lm->hidden_states(input);
  const torch::Tensor nll =
      causal_lm_token_nll(hidden, lm->lm_head_weight(), target, chunk_tokens, lm->logit_transform());
  // Positions without a target (the last one, and those whose shifted label is -100) give 0;
  // sum in fp64.
  s.loss_sum = nll.to(torch::kFloat64).sum().item<double>();
  return s;
}

}  // namespace

SampleScore score_tokens(CausalLM& lm, std::span<const std::int32_t> ids, std::int64_t chunk_tokens) {
  const auto n = static_cast<std::int64_t>(ids.size());
  return score(lm, ids, std::vector<std::int64_t>(ids.begin(), ids.end()), n > 1 ? n - 1 : 0, chunk_tokens);
}

SampleScore score_labelled(CausalLM& lm, std::span<const std::int32_t> ids, std::span<const std::int32_t> labels,
                           std::int64_t chunk_tokens) {
  if (labels.size() != ids.size())
    throw std::invalid_argument("score_labelled: " + std::to_string(labels.size()) + " labels for " +
                                std::to_string(ids.size()) + " ids");
  std::int64_t targets = 0;
  for (std::size_t i = 1; i < labels.size(); ++i) targets += labels[i] != -100;
  return score(lm, ids, std::vector<std::int64_t>(labels.begin(), labels.end()), targets, chunk_tokens);
}

}  // namespace odyssey::model
