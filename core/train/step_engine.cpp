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
    r.tokens += mb.counted_tokens();
    r.samples += mb.samples;
  }
  if (world_ && world_->size() > 1) {
    torch::Tensor counts = torch::tensor({r.target_tokens, r.tokens, r.samples}, torch::kInt64)
                               .to(lm_->lm_head_weight().device());
    world_->all_reduce(counts);
    counts = counts.cpu();
    r.target_tokens = counts[0].item<std::int64_t>();
    r.tokens = counts[1].item<std::int64_t>();
    r.samples = counts[2].item<std::int64_t>();
  }
  const double denom = static_cast<double>(std::max<std::int64_t>(1, r.target_tokens));
  double total = 0;
  for (const auto& mb : micro_batches) {
    const torch::Tensor sum = row_loss_sum(lm_, mb);
    total += sum.item<double>();
    if (sum.requires_grad()) (sum / denom).backward();
  }
  if (world_ && world_->size() > 1) {
    torch::Tensor t = torch::tensor({total}, torch::kFloat64).to(lm_->lm_head_weight().device());
    world_->all_reduce(t);
    total = t.cpu().item<double>();
    reduce_gradients();
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

void StepEngine::reduce_gradients() {
  // Buckets of one dtype up to 64 Mi elements: one collective each instead of one per tensor.
  constexpr std::int64_t kBucket = std::int64_t{1} << 26;
  std::vector<torch::Tensor> bucket;
  std::int64_t filled = 0;
  auto flush = [&] {
    if (bucket.empty()) return;
    std::vector<torch::Tensor> flat;
    for (const auto& g : bucket) flat.push_back(g.reshape({-1}));
    torch::Tensor buf = torch::cat(flat);
    world_->all_reduce(buf);
    std::int64_t off = 0;
    for (auto& g : bucket) {
      g.copy_(buf.narrow(0, off, g.numel()).view_as(g));
      off += g.numel();
    }
    bucket.clear();
    filled = 0;
  };
  for (auto& p : trainable_) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    torch::Tensor g = p.grad();
    if (!bucket.empty() && (bucket.front().scalar_type() != g.scalar_type() || filled + g.numel() > kBucket)) flush();
    bucket.push_back(g);
    filled += g.numel();
  }
  flush();
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
  if (world_ && world_->size() > 1) {
    torch::Tensor t = torch::tensor({total, static_cast<double>(targets)}, torch::kFloat64)
                          .to(lm_->lm_head_weight().device());
    world_->all_reduce(t);
    t = t.cpu();
    total = t[0].item<double>();
    targets = static_cast<std::int64_t>(std::llround(t[1].item<double>()));
  }
  lm_->train();
  return {targets > 0 ? total / static_cast<double>(targets) : std::nan(""), targets};
}

}  // namespace odyssey::train
