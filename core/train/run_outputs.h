// What a run writes besides its checkpoints (docs/run-contract.md): logs/rank-N.log (echoed
// to stdout on rank 0), and on rank 0 events.jsonl and status.json (refreshed every 5 s
// from a thread of its own). A failed write to any of them (ENOSPC, EFBIG, EIO, a file
// replaced, removed or made read-only under the run) is recorded, not thrown, and that
// output goes quiet; the trainer asks failure() between stages and after every step and
// ends the run, and finish() writes the end to whichever outputs still work
// (docs/training.md, "When a write fails").
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "run/event_schema.h"
#include "run/event_writer.h"
#include "run/run_dir.h"
#include "run/status_file.h"

namespace odyssey::train {

class RunOutputs {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens the rank's log, and on the main rank events.jsonl and status.json (written once
  // with `initial`, then refreshed by the heartbeat thread). A file that cannot be opened is
  // a recorded failure like any later write.
  // tensorboard: rank 0's events also go to the run's tensorboard/ (report_to: tensorboard).
  RunOutputs(const run::RunDir& dir, int rank, bool main_rank, const run::RunStatus& initial, Clock::time_point t0,
             bool tensorboard = true);
  ~RunOutputs();
  RunOutputs(const RunOutputs&) = delete;
  RunOutputs& operator=(const RunOutputs&) = delete;

  // One line to the log file and, on the main rank, stdout.
  void log(const std::string& line);

  // An event for events.jsonl (main rank only). Until run_start is written, events are held
  // in memory (stamped with the time they happened) so that run_start is the first line;
  // write_run_start writes it and then them.
  void event(run::Event e);
  void write_run_start(run::RunStartEvent e);
  bool run_start_written() const { return run_start_written_; }

  // status.json's step, total and state (written by the next heartbeat).
  void progress(std::int64_t step, std::int64_t total, run::RunState state = run::RunState::Running);

  // The first failed write ("events.jsonl: cannot append 212 bytes: No space left on
  // device"), or nullopt while every output works.
  std::optional<std::string> failure() const;

  // Ends the run: a run_end event (after run_start, with `fallback_start` when none was
  // written yet, and any held events), the terminal status.json, and a last log line, each
  // to the outputs that still work. A failed write (earlier or now) makes the run failed
  // with that reason, printed once to stderr. Returns the exit code.
  int finish(run::RunState state, int exit_code, std::string reason, std::int64_t step, std::int64_t total_steps,
             const run::RunStartEvent& fallback_start);

 private:
  void record(const Diagnostics& d, const char* what);
  void heartbeat_loop();
  bool write_status(const run::RunStatus& s);  // false (recorded) on failure

  Clock::time_point t0_;
  bool main_rank_;
  // The outputs; each goes quiet (reset) after its first failure.
  std::optional<run::LineAppender> log_;
  std::optional<run::EventWriter> events_;
  std::optional<run::StatusFile> status_file_;
  std::vector<run::Event> held_;
  bool run_start_written_ = false;

  mutable std::mutex mu_;  // failure_, status_, status_ok_, stopped_
  std::optional<std::string> failure_;
  run::RunStatus status_;
  bool status_ok_ = false;
  bool stopped_ = false;
  std::condition_variable cv_;
  std::thread heartbeat_;
};

}  // namespace odyssey::train
