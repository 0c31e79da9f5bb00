// status.json (atomic replace, round trip, version rules, stale detection) and the run
// directory layout (unique names, never reusing a directory).
#include <QtTest>

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "run/run_dir.h"
#include "run/status_file.h"

using namespace odyssey;
using namespace odyssey::run;
namespace fs = std::filesystem;

namespace {

QByteArray q(const std::string& s) { return QByteArray::fromStdString(s); }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RunStatus sample_status() {
  RunStatus s;
  s.state = RunState::Failed;
  s.run_id = "20241129-170640-qwen";
  s.pid = 4242;
  s.launcher_pid = 4240;
  s.hostname = "gpu-node-1";
  s.started_at = 1732900000.25;
  s.heartbeat = 1732900195.5;
  s.step = 101;
  s.total_steps = 1250;
  s.reason = "rank 1: CUDA out of memory";
  s.failed_rank = 1;
  s.exit_code = 1;
  s.last_error_lines = {"torch.OutOfMemoryError: CUDA out of memory.", "Tried to allocate 2.00 GiB \"x\""};
  return s;
}

// A pid that certainly does not exist: a child we started, waited for and reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int st = 0;
  ::waitpid(child, &st, 0);
  return child;
}

}  // namespace

class TstStatusFile : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path dir() const { return fs::path(tmp_.path().toStdString()); }

 private slots:
  void roundTrip() {
    StatusFile f(dir() / "status.json");
    const RunStatus s = sample_status();
    QVERIFY(f.write(s).empty());
    auto r = f.read();
    QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
    QCOMPARE(q(encode_status(r.value)), q(encode_status(s)));
    QVERIFY(r.value.state == RunState::Failed);
    QCOMPARE(r.value.pid, std::int64_t(4242));
    QCOMPARE(r.value.heartbeat, 1732900195.5);
    QCOMPARE(*r.value.exit_code, 1);
    QCOMPARE(r.value.last_error_lines.size(), std::size_t(2));
    QCOMPARE(q(r.value.last_error_lines[1]), QByteArray("Tried to allocate 2.00 GiB \"x\""));
    // No temporary file is left beside it.
    int files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir())) ++files;
    QCOMPARE(files, 1);
  }

  void unsetExitCodeIsNull() {
    RunStatus s;
    s.state = RunState::Running;
    const std::string text = encode_status(s);
    QVERIFY(text.find("\"exit_code\": null") != std::string::npos);
    QVERIFY(text.rfind("{\n  \"v\": \"1.0\",", 0) == 0);
    auto r = decode_status(text, "status.json");
    QVERIFY(r.ok());
    QVERIFY(!r.value.exit_code.has_value());
  }

  void versionAndUnknownFields() {
    auto r = decode_status("{\"v\":\"1.4\",\"state\":\"running\",\"pid\":7,\"gpu_temps\":[61,63]}", "status.json");
    QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
    QCOMPARE(r.value.pid, std::int64_t(7));
    r = decode_status("{\"v\":\"2.0\",\"state\":\"running\"}", "status.json");
    QVERIFY(!r.ok());
    QVERIFY2(format_all(r.diagnostics)
                     .find("status.json: error: schema version 2.x is newer than this "
                           "Odyssey understands (1.x); update Odyssey") != std::string::npos,
             format_all(r.diagnostics).c_str());
    r = decode_status("{\"v\":\"1.0\",\"state\":\"dancing\"}", "status.json");
    QVERIFY(!r.ok());
    QVERIFY(format_all(r.diagnostics).find("state: unknown state 'dancing'") != std::string::npos);
    r = decode_status("{\"v\":\"1.0\",\"state\":\"running\",\"pid\":\"seven\"}", "status.json");
    QVERIFY(!r.ok());
    QVERIFY(format_all(r.diagnostics).find("pid: must be an integer") != std::string::npos);
    r = decode_status("{\"v\":\"1.0\",\"sta", "status.json");
    QVERIFY(!r.ok());
    r = StatusFile(dir() / "absent.json").read();
    QVERIFY(!r.ok());
  }

  void readersNeverSeeAHalfFile() {
    // A reader polling while the writer replaces the file many times must always parse it.
    StatusFile f(dir() / "busy.json");
    RunStatus s = sample_status();
    s.last_error_lines.assign(200, std::string(100, 'e'));  // ~20 KB: many write() calls
    QVERIFY(f.write(s).empty());
    std::atomic<bool> done{false};
    std::thread writer([&] {
      RunStatus w = s;
      for (int i = 0; i < 300; ++i) {
        w.step = i;
        (void)f.write(w);
      }
      done = true;
    });
    int reads = 0, bad = 0;
    while (!done) {
      ++reads;
      if (!f.read().ok()) ++bad;
    }
    writer.join();
    QCOMPARE(bad, 0);
    QVERIFY(reads > 0);
  }

  void staleDetection() {
    const double now = unix_now();
    RunStatus s;
    s.state = RunState::Running;
    s.hostname = this_hostname();
    s.pid = ::getpid();
    s.heartbeat = now - 1;
    QVERIFY(liveness(s, now) == Liveness::Alive);
    QVERIFY(!is_stale(s, now));

    s.pid = dead_pid();  // on this host a dead pid is dead at once, heartbeat or not
    QVERIFY(liveness(s, now) == Liveness::Dead);
    QVERIFY(is_stale(s, now));
    s.launcher_pid = ::getpid();  // the launcher still lives: it will record the end
    QVERIFY(!is_stale(s, now));

    s.pid = ::getpid();
    s.launcher_pid = 0;
    s.heartbeat = now - 3600;  // alive pid, but silent for an hour: recycled pid or frozen
    QVERIFY(liveness(s, now) == Liveness::Silent);

    s.hostname = "some-other-host";  // only the heartbeat can tell
    s.pid = dead_pid();
    s.heartbeat = now - 10;
    QVERIFY(!is_stale(s, now, 60));
    s.heartbeat = now - 61;
    QVERIFY(is_stale(s, now, 60));
    s.heartbeat = std::nan("");
    QVERIFY(is_stale(s, now, 60));

    s.state = RunState::Completed;  // finished jobs are not stale, they are done
    QVERIFY(liveness(s, now) == Liveness::Finished);
    QVERIFY(!is_stale(s, now));
  }

  void runDirLayout() {
    const RunDir d(dir() / "r1");
    QCOMPARE(q(d.events().string()), q((dir() / "r1/events.jsonl").string()));
    QCOMPARE(q(d.status().filename().string()), QByteArray("status.json"));
    QCOMPARE(q(d.config().filename().string()), QByteArray("config.yaml"));
    QCOMPARE(q(d.rank_log(3).string()), q((dir() / "r1/logs/rank-3.log").string()));
    QCOMPARE(q(d.checkpoint(500).string()), q((dir() / "r1/checkpoints/checkpoint-500").string()));
    QCOMPARE(q(d.run_id()), QByteArray("r1"));
  }

  void createRunDirIsUniqueAndNeverReuses() {
    const fs::path out = dir() / "output" / "nested";
    const auto t = std::chrono::system_clock::from_time_t(1732900000);  // 2024-11-29 17:06:40 UTC
    auto a = create_run_dir(out, "Qwen/Qwen2.5 7B (LoRA)", t);
    QVERIFY2(a.ok(), format_all(a.diagnostics).c_str());
    QCOMPARE(q(a.value.run_id()), QByteArray("20241129-170640-Qwen-Qwen2.5-7B-LoRA"));
    QVERIFY(fs::is_directory(a.value.logs_dir()));
    QVERIFY(fs::is_directory(a.value.checkpoints_dir()));
    std::ofstream(a.value.events()) << "x\n";
    auto b = create_run_dir(out, "Qwen/Qwen2.5 7B (LoRA)", t);
    QVERIFY(b.ok());
    QCOMPARE(q(b.value.run_id()), QByteArray("20241129-170640-Qwen-Qwen2.5-7B-LoRA-2"));
    QCOMPARE(q(slurp(a.value.events())), QByteArray("x\n"));  // untouched
    auto c = create_run_dir(out, "", t);
    QVERIFY(c.ok());
    QCOMPARE(q(c.value.run_id()), QByteArray("20241129-170640"));
    QCOMPARE(q(run_name_slug("../../etc")), QByteArray("etc"));
    QCOMPARE(q(run_name_slug("\xe2\x80\x94")), QByteArray(""));
    QVERIFY(RunDir::looks_like_run(a.value.root()));
    QVERIFY(!RunDir::looks_like_run(c.value.root()));

    fs::create_directories(a.value.checkpoint(20));
    fs::create_directories(a.value.checkpoint(100));
    fs::create_directories(a.value.checkpoints_dir() / "checkpoint-x");
    QCOMPARE(a.value.checkpoint_steps(), (std::vector<std::int64_t>{20, 100}));

    // A file where the output directory should be is reported, not thrown.
    std::ofstream(dir() / "blocker") << "";
    auto e = create_run_dir(dir() / "blocker", "x", t);
    QVERIFY(!e.ok());
  }
};

QTEST_APPLESS_MAIN(TstStatusFile)
#include "tst_status_file.moc"
