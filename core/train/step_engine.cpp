#include "train/step_engine.h"

#include <cmath>

namespace odyssey::train {

StepEngine::StepEngine(model::CausalLM lm, StepOptions options) : lm_(std::move(lm)), options_(std::move(options)) {
  std::vector<NamedParam> named;
  for (auto& p : lm_->named_parameters(true)) {
    if (!p.value().requires_grad()) continue;
    trainable_.push_back(p.value());
    named.push_back({p.key(), p.value(), decays(p.key())});
  }
  optimizer_.emplace(std::move(named), options_.adamw);
}

std::int64_t StepEngine::trainable_params() const {
  std::int64_t n = 0;
  for (const auto& t : trainable_) n += t.numel();
  return n;
}

StepResult StepEngine::step(const std::vector<PackedRow>& micro_batches) {
  StepResult r;
  lm_->train();
  for (const auto& mb : micro_batches) {
    r.target_tokens += mb.target_tokens();
    r.tokens += mb.tokens();
    r.samples += mb.samples;
  }
  const double denom = static_cast<double>(std::max<std::int64_t>(1, r.target_tokens));
  double total = 0;
  for (const auto& mb : micro_batches) {
    const torch::Tensor sum = row_loss_sum(lm_, mb);
    total += sum.item<double>();
    if (sum.requires_grad()) (sum / denom).backward();
  }
  r.loss = total / denom;
  r.lr = options_.schedule.lr(step_);
  if (!std::isfinite(r.loss)) {
    optimizer_->zero_grad();
    r.grad_norm = std::nan("");
    return r;
  }
  r.grad_norm = clip_grad_norm(trainable_, options_.max_grad_norm);
  if (!std::isfinite(r.grad_norm)) {  // an overflow in backward: the update would poison every weight
    optimizer_->zero_grad();
    return r;
  }
  optimizer_->step(r.lr);
  optimizer_->zero_grad();
  ++step_;
  return r;
}

std::pair<double, std::int64_t> StepEngine::evaluate(const std::vector<PackedRow>& rows) {
  torch::NoGradGuard no_grad;
  lm_->eval();
  double total = 0;
  std::int64_t targets = 0;
  for (const auto& row : rows) {
    total += row_loss_sum(lm_, row).item<double>();
    targets += row.target_tokens();
  }
  lm_->train();
  return {targets > 0 ? total / static_cast<double>(targets) : std::nan(""), targets};
}

}  // namespace odyssey::train
