// AdamW, learning-rate schedules and gradient clipping, computed the way PyTorch and
// transformers compute them so a transformers/PEFT training loop is an exact oracle:
// - AdamW runs ATen's fused kernel (_fused_adamw_, CPU and CUDA), the kernel of
//   torch.optim.AdamW(fused=True); step counts are float tensors incremented before it.
// - Schedules are transformers' get_{cosine,linear,constant}_schedule_with_warmup.
// - clip_grad_norm is torch.nn.utils.clip_grad_norm_: the global L2 norm of the per-tensor
//   norms, every gradient multiplied by min(1, max_norm / (norm + 1e-6)).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/diagnostic.h"

namespace odyssey::train {

struct AdamWOptions {
  double lr = 1e-4;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// One parameter under its HF/PEFT name; decay = whether weight decay applies (transformers'
// Trainer: not for biases and norm weights).
struct NamedParam {
  std::string name;
  torch::Tensor param;
  bool decay = true;
};

class AdamW {
 public:
  AdamW(std::vector<NamedParam> params, AdamWOptions options);
  // One update of every parameter that has a gradient, at learning rate `lr`.
  void step(double lr);
  void zero_grad();
  const std::vector<NamedParam>& params() const { return params_; }
  // exp_avg.<name>, exp_avg_sq.<name>, step.<name> (CPU copies), for checkpoints.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  // The inverse; every parameter's three tensors must be present with matching shapes.
  Diagnostics load_state(const std::vector<std::pair<std::string, torch::Tensor>>& named, const std::string& file);
  // Bytes of optimizer state (moments and steps).
  std::int64_t state_bytes() const;

 private:
  std::vector<NamedParam> params_;
  AdamWOptions options_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_, steps_;
};

// transformers' rule: no weight decay for biases and norm weights (Qwen3's q_norm/k_norm too).
bool decays(const std::string& hf_name);

struct Schedule {
  std::string type = "cosine";  // cosine|linear|constant
  double base_lr = 1e-4;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  // Learning rate of 0-based optimizer step `step` (LambdaLR: base_lr × lambda(step)).
  double lr(std::int64_t step) const;
};

// warmup_steps if > 0, else ceil(warmup_ratio × total_steps) (transformers' get_warmup_steps).
std::int64_t warmup_steps_for(std::int64_t warmup_steps, double warmup_ratio, std::int64_t total_steps);

// Clips in place; returns the norm before clipping (fp32 scalar's value). max_norm <= 0:
// only measures.
double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace odyssey::train
