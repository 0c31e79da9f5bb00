// Cross-field validation of a TrainConfig, before anything launches: the model's heads
// against the Ulysses degree, max_length against the sequence-parallel padding rule, ring
// attention's needs, LoRA-only and full-only settings, devices and process counts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/diagnostic.h"
#include "config/model_config.h"
#include "config/preset_io.h"

namespace odyssey {

struct CheckedConfig {
  LoadedConfig loaded;
  ModelLocation location;
  std::optional<HfModelConfig> model;  // when the model (or its bundled shape) was found
  Diagnostics diagnostics;
  bool ok() const { return !has_errors(diagnostics); }
};

// The Ulysses rule on a model's heads: "" when the degree `ulysses` can split them (the query
// heads divide by it; the KV heads divide by it, or it by them: split or replicated), else why
// not (both reasons when both fail). validate_config reports it against the key that set the degree; the trainer
// refuses the mesh with it (dist::heads_fit_ulysses).
std::string ulysses_heads_problem(std::int64_t q_heads, std::int64_t kv_heads, std::int64_t ulysses);

// Checks that need only the config and the model's shape (never the disk beyond
// config.json). `model` may be empty when the model cannot be found.
Diagnostics validate_config(const LoadedConfig& cfg, const HfModelConfig* model);

// Locate the model, read its config.json, validate. With `check_files`, the model's
// weights and every dataset file must exist (as `run` requires); without, a missing
// model or dataset is a warning (presets are shared between machines).
CheckedConfig check_config(LoadedConfig cfg, bool check_files);

// Copy with model and dataset paths made absolute where they resolve against the
// preset's directory or the current directory (hub ids and missing paths unchanged).
TrainConfig resolve_paths(const LoadedConfig& cfg, const ModelLocation& loc);

}  // namespace odyssey
