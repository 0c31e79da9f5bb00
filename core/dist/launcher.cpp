#include "dist/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

extern char** environ;

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <iostream>
#include <sstream>

#include "common/text.h"
#include "dist/store_auth.h"
#include "engine/runtime_info.h"
#include "run/event_writer.h"
#include "run/run_dir.h"
#include "run/run_lock.h"
#include "run/status_file.h"

namespace odyssey::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_signals{0};
extern "C" void on_launcher_signal(int) { g_signals.fetch_add(1); }

struct Rank {
  int global = 0;
  pid_t pid = -1;
  int fd = -1;  // its stdout and stderr
  bool running = false;
  int status = 0;
  std::string partial;
  std::deque<std::string> tail;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : std::string());
  }
  return "status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// The reason a rank gave for failing: its last "failed: …" line, the trainer's last word
// (core/train/trainer.cpp); "" when it wrote none (killed, crashed).
std::string own_reason(const std::vector<std::string>& lines) {
  for (auto it = lines.rbegin(); it != lines.rend(); ++it)
    if (text::starts_with(*it, "failed: ")) return it->substr(8);
  return {};
}

// Whether `lines` blame rank `other` ("rank 1 got nothing from rank 0 within 5 s").
bool blames(const std::vector<std::string>& lines, int other) {
  const std::string needle = "from rank " + std::to_string(other);
  for (const auto& l : lines)
    for (std::size_t p = l.find(needle); p != std::string::npos; p = l.find(needle, p + 1)) {
      const std::size_t end = p + needle.size();
      if (end == l.size() || std::isdigit(static_cast<unsigned char>(l[end])) == 0) return true;
    }
  return false;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// A listening socket for the store: loopback for one node, the master address for several.
int listen_socket(const std::string& addr, int port, std::string* error) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    if (::getaddrinfo(addr.c_str(), nullptr, &hints, &res) != 0 || !res) {
      *error = "the master address " + addr + " does not resolve to an IPv4 address of this machine";
      ::close(fd);
      return -1;
    }
    sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    ::freeaddrinfo(res);
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    const int e = errno;
    *error = e == EADDRINUSE ? "port " + std::to_string(port) + " on " + addr +
                                   " is in use (another run?); choose another with --master-port"
                             : "cannot bind " + addr + ":" + std::to_string(port) + ": " + std::strerror(e);
    ::close(fd);
    return -1;
  }
  if (::listen(fd, 256) != 0) {
    *error = std::string("listen: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

int bound_port(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return ntohs(sa.sin_port);
}

class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& o) : o_(o), dir_(o.run_dir) {}

  int run() {
    const int world = o_.nproc * o_.nnodes;
    std::string error;
    // The ranks accept the run directory because their parent holds its lock (run_lock.h):
    // a launcher that does not would let them write into a directory nobody owns.
    if (const auto owner = run::read_lock_owner(dir_); !owner || owner->pid != ::getpid()) {
      std::cerr << "odyssey-train: " << dir_.root().string()
                << ": the launcher does not hold this run directory's lock (run::claim_run_dir); nothing was started\n";
      return 1;
    }
    std::vector<std::string> cvd;
    if (!gpu_mapping(&cvd, &error)) return fail_before_start(error);

    // The store: hosted here on node 0, for the whole run.
    c10::intrusive_ptr<c10d::TCPStore> store;
    int port = o_.master_port;
    if (o_.node_rank == 0) {
      const std::string bind_addr = o_.nnodes > 1 ? o_.master_addr : std::string("127.0.0.1");
      const int fd = listen_socket(bind_addr, port, &error);
      if (fd < 0) return fail_before_start(error);
      port = bound_port(fd);
      c10d::TCPStoreOptions so;
      so.port = static_cast<std::uint16_t>(port);
      so.isServer = true;
      so.waitWorkers = false;
      so.masterListenFd = fd;
      try {
        store = c10::make_intrusive<c10d::TCPStore>(bind_addr, so);
      } catch (const c10::Error& e) {
        return fail_before_start(std::string("the rendezvous store could not start: ") + e.what_without_backtrace());
      }
    } else if (port <= 0) {
      return fail_before_start("--master-port is required on nodes other than node 0");
    }

    struct sigaction sa {};
    sa.sa_handler = on_launcher_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);

    std::string secret;
    if (!store_secret(&secret, &error)) return fail_before_start(error);
    const std::string master = o_.nnodes > 1 ? o_.master_addr : std::string("127.0.0.1");
    for (int i = 0; i < o_.nproc; ++i) {
      Rank r;
      r.global = o_.node_rank * o_.nproc + i;
      int pipefd[2];
      if (::pipe2(pipefd, O_CLOEXEC) != 0) return abort_all("pipe: " + std::string(std::strerror(errno)), -1);
      std::vector<std::pair<std::string, std::string>> env = {
          {"RANK", std::to_string(r.global)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(i)},
          {"LOCAL_WORLD_SIZE", std::to_string(o_.nproc)},
          {"GROUP_RANK", std::to_string(o_.node_rank)},
          {"MASTER_ADDR", master},
          {"MASTER_PORT", std::to_string(port)},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
          {"ODYSSEY_LAUNCHER_PID", std::to_string(::getpid())},
          {"ODYSSEY_RUN_DIR", dir_.root().string()},
          // The environment, not the command line: argv is world-readable in /proc.
          {kStoreSecretVariable, secret},
      };
      if (!cvd.empty()) env.push_back({"CUDA_VISIBLE_DEVICES", join(cvd)});
      if (const int threads = intra_op_threads_per_rank(o_.nproc); threads > 0)
        env.push_back({"OMP_NUM_THREADS", std::to_string(threads)});
      // Everything the child needs is prepared before fork: between fork and exec it only
      // calls async-signal-safe functions (the store's threads may hold locks).
      std::vector<std::string> env_strings;
      for (char** e = environ; *e; ++e) {
        const std::string kv = *e;
        const std::string key = kv.substr(0, kv.find('='));
        bool overridden = false;
        for (const auto& [k, v] : env) overridden = overridden || k == key;
        if (!overridden) env_strings.push_back(kv);
      }
      for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
      std::vector<char*> envp, argv;
      for (auto& e : env_strings) envp.push_back(e.data());
      envp.push_back(nullptr);
      argv.push_back(const_cast<char*>(o_.executable.c_str()));
      for (const auto& a : o_.arguments) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      static const char kExecFailed[] = "odyssey-train launcher: cannot execute the rank program\n";
      const pid_t parent = ::getpid();
      const pid_t pid = ::fork();
      if (pid < 0) return abort_all("fork: " + std::string(std::strerror(errno)), -1);
      if (pid == 0) {
        ::setpgid(0, 0);  // terminal signals reach the launcher only; it forwards them once
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);
        ::dup2(pipefd[1], 1);
        ::dup2(pipefd[1], 2);
        ::execve(argv[0], argv.data(), envp.data());
        (void)!::write(2, kExecFailed, sizeof kExecFailed - 1);
        ::_exit(127);
      }
      ::close(pipefd[1]);
      r.pid = pid;
      r.fd = pipefd[0];
      r.running = true;
      ranks_.push_back(std::move(r));
    }
    std::cout << "launcher: " << o_.nproc << " rank(s) on this node, world " << world << ", store " << master << ":"
              << port << (cvd.empty() ? std::string() : ", CUDA_VISIBLE_DEVICES=" + join(cvd)) << '\n';
    if (o_.nnodes > 1)
      std::cout << "launcher: the rendezvous store "
                << (o_.node_rank == 0 ? "listens on the network at " : "is reached over the network at ") << master
                << ":" << port << "; every request to it is authenticated with " << kStoreSecretVariable
                << ", which each node's launcher hands to its ranks from the job's environment (the same value on "
                   "every node)\n";
    std::cout << std::flush;
    return supervise();
  }

 private:
  static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
    return s;
  }

  // One node: a fresh secret for this run from the OS CSPRNG. Several: the one the job exported
  // (each node's launcher must hand its ranks the same), refused when missing.
  bool store_secret(std::string* secret, std::string* error) const {
    if (o_.nnodes > 1) {
      *error = multi_node_secret_problem();
      if (!error->empty()) return false;
      *secret = std::getenv(kStoreSecretVariable);
      return true;
    }
    try {
      *secret = generate_store_secret();
    } catch (const std::exception& e) {
      *error = std::string("no secret for the rendezvous store: ") + e.what();
      return false;
    }
    return true;
  }

  bool gpu_mapping(std::vector<std::string>* out, std::string* error) const {
    if (!o_.use_gpus) return true;
    std::vector<std::string> visible;
    if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES"); env && *env) {
      visible = split_list(env);
    } else {
      for (long i = 0; i < visible_device_count_; ++i) visible.push_back(std::to_string(i));
    }
    std::vector<long> ids = o_.gpu_ids;
    if (ids.empty())
      for (long i = 0; i < o_.nproc; ++i) ids.push_back(i);
    if (static_cast<int>(ids.size()) != o_.nproc) {
      *error = "gpu_ids lists " + std::to_string(ids.size()) + " GPU(s) for " + std::to_string(o_.nproc) + " processes";
      return false;
    }
    for (long id : ids) {
      if (id < 0 || id >= static_cast<long>(visible.size())) {
        *error = "gpu_ids: GPU " + std::to_string(id) + " does not exist; " + std::to_string(visible.size()) +
                 " GPU(s) are visible" +
                 (std::getenv("CUDA_VISIBLE_DEVICES")
                      ? " (CUDA_VISIBLE_DEVICES=" + std::string(std::getenv("CUDA_VISIBLE_DEVICES")) + ")"
                      : std::string());
        return false;
      }
      out->push_back(visible[static_cast<std::size_t>(id)]);
    }
    return true;
  }

 public:
  long visible_device_count_ = 0;

 private:
  void write_final(run::RunState state, int exit_code, const std::string& reason, int failed_rank,
                   const std::vector<std::string>& lines) {
    if (o_.node_rank != 0) return;
    run::StatusFile file(dir_.status());
    auto prev = file.read();
    run::RunStatus s = prev.ok() ? prev.value : run::RunStatus{};
    const bool rank0_said_failed = prev.ok() && s.state == run::RunState::Failed;
    // status.json's step is as old as rank 0's last heartbeat (every 5 s); events.jsonl has
    // every finished step.
    const run::EventsTail tail = run::read_events_tail(dir_.events());
    if (tail.last_step) {
      s.step = std::max(s.step, tail.last_step->step);
      if (s.total_steps == 0) s.total_steps = tail.last_step->total_steps;
    }
    s.state = state;
    s.run_id = dir_.run_id();
    s.launcher_pid = ::getpid();
    s.exit_code = exit_code;
    s.failed_rank = failed_rank;
    s.last_error_lines = lines;
    if (s.hostname.empty()) s.hostname = run::this_hostname();
    if (s.started_at == 0) s.started_at = run::unix_now();
    s.heartbeat = run::unix_now();
    // Rank 0's own reason (a NaN loss, bad data) says more than its exit code.
    s.reason = rank0_said_failed && failed_rank == 0 && !s.reason.empty() ? s.reason : reason;
    file.write(s);
    if (tail.ends_with_run_end) return;  // rank 0 said how its run ended
    auto w = run::EventWriter::open(dir_.events());
    if (!w.ok()) return;
    run::RunEndEvent e;
    e.status = state == run::RunState::Stopped ? run::RunOutcome::Stopped : run::RunOutcome::Failed;
    e.reason = reason;
    e.exit_code = exit_code;
    e.step = s.step;
    e.failed_rank = failed_rank;
    // elapsed_s counts from rank 0's start, which only its events know: the last one's
    // elapsed plus the wall time since it. Without events, from the launcher's own start.
    w.value.set_start(started_);
    if (tail.events > 0) {
      e.time = run::unix_now();
      e.elapsed_s = tail.last_elapsed_s + std::max(0.0, e.time - tail.last_time);
    }
    w.value.write(e);
  }

  int fail_before_start(const std::string& error) {
    std::cerr << "odyssey-train: " << error << '\n';
    write_final(run::RunState::Failed, 1, error, -1, {});
    return 1;
  }

  int abort_all(const std::string& error, int failed_rank) {
    kill_all(SIGKILL);
    reap_all(5.0);
    std::cerr << "odyssey-train: " << error << '\n';
    write_final(run::RunState::Failed, 1, error, failed_rank, {});
    return 1;
  }

  void kill_all(int sig) {
    for (auto& r : ranks_)
      if (r.running) ::kill(r.pid, sig);
  }

  void drain(Rank& r, bool block) {
    char buf[8192];
    for (;;) {
      if (!block) {
        pollfd p{r.fd, POLLIN, 0};
        if (::poll(&p, 1, 0) <= 0) return;
      }
      const ssize_t n = ::read(r.fd, buf, sizeof buf);
      if (n <= 0) {
        if (!r.partial.empty()) line(r, r.partial);
        r.partial.clear();
        ::close(r.fd);
        r.fd = -1;
        return;
      }
      r.partial.append(buf, static_cast<std::size_t>(n));
      std::size_t nl;
      while ((nl = r.partial.find('\n')) != std::string::npos) {
        line(r, r.partial.substr(0, nl));
        r.partial.erase(0, nl + 1);
      }
      // A line without end (a rank printing megabytes of one line) is passed on in pieces
      // instead of growing here without bound.
      if (r.partial.size() > kMaxPartialLine) {
        line(r, r.partial);
        r.partial.clear();
      }
      if (!block) continue;
    }
  }

  void line(Rank& r, const std::string& s) {
    r.tail.push_back(run::cut_line(s, 500));
    if (r.tail.size() > 20) r.tail.pop_front();
    if (r.global == 0) std::cout << s << '\n' << std::flush;
  }

  // Waits for every rank to exit (up to `seconds`, then SIGKILL), reading their output.
  void reap_all(double seconds) {
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    bool killed = false;
    for (;;) {
      bool any = false;
      for (auto& r : ranks_) {
        if (r.fd >= 0) drain(r, false);
        if (r.running && ::waitpid(r.pid, &r.status, WNOHANG) == r.pid) r.running = false;
        any = any || r.running;
      }
      if (!any) break;
      if (!killed && Clock::now() > until) {
        kill_all(SIGKILL);
        killed = true;
      }
      ::usleep(20000);
    }
    for (auto& r : ranks_)
      if (r.fd >= 0) drain(r, true);
  }

  int supervise() {
    int forwarded = 0;
    Clock::time_point stop_at{};
    for (;;) {
      std::vector<pollfd> fds;
      for (auto& r : ranks_)
        if (r.fd >= 0) fds.push_back({r.fd, POLLIN, 0});
      if (!fds.empty()) ::poll(fds.data(), fds.size(), 100);
      else ::usleep(100000);
      for (auto& r : ranks_)
        if (r.fd >= 0) drain(r, false);

      // Stop requests: the first is forwarded, a second (or the timeout) kills.
      const int sigs = g_signals.load();
      if (sigs >= 1 && forwarded == 0) {
        forwarded = 1;
        stop_at = Clock::now();
        std::cout << "launcher: stop requested; the ranks finish their step and rank 0 saves a checkpoint\n"
                  << std::flush;
        for (auto& r : ranks_)
          if (r.running) ::kill(r.pid, SIGTERM);
      }
      const bool timed_out =
          forwarded && std::chrono::duration<double>(Clock::now() - stop_at).count() > o_.stop_timeout_s;
      if (sigs >= 2 || timed_out) {
        const std::string why = sigs >= 2 ? "killed on a second stop request"
                                          : "killed: the ranks did not stop within " +
                                                std::to_string(static_cast<int>(o_.stop_timeout_s)) +
                                                " s of the stop request";
        std::cerr << "odyssey-train: " << why << '\n';
        kill_all(SIGKILL);
        reap_all(10);
        write_final(run::RunState::Stopped, 1, why, -1, {});
        return 1;
      }

      bool any_running = false;
      std::vector<Rank*> failed;
      for (auto& r : ranks_) {
        if (!r.running) continue;
        if (::waitpid(r.pid, &r.status, WNOHANG) != r.pid) {
          any_running = true;
          continue;
        }
        r.running = false;
        if (!(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0)) failed.push_back(&r);
      }
      // A rank failed: the others would wait for it in their next collective.
      if (!failed.empty()) return rank_failed(failed);
      if (!any_running) break;
    }
    for (auto& r : ranks_)
      if (r.fd >= 0) drain(r, true);
    return 0;
  }

  // What the failed rank said: its log (ranks other than 0 write their reason only there)
  // and its own output, noise filtered (run::failure_lines).
  std::vector<std::string> failure_lines_of(const Rank& r) const {
    return run::failure_lines(run::read_last_lines(dir_.rank_log(r.global), 200),
                              std::vector<std::string>(r.tail.begin(), r.tail.end()));
  }

  // `failed`: the ranks found exited abnormally in one look, which may be a fault and its
  // consequences (a peer that timed out waiting for it). The root cause is the one that
  // blames no other rank of the set; the others are killed with everything else.
  int rank_failed(const std::vector<Rank*>& failed) {
    const auto t_fail = Clock::now();
    for (Rank* f : failed)
      if (f->fd >= 0) drain(*f, true);
    Rank* root = failed.front();
    std::vector<std::vector<std::string>> said;
    for (Rank* f : failed) said.push_back(failure_lines_of(*f));
    for (std::size_t i = 0; i < failed.size() && failed.size() > 1; ++i) {
      bool blames_other = false;
      for (Rank* other : failed) blames_other = blames_other || (other != failed[i] && blames(said[i], other->global));
      if (!blames_other) {
        root = failed[i];
        break;
      }
    }
    kill_all(SIGKILL);
    reap_all(o_.rank_exit_grace_s);
    const double took = std::chrono::duration<double>(Clock::now() - t_fail).count();
    // Read again: the log may have grown while the others were stopped.
    const std::vector<std::string> lines = failure_lines_of(*root);
    const std::string own = own_reason(run::read_last_lines(dir_.rank_log(root->global), 200));
    const std::string why =
        "rank " + std::to_string(root->global) + " exited abnormally (" + describe_status(root->status) + ")" +
        (own.empty() ? std::string() : ": " + run::cut_line(own, 400)) + "; every other rank was stopped";
    std::cerr << "odyssey-train: " << why << " (in " << static_cast<int>(took * 1000) << " ms); its last lines:\n";
    for (const auto& l : lines) std::cerr << "  [rank " << root->global << "] " << l << '\n';
    const int code = exit_code_of(root->status);
    write_final(run::RunState::Failed, code == 0 ? 1 : code, why, root->global, lines);
    return 1;
  }

  static constexpr std::size_t kMaxPartialLine = std::size_t{1} << 20;
  const LaunchOptions& o_;
  run::RunDir dir_;
  std::vector<Rank> ranks_;
  const Clock::time_point started_ = Clock::now();
};

}  // namespace

int launch(const LaunchOptions& options) {
  Supervisor s(options);
  if (options.use_gpus) s.visible_device_count_ = static_cast<long>(torch::cuda::device_count());
  return s.run();
}

}  // namespace odyssey::dist
