// The numerical core of training: a model, its trainable parameters, AdamW and the
// schedule; one call = one optimizer step over a list of micro-batches. No files, no
// events: the trainer (trainer.h) and the loop-parity test drive it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "model/decoder.h"
#include "train/batch.h"
#include "train/optim.h"

namespace odyssey::train {

// GaLore / Q-GaLore (docs/optimizers.md). Defaults: Q-GaLore's (ms-swift's galore_* keys).
struct GaLoreOptions {
  bool enabled = false;
  bool quantized = false;  // Q-GaLore
  std::int64_t rank = 128;
  std::int64_t update_proj_gap = 200;
  double scale = 0.25;
  std::vector<std::string> target_modules = {"all-linear"};  // q_proj ... down_proj, or all-linear
  int proj_bits = 4;                                         // Q-GaLore: projection matrices in int4 ...
  std::int64_t proj_group_size = 256;                        // ... with one scale and zero point per 256 values
  double cos_threshold = 0.4;                                // lazy subspace rule: when the mean cosine similarity of
  double gamma_proj = 2.0;                                   // the last queue_size successive projections reaches the
  std::int64_t queue_size = 5;                               // threshold, update_proj_gap *= gamma_proj
  std::int64_t state_block = 256;                            // Q-GaLore: 8-bit Adam states, one absmax per block
  // The projection's SVD is exact for weights whose smaller side is at most this, randomized
  // (subspace iteration, 2 power iterations, oversampling 8) above it.
  std::int64_t exact_svd_max_side = 1024;
};

// ZeRO (docs/optimizers.md): stage 2 shards gradients, fp32 master weights and AdamW states
// over the world group (dp × sp, as DeepSpeed-Ulysses does); offload keeps the shard and its
// update in host memory.
struct ZeroOptions {
  int stage = 0;  // 0, 1 (states sharded) or 2 (gradients too)
  bool offload = false;
  // optimizer_dtype: fp32 without ZeRO: stage 2 over a group of one, for its fp32 master
  // weights, moments and gradient accumulator (nothing is sharded; see optimizer_zero_stage).
  bool fp32_master_only = false;
};

struct StepOptions {
  AdamWOptions adamw;
  Schedule schedule;
  double max_grad_norm = 1.0;  // <= 0: no clipping
  GaLoreOptions galore;
  ZeroOptions zero;
  // MoE models: transformers' load-balancing loss times this coefficient joins each
  // micro-batch's loss (its ForCausalLM adds router_aux_loss_coef · aux_loss when
  // output_router_logits); 0: not computed. StepOptions built by the trainer take config.json's
  // (docs/moe.md). Over several ranks the statistic is each row's (summed over its
  // sequence-parallel ranks), averaged over the data-parallel ranks.
  double router_aux_loss_coef = 0.0;
};

struct StepResult {
  double loss = 0;  // summed token loss / target tokens of the whole step (+ the MoE aux loss)
  // MoE: the load-balancing loss (unweighted), averaged over the micro-batches and the ranks
  // (0: none); each micro-batch adds router_aux_loss_coef times its own to `loss`.
  double aux_loss = 0;
  double grad_norm = 0;            // before clipping
  double lr = 0;                   // used by this step
  std::int64_t tokens = 0;         // input tokens of the step
  std::int64_t target_tokens = 0;  // tokens with a label
  std::int64_t samples = 0;
};

// GaLore and ZeRO settings of a configuration (use_galore, galore_*, zero_stage,
// offload_optimizer, optimizer_dtype) into `options`; `weights_16bit`: the model's weights are
// bf16 or fp16 (optimizer_dtype applies to those only).
void set_memory_optimizer(StepOptions& options, const TrainConfig& config, bool weights_16bit);

// The optimizer `options` asks for over the trainable parameters: AdamW, GaLore (galore.h),
// Q-GaLore, or ZeRO-2 AdamW (zero.h) sharded over `world` (required for ZeRO).
std::unique_ptr<Optimizer> make_optimizer(std::vector<NamedParam> params, const StepOptions& options,
                                          dist::Group* world);

// The group a StepEngine reduces gradients and shards optimizer state over: the mesh's world
// group when there are several processes, and also on one process under ZeRO (ZeRO-Offload on
// one GPU: a group of one); none otherwise. The trainer and odyssey-bench both build theirs so.
dist::Group* step_group(const dist::Mesh& mesh, std::int64_t zero_stage);

class StepEngine {
 public:
  // Trainable = parameters with requires_grad (apply_lora freezes the base first). `world`:
  // see set_world; the optimizer is built here (ZeRO shards over `world`).
  StepEngine(model::CausalLM lm, StepOptions options, dist::Group* world = nullptr);

  // One optimizer step: each micro-batch's summed loss / the step's target tokens is
  // back-propagated (transformers' num_items_in_batch), then clip, AdamW at schedule(step),
  // zero grads, step += 1. A non-finite loss or gradient norm skips the update and leaves
  // the step count (the caller stops the run).
  StepResult step(const std::vector<PackedRow>& micro_batches);

  // Mean token loss over rows, without gradients. Returns {loss, target tokens}.
  std::pair<double, std::int64_t> evaluate(const std::vector<PackedRow>& rows);

  // Data- and sequence-parallel runs: every rank passes its own rows (whole rows of its dp
  // slice, or their sp shards); target counts, loss sums and gradients are summed over
  // `world` so the step equals one process over the global batch (loss = all valid tokens'
  // sum / the global count of valid tokens). Null = one process. A ZeRO or GaLore optimizer
  // takes the group in the constructor instead (it shards or projects over it).
  void set_world(dist::Group* world);

  // Expert parallelism (docs/moe.md; after CausalLMImpl::split_experts): the experts'
  // gradients (parameters under ".mlp.experts.") are summed over `expert_dp` (the ranks with the
  // same share) instead of the world group, and the gradient norm adds the other shares' over
  // `ep`. Plain AdamW only.
  void set_expert_parallel(dist::Group* ep, dist::Group* expert_dp);

  std::int64_t completed_steps() const { return step_; }
  void set_completed_steps(std::int64_t s) { step_ = s; }
  model::CausalLM& model() { return lm_; }
  Optimizer& optimizer() { return *optimizer_; }
  const StepOptions& options() const { return options_; }
  std::int64_t trainable_params() const;

 private:
  model::CausalLM lm_;
  StepOptions options_;
  std::vector<torch::Tensor> trainable_;
  std::unique_ptr<Optimizer> optimizer_;
  std::int64_t step_ = 0;
  dist::Group* world_ = nullptr;
  dist::Group* expert_dp_ = nullptr;  // expert parallelism: see set_expert_parallel
  std::vector<torch::Tensor> replicated_, experts_;
};

}  // namespace odyssey::train
