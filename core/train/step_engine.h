// The numerical core of training: a model, its trainable parameters, AdamW and the
// schedule; one call = one optimizer step over a list of micro-batches. No files, no
// events: the trainer (trainer.h) and the loop-parity test drive it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "dist/comm.h"
#include "model/decoder.h"
#include "train/batch.h"
#include "train/optim.h"

namespace odyssey::train {

struct StepOptions {
  AdamWOptions adamw;
  Schedule schedule;
  double max_grad_norm = 1.0;  // <= 0: no clipping
};

struct StepResult {
  double loss = 0;        // summed token loss / target tokens of the whole step
  double grad_norm = 0;   // before clipping
  double lr = 0;          // used by this step
  std::int64_t tokens = 0;          // input tokens of the step
  std::int64_t target_tokens = 0;   // tokens with a label
  std::int64_t samples = 0;
};

class StepEngine {
 public:
  // Trainable = parameters with requires_grad (apply_lora freezes the base first).
  StepEngine(model::CausalLM lm, StepOptions options);

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
  // sum / the global count of valid tokens). Null = one process.
  void set_world(dist::Group* world) { world_ = world; }

  std::int64_t completed_steps() const { return step_; }
  void set_completed_steps(std::int64_t s) { step_ = s; }
  model::CausalLM& model() { return lm_; }
  AdamW& optimizer() { return *optimizer_; }
  const StepOptions& options() const { return options_; }
  std::int64_t trainable_params() const;

 private:
  model::CausalLM lm_;
  StepOptions options_;
  std::vector<torch::Tensor> trainable_;
  std::optional<AdamW> optimizer_;
  std::int64_t step_ = 0;
  dist::Group* world_ = nullptr;
  void reduce_gradients();
};

}  // namespace odyssey::train
