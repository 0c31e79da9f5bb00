// Single-owner run directories (core/run/run_lock.h, docs/run-contract.md "Ownership"), with
// real processes: a second owner is refused while the first lives and let in once it died
// (however it died); processes the owner starts do not inherit the lock; directories that
// hold an earlier run are refused whoever asks, naming why. Also the readers the launcher
// uses after a failure: the tail of events.jsonl and a failed rank's lines.
#include <QtTest>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "run/event_writer.h"
#include "run/run_dir.h"
#include "run/run_lock.h"
#include "run/status_file.h"

using namespace odyssey;
using namespace odyssey::run;
namespace fs = std::filesystem;

namespace {

struct ChildClaim {
  bool ok = false;
  std::string message;
};

// claim_run_dir in a child process (another owner, as a second launch would be).
ChildClaim claim_in_child(const RunDir& dir) {
  int p[2];
  if (::pipe(p) != 0) qFatal("pipe");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    auto c = claim_run_dir(dir);
    const std::string out = (c.ok() ? "ok\n" : "refused\n") + format_all(c.diagnostics);
    (void)!::write(p[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(p[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  ChildClaim c;
  c.ok = got.rfind("ok\n", 0) == 0;
  c.message = got.substr(got.find('\n') + 1);
  return c;
}

// Whether process `pid` has `file` open (its /proc fd table).
bool has_open(pid_t pid, const fs::path& file) {
  std::error_code ec;
  for (fs::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end; !ec && it != end; it.increment(ec))
    if (fs::read_symlink(it->path(), ec) == fs::canonical(file)) return true;
  return false;
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

}  // namespace

class TstRunLock : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir tmp_;
  int n_ = 0;
  RunDir fresh() {
    const fs::path root = fs::path(tmp_.path().toStdString()) / ("run-" + std::to_string(++n_));
    return RunDir(root);
  }

 private Q_SLOTS:
  void secondOwnerIsRefusedWhileTheFirstLives() {
    const RunDir dir = fresh();
    auto first = claim_run_dir(dir);
    QVERIFY2(first.ok(), format_all(first.diagnostics).c_str());
    QVERIFY(first.value.lock.held());
    QVERIFY(!first.value.inherited);
    QVERIFY(fs::is_directory(dir.logs_dir()) && fs::is_directory(dir.checkpoints_dir()));
    const auto owner = read_lock_owner(dir);
    QVERIFY(owner);
    QCOMPARE(owner->pid, static_cast<std::int64_t>(::getpid()));
    QCOMPARE(owner->hostname, this_hostname());

    const ChildClaim second = claim_in_child(dir);
    QVERIFY(!second.ok);
    qInfo("second owner: %s", second.message.c_str());
    QVERIFY2(second.message.find(dir.root().string()) != std::string::npos, second.message.c_str());
    QVERIFY2(
        second.message.find("another live process owns it (pid " + std::to_string(::getpid())) != std::string::npos,
        second.message.c_str());

    first.value.lock.release();
    QVERIFY(claim_in_child(dir).ok);  // nothing was written: the directory holds no run yet
  }

  void deadOwnerReleasesTheLock() {
    const RunDir dir = fresh();
    // The owner dies by SIGKILL while holding the lock: the kernel drops it.
    int p[2];
    QVERIFY(::pipe(p) == 0);
    const pid_t owner = ::fork();
    if (owner == 0) {
      auto c = claim_run_dir(dir);
      (void)!::write(p[1], c.ok() ? "y" : "n", 1);
      for (;;) ::pause();
    }
    char c = 0;
    QVERIFY(::read(p[0], &c, 1) == 1);
    ::close(p[0]);
    ::close(p[1]);
    QCOMPARE(c, 'y');
    QVERIFY(!claim_in_child(dir).ok);
    ::kill(owner, SIGKILL);
    int st = 0;
    ::waitpid(owner, &st, 0);
    const ChildClaim after = claim_in_child(dir);
    QVERIFY2(after.ok, after.message.c_str());
  }

  // The lock file is opened O_CLOEXEC: a program the owner starts does not hold it, so it
  // cannot keep the directory owned after the owner is gone.
  void startedProgramsDoNotInheritTheLock() {
    const RunDir dir = fresh();
    auto claim = claim_run_dir(dir);
    QVERIFY(claim.ok());
    const pid_t child = ::fork();
    if (child == 0) {
      ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    auto exe = [child] {
      std::error_code ec;
      return fs::read_symlink("/proc/" + std::to_string(child) + "/exe", ec).filename().string();
    };
    QTRY_COMPARE_WITH_TIMEOUT(exe(), std::string("sleep"), 5000);
    QVERIFY(has_open(::getpid(), dir.lock_file()));
    QVERIFY2(!has_open(child, dir.lock_file()), "the started program holds the lock file open");
    claim.value.lock.release();
    const ChildClaim next = claim_in_child(dir);  // the sleeping child lives on
    ::kill(child, SIGKILL);
    int st = 0;
    ::waitpid(child, &st, 0);
    QVERIFY2(next.ok, next.message.c_str());
  }

  // A process whose parent holds the lock (a rank of the launcher) runs inside that
  // ownership; any other process naming the same launcher pid is refused.
  void launcherChildIsAccepted() {
    const RunDir dir = fresh();
    auto claim = claim_run_dir(dir);
    QVERIFY(claim.ok());
    int p[2];
    QVERIFY(::pipe(p) == 0);
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child == 0) {
      auto c = claim_run_dir(dir, parent);
      (void)!::write(p[1], c.ok() && c.value.inherited && !c.value.lock.held() ? "y" : "n", 1);
      ::_exit(0);
    }
    char c = 0;
    QVERIFY(::read(p[0], &c, 1) == 1);
    ::close(p[0]);
    ::close(p[1]);
    int st = 0;
    ::waitpid(child, &st, 0);
    QCOMPARE(c, 'y');
    // A grandchild names the same launcher pid, but its parent is not the launcher.
    QVERIFY(::pipe(p) == 0);
    const pid_t middle = ::fork();
    if (middle == 0) {
      const pid_t grandchild = ::fork();
      if (grandchild == 0) {
        auto g = claim_run_dir(dir, parent);
        (void)!::write(p[1], g.ok() ? "y" : "n", 1);
        ::_exit(0);
      }
      int s = 0;
      ::waitpid(grandchild, &s, 0);
      ::_exit(0);
    }
    c = 0;
    QVERIFY(::read(p[0], &c, 1) == 1);
    ::close(p[0]);
    ::close(p[1]);
    ::waitpid(middle, &st, 0);
    QCOMPARE(c, 'n');
  }

  void earlierRunsAreRefused_data() {
    QTest::addColumn<QString>("what");
    QTest::addColumn<QString>("expected");
    QTest::newRow("completed status") << "status-completed"
                                      << "status.json: completed at step 10";
    QTest::newRow("running status, owner gone") << "status-running"
                                                << "its owner is gone without finishing it";
    QTest::newRow("run_end event") << "events-end"
                                   << "events.jsonl: run_end completed at step 10";
    QTest::newRow("events without run_end") << "events-open"
                                            << "(last step 3) whose owner is gone without a run_end";
    QTest::newRow("a checkpoint") << "checkpoint"
                                  << "checkpoints/ holds 1 checkpoint(s) of an earlier run (the last checkpoint-10)";
    QTest::newRow("a file") << "file"
                            << "it exists and is not a directory";
  }
  void earlierRunsAreRefused() {
    QFETCH(QString, what);
    QFETCH(QString, expected);
    const RunDir dir = fresh();
    if (what == "file") {
      write_text(dir.root(), "x");
    } else {
      fs::create_directories(dir.root());
    }
    if (what.startsWith("status")) {
      RunStatus s;
      s.run_id = dir.run_id();
      s.state = what == "status-completed" ? RunState::Completed : RunState::Running;
      s.step = 10;
      s.launcher_pid = 12345;
      QVERIFY(StatusFile(dir.status()).write(s).empty());
    }
    if (what.startsWith("events")) {
      auto w = EventWriter::open(dir.events());
      QVERIFY(w.ok());
      StepEvent st;
      st.step = 3;
      st.loss = 1.5;
      w.value.write(st);
      if (what == "events-end") {
        RunEndEvent e;
        e.step = 10;
        w.value.write(e);
      }
    }
    if (what == "checkpoint") fs::create_directories(dir.checkpoint(10));
    const auto c = claim_run_dir(dir);
    QVERIFY(!c.ok());
    const std::string m = format_all(c.diagnostics);
    qInfo("%s", m.c_str());
    QVERIFY2(m.find(dir.root().string()) != std::string::npos, m.c_str());
    QVERIFY2(m.find(expected.toStdString()) != std::string::npos, m.c_str());
    // Refused means untouched: not even a lock file or logs/ was added to the earlier run.
    QVERIFY(!fs::exists(dir.lock_file()));
    QVERIFY(!fs::exists(dir.logs_dir()));
  }

  void eventsTailSkipsTheUnfinishedLine() {
    const RunDir dir = fresh();
    fs::create_directories(dir.root());
    {
      auto w = EventWriter::open(dir.events());
      QVERIFY(w.ok());
      for (int i = 1; i <= 3; ++i) {
        StepEvent st;
        st.step = i;
        st.loss = 2.0;
        st.time = 1000.0 + i;
        st.elapsed_s = 10.0 * i;
        w.value.write(st);
      }
    }
    {
      std::ofstream out(dir.events(), std::ios::app | std::ios::binary);
      // A writer died mid-line. (No raw string here: moc's lexer does not know them.)
      out << "{\"v\":\"1.0\",\"type\":\"step\",\"time\":2000,\"elapsed_s\":99,\"step\":4,\"lo";
    }
    const EventsTail t = read_events_tail(dir.events());
    QVERIFY(t.last_step);
    QCOMPARE(t.last_step->step, std::int64_t{3});
    QCOMPARE(t.last_elapsed_s, 30.0);
    QCOMPARE(t.last_time, 1003.0);
    QVERIFY(!t.ends_with_run_end);
    // A window that starts inside line 2: that line is not taken for an event.
    std::ifstream in(dir.events(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::size_t line3 = 0;
    for (int i = 0; i < 2; ++i) line3 = text.find('\n', line3) + 1;
    const EventsTail small = read_events_tail(dir.events(), text.size() - (line3 - 5));
    QCOMPARE(small.events, 1);
    QVERIFY(small.last_step && small.last_step->step == 3);
    QCOMPARE(read_events_tail(dir.root() / "missing.jsonl").bytes, std::uintmax_t{0});
  }

  void failureLinesKeepTheReason() {
    // What rank 1 of a run whose rank 0 stalled said: its log, and c10d's warnings on stderr.
    const std::vector<std::string> log = {
        "[load_model] model loaded", "step 3/500  loss 6.9",
        "failed: error at step 4: all_to_all on the ulysses group: rank 1 got nothing from rank 0 within 5 s"};
    std::vector<std::string> out;
    for (int i = 0; i < 30; ++i)
      out.push_back("[W1201 12:00:0" + std::to_string(i % 10) +
                    ".123 socket.cpp:462] [c10d] The server socket has failed to listen on any local network address.");
    const auto lines = failure_lines(log, out, 20);
    QCOMPARE(lines.size(), std::size_t{3});
    QCOMPARE(lines.back(), log.back());
    // Only noise: then the noise is the reason.
    QCOMPARE(failure_lines({}, {out.front()}, 20), std::vector<std::string>{out.front()});
    // The reason said before 25 ordinary lines still leads the window.
    std::vector<std::string> chatty = {"Error: tokenizer.json: unexpected end of input"};
    for (int i = 0; i < 25; ++i) chatty.push_back("line " + std::to_string(i));
    const auto kept = failure_lines(chatty, {}, 20);
    QCOMPARE(kept.size(), std::size_t{20});
    QCOMPARE(kept.front(), chatty.front());
    QCOMPARE(kept.back(), chatty.back());
    // Lines the rank printed and logged both are counted once.
    QCOMPARE(failure_lines({"a", "b"}, {"b", "c"}, 20), (std::vector<std::string>{"a", "b", "c"}));
  }

  void lastLinesAreBounded() {
    const fs::path f = fs::path(tmp_.path().toStdString()) / "huge.log";
    write_text(f, "first\n" + std::string(100000, 'x') + "\nlast\n");
    const auto lines = read_last_lines(f, 10);
    QCOMPARE(lines.size(), std::size_t{3});
    QVERIFY(lines[1].size() < 600);
    QVERIFY2(lines[1].find("(100000 bytes)") != std::string::npos, lines[1].c_str());
    QCOMPARE(lines[2], std::string("last"));
    // A FIFO under a log's name is not waited on.
    const fs::path fifo = fs::path(tmp_.path().toStdString()) / "fifo.log";
    QVERIFY(::mkfifo(fifo.c_str(), 0644) == 0);
    QVERIFY(read_last_lines(fifo, 10).empty());
  }
};

QTEST_GUILESS_MAIN(TstRunLock)
#include "tst_run_lock.moc"
