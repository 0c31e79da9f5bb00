// RunDir: where each file of a run lives (docs/run-contract.md, "Layout"). Every program
// that touches a run directory builds its paths here, so the layout is spelled once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/diagnostic.h"
#include "run/event_schema.h"

namespace odyssey::run {

class RunDir {
 public:
  RunDir() = default;
  explicit RunDir(std::filesystem::path root) : root_(std::move(root)) {}

  const std::filesystem::path& root() const { return root_; }
  // The directory's name, which is also the run id of run_start and status.json.
  std::string run_id() const { return root_.filename().string(); }

  std::filesystem::path config() const { return root_ / "config.yaml"; }
  std::filesystem::path events() const { return root_ / "events.jsonl"; }
  std::filesystem::path status() const { return root_ / "status.json"; }
  // Held (flock) by the run's one owner for its whole life: core/run/run_lock.h.
  std::filesystem::path lock_file() const { return root_ / "run.lock"; }
  std::filesystem::path logs_dir() const { return root_ / "logs"; }
  std::filesystem::path rank_log(int rank) const;  // logs/rank-<N>.log
  std::filesystem::path launcher_log() const { return logs_dir() / "launcher.log"; }
  std::filesystem::path checkpoints_dir() const { return root_ / "checkpoints"; }
  // TensorBoard event files (core/run/tensorboard.h, docs/tensorboard.md).
  std::filesystem::path tensorboard_dir() const { return root_ / "tensorboard"; }
  std::filesystem::path checkpoint(std::int64_t step) const;  // checkpoints/checkpoint-<step>

  // Steps of the checkpoints present, ascending (names that do not parse are left out).
  std::vector<std::int64_t> checkpoint_steps() const;

  // A directory with an events.jsonl or status.json: what a runs list shows.
  static bool looks_like_run(const std::filesystem::path& dir);

 private:
  std::filesystem::path root_;
};

// The name part a user or preset gives a run, made safe for a directory name: letters,
// digits, '.', '_' and '-' kept, runs of anything else become one '-', at most 48 bytes.
std::string run_name_slug(std::string_view name);

// Creates <output_dir>/<UTC yyyymmdd-hhmmss>[-<slug of name>] with logs/ and checkpoints/
// inside, adding -2, -3, ... when the name is taken. mkdir(2) decides (it fails on an
// existing directory), so two launches in the same second never share a directory and an
// existing one is never reused. output_dir is created if missing.
Result<RunDir> create_run_dir(const std::filesystem::path& output_dir, std::string_view name,
                              std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

// What the end of an events.jsonl says, read from its last `max_bytes` only (a long run's
// file is large; everything a supervisor needs at the end is near the end). Lines that do
// not decode are skipped, as a monitor skips them.
struct EventsTail {
  std::uintmax_t bytes = 0;                 // the file's size; 0 when missing or empty
  std::optional<StepEvent> last_step;       // the last step event in the tail
  std::optional<RunEndEvent> last_run_end;  // the last run_end in the tail
  bool ends_with_run_end = false;           // the tail's last event is a run_end
  double last_time = 0;                     // `time` and `elapsed_s` of the tail's last event
  double last_elapsed_s = 0;
  int events = 0;  // events decoded in the tail
};
EventsTail read_events_tail(const std::filesystem::path& events, std::size_t max_bytes = std::size_t{4} << 20);

// The last `max_lines` complete or final lines of a text file (a log), read from its last
// `max_bytes`; each line cut to `max_line_bytes` with the cut said. Empty when unreadable.
std::vector<std::string> read_last_lines(const std::filesystem::path& file, std::size_t max_lines,
                                         std::size_t max_bytes = std::size_t{256} << 10,
                                         std::size_t max_line_bytes = 500);

// What status.json's last_error_lines gets for a failed rank: the last `max_lines` of what it
// said, from its log file (`log_tail`; a rank other than 0 writes its reason only there) and
// its own stdout/stderr (`output_tail`; a crash, an uncaught exception, c10d's warnings),
// lines of both counted once. Known noise (c10d's socket and store warnings, which a dying
// peer causes by the dozen) is left out unless nothing else was said; the last line that
// says error/failed is kept even when more than `max_lines` lines follow it.
std::vector<std::string> failure_lines(const std::vector<std::string>& log_tail,
                                       const std::vector<std::string>& output_tail, std::size_t max_lines = 20);

// `line` cut to `max_bytes` (at a UTF-8 boundary), ending in "… (N bytes)" when cut.
std::string cut_line(std::string_view line, std::size_t max_bytes);

}  // namespace odyssey::run
