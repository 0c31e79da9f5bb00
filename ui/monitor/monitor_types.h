// Value types that travel from the monitor's worker thread to the GUI thread through
// queued signals (hotspot style: plain structs, no shared state, stale ones dropped by
// generation number).
#pragma once

#include <QMetaType>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <optional>
#include <vector>

#include "run/event_schema.h"
#include "run/status_file.h"

namespace odyssey::ui {

// New points of one named series. Names: "loss", "loss_ema", "eval_loss", "lr",
// "grad_norm", "tokens_per_s", "vram_peak/rank N", "vram_reserved/rank N" (GiB),
// "busbw/<op>/<group>" (GB/s). x is the optimizer step.
struct SeriesChunk {
  QString name;
  std::vector<double> x;
  std::vector<double> y;
};

// How the monitor shows a run's state: status.json's state, corrected by liveness (a job
// that claims to run but is dead or silent is shown as failed, "stopped responding").
enum class DisplayState { Unknown, Starting, Running, Stopping, Completed, Stopped, Failed, Stale };
QString display_state_name(DisplayState s);
DisplayState display_state(const std::optional<run::RunStatus>& status, run::Liveness liveness,
                           const std::optional<run::RunEndEvent>& run_end);
bool is_failure(DisplayState s);

// The latest progress of a run (the last step event seen).
struct StepProgress {
  std::int64_t step = 0;
  std::int64_t total_steps = 0;
  double loss = 0;
  double elapsed_s = 0;
  double eta_s = 0;
  double tokens_per_s = 0;
};

// What one poll of the watcher found. Empty fields mean "nothing new".
struct WatchBatch {
  std::uint64_t generation = 0;  // the attach this batch belongs to
  bool restarted = false;        // events.jsonl was replaced: clear the charts first
  std::vector<SeriesChunk> series;
  std::optional<run::RunStartEvent> run_start;
  std::optional<run::RunEndEvent> run_end;
  std::optional<StepProgress> progress;
  QString stage;  // latest stage event, "" when none arrived
  bool status_changed = false;
  std::optional<run::RunStatus> status;  // valid when status_changed
  run::Liveness liveness = run::Liveness::Alive;
  QStringList messages;                // reader diagnostics, status.json problems, watcher notes
  QStringList log_lines;               // new lines of logs/rank-0.log
  std::optional<bool> dir_missing;     // set when the run directory vanished or came back
  std::optional<QString> config_yaml;  // config.yaml, once
  std::int64_t events_read = 0;        // events parsed so far (all batches of this attach)
  std::int64_t bytes_read = 0;         // offset into events.jsonl
  std::int64_t bytes_total = 0;        // its size at this poll
  bool caught_up = true;               // nothing more to read right now
};

// One row of the runs list.
struct RunSummary {
  QString path;
  QString run_id;
  DisplayState state = DisplayState::Unknown;
  std::int64_t step = 0;
  std::int64_t total_steps = 0;
  double last_loss = 0;
  bool has_loss = false;
  double elapsed_s = -1;  // -1: unknown
  double eta_s = -1;
  QString reason;
  bool operator==(const RunSummary&) const = default;
};

// "1h 02m", "3m 05s", "12s"; "–" for negative (unknown).
QString format_duration(double seconds);

}  // namespace odyssey::ui

Q_DECLARE_METATYPE(odyssey::ui::WatchBatch)
Q_DECLARE_METATYPE(odyssey::ui::RunSummary)
