#include "run/status_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>

#include "common/text.h"
#include "run/event_schema.h"
#include "run/json_fields.h"

namespace odyssey::run {

using detail::OrderedJson;
using nlohmann::json;

namespace {

// status.json is a page of text; anything far larger is not one.
constexpr std::uintmax_t kMaxStatusBytes = 4u << 20;

bool process_exists(std::int64_t pid) {
  if (pid <= 0 || pid > 0x7fffffff) return false;
  // EPERM: it exists but belongs to someone else, which still means alive.
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace

std::string_view to_string(RunState s) {
  switch (s) {
    case RunState::Starting: return "starting";
    case RunState::Running: return "running";
    case RunState::Stopping: return "stopping";
    case RunState::Completed: return "completed";
    case RunState::Failed: return "failed";
    case RunState::Stopped: return "stopped";
  }
  return "failed";
}

std::optional<RunState> parse_run_state(std::string_view s) {
  for (auto x : {RunState::Starting, RunState::Running, RunState::Stopping, RunState::Completed, RunState::Failed,
                 RunState::Stopped})
    if (to_string(x) == s) return x;
  return std::nullopt;
}

bool is_terminal(RunState s) { return s == RunState::Completed || s == RunState::Failed || s == RunState::Stopped; }

std::string encode_status(const RunStatus& s) {
  OrderedJson j = OrderedJson::object();
  j["v"] = std::string(kSchemaVersion);
  j["state"] = std::string(to_string(s.state));
  j["run_id"] = s.run_id;
  j["pid"] = s.pid;
  j["launcher_pid"] = s.launcher_pid;
  j["hostname"] = s.hostname;
  j["started_at"] = detail::number(s.started_at);
  j["heartbeat"] = detail::number(s.heartbeat);
  j["step"] = s.step;
  j["total_steps"] = s.total_steps;
  j["reason"] = s.reason;
  j["failed_rank"] = s.failed_rank;
  j["exit_code"] = s.exit_code ? OrderedJson(*s.exit_code) : OrderedJson(nullptr);
  j["last_error_lines"] = s.last_error_lines;
  return detail::dump_pretty(j) + "\n";
}

Result<RunStatus> decode_status(std::string_view text, const std::string& file) {
  Result<RunStatus> r;
  try {
    const json j = json::parse(text.begin(), text.end(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      r.diagnostics.push_back(error_at(file, {}, "not a JSON object"));
      return r;
    }
    detail::FieldReader f(j, "", file, 0, r.diagnostics);
    std::string v;
    f.required("v", v);
    if (!r.ok()) return r;
    const auto ver = parse_schema_version(v);
    if (!ver) {
      f.error("v", "schema version " + text::quoted(v) + " is not of the form MAJOR.MINOR");
      return r;
    }
    if (ver->first != kSchemaMajor) {
      r.diagnostics.push_back(error_at(file, {},
                                       "schema version " + std::to_string(ver->first) + ".x is " +
                                           (ver->first > kSchemaMajor ? "newer than this Odyssey understands ("
                                                                      : "older than this Odyssey reads (") +
                                           std::to_string(kSchemaMajor) + ".x)" +
                                           (ver->first > kSchemaMajor ? "; update Odyssey" : "")));
      return r;
    }
    RunStatus& s = r.value;
    std::string state;
    f.required("state", state);
    if (f.has_string("state")) {
      if (auto st = parse_run_state(state)) s.state = *st;
      else
        f.error("state", "unknown state " + text::quoted(state) +
                             "; allowed: starting, running, stopping, completed, failed, stopped");
    }
    f.optional("run_id", s.run_id);
    f.optional("pid", s.pid);
    f.optional("launcher_pid", s.launcher_pid);
    f.optional("hostname", s.hostname);
    f.optional("started_at", s.started_at);
    f.optional("heartbeat", s.heartbeat);
    f.optional("step", s.step);
    f.optional("total_steps", s.total_steps);
    f.optional("reason", s.reason);
    f.optional("failed_rank", s.failed_rank);
    f.optional("exit_code", s.exit_code);
    f.optional("last_error_lines", s.last_error_lines);
  } catch (const std::exception& e) {
    r.diagnostics.push_back(error_at(file, {}, std::string("cannot decode: ") + e.what()));
  }
  return r;
}

Diagnostics StatusFile::write(const RunStatus& status) const {
  Diagnostics diags;
  const std::string text = encode_status(status);
  // Unique per process and call: the launcher and rank 0 may both write, and each must
  // rename its own complete file.
  static std::atomic<unsigned> counter{0};
  const std::string final_name = path_.string();
  const std::string tmp =
      final_name + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    diags.push_back(error_at(tmp, {}, std::string("cannot create: ") + std::strerror(errno)));
    return diags;
  }
  std::size_t done = 0;
  bool ok = true;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      diags.push_back(error_at(tmp, {}, std::string("cannot write: ") + std::strerror(errno)));
      ok = false;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  if (ok && is_terminal(status.state) && ::fsync(fd) != 0) {
    diags.push_back(error_at(tmp, {}, std::string("cannot sync: ") + std::strerror(errno)));
    ok = false;
  }
  if (::close(fd) != 0 && ok) {
    diags.push_back(error_at(tmp, {}, std::string("cannot close: ") + std::strerror(errno)));
    ok = false;
  }
  if (ok && ::rename(tmp.c_str(), final_name.c_str()) != 0) {
    diags.push_back(error_at(final_name, {}, std::string("cannot replace: ") + std::strerror(errno)));
    ok = false;
  }
  if (!ok) ::unlink(tmp.c_str());
  return diags;
}

Result<RunStatus> StatusFile::read() const {
  const std::string name = path_.string();
  std::error_code ec;
  const auto size = std::filesystem::file_size(path_, ec);
  if (ec) {
    Result<RunStatus> r;
    r.diagnostics.push_back(error_at(name, {}, "cannot read: " + ec.message()));
    return r;
  }
  if (size > kMaxStatusBytes) {
    Result<RunStatus> r;
    r.diagnostics.push_back(
        error_at(name, {}, "is " + std::to_string(size) + " bytes; a status file is a few hundred"));
    return r;
  }
  std::ifstream in(path_, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in) {
    Result<RunStatus> r;
    r.diagnostics.push_back(error_at(name, {}, "cannot read"));
    return r;
  }
  return decode_status(ss.str(), name);
}

Liveness liveness(const RunStatus& s, double now, double timeout_s) {
  if (is_terminal(s.state)) return Liveness::Finished;
  const bool has_pid = s.pid > 0 || s.launcher_pid > 0;
  if (has_pid && !s.hostname.empty() && s.hostname == this_hostname()) {
    // Either process alive may mean the job is: a launcher alone is still about to record
    // how its ranks ended; an engine run without a launcher has only `pid`.
    if (!process_exists(s.pid) && !process_exists(s.launcher_pid)) return Liveness::Dead;
  }
  // Also on this host: a live pid with a stale heartbeat is a recycled pid or a frozen
  // job. Written so that a NaN heartbeat counts as stale.
  return now - s.heartbeat <= timeout_s ? Liveness::Alive : Liveness::Silent;
}

bool is_stale(const RunStatus& s, double now, double timeout_s) {
  const Liveness l = liveness(s, now, timeout_s);
  return l == Liveness::Dead || l == Liveness::Silent;
}

std::string this_hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace odyssey::run
