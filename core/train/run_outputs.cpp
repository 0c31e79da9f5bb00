#include "train/run_outputs.h"

#include <iostream>
#include <variant>

namespace odyssey::train {

namespace {

// The time an event happened, stamped when it is made rather than when a held event reaches
// the file (the writer stamps only events whose time is 0).
void stamp(run::Event& e, RunOutputs::Clock::time_point t0) {
  std::visit(
      [&](auto& x) {
        if (x.time != 0) return;
        x.time = run::unix_now();
        x.elapsed_s = std::chrono::duration<double>(RunOutputs::Clock::now() - t0).count();
      },
      e);
}

}  // namespace

RunOutputs::RunOutputs(const run::RunDir& dir, int rank, bool main_rank, const run::RunStatus& initial,
                       Clock::time_point t0, bool tensorboard)
    : t0_(t0), main_rank_(main_rank), status_(initial) {
  auto opened_log = run::LineAppender::open(dir.rank_log(rank));
  if (opened_log.ok()) log_.emplace(std::move(opened_log.value));
  else record(opened_log.diagnostics, "log");
  if (!main_rank_) return;
  run::EventWriterOptions options;
  options.tensorboard = tensorboard;
  auto opened_events = run::EventWriter::open(dir.events(), options);
  if (opened_events.ok()) {
    events_.emplace(std::move(opened_events.value));
    events_->set_start(t0);
  } else {
    record(opened_events.diagnostics, "events");
  }
  status_file_.emplace(dir.status());
  status_ok_ = true;
  if (write_status(status_)) heartbeat_ = std::thread([this] { heartbeat_loop(); });
}

RunOutputs::~RunOutputs() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
}

void RunOutputs::record(const Diagnostics& d, const char* what) {
  std::string reason = format_all(d);
  while (!reason.empty() && reason.back() == '\n') reason.pop_back();
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_) failure_ = "writing the run directory failed (" + std::string(what) + "): " + reason;
}

std::optional<std::string> RunOutputs::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void RunOutputs::log(const std::string& line) {
  if (main_rank_) std::cout << line << '\n' << std::flush;
  if (!log_) return;
  if (auto d = log_->append(line + "\n", false); !d.empty()) {
    record(d, "log");
    log_.reset();
  }
}

void RunOutputs::event(run::Event e) {
  if (!main_rank_) return;
  stamp(e, t0_);
  if (!run_start_written_) {
    held_.push_back(std::move(e));
    return;
  }
  if (!events_) return;
  if (auto d = events_->write(std::move(e)); !d.empty()) {
    record(d, "events");
    events_.reset();
  }
}

void RunOutputs::write_run_start(run::RunStartEvent e) {
  if (!main_rank_ || run_start_written_) return;
  run_start_written_ = true;
  std::vector<run::Event> held = std::move(held_);
  held_.clear();
  event(std::move(e));
  for (auto& h : held) event(std::move(h));
}

void RunOutputs::progress(std::int64_t step, std::int64_t total, run::RunState state) {
  std::lock_guard<std::mutex> lock(mu_);
  status_.step = step;
  status_.total_steps = total;
  status_.state = state;
}

bool RunOutputs::write_status(const run::RunStatus& s) {
  if (auto d = status_file_->write(s); !d.empty()) {
    record(d, "status");
    std::lock_guard<std::mutex> lock(mu_);
    status_ok_ = false;
    return false;
  }
  return true;
}

void RunOutputs::heartbeat_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    cv_.wait_for(lock, std::chrono::duration<double>(run::kHeartbeatPeriodS));
    if (stopped_ || !status_ok_) break;
    status_.heartbeat = run::unix_now();
    const run::RunStatus copy = status_;
    lock.unlock();
    const bool ok = write_status(copy);
    lock.lock();
    if (!ok) break;  // status.json went quiet; the trainer sees failure() and ends the run
  }
}

int RunOutputs::finish(run::RunState state, int exit_code, std::string reason, std::int64_t step,
                       std::int64_t total_steps, const run::RunStartEvent& fallback_start) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  // A write that failed earlier is why the run ends, whatever it was doing since.
  auto end_as_failed = [&](const std::string& why) {
    if (state == run::RunState::Failed && reason == why) return;
    reason = state == run::RunState::Completed || reason.empty() ? why : why + " (and: " + reason + ")";
    state = run::RunState::Failed;
    exit_code = 1;
  };
  if (auto f = failure()) end_as_failed(*f);
  if (main_rank_) {
    if (!run_start_written_) write_run_start(fallback_start);  // run_start stays the first line
    run::RunEndEvent e;
    e.status = state == run::RunState::Completed ? run::RunOutcome::Completed
               : state == run::RunState::Stopped ? run::RunOutcome::Stopped
                                                 : run::RunOutcome::Failed;
    e.reason = reason;
    e.exit_code = exit_code;
    e.step = step;
    event(e);
    // The run_end itself may be what failed: status.json then carries the reason.
    if (auto f = failure()) end_as_failed(*f);
    bool status_ok = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ok = status_ok_;
    }
    if (status_ok) {
      run::RunStatus fin = status_;
      fin.state = state;
      fin.step = step;
      fin.total_steps = total_steps;
      fin.reason = reason;
      fin.exit_code = exit_code;
      fin.heartbeat = run::unix_now();
      write_status(fin);
      if (auto f = failure()) end_as_failed(*f);
    }
  }
  const bool write_failed = failure().has_value();
  if (!reason.empty()) {
    const std::string line = (state == run::RunState::Failed ? "failed: " : "stopped: ") + reason;
    if (write_failed) {
      // Printed once, to stderr: the log file may be what failed, and stdout is the log's echo.
      std::cerr << "odyssey-train: " << line << '\n' << std::flush;
      if (log_) log_->append(line + "\n", false);
    } else {
      log(line);
    }
  }
  return exit_code;
}

}  // namespace odyssey::train
