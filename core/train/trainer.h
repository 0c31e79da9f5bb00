// The trainer: a resolved TrainConfig in, a run directory out (docs/run-contract.md), on one
// GPU, the CPU, or as one rank of a parallel run (docs/parallel.md). docs/training.md
// describes the pipeline.
//
// Exit codes: 0 completed, or stopped on request (SIGTERM/SIGINT: the step finishes, a
// checkpoint is written, status "stopped"); 1 failed (bad data, NaN/Inf loss, out of
// memory, I/O) with status "failed", the step and the reason.
#pragma once

#include <filesystem>
#include <string>

#include <chrono>

#include "config/train_config.h"
#include "dist/mesh.h"
#include "run/run_dir.h"

namespace odyssey::train {

struct TrainerOptions {
  std::string token_cache_dir;  // "" = the default cache; "off" disables it
  bool install_signal_handlers = true;
  std::string preset_base_dir;  // relative dataset paths resolve against it
  std::string launched_by;      // e.g. "odyssey-train run"
  // Parallel runs (docs/parallel.md): this rank, the rendezvous store, and how long a rank
  // waits for a peer before failing. Rank 0 writes events and status.json.
  dist::DistEnv env;
  c10::intrusive_ptr<c10d::Store> store;
  std::chrono::milliseconds comm_timeout{std::chrono::minutes(10)};
  int launcher_pid = 0;  // status.json's launcher_pid (0 = no launcher)
};

// `config` has absolute paths (validate.h resolve_paths); `dir` exists and holds
// config.yaml. Writes events.jsonl, status.json, logs/rank-0.log and checkpoints/.
int run_training(const TrainConfig& config, const run::RunDir& dir, const TrainerOptions& options = {});

// Asks a running run_training (this process) to stop after the current step, as SIGTERM does.
void request_stop();

}  // namespace odyssey::train
