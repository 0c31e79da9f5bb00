// Writes realistic run directories with the real run-contract writers (EventWriter,
// StatusFile, create_run_dir's layout) for the Monitor page's tests, screenshots and
// ingestion benchmark.
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>

#include "run/event_schema.h"
#include "run/event_writer.h"
#include "run/status_file.h"

namespace odyssey::testing {

struct FakeRun {
  int ranks = 2;
  int steps = 500;
  int total_steps = 500;
  int eval_every = 100;
  int checkpoint_every = 250;
  int nan_step = -1;  // a step whose loss is NaN (-1: none)
  double learning_rate = 2e-4;
  std::uint32_t seed = 1;
  bool write_run_end = true;        // and a terminal status.json
  run::OptimizerSummary optimizer;  // written into run_start when its name is set
  run::RunState final_state = run::RunState::Completed;
  std::string reason;  // for failed/stopped
  int log_lines_per_step = 1;
  std::string device = "NVIDIA H200";  // run_start's device name per rank ("CPU (…)" on the CPU)
};

// A step with plausible figures: a decreasing noisy loss, cosine lr, per-rank memory and
// all-to-all/all-reduce bandwidth near what two H200s over NVLink reach.
run::StepEvent make_step(int step, const FakeRun& f, std::mt19937& rng);

// Creates <root>/<name> with config.yaml, events.jsonl, status.json and logs/rank-0.log.
std::filesystem::path write_run(const std::filesystem::path& root, const std::string& name, const FakeRun& f);

// Appends the bytes to a file as they are (for partial lines and garbage).
void append_raw(const std::filesystem::path& file, const std::string& bytes);

// Peak resident memory of this process (VmHWM), in MiB; -1 when unknown.
double peak_rss_mib();
double current_rss_mib();

}  // namespace odyssey::testing
