#include "train/optim.h"

#include <cmath>
#include <map>
#include <numbers>

namespace odyssey::train {

std::vector<torch::Tensor> Optimizer::param_tensors() const {
  std::vector<torch::Tensor> ps;
  ps.reserve(params_.size());
  for (const auto& p : params_) ps.push_back(p.param);
  return ps;
}

void Optimizer::reduce_gradients(dist::Group& world) { all_reduce_gradients(param_tensors(), world); }

double Optimizer::clip_grad_norm(double max_norm) {
  const torch::Tensor total = clip_grad_norm_tensor(param_tensors(), max_norm, &sharded_);
  return total.defined() ? total.item<double>() : 0.0;
}

torch::Tensor Optimizer::clip_and_step(double max_norm, double lr, const torch::Tensor& loss) {
  if (!std::isfinite(loss.to(torch::kCPU, torch::kFloat64).item<double>()))
    return torch::full({}, std::nan(""), torch::kFloat32);
  const double norm = clip_grad_norm(max_norm);
  if (std::isfinite(norm)) step(lr);  // else an overflow in backward: the update would poison every weight
  return torch::full({}, norm, torch::kFloat32);
}

void Optimizer::zero_grad() {
  for (auto& p : params_)
    if (p.param.grad().defined()) p.param.mutable_grad() = torch::Tensor();
}

void all_reduce_bucketed(const std::vector<torch::Tensor>& tensors, dist::Group& world) {
  // Buckets of one dtype up to 64 Mi elements: one collective each instead of one per tensor.
  constexpr std::int64_t kBucket = std::int64_t{1} << 26;
  std::vector<torch::Tensor> bucket;
  std::int64_t filled = 0;
  auto flush = [&] {
    if (bucket.empty()) return;
    std::vector<torch::Tensor> flat;
    for (const auto& g : bucket) flat.push_back(g.reshape({-1}));
    torch::Tensor buf = torch::cat(flat);
    world.all_reduce(buf);
    std::int64_t off = 0;
    for (auto& g : bucket) {
      g.copy_(buf.narrow(0, off, g.numel()).view_as(g));
      off += g.numel();
    }
    bucket.clear();
    filled = 0;
  };
  for (const auto& g : tensors) {
    if (!bucket.empty() && (bucket.front().scalar_type() != g.scalar_type() || filled + g.numel() > kBucket)) flush();
    bucket.push_back(g);
    filled += g.numel();
  }
  flush();
}

void all_reduce_gradients(const std::vector<torch::Tensor>& params, dist::Group& world) {
  std::vector<torch::Tensor> grads;
  for (auto p : params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  all_reduce_bucketed(grads, world);
}

AdamW::AdamW(std::vector<NamedParam> params, AdamWOptions options) : Optimizer(std::move(params)), options_(options) {
  for (const auto& p : params_) {
    torch::NoGradGuard no_grad;
    exp_avg_.push_back(torch::zeros_like(p.param, torch::MemoryFormat::Preserve));
    exp_avg_sq_.push_back(torch::zeros_like(p.param, torch::MemoryFormat::Preserve));
    steps_.push_back(torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(p.param.device())));
  }
}

void AdamW::step(double lr) { update(lr, std::nullopt); }

torch::Tensor AdamW::clip_and_step(double max_norm, double lr, const torch::Tensor& loss) {
  torch::NoGradGuard no_grad;
  const torch::Tensor norm = train::clip_grad_norm_tensor(param_tensors(), max_norm, &sharded_);
  if (!norm.defined()) return torch::zeros({}, torch::kFloat32);  // no gradient: nothing to update
  const torch::Tensor finite = torch::isfinite(norm).logical_and(torch::isfinite(loss.to(norm.device()).reshape({})));
  update(lr, finite.logical_not().to(torch::kFloat32));
  return norm;
}

void AdamW::update(double lr, const std::optional<torch::Tensor>& skip) {
  torch::NoGradGuard no_grad;
  // One fused call per (decay, device, dtype) group, as torch groups tensors.
  std::map<std::tuple<bool, std::string, int>, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i].param;
    if (!p.grad().defined()) continue;
    groups[{params_[i].decay, p.device().str(), static_cast<int>(p.scalar_type())}].push_back(i);
  }
  for (const auto& [key, idx] : groups) {
    std::vector<torch::Tensor> ps, gs, m, v, st;
    for (std::size_t i : idx) {
      ps.push_back(params_[i].param);
      gs.push_back(params_[i].param.grad());
      m.push_back(exp_avg_[i]);
      v.push_back(exp_avg_sq_[i]);
      st.push_back(steps_[i]);
    }
    std::optional<torch::Tensor>
        found_inf;  // the counts advance by 1 − skip; the kernel returns at once when skip is 1
    if (skip) {
      found_inf = skip->to(ps.front().device());
      at::_foreach_add_(st, std::vector<torch::Tensor>(st.size(), 1.0 - *found_inf));
    } else {
      at::_foreach_add_(st, 1.0);
    }
    at::_fused_adamw_(ps, gs, m, v, /*max_exp_avg_sqs=*/{}, st, lr, options_.beta1, options_.beta2,
                      std::get<0>(key) ? options_.weight_decay : 0.0, options_.eps, /*amsgrad=*/false,
                      /*maximize=*/false, /*grad_scale=*/std::nullopt, found_inf);
  }
}

NamedTensors AdamW::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("exp_avg." + params_[i].name, exp_avg_[i].detach().to(torch::kCPU).contiguous());
    out.emplace_back("exp_avg_sq." + params_[i].name, exp_avg_sq_[i].detach().to(torch::kCPU).contiguous());
    out.emplace_back("step." + params_[i].name, steps_[i].detach().to(torch::kCPU).reshape({1}));
  }
  return out;
}

Diagnostics AdamW::load_state(const NamedTensors& named, const std::string& file) {
  Diagnostics d;
  std::map<std::string, torch::Tensor> by_name(named.begin(), named.end());
  auto find = [&](const std::string& key, const torch::Tensor& like) -> torch::Tensor {
    auto it = by_name.find(key);
    if (it == by_name.end()) {
      d.push_back({Severity::Error, file, 0, 0, key, "missing from the optimizer state"});
      return {};
    }
    if (it->second.numel() != like.numel()) {
      d.push_back({Severity::Error, file, 0, 0, key,
                   "has " + std::to_string(it->second.numel()) + " elements, the parameter has " +
                       std::to_string(like.numel())});
      return {};
    }
    return it->second;
  };
  std::vector<std::array<torch::Tensor, 3>> found;
  for (std::size_t i = 0; i < params_.size(); ++i)
    found.push_back({find("exp_avg." + params_[i].name, exp_avg_[i]),
                     find("exp_avg_sq." + params_[i].name, exp_avg_sq_[i]),
                     find("step." + params_[i].name, steps_[i])});
  if (has_errors(d)) return d;
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    exp_avg_[i].copy_(found[i][0].view(exp_avg_[i].sizes()));
    exp_avg_sq_[i].copy_(found[i][1].view(exp_avg_sq_[i].sizes()));
    steps_[i].copy_(found[i][2].reshape(steps_[i].sizes()));  // not view({}): that is view(ScalarType)
  }
  return d;
}

std::int64_t AdamW::state_bytes() const {
  std::int64_t b = 0;
  for (std::size_t i = 0; i < params_.size(); ++i)
    b += static_cast<std::int64_t>(exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes() + steps_[i].nbytes());
  return b;
}

bool decays(const std::string& n) {
  if (n.ends_with(".bias")) return false;
  if (n.ends_with("norm.weight")) return false;  // input_layernorm, post_attention_layernorm, norm, q_norm, k_norm
  return true;
}

double Schedule::lr(std::int64_t step) const {
  const double s = static_cast<double>(step);
  const double w = static_cast<double>(warmup_steps);
  if (step < warmup_steps) return base_lr * s / std::max(1.0, w);
  if (type == "constant") return base_lr;
  const double rest = std::max(1.0, static_cast<double>(total_steps - warmup_steps));
  if (type == "linear") return base_lr * std::max(0.0, static_cast<double>(total_steps - step) / rest);
  const double progress = (s - w) / rest;  // cosine, num_cycles = 0.5
  return base_lr * std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * 0.5 * 2.0 * progress)));
}

std::int64_t warmup_steps_for(std::int64_t warmup_steps, double warmup_ratio, std::int64_t total_steps) {
  if (warmup_steps > 0) return warmup_steps;
  return static_cast<std::int64_t>(std::ceil(static_cast<double>(total_steps) * warmup_ratio));
}

double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  const torch::Tensor total = clip_grad_norm_tensor(params, max_norm);
  return total.defined() ? total.item<double>() : 0.0;
}

namespace {

// Σ ‖g‖² over `grads` in fp32 (0 when none) on `device`.
torch::Tensor squared_norm(const std::vector<torch::Tensor>& grads, const torch::Device& device) {
  if (grads.empty()) return torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  return torch::stack(at::_foreach_norm(grads, 2)).to(torch::kFloat32).pow(2).sum();
}

}  // namespace

torch::Tensor clip_grad_norm_tensor(const std::vector<torch::Tensor>& params, double max_norm,
                                    const ShardedParams* sharded) {
  torch::NoGradGuard no_grad;
  const bool split = sharded && sharded->active();
  std::vector<torch::Tensor> grads, shares;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i].grad().defined()) continue;
    const bool share = split && i < sharded->sharded.size() && sharded->sharded[i];
    (share ? shares : grads).push_back(params[i].grad());
  }
  torch::Tensor total;
  if (split) {  // every rank of the group takes part, gradients or not
    const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
    torch::Tensor others = squared_norm(shares, device).reshape({1}).to(sharded->group->device());
    sharded->group->all_reduce(others);
    total = (squared_norm(grads, device) + others.to(device)[0]).sqrt();
    grads.insert(grads.end(), shares.begin(), shares.end());
    if (grads.empty()) return {};
  } else {
    if (grads.empty()) return {};
    total = torch::linalg_vector_norm(torch::stack(at::_foreach_norm(grads, 2)), 2);
  }
  if (max_norm > 0) {
    const torch::Tensor coef = torch::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
    at::_foreach_mul_(grads, coef);
  }
  return total;
}

}  // namespace odyssey::train
