#pragma once
// The memory policy of a training job (docs/training.md, "Memory policy"): which layers are
// checkpointed, which of those keep their attention output, which of the others recompute or
// offload their MLP's gate and up, and the MLP tile. The trainer and odyssey-bench both take
// it from here, so a benchmark row runs the policy a run with the same settings would run.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "config/train_config.h"
#include "model/decoder.h"
#include "planner/memory_planner.h"

namespace odyssey::train {

struct MemoryPolicy {
  std::vector<bool> checkpoint;      // layers recomputed in backward
  std::vector<bool> keep_attention;  // checkpointed layers keeping their attention output
  std::vector<bool> mlp_recompute;   // layers not checkpointed whose MLP recomputes gate and up
  std::vector<bool> mlp_offload;     // layers not checkpointed whose MLP keeps gate and up on the host
  std::vector<bool> mlp_park;        // checkpointed layers whose MLP parks gate and up on the host
  std::int64_t mlp_offload_lead = 1;
  std::int64_t mlp_tile = 0;
  bool offload_checkpoints = false;        // offload_activations: checkpointed layers keep their input on the host
  std::int64_t layers_per_checkpoint = 1;  // checkpoint segments (CausalLMImpl::set_layers_per_checkpoint)
  std::string why;                         // one line for the run's log and the schedule
  std::string over_capacity;       // the plan's warning when even its leanest choice does not fit ("" when it fits)
  std::optional<MemoryPlan> plan;  // the planner's view of this job (on a GPU)

  std::int64_t count(const std::vector<bool>& layers) const;
  // Checkpointed layers whose input backward rebuilds (checkpoint segments): each costs one
  // forward more than checkpointing (planner::checkpoint_stores).
  std::int64_t rebuilt_layers() const;
  // Whether the plan predicts the policy that runs (its layer counts are the policy's): a
  // benchmark row compares the plan's peak with the measured one only then.
  bool plan_matches() const;
};

// Fixed layer counts instead of the configured or planned choice (odyssey-bench's
// --checkpointing N, --mlp-offload N, --mlp-recompute N, --mlp-park N); -1 keeps the policy's own.
struct LayerCounts {
  std::int64_t checkpoint_first = -1;     // the first N layers checkpointed
  std::int64_t mlp_offload_first = -1;    // the first N layers not checkpointed offload their MLP
  std::int64_t mlp_recompute_first = -1;  // the next N recompute theirs
  std::int64_t mlp_park_first = -1;       // the first N checkpointed layers park their MLP (0: none)
  std::int64_t mlp_park_stride = 1;       // ... every S-th of them (0, S, 2S, ...) until N are parked
};

// The planner refused the job outright (planner::kOutOfReachFactor beyond the GPU).
struct MemoryPolicyRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The policy for `c` on model `m`. `gpu` is the planner's view of the GPU (its memory, or a
// budget below it); nullopt on the CPU, where memory is not the limit and auto checkpoints
// nothing. On a GPU the plan is always made (the record's prediction); its choices are taken
// where the configuration says auto.
MemoryPolicy memory_policy(const TrainConfig& c, const HfModelConfig& m, const std::optional<PlannerOptions>& gpu,
                           const LayerCounts& fixed = {});

// Sets the policy's layers on the model.
void apply_memory_policy(model::CausalLM& lm, const MemoryPolicy& p);

// The plan counts host memory as the machine has it (planner::kHostOffloadShare of its RAM, the
// same on every rank, so ranks plan alike); what is free when a run starts may be less. "" when
// `local_processes` x the plan's host bytes fit in `available_bytes` (MemAvailable; 0 = unknown),
// else the warning that says so with the numbers and the settings that pin less.
std::string host_shortfall(const MemoryPolicy& p, std::int64_t local_processes, std::int64_t available_bytes);

}  // namespace odyssey::train
