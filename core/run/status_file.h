// status.json: the run's current state in one small file that is replaced atomically, so
// a monitor reads either the old or the new state, never half of one. events.jsonl is the
// history; status.json answers "is it alive, and if not, why did it stop".
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/diagnostic.h"

namespace odyssey::run {

enum class RunState { Starting, Running, Stopping, Completed, Failed, Stopped };

std::string_view to_string(RunState s);
std::optional<RunState> parse_run_state(std::string_view s);
// Completed, Failed and Stopped: nothing runs any more.
bool is_terminal(RunState s);

// How often the engine refreshes `heartbeat` (from a thread of its own, so a long
// checkpoint save or compile does not look like death), and how old a heartbeat must be
// before a monitor that cannot check the pid calls the job dead.
inline constexpr double kHeartbeatPeriodS = 5.0;
inline constexpr double kStaleAfterS = 60.0;

struct RunStatus {
  RunState state = RunState::Starting;
  std::string run_id;
  std::int64_t pid = 0;           // rank 0 (the engine) on `hostname`; 0 before it exists
  std::int64_t launcher_pid = 0;  // the supervising launcher; 0 when run without one
  std::string hostname;
  double started_at = 0;  // unix seconds
  double heartbeat = 0;   // unix seconds of the last refresh
  std::int64_t step = 0;
  std::int64_t total_steps = 0;
  std::string reason;  // why it failed or stopped
  int failed_rank = -1;
  std::optional<int> exit_code;               // set once the job has exited
  std::vector<std::string> last_error_lines;  // tail of the failing rank's log
};

class StatusFile {
 public:
  explicit StatusFile(std::filesystem::path file) : path_(std::move(file)) {}
  const std::filesystem::path& path() const { return path_; }

  // Writes a temporary file beside status.json and renames it over: rename(2) is atomic
  // within a directory. Terminal states are fsynced first (the last word must survive a
  // crash); heartbeats are not (a lost one is harmless, a sync every 5 s is not free).
  // Returns no diagnostics on success.
  Diagnostics write(const RunStatus& status) const;

  // Unknown fields are ignored; an unknown major version is refused with a message.
  Result<RunStatus> read() const;

 private:
  std::filesystem::path path_;
};

// status.json text, and parsing it (`file` only labels diagnostics).
std::string encode_status(const RunStatus& status);
Result<RunStatus> decode_status(std::string_view text, const std::string& file);

enum class Liveness {
  Finished,  // a terminal state was recorded
  Alive,     // the heartbeat is recent (and on this host a recorded pid exists)
  Dead,      // on this host, and none of the recorded processes exists
  Silent,    // the heartbeat is older than the timeout
};

// Whether the job that wrote `status` still runs, judged at unix time `now`. On the host
// that ran it, kill(pid, 0) tells a dead job at once, without waiting for the timeout;
// elsewhere (a shared disk) only the heartbeat can tell, and clocks of two hosts may
// differ by seconds, hence a timeout well above the heartbeat period.
Liveness liveness(const RunStatus& status, double now, double timeout_s = kStaleAfterS);
// A job that claims to run but is Dead or Silent: the monitor shows it as failed.
bool is_stale(const RunStatus& status, double now, double timeout_s = kStaleAfterS);

std::string this_hostname();
double unix_now();

}  // namespace odyssey::run
