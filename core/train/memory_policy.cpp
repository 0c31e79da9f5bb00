#include "train/memory_policy.h"

#include <algorithm>
#include <cstdio>

#include "common/text.h"
#include "planner/kept_attention.h"

namespace odyssey::train {
namespace {

std::string gib(std::int64_t bytes) {
  char b[48];
  std::snprintf(b, sizeof b, "%.2f GiB", static_cast<double>(bytes) / static_cast<double>(planner::kGiB));
  return b;
}

// The checkpointing the plan is made for: a fixed count of layers is none, all, or what auto
// would choose (the plan then predicts another policy, and plan_matches() says so).
TrainConfig planned_config(const TrainConfig& c, std::int64_t layers, const LayerCounts& fixed) {
  TrainConfig pc = c;
  if (fixed.checkpoint_first >= 0)
    pc.activation_checkpointing = fixed.checkpoint_first == 0        ? "none"
                                  : fixed.checkpoint_first >= layers ? "all"
                                                                     : "auto";
  return pc;
}

}  // namespace

std::int64_t MemoryPolicy::count(const std::vector<bool>& layers) const {
  return static_cast<std::int64_t>(std::count(layers.begin(), layers.end(), true));
}

std::int64_t MemoryPolicy::rebuilt_layers() const {
  return count(checkpoint) - count(checkpoint_stores(checkpoint, keep_attention, layers_per_checkpoint));
}

bool MemoryPolicy::plan_matches() const {
  if (!plan || !plan->refused.empty() || plan->checkpointed_layers != count(checkpoint) ||
      plan->layers_per_checkpoint != layers_per_checkpoint || plan->mlp_recomputed_layers != count(mlp_recompute) ||
      plan->mlp_offloaded_layers != count(mlp_offload) || plan->mlp_parked_layers != count(mlp_park))
    return false;
  // The same parked layers, not only as many (a fixed count parks the first N, or every S-th).
  std::vector<bool> planned = planned_mlp_park(*plan);
  planned.resize(mlp_park.size(), false);
  return planned == mlp_park;
}

MemoryPolicy memory_policy(const TrainConfig& c, const HfModelConfig& m, const std::optional<PlannerOptions>& gpu,
                           const LayerCounts& fixed) {
  const auto n = static_cast<std::size_t>(m.num_hidden_layers);
  const auto layers = static_cast<std::int64_t>(n);
  CheckpointPolicy policy;
  parse_checkpoint_policy(c.activation_checkpointing, &policy);
  const bool auto_checkpoint = policy.kind == CheckpointPolicy::Auto && fixed.checkpoint_first < 0;
  // The plan decides where the configuration says auto (checkpointing, the MLP tile, kept
  // attention); a job it refuses outright cannot run, and its tables were never built.
  const bool plan_decides = auto_checkpoint || c.mlp_tile_tokens == 0 || c.keep_attention == "auto";
  MemoryPolicy mp;
  if (gpu) {
    mp.plan = plan_memory(planned_config(c, layers, fixed), m, *gpu);
    if (!mp.plan->refused.empty()) {
      if (plan_decides) throw MemoryPolicyRefused("the memory planner refused the job: " + mp.plan->refused);
      mp.plan.reset();
    }
  }
  const MemoryPlan* plan = mp.plan ? &*mp.plan : nullptr;
  if (plan && plan_decides && !plan->fits)
    mp.over_capacity =
        "the memory plan does not fit: predicted peak " + gib(plan->peak_bytes) + " against " +
        gib(plan->capacity_bytes) +
        (c.gpu_memory_budget_gib > 0 ? " (gpu_memory_budget_gib " + text::format_double(c.gpu_memory_budget_gib) + ")"
                                     : std::string()) +
        "; the run goes ahead with the leanest choice and may run out of memory (`odyssey-train plan` "
        "lists the terms and the largest max_length that fits)";
  mp.mlp_tile = c.mlp_tile_tokens > 0 ? c.mlp_tile_tokens : plan ? plan->mlp_tile_tokens : 0;
  // offload_activations: as configured, or (auto) as the plan chose; off where nothing was planned (CPU).
  mp.offload_checkpoints =
      c.offload_activations == "true" || (c.offload_activations == "auto" && plan && plan->offload_activations);
  mp.checkpoint.assign(n, false);
  if (fixed.checkpoint_first >= 0) {
    const std::int64_t k = std::min(fixed.checkpoint_first, layers);
    for (std::int64_t i = 0; i < k; ++i) mp.checkpoint[static_cast<std::size_t>(i)] = true;
    mp.why = "the first " + std::to_string(k) + " of " + std::to_string(n) + " layers (a fixed count)";
  } else {
    switch (policy.kind) {
      case CheckpointPolicy::None: mp.why = "none (activation_checkpointing: none)"; break;
      case CheckpointPolicy::All:
        mp.checkpoint.assign(n, true);
        mp.why = "every layer (activation_checkpointing: all)";
        break;
      case CheckpointPolicy::EveryK:
        for (std::size_t i = 0; i < n; i += static_cast<std::size_t>(policy.every)) mp.checkpoint[i] = true;
        mp.why = "every " + std::to_string(policy.every) +
                 "-th layer (activation_checkpointing: every:" + std::to_string(policy.every) + ")";
        break;
      case CheckpointPolicy::Auto:
        if (!plan) {
          mp.why = "none (auto on the CPU: memory is not the limit)";
          break;
        }
        for (std::size_t i = 0; i < n; ++i) mp.checkpoint[i] = checkpoints_layer(*plan, static_cast<std::int64_t>(i));
        mp.why = std::to_string(plan->checkpointed_layers) + " of " + std::to_string(n) +
                 " layers (auto: the memory planner's choice for this GPU, predicted peak " + gib(plan->peak_bytes) +
                 ")";
        break;
    }
  }
  // Checkpoint segments: as configured, or the plan's choice (auto).
  mp.layers_per_checkpoint = c.layers_per_checkpoint > 0 ? c.layers_per_checkpoint
                             : plan != nullptr           ? plan->layers_per_checkpoint
                                                         : 1;
  // Kept attention: every checkpointed layer (all), none, or the last ones the plan keeps
  // (auto; the plan's checkpointed layers are the engine's when both are auto, and otherwise
  // the plan was made for the configured policy).
  mp.keep_attention.assign(n, false);
  const bool keepable = attention_keepable(c, m, gpu.has_value());
  for (std::size_t i = 0; keepable && i < n; ++i) {
    const bool keep = c.keep_attention == "all" ? true
                      : c.keep_attention == "auto" && plan != nullptr
                          ? keeps_attention(*plan, static_cast<std::int64_t>(i))
                          : false;
    mp.keep_attention[i] = keep && mp.checkpoint[i];
  }
  if (const auto kept = mp.count(mp.keep_attention); kept > 0)
    mp.why += "; " + std::to_string(kept) + " of them keep their attention output";
  if (mp.offload_checkpoints && mp.count(mp.checkpoint) > 0)
    mp.why += std::string("; their inputs wait in pinned host memory (offload_activations") +
              (c.offload_activations == "auto" ? " auto: the planner's choice" : "") + ")";
  if (mp.layers_per_checkpoint > 1 && mp.count(mp.checkpoint) > 1)
    mp.why += "; up to " + std::to_string(mp.layers_per_checkpoint) +
              " consecutive checkpointed layers share one stored input (layers_per_checkpoint" +
              (c.layers_per_checkpoint > 0 ? std::string() : " auto") + ")";
  // MLP offload, then recomputation, on the layers that are not checkpointed: the plan's
  // choice when it chose the checkpointed layers too, or fixed counts (the first N offloaded,
  // the next M recomputing).
  const bool plan_mlp = plan != nullptr && auto_checkpoint;
  const std::int64_t offload_base = fixed.mlp_offload_first >= 0 ? fixed.mlp_offload_first
                                    : plan_mlp                   ? plan->mlp_offloaded_layers
                                                                 : 0;
  mp.mlp_recompute.assign(n, false);
  mp.mlp_offload.assign(n, false);
  std::int64_t seen = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (mp.checkpoint[i]) continue;
    const auto layer = static_cast<std::int64_t>(i);
    mp.mlp_offload[i] =
        fixed.mlp_offload_first >= 0 ? seen < fixed.mlp_offload_first : plan_mlp && offloads_mlp(*plan, layer);
    mp.mlp_recompute[i] =
        !mp.mlp_offload[i] && (fixed.mlp_recompute_first >= 0 ? seen - offload_base < fixed.mlp_recompute_first
                                                              : plan_mlp && recomputes_mlp(*plan, layer));
    ++seen;
  }
  // The MLP park on checkpointed layers: the plan's (whatever the checkpointing policy: the plan
  // parks the first checkpointed layers it has, which are the engine's unless a count is
  // fixed), or N checkpointed layers (a fixed count): the first N, or with a stride S every S-th
  // from the first (a parked layer's copies then have S layers' forward to drain on the host
  // link instead of one). Only with offload_activations.
  mp.mlp_park.assign(n, false);
  if (mp.offload_checkpoints && fixed.mlp_park_first >= 0) {
    mp.mlp_park = mlp_park_layers(mp.checkpoint, fixed.mlp_park_first, fixed.mlp_park_stride);
  } else if (mp.offload_checkpoints && plan != nullptr) {
    const std::vector<bool> planned = planned_mlp_park(*plan);
    for (std::size_t i = 0; i < n && i < planned.size(); ++i) mp.mlp_park[i] = mp.checkpoint[i] && planned[i];
  }
  if (const std::int64_t parked = mp.count(mp.mlp_park); parked > 0)
    mp.why += "; " + std::to_string(parked) +
              " of the checkpointed layers park their MLP's gate and up in pinned host memory for backward instead "
              "of recomputing them (the MLP park)";
  const std::int64_t offloaded = mp.count(mp.mlp_offload), recomputed = mp.count(mp.mlp_recompute);
  mp.mlp_offload_lead = planner::mlp_offload_lead(offloaded);
  if (offloaded > 0)
    mp.why += "; " + std::to_string(offloaded) +
              " other layers keep their MLP's gate and up in pinned host memory until backward (offload_activations)";
  if (recomputed > 0)
    mp.why += "; " + std::to_string(recomputed) + " other layers recompute their MLP's gate and up in backward";
  if (mp.mlp_tile > 0) mp.why += "; tiled MLP, " + std::to_string(mp.mlp_tile) + " tokens per tile";
  return mp;
}

void apply_memory_policy(model::CausalLM& lm, const MemoryPolicy& p) {
  lm->set_checkpoint_layers(p.checkpoint);
  lm->set_keep_attention_layers(p.keep_attention);
  lm->set_mlp_recompute_layers(p.mlp_recompute);
  // One flag for both: on a checkpointed layer it parks the MLP (CausalLMImpl).
  std::vector<bool> flags = p.mlp_offload;
  flags.resize(std::max(flags.size(), p.mlp_park.size()), false);
  for (std::size_t i = 0; i < p.mlp_park.size(); ++i) flags[i] = flags[i] || p.mlp_park[i];
  lm->set_mlp_offload_layers(flags, p.mlp_offload_lead);
  lm->set_offload_checkpoints(p.offload_checkpoints);
  lm->set_layers_per_checkpoint(p.layers_per_checkpoint);
  lm->set_mlp_tile_tokens(p.mlp_tile);
}

std::string host_shortfall(const MemoryPolicy& p, std::int64_t local_processes, std::int64_t available_bytes) {
  if (!p.plan || p.plan->host_bytes <= 0 || available_bytes <= 0) return {};
  const std::int64_t local = std::max<std::int64_t>(1, local_processes), need = p.plan->host_bytes * local;
  if (need <= available_bytes) return {};
  return "the memory plan pins " + gib(p.plan->host_bytes) + " of host memory per process (" + std::to_string(local) +
         " on this host: " + gib(need) + ") but " + gib(available_bytes) +
         " is available now (MemAvailable); the run may be killed when the host runs out. Free host memory, or "
         "pin less: offload_activations: false, layers_per_checkpoint: auto, a shorter max_length";
}

}  // namespace odyssey::train
