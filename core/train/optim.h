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
#include <optional>
#include <string>
#include <vector>

#include "common/diagnostic.h"
#include "dist/comm.h"

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

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Expert parallelism (docs/moe.md): which parameters (in the optimizer's order) each rank of
// `group` holds a different share of, the experts. The gradient norm is then the norm of the
// whole model's gradient: the squares of those shares summed over the group.
struct ShardedParams {
  std::vector<bool> sharded;
  dist::Group* group = nullptr;
  bool active() const { return group != nullptr && group->size() > 1; }
};

// What the step engine needs of an optimizer (docs/optimizers.md). One step:
//   begin_step(); for each micro-batch { backward; end_micro_batch(last) };
//   reduce_gradients(world) when data- or sequence-parallel; norm = clip_grad_norm(max);
//   step(lr) unless the norm is not finite; zero_grad().
// Optimizers that consume gradients during backward (GaLore's projection hooks, ZeRO-2's
// reduce-scatter buckets) do it between begin_step and end_micro_batch.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;  // adamw, galore_adamw, q_galore_adamw8bit, zero2_adamw
  virtual void begin_step() {}
  virtual void end_micro_batch(bool /*last*/) {}
  // Sums this step's gradients over `world` (in place or in the optimizer's own buffers).
  // The default all-reduces every trainable parameter's .grad in 64 Mi-element buckets.
  virtual void reduce_gradients(dist::Group& world);
  // The global L2 norm of the step's gradient (torch.nn.utils.clip_grad_norm_'s), then, when
  // max_norm > 0, every gradient scaled by min(1, max_norm / (norm + 1e-6)).
  virtual double clip_grad_norm(double max_norm);
  // One update at learning rate `lr`.
  virtual void step(double lr) = 0;
  // The step's clipping and update as one call, which an optimizer may run with no host
  // synchronisation: returns the gradient norm before clipping (clip_grad_norm's, a 0-d
  // tensor, possibly still being computed on the device), and no update is made when that
  // norm or `loss` (0-d, any device) is not finite. The default reads `loss` on the host, and
  // when it is finite clips and then steps unless the norm is not finite (its norm is NaN when
  // `loss` is not finite). AdamW decides on the device (the fused kernel's found_inf).
  virtual torch::Tensor clip_and_step(double max_norm, double lr, const torch::Tensor& loss);
  // Drops this step's gradients (after an update, or instead of one).
  virtual void zero_grad();
  // Named CPU tensors for checkpoints (optimizer.safetensors), and the inverse: every tensor
  // this optimizer would save must be present with its element count.
  virtual NamedTensors state() const = 0;
  virtual Diagnostics load_state(const NamedTensors& named, const std::string& file) = 0;
  // Bytes this process holds for the optimizer: states, master weights, projections
  // (on the device or, offloaded, in host memory).
  virtual std::int64_t state_bytes() const = 0;
  virtual std::int64_t host_state_bytes() const { return 0; }
  // True when state() is this rank's shard only (ZeRO): checkpoints keep one file per rank.
  virtual bool sharded_state() const { return false; }
  const std::vector<NamedParam>& params() const { return params_; }
  // Expert parallelism: the parameters whose gradient norm adds the other ranks' shares.
  void set_sharded_params(ShardedParams s) { sharded_ = std::move(s); }

 protected:
  explicit Optimizer(std::vector<NamedParam> params) : params_(std::move(params)) {}
  // The parameters' tensors, in params_ order.
  std::vector<torch::Tensor> param_tensors() const;
  std::vector<NamedParam> params_;
  ShardedParams sharded_;
};

// Bucketed in-place all-reduce (sum) of the gradients of `params` over `world`; parameters
// without a gradient take part with zeros, so every rank issues the same collectives.
void all_reduce_gradients(const std::vector<torch::Tensor>& params, dist::Group& world);
// The same over tensors: one collective per run of one dtype up to 64 Mi elements.
void all_reduce_bucketed(const std::vector<torch::Tensor>& tensors, dist::Group& world);

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<NamedParam> params, AdamWOptions options);
  std::string name() const override { return "adamw"; }
  // One update of every parameter that has a gradient, at learning rate `lr`.
  void step(double lr) override;
  // Clipping and update with no host synchronisation: the norm and the skip flag stay on the
  // device, the fused kernel skips its update when the flag is set and the step counts do
  // not advance.
  torch::Tensor clip_and_step(double max_norm, double lr, const torch::Tensor& loss) override;
  // exp_avg.<name>, exp_avg_sq.<name>, step.<name> (CPU copies), for checkpoints.
  NamedTensors state() const override;
  // The inverse; every parameter's three tensors must be present with matching shapes.
  Diagnostics load_state(const NamedTensors& named, const std::string& file) override;
  // Bytes of optimizer state (moments and steps).
  std::int64_t state_bytes() const override;

 private:
  // skip: an fp32 0-d tensor on the parameters' device, 1 to leave everything as it is.
  void update(double lr, const std::optional<torch::Tensor>& skip);
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
// The same without reading the norm on the host: a 0-d fp32 tensor on the gradients' device
// (undefined when no parameter has a gradient).
// With `sharded` active, the squares of its parameters' gradients are summed over its group
// first (a collective: every rank of the group must call).
torch::Tensor clip_grad_norm_tensor(const std::vector<torch::Tensor>& params, double max_norm,
                                    const ShardedParams* sharded = nullptr);

}  // namespace odyssey::train
