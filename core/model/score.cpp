#include "model/score.h"

#include <vector>

namespace odyssey::model {

SampleScore score_tokens(CausalLM& lm, std::span<const std::int32_t> ids, std::int64_t chunk_tokens) {
  SampleScore s;
  s.tokens = static_cast<std::int64_t>(ids.size());
  s.targets = s.tokens > 1 ? s.tokens - 1 : 0;
  if (s.targets == 0) return s;
  torch::NoGradGuard no_grad;
  const torch::Device device = lm->options().device;
  const std::vector<std::int64_t> v(ids.begin(), ids.end());
  const torch::Tensor input = torch::tensor(v, torch::kInt64).view({1, s.tokens}).to(device);
  const torch::Tensor hidden = lm->hidden_states(input);
  const torch::Tensor nll =
      causal_lm_token_nll(hidden, lm->lm_head_weight(), input, chunk_tokens, lm->logit_transform());
  // The last position has no target (its label is the appended -100, nll 0); sum in fp64.
  s.loss_sum = nll.to(torch::kFloat64).sum().item<double>();
  return s;
}

}  // namespace odyssey::model
