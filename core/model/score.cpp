#include "model/score.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace odyssey::model {

namespace {

// Targets of a labelled sample: labels[1:] that are not -100 (the shift drops the first).
std::int64_t labelled_targets(std::span<const std::int32_t> labels) {
  std::int64_t t = 0;
  for (std::size_t i = 1; i < labels.size(); ++i) t += labels[i] != -100;
  return t;
}

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
  return score(lm, ids, std::vector<std::int64_t>(labels.begin(), labels.end()), labelled_targets(labels),
               chunk_tokens);
}

void score_samples(CausalLM& lm, std::span<const ScoreInput> samples, std::int64_t row_tokens,
                   const std::function<void(std::size_t, const SampleScore&)>& done, std::int64_t chunk_tokens) {
  for (std::size_t i = 0; i < samples.size(); ++i)
    if (!samples[i].labels.empty() && samples[i].labels.size() != samples[i].ids.size())
      throw std::invalid_argument("score_samples: sample " + std::to_string(i) + " has " +
                                  std::to_string(samples[i].labels.size()) + " labels for " +
                                  std::to_string(samples[i].ids.size()) + " ids");
  auto targets_of = [](const ScoreInput& in) -> std::int64_t {
    if (in.labels.empty()) return in.ids.size() > 1 ? static_cast<std::int64_t>(in.ids.size()) - 1 : 0;
    return labelled_targets(in.labels);
  };
  if (row_tokens <= 0) {
    for (std::size_t i = 0; i < samples.size(); ++i)
      done(i, samples[i].labels.empty() ? score_tokens(lm, samples[i].ids, chunk_tokens)
                                        : score_labelled(lm, samples[i].ids, samples[i].labels, chunk_tokens));
    return;
  }
  torch::NoGradGuard no_grad;
  const torch::Device device = lm->options().device;
  std::vector<std::int64_t> ids, labels, pos;
  std::vector<std::int32_t> cu{0};
  std::vector<std::size_t> members;  // the samples of the row being filled
  std::int64_t longest = 0;
  auto flush = [&] {
    if (members.empty()) return;
    const auto t = static_cast<std::int64_t>(ids.size());
    const auto opts = torch::TensorOptions().dtype(torch::kInt64);
    const torch::Tensor input = torch::tensor(ids, opts).view({1, t}).to(device);
    const torch::Tensor position = torch::tensor(pos, opts).view({1, t}).to(device);
    const torch::Tensor target = torch::tensor(labels, opts).view({1, t});
    const torch::Tensor bounds = torch::tensor(cu, torch::TensorOptions().dtype(torch::kInt32)).to(device);
    const torch::Tensor hidden = lm->hidden_states_packed(input, position, bounds, longest);
    // causal_lm_token_nll shifts: position p is scored on labels[p + 1], so each sample's
    // first label is -100 and no position is scored on the next sample's first token.
    const torch::Tensor nll =
        causal_lm_token_nll(hidden.view({1, t, -1}), lm->lm_head_weight(), target, chunk_tokens, lm->logit_transform())
            .to(torch::kFloat64)
            .cpu()
            .view({t});
    const double* v = nll.data_ptr<double>();
    for (std::size_t m = 0; m < members.size(); ++m) {
      SampleScore s;
      s.tokens = cu[m + 1] - cu[m];
      s.targets = targets_of(samples[members[m]]);
      for (std::int32_t p = cu[m]; p < cu[m + 1]; ++p) s.loss_sum += v[p];
      done(members[m], s);
    }
    ids.clear(), labels.clear(), pos.clear(), members.clear();
    cu.assign(1, 0);
    longest = 0;
  };
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const ScoreInput& in = samples[i];
    const auto n = static_cast<std::int64_t>(in.ids.size());
    if (targets_of(in) == 0) {  // nothing to score: no forward (in order after the row before it)
      flush();
      SampleScore s;
      s.tokens = n;
      done(i, s);
      continue;
    }
    if (!members.empty() && static_cast<std::int64_t>(ids.size()) + n > row_tokens) flush();
    for (std::int64_t p = 0; p < n; ++p) {
      ids.push_back(in.ids[p]);
      labels.push_back(p == 0 ? -100 : (in.labels.empty() ? in.ids[p] : in.labels[p]));
      pos.push_back(p);
    }
    cu.push_back(static_cast<std::int32_t>(ids.size()));
    members.push_back(i);
    longest = std::max(longest, n);
  }
  flush();
}

}  // namespace odyssey::model
