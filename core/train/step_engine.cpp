#include "train/step_engine.h"

#include <cmath>
#include <stdexcept>

namespace odyssey::train {

dist::Group* step_group(const dist::Mesh& mesh, std::int64_t zero_stage) {
  return mesh.distributed() || zero_stage > 0 ? mesh.world_group.get() : nullptr;
}

StepEngine::StepEngine(model::CausalLM lm, StepOptions options, dist::Group* world)
    : lm_(std::move(lm)), options_(std::move(options)), world_(world) {
  std::vector<NamedParam> named;
  for (auto& p : lm_->named_parameters(true)) {
    if (!p.value().requires_grad()) continue;
    trainable_.push_back(p.value());
    named.push_back({p.key(), p.value(), decays(p.key())});
  }
  optimizer_ = make_optimizer(std::move(named), options_, world_);
}

void StepEngine::set_world(dist::Group* world) {
  if (world == world_) return;
  if (options_.zero.stage > 0 || options_.galore.enabled)
    throw std::logic_error("StepEngine::set_world: a ZeRO or GaLore optimizer takes its group in the constructor");
  world_ = world;
}

void StepEngine::set_expert_parallel(dist::Group* ep, dist::Group* expert_dp) {
  if (options_.zero.stage > 0 || options_.galore.enabled)
    throw std::invalid_argument("expert parallelism runs with plain AdamW (no ZeRO, no GaLore)");
  expert_dp_ = expert_dp;
  replicated_.clear();
  experts_.clear();
  ShardedParams sharded;
  sharded.group = ep;
  for (const auto& p : optimizer_->params()) {
    const bool expert = p.name.find(".mlp.experts.") != std::string::npos;
    (expert ? experts_ : replicated_).push_back(p.param);
    sharded.sharded.push_back(expert);
  }
  optimizer_->set_sharded_params(std::move(sharded));
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
    torch::Tensor counts =
        torch::tensor({r.target_tokens, r.tokens, r.samples}, torch::kInt64).to(lm_->lm_head_weight().device());
    world_->all_reduce(counts);
    counts = counts.cpu();
    r.target_tokens = counts[0].item<std::int64_t>();
    r.tokens = counts[1].item<std::int64_t>();
    r.samples = counts[2].item<std::int64_t>();
  }
  const double denom = static_cast<double>(std::max<std::int64_t>(1, r.target_tokens));
  // The loss sum stays on the device until every micro-batch's backward is queued: reading it
  // after each forward would drain the GPU's queue before each backward.
  torch::Tensor total, aux_total;
  optimizer_->begin_step();
  // MoE: each micro-batch's loss gains coef · aux (as transformers' does). Gradients are summed
  // over the ranks: a rank's own statistic counts 1 / ranks; a row's statistic summed over its
  // row_ranks sequence-parallel ranks (each adding its tokens' part of dAux/dp) row_ranks /
  // ranks. In the total (summed over every rank) it is scaled by denom, which the reported loss
  // divides by.
  const bool aux = options_.router_aux_loss_coef > 0 && lm_->config().hf.is_moe();
  const double ranks = world_ ? static_cast<double>(std::max(1, world_->size())) : 1.0;
  lm_->set_router_aux_loss(aux);
  for (std::size_t i = 0; i < micro_batches.size(); ++i) {
    const torch::Tensor sum = row_loss_sum(lm_, micro_batches[i]);
    torch::Tensor s64 = sum.detach().to(torch::kFloat64);
    if (const auto& stats = lm_->router_stats(); aux && stats && !stats->empty()) {
      stats->grad_scale = options_.router_aux_loss_coef * static_cast<double>(stats->row_ranks) / ranks;
      const torch::Tensor a = stats->aux_loss().to(s64.device(), torch::kFloat64);
      aux_total = aux_total.defined() ? aux_total + a : a;
      s64 = s64 + a * (options_.router_aux_loss_coef * denom / ranks);
    }
    total = total.defined() ? total + s64 : s64;
    if (sum.requires_grad()) (sum / denom).backward();
    optimizer_->end_micro_batch(i + 1 == micro_batches.size());
  }
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(lm_->lm_head_weight().device());
  if (!total.defined())  // no micro-batch: a zero sum (the ranks still meet in the all-reduce)
    total = torch::zeros({}, f64);
  // The aux statistic of this rank's micro-batches, averaged; over several ranks the mean of
  // the ranks' (sequence-parallel ranks of a row hold the same one), summed with the loss.
  torch::Tensor aux_mean;
  if (aux)
    aux_mean = aux_total.defined() ? (aux_total / static_cast<double>(std::max<std::size_t>(1, micro_batches.size())))
                                         .reshape({})
                                         .to(f64.device())
                                   : torch::zeros({}, f64);
  if (world_ && world_->size() > 1) {
    if (aux) {
      torch::Tensor both = torch::stack({total.reshape({}).to(f64.device()), aux_mean});
      world_->all_reduce(both);
      total = both.narrow(0, 0, 1);
      aux_mean = both[1] / ranks;
    } else {
      total = total.reshape({1}).to(f64.device());
      world_->all_reduce(total);
    }
    if (expert_dp_) {
      all_reduce_gradients(replicated_, *world_);
      all_reduce_gradients(experts_, *expert_dp_);
    } else {
      optimizer_->reduce_gradients(*world_);
    }
  }
  r.lr = options_.schedule.lr(step_);
  // Clipping, the finiteness check and the update are queued behind backward; the step's
  // loss and norm are read once, after them (a non-finite one means no update was made).
  const torch::Tensor norm = optimizer_->clip_and_step(options_.max_grad_norm, r.lr, total);
  optimizer_->zero_grad();
  std::vector<torch::Tensor> read{total.reshape({}).to(torch::kFloat64), norm.to(total.device(), torch::kFloat64)};
  if (aux) read.push_back(aux_mean.to(total.device()));
  const torch::Tensor host = torch::stack(read).cpu();
  if (aux) r.aux_loss = host[2].item<double>();
  r.loss = host[0].item<double>() / denom;
  r.grad_norm = std::isfinite(r.loss) ? host[1].item<double>() : std::nan("");
  if (std::isfinite(r.grad_norm)) ++step_;
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
  if (world_ && world_->size() > 1) {
    torch::Tensor t =
        torch::tensor({total, static_cast<double>(targets)}, torch::kFloat64).to(lm_->lm_head_weight().device());
    world_->all_reduce(t);
    t = t.cpu();
    total = t[0].item<double>();
    targets = static_cast<std::int64_t>(std::llround(t[1].item<double>()));
  }
  lm_->train();
  return {targets > 0 ? total / static_cast<double>(targets) : std::nan(""), targets};
}

}  // namespace odyssey::train
