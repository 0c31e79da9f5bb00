#include "run/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "common/text.h"
#include "run/status_file.h"

namespace odyssey::run {

namespace fs = std::filesystem;

struct RunLockAccess {
  static int& fd(RunLock& l) { return l.fd_; }
};

namespace {

std::string owner_text(const RunLockOwner& o) {
  return "pid " + std::to_string(o.pid) + (o.hostname.empty() ? std::string() : " on " + o.hostname);
}

// "pid=<n>\nhost=<name>\n": read by read_lock_owner, and by people (`cat run.lock`).
void write_owner(int fd) {
  const std::string text = "pid=" + std::to_string(::getpid()) + "\nhost=" + this_hostname() + "\n";
  if (::ftruncate(fd, 0) != 0) return;
  // Best effort: the flock is the lock, the text only names its holder in messages.
  (void)!::pwrite(fd, text.data(), text.size(), 0);
}

std::string describe_checkpoints(const RunDir& dir) {
  const auto steps = dir.checkpoint_steps();
  if (steps.empty()) return {};
  return "checkpoints/ holds " + std::to_string(steps.size()) + " checkpoint(s) of an earlier run (the last " +
         dir.checkpoint(steps.back()).filename().string() + ")";
}

}  // namespace

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void RunLock::release() {
  if (fd_ < 0) return;
  ::close(fd_);  // the last descriptor of the open file: the flock goes with it
  fd_ = -1;
}

std::optional<RunLockOwner> read_lock_owner(const RunDir& dir) {
  const int fd = ::open(dir.lock_file().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  RunLockOwner o;
  std::string_view rest(buf, static_cast<std::size_t>(n));
  while (!rest.empty()) {
    const std::size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (text::starts_with(line, "pid=")) {
      if (auto v = text::parse_int(line.substr(4)); v && *v > 0) o.pid = *v;
    } else if (text::starts_with(line, "host=")) {
      o.hostname = std::string(line.substr(5));
    }
  }
  if (o.pid <= 0) return std::nullopt;
  return o;
}

std::string reuse_refusal(const RunDir& dir, std::int64_t own_launcher_pid) {
  std::error_code ec;
  if (fs::exists(dir.status(), ec)) {
    const auto st = StatusFile(dir.status()).read();
    if (!st.ok()) return "its status.json cannot be read (" + format_all(st.diagnostics) + ")";
    const RunStatus& s = st.value;
    const std::string who = s.run_id.empty() ? std::string("an earlier run") : "run " + s.run_id;
    if (is_terminal(s.state))
      return who + " ended there (status.json: " + std::string(to_string(s.state)) + " at step " +
             std::to_string(s.step) + (s.reason.empty() ? std::string() : ": " + s.reason) + ")";
    if (own_launcher_pid <= 0 || s.launcher_pid != own_launcher_pid) {
      // A live owner that holds no lock: an Odyssey from before run.lock.
      if (liveness(s, unix_now()) == Liveness::Alive)
        return "another live process owns it (status.json: " + std::string(to_string(s.state)) + ", pid " +
               std::to_string(s.pid) + (s.hostname.empty() ? std::string() : " on " + s.hostname) + ")";
      return who + " wrote status.json there (state " + std::string(to_string(s.state)) +
             ") and its owner is gone without finishing it";
    }
  }
  const EventsTail tail = read_events_tail(dir.events());
  if (tail.bytes > 0) {
    if (tail.last_run_end) {
      const RunEndEvent& e = *tail.last_run_end;
      return "a run ended there (events.jsonl: run_end " + std::string(to_string(e.status)) + " at step " +
             std::to_string(e.step) + (e.reason.empty() ? std::string() : ": " + e.reason) + ")";
    }
    return "events.jsonl already holds " + std::to_string(tail.bytes) + " bytes of an earlier run" +
           (tail.last_step ? " (last step " + std::to_string(tail.last_step->step) + ")" : std::string()) +
           " whose owner is gone without a run_end";
  }
  return describe_checkpoints(dir);
}

namespace {

// Takes the lock on `fd` (an open lock file) or finds who holds it. Returns "" when this
// process may run here (`claim` filled), else why not.
std::string lock_or_owner(const RunDir& dir, int fd, pid_t launcher_pid, RunClaim& claim) {
  RunLock lock;
  RunLockAccess::fd(lock) = fd;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    claim.lock = std::move(lock);
    return {};
  }
  const int e = errno;
  lock.release();
  if (e != EWOULDBLOCK) return "cannot lock " + dir.lock_file().string() + ": " + std::strerror(e);
  const auto owner = read_lock_owner(dir);
  // The lock's holder is the launcher that started this process: the run is its, and this
  // process is one of its ranks. Only the parent counts: an unrelated process that copies
  // ODYSSEY_LAUNCHER_PID from a live run is not that launcher's child.
  const bool parent_holds = launcher_pid > 0 && owner && owner->pid == launcher_pid && ::getppid() == launcher_pid &&
                            owner->hostname == this_hostname();
  if (!parent_holds)
    return "another live process owns it (" +
           (owner ? owner_text(*owner) : std::string("its lock file names no owner yet")) + " holds " +
           dir.lock_file().filename().string() + ")";
  claim.inherited = true;
  return {};
}

}  // namespace

Result<RunClaim> claim_run_dir(const RunDir& dir, pid_t launcher_pid) {
  Result<RunClaim> r;
  const fs::path& root = dir.root();
  auto refuse = [&](std::string why) {
    r.value = RunClaim{};
    r.diagnostics.push_back(error_at(root.string(), {},
                                     "run directory refused: " + why +
                                         "; a run directory belongs to one run (docs/run-contract.md): "
                                         "start a new run, or resume with resume_from_checkpoint"));
    return std::move(r);
  };
  std::error_code ec;
  if (fs::exists(root, ec) && !fs::is_directory(root, ec)) return refuse("it exists and is not a directory");
  // A live owner first: its directory holds events and a running status, but "it is in use"
  // is the answer. Opening without O_CREAT leaves a finished run's directory as it was.
  // O_NOFOLLOW: a symlink planted as run.lock must not make us create or truncate its target.
  const int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW;
  if (int fd = ::open(dir.lock_file().c_str(), flags); fd >= 0) {
    if (std::string why = lock_or_owner(dir, fd, launcher_pid, r.value); !why.empty()) return refuse(why);
  } else if (errno != ENOENT) {
    return refuse("cannot open " + dir.lock_file().string() + ": " + std::strerror(errno));
  }
  const bool locked = r.value.lock.held() || r.value.inherited;
  // Before anything is created, so that an earlier run's directory is left as it was.
  if (fs::is_directory(root, ec))
    if (std::string why = reuse_refusal(dir, r.value.inherited ? launcher_pid : 0); !why.empty()) return refuse(why);
  for (const fs::path& d : {root, dir.logs_dir(), dir.checkpoints_dir()}) {
    fs::create_directories(d, ec);
    if (ec) return refuse("cannot create " + d.string() + ": " + ec.message());
  }
  if (!locked) {
    const int fd = ::open(dir.lock_file().c_str(), flags | O_CREAT, 0644);
    if (fd < 0) return refuse("cannot create " + dir.lock_file().string() + ": " + std::strerror(errno));
    if (std::string why = lock_or_owner(dir, fd, launcher_pid, r.value); !why.empty()) return refuse(why);
    // Looked at again under the lock: another claimer may have started between the two.
    if (std::string why = reuse_refusal(dir, r.value.inherited ? launcher_pid : 0); !why.empty()) return refuse(why);
  }
  if (r.value.lock.held()) write_owner(RunLockAccess::fd(r.value.lock));
  return r;
}

}  // namespace odyssey::run
