// `plan`: the memory planner (core/planner/memory_planner.h) on the command line. Prints the
// per-GPU breakdown, whether it fits, and the largest max_length and smallest
// sequence_parallel_size that fit; --json for scripts, --require-fit for CI gates.
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/json_dump.h"
#include "common/text.h"
#include "planner/memory_planner.h"

namespace odyssey::cli {

CommandSpec plan_spec() {
  return {"plan",
          "plan [PRESET] [--set KEY=VALUE]... [--gpu-memory GIB] [--host-memory GIB] [--json] [--require-fit]",
          "Predict each GPU's peak memory for a preset and what would fit.",
          "Loads the preset (the embedded quickstart when none is given), applies --set overrides,\n"
          "reads the model's config.json (or Odyssey's bundled shape of it) and prints each term of\n"
          "one GPU's peak memory: weights, adapters or gradients, optimizer states, activations\n"
          "under the checkpointing policy, loss and attention working sets, communication buffers\n"
          "and runtime overhead. It also prints the largest max_length and the smallest\n"
          "sequence_parallel_size (with the preset's process count) that fit.\n\n"
          "Capacity: device cuda, or auto, is planned for an H200 (139.8 GiB) unless --gpu-memory\n"
          "gives another size; device cpu is planned against this machine's RAM shared by\n"
          "nproc_per_node processes. What offloading parks in host memory is held against 90% of\n"
          "this machine's RAM unless --host-memory gives the RAM of the machine that will train.\n"
          "The model is described in docs/memory-planner.md.\n\n"
          "Exit codes: 0 planned, 3 the preset has errors, the model's shape is unknown or the job\n"
          "exceeds the machine a thousandfold (refused without planning),\n"
          "4 with --require-fit when the plan does not fit.",
          {{"set", true, true, "KEY=VALUE", "override a setting (value in YAML syntax)"},
           {"gpu-memory", true, false, "GIB", "memory of one GPU in GiB (default: an H200, 139.8)"},
           {"host-memory", true, false, "GIB", "RAM of the training machine in GiB (default: this machine's)"},
           {"json", false, false, "", "print the plan as JSON"},
           {"require-fit", false, false, "", "exit with code 4 when the plan does not fit"}},
          0,
          1};
}

int cmd_plan(const Args& a) {
  PlannerOptions opts;
  // --gpu-memory / --host-memory: GiB into bytes; false (the message printed) when not a
  // positive number up to `most`.
  auto gib_option = [&a](const char* name, double most, const char* examples, std::int64_t* bytes) {
    if (!a.has(name)) return true;
    const auto g = text::parse_double(a.value(name));
    if (!g || *g <= 0.0 || *g > most) {
      std::cerr << "odyssey-train plan: --" << name << ": found " << text::quoted(a.value(name))
                << ", expected a positive number of GiB such as " << examples << "\n";
      return false;
    }
    *bytes = static_cast<std::int64_t>(*g * static_cast<double>(planner::kGiB));
    return true;
  };
  if (!gib_option("gpu-memory", 1e5, "80 or 139.8", &opts.gpu_memory_bytes) ||
      !gib_option("host-memory", 1e6, "128 or 512", &opts.host_memory_bytes))
    return kUsage;
  auto lc = load_config_arg(a);
  if (!lc) return kInvalidConfig;
  const CheckedConfig cc = check_config(*lc, false);
  print_diagnostics(cc.diagnostics);
  if (!cc.model) {
    std::cerr << "odyssey-train plan: error: the shape of model " << text::quoted(lc->config.model)
              << " is unknown: give a directory with config.json, or a hub id found in the Hugging Face "
                 "or ModelScope cache or among Odyssey's bundled shapes\n";
    return kInvalidConfig;
  }
  const TrainConfig& c = cc.loaded.config;
  const HfModelConfig& m = *cc.model;
  const MemoryPlan plan = plan_memory(c, m, opts);
  if (!plan.refused.empty()) {
    // Nothing else is computed: largest_max_length and the rest would refuse the same way.
    std::cerr << "odyssey-train plan: error: " << plan.refused << '\n';
    return kInvalidConfig;
  }
  const std::int64_t world = std::max<std::int64_t>(1, c.nnodes) * resolved_nproc_per_node(c);
  const std::int64_t largest = largest_max_length(c, m, opts);
  const std::int64_t smallest_sp = smallest_sequence_parallel_size(c, m, opts, world);
  const std::int64_t mult = sequence_pad_multiple(plan.layout);

  if (a.has("json")) {
    nlohmann::json j = plan_to_json(plan);
    j["model"] = cc.location.describe();
    j["parameters"] = m.parameter_count();
    j["max_length"] = c.max_length;
    j["largest_max_length"] = largest;
    j["pad_multiple"] = mult;
    j["smallest_sequence_parallel_size"] = smallest_sp;
    j["max_world"] = world;
    j["config_valid"] = cc.ok();
    std::cout << dump_json(j, 2) << '\n';
  } else {
    std::cout << "model: " << cc.location.describe() << " (" << m.architecture << ", " << m.parameter_count()
              << " parameters, " << m.num_hidden_layers << " layers)\n";
    std::cout << format_plan_table(plan) << '\n';
    std::cout << "largest max_length that fits: "
              << (largest > 0 ? std::to_string(largest) + " (a multiple of " + std::to_string(mult) + ")"
                              : std::string("none"))
              << (largest > m.max_position_embeddings && m.max_position_embeddings > 0
                      ? ", beyond the model's max_position_embeddings " + std::to_string(m.max_position_embeddings)
                      : std::string())
              << '\n';
    std::cout << "smallest sequence_parallel_size that fits on " << world
              << " process(es): " << (smallest_sp > 0 ? std::to_string(smallest_sp) : std::string("none")) << '\n';
  }
  if (!cc.ok()) {
    std::cerr << "odyssey-train plan: the configuration has errors (above); the plan is for the values as given\n";
    return kInvalidConfig;
  }
  if (a.has("require-fit") && !plan.fits) return kDoesNotFit;
  return kOk;
}

}  // namespace odyssey::cli
