// RunWatcher: follows one run directory from a worker thread. Every tick it polls
// events.jsonl (EventReader, incremental), status.json and logs/rank-0.log, and emits
// what is new as one WatchBatch value through a queued signal. EventReader is not
// thread-safe, so each watcher owns its reader and lives on exactly one thread.
//
// Flow control: a long events file is read in slices (max_bytes_per_poll); the next slice
// is read as soon as the GUI acknowledges the previous batch, so the GUI never has more
// than a couple of batches queued and opening a 100 MB run shows progress instead of
// freezing the window.
#pragma once

#include <QObject>
#include <QString>
#include <QTimer>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "batch_builder.h"
#include "monitor_types.h"
#include "run/event_reader.h"
#include "run/run_dir.h"

namespace odyssey::ui {

struct WatcherOptions {
  int interval_ms = 300;
  std::size_t slice_bytes = std::size_t{2} << 20;  // events bytes parsed per batch
  std::int64_t log_tail_bytes = 256 * 1024;        // how much of an old log to show on attach
  int max_log_lines_per_batch = 2000;
};

class RunWatcher : public QObject {
  Q_OBJECT
 public:
  RunWatcher(QString run_dir, std::uint64_t generation, WatcherOptions options = {});

  // Cancel from any thread: the current poll stops at its next check, nothing more is sent.
  void cancel() { cancelled_.store(true); }

 public slots:
  void start();        // on the worker thread
  void acknowledge();  // the GUI consumed a batch

 signals:
  void batch_ready(const odyssey::ui::WatchBatch& batch);

 private:
  void poll();
  void poll_status(WatchBatch& b);
  void poll_log(WatchBatch& b);

  run::RunDir dir_;
  std::uint64_t generation_;
  WatcherOptions options_;
  std::unique_ptr<run::EventReader> reader_;
  BatchBuilder builder_;
  QTimer* timer_ = nullptr;  // child of this, created on the worker thread
  std::atomic<bool> cancelled_{false};
  int in_flight_ = 0;
  bool more_pending_ = false;
  bool dir_missing_ = false;
  bool config_sent_ = false;
  std::int64_t events_total_ = 0;
  std::string last_status_text_;
  int last_liveness_ = -1;
  std::string status_error_;
  std::int64_t log_offset_ = -1;  // -1: not opened yet
  std::string log_partial_;
};

}  // namespace odyssey::ui
