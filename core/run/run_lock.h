// RunLock: a run directory has one owner for its whole life (docs/run-contract.md,
// "Ownership"). The owner holds an exclusive flock(2) on <run>/run.lock: Odyssey's launcher
// for a parallel run, else the single process or rank 0 (torchrun, Slurm). The kernel drops
// the lock when its holder dies, however it dies, so a lock that is held names a live owner
// and a crashed run never blocks a directory for ever.
//
// Why a lock and not only "does status.json exist": two launches that both look before
// either writes would both find an empty directory; flock decides between them atomically.
// The file is opened O_CLOEXEC, so the processes an owner starts (its ranks, a compiler)
// do not inherit the descriptor and cannot keep the lock held after the owner is gone; the
// launcher's own ranks are recognised instead through the pid written in the file.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/diagnostic.h"
#include "run/run_dir.h"

namespace odyssey::run {

class RunLock {
 public:
  RunLock() = default;
  ~RunLock() { release(); }
  RunLock(RunLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  bool held() const { return fd_ >= 0; }
  void release();

 private:
  friend struct RunLockAccess;
  int fd_ = -1;
};

// Who holds a run directory's lock, as its holder wrote it into the lock file.
struct RunLockOwner {
  std::int64_t pid = 0;
  std::string hostname;
};

// A run directory claimed for a new run. `inherited`: the lock is held by the launcher
// that started this process, which therefore runs inside that launcher's ownership.
struct RunClaim {
  RunLock lock;  // not held when inherited
  bool inherited = false;
};

// Why `dir` cannot hold a new run, from what earlier runs left there; "" when it can.
// Refused: status.json recording a finished run (completed, failed, stopped) or, unless it
// was written by `own_launcher_pid`'s run, any other state (its owner died: the lock was
// free); events.jsonl holding any event; a checkpoint in checkpoints/. Only a reader: the
// caller holds the lock, so nothing changes between this look and the run's first write.
std::string reuse_refusal(const RunDir& dir, std::int64_t own_launcher_pid = 0);

// Claims `dir` (created if missing, with logs/ and checkpoints/) for a new run, without
// waiting: takes the lock, or accepts that `launcher_pid` holds it when that is this
// process's parent on this host (a rank the launcher started), then checks reuse_refusal.
// Refusals name the directory and why: another live owner (pid, host), a finished run.
Result<RunClaim> claim_run_dir(const RunDir& dir, pid_t launcher_pid = 0);

// The owner written into `dir`'s lock file (nullopt when there is none or it is garbled).
// It says who held the lock last; whether it is still held only flock can tell.
std::optional<RunLockOwner> read_lock_owner(const RunDir& dir);

}  // namespace odyssey::run
