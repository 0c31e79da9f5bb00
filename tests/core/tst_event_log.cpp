// events.jsonl: the golden file pins the schema byte for byte (regenerate it with
// ODYSSEY_UPDATE_GOLDEN=1 only when docs/run-contract.md changes with it); the reader is
// fed half lines, garbage, binary junk, newer versions, truncation and replacement.
#include <QtTest>

#include <sys/resource.h>

#include <csignal>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <sstream>

#include "run/event_reader.h"
#include "run/event_schema.h"
#include "run/event_writer.h"

using namespace odyssey;
using namespace odyssey::run;

namespace {

const std::string kData = std::string(ODYSSEY_TEST_DATA_DIR) + "/events/";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

QByteArray q(const std::string& s) { return QByteArray::fromStdString(s); }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void put(const std::string& path, const std::string& bytes, bool append) {
  std::ofstream out(path, std::ios::binary | (append ? std::ios::app : std::ios::trunc));
  out << bytes;
}

// One event of every type with fixed values: what the golden file holds.
std::vector<Event> sample_events() {
  RunStartEvent start;
  start.time = 1732900000.25;
  start.elapsed_s = 0.0;
  start.run_id = "20241129-170640-qwen2.5-7b";
  start.odyssey_version = "0.1.0";
  start.config_path = "config.yaml";
  start.hostname = "gpu-node-1";
  start.mesh = {2, 1, 2, 2, 1, 1, 2};
  start.devices = {{0, "NVIDIA H200", 150754820096}, {1, "NVIDIA H200", 150754820096}};
  start.totals = {20000, 81920000, 1250, 2.0};
  start.model = {"Qwen/Qwen2.5-7B-Instruct", 7615616512, 40370176};

  StageEvent stage{1732900003.5, 3.25, "load_model", "loading 4 safetensors shards"};

  StepEvent step;
  step.time = 1732900060.125;
  step.elapsed_s = 59.875;
  step.step = 10;
  step.total_steps = 1250;
  step.epoch = 0.016;
  step.loss = 2.3456789;
  step.lr = 1e-05;
  step.grad_norm = 0.8125;
  step.tokens = 65536;
  step.tokens_total = 655360;
  step.tokens_per_s = 12345.5;
  step.step_time_s = 5.3085;
  step.eta_s = 6583.5;
  step.memory = {{0, 60129542144, 98784247808, 107374182400}, {1, 60129542144, 97710505984, 105226698752}};
  step.collectives = {{"all_to_all", "ulysses", 2, 112, 7516192768, 0.0625, 60.129542144},
                      {"all_reduce", "world", 2, 4, 30462466048, 0.25, 121.849864192}};
  step.comm_wait_s = 0.3125;

  StepEvent diverged = step;  // a NaN loss and an overflowing gradient must reach the chart
  diverged.time = 1732900065.5;
  diverged.elapsed_s = 65.25;
  diverged.step = 11;
  diverged.loss = kNaN;
  diverged.grad_norm = kInf;
  diverged.lr = -kInf;
  diverged.memory.clear();
  diverged.collectives.clear();
  diverged.comm_wait_s = 0;
  diverged.aux_loss = 2.0625;  // an MoE run's load-balancing loss (docs/run-contract.md)

  EvalEvent eval{1732900100.0, 99.75, 100, 1.875, 409600, 200, 12.5, {{"accuracy", 0.625}, {"ppl", kNaN}}};
  CheckpointEvent ckpt{1732900130.0, 129.75, 100, "checkpoints/checkpoint-100", 15231233024, 28.5};
  WarningEvent warn{1732900131.0, 130.75, "loss_spike", "loss rose 4.2x in one step \xe2\x80\x94 \"check lr\"", 1, 101};
  RunEndEvent end{1732900200.0, 199.75, RunOutcome::Failed, "rank 1: CUDA out of memory", 1, 101, 1};
  return {start, stage, step, diverged, eval, ckpt, warn, end};
}

PollResult poll_file(const std::string& path, EventReaderOptions o = {}) {
  EventReader r(path, o);
  return r.poll();
}

std::vector<int> lines_of(const PollResult& r, Severity s = Severity::Error) {
  std::vector<int> lines;
  for (const auto& d : r.diagnostics)
    if (d.severity == s) lines.push_back(d.line);
  return lines;
}

std::vector<int> event_lines(const PollResult& r) {
  std::vector<int> lines;
  for (const auto& e : r.events) lines.push_back(e.line);
  return lines;
}

std::string good_line(std::int64_t step) {
  StepEvent s;
  s.time = 1700000000.0 + static_cast<double>(step);
  s.step = step;
  s.loss = 1.5;
  return encode_event(s) + "\n";
}

}  // namespace

class TstEventLog : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  std::string file(const char* name) { return tmp_.filePath(name).toStdString(); }

 private slots:
  void goldenFileMatchesWriter() {
    const std::string out = file("golden.jsonl");
    auto w = EventWriter::open(out);
    QVERIFY2(w.ok(), format_all(w.diagnostics).c_str());
    for (const auto& e : sample_events()) QVERIFY(w.value.write(e).empty());
    w.value.close();
    const std::string golden = kData + "golden.jsonl";
    if (qEnvironmentVariableIsSet("ODYSSEY_UPDATE_GOLDEN")) put(golden, slurp(out), false);
    const std::string want = slurp(golden), got = slurp(out);
    std::istringstream a(want), b(got);
    std::string la, lb;
    int n = 0;
    while (std::getline(a, la) && std::getline(b, lb)) {
      ++n;
      QVERIFY2(la == lb,
               qPrintable(QString("golden.jsonl line %1 differs:\n want %2\n got  %3").arg(n).arg(q(la)).arg(q(lb))));
    }
    QCOMPARE(q(got), q(want));  // also catches a missing golden file and a line count change
  }

  void roundTripEveryEventType() {
    const auto samples = sample_events();
    const PollResult r = poll_file(kData + "golden.jsonl");
    QVERIFY2(r.diagnostics.empty(), format_all(r.diagnostics).c_str());
    QCOMPARE(r.events.size(), samples.size());
    std::set<std::string> types;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      QCOMPARE(r.events[i].line, int(i) + 1);
      QCOMPARE(r.events[i].event.index(), samples[i].index());
      QCOMPARE(q(encode_event(r.events[i].event)), q(encode_event(samples[i])));
      types.insert(std::string(event_type_name(r.events[i].event)));
    }
    QCOMPARE(types.size(), std::size_t(7));  // every type but UnknownEvent

    // Spot checks on decoded values, independent of the encoder.
    const auto& start = std::get<RunStartEvent>(r.events[0].event);
    QCOMPARE(start.mesh.ulysses, 2);
    QCOMPARE(start.devices.at(1).memory_bytes, std::int64_t(150754820096));
    QCOMPARE(start.model.trainable_params, std::int64_t(40370176));
    const auto& step = std::get<StepEvent>(r.events[2].event);
    QCOMPARE(step.loss, 2.3456789);
    QCOMPARE(step.lr, 1e-05);
    QCOMPARE(step.memory.at(1).vram_peak_bytes, std::int64_t(97710505984));
    QCOMPARE(step.memory.at(0).fragmentation_bytes(), std::int64_t(107374182400 - 60129542144));
    QCOMPARE(q(step.collectives.at(0).group), QByteArray("ulysses"));
    QCOMPARE(step.collectives.at(1).bus_bandwidth_gb_per_s, 121.849864192);
    const auto& bad = std::get<StepEvent>(r.events[3].event);
    QVERIFY(std::isnan(bad.loss));
    QVERIFY(std::isinf(bad.grad_norm) && bad.grad_norm > 0);
    QVERIFY(std::isinf(bad.lr) && bad.lr < 0);
    const auto& eval = std::get<EvalEvent>(r.events[4].event);
    QCOMPARE(eval.metrics.at("accuracy"), 0.625);
    QVERIFY(std::isnan(eval.metrics.at("ppl")));
    QCOMPARE(q(std::get<WarningEvent>(r.events[6].event).message), q(std::get<WarningEvent>(samples[6]).message));
    const auto& end = std::get<RunEndEvent>(r.events[7].event);
    QVERIFY(end.status == RunOutcome::Failed);
    QCOMPARE(end.failed_rank, 1);
  }

  void nonFiniteNumbersAreStrings() {
    const std::string line = encode_event(sample_events()[3]);
    QVERIFY(line.find("\"loss\":\"NaN\"") != std::string::npos);
    QVERIFY(line.find("\"grad_norm\":\"Infinity\"") != std::string::npos);
    QVERIFY(line.find("\"lr\":\"-Infinity\"") != std::string::npos);
    // Hand-written: the three strings, and null as other JSON writers print a NaN.
    const PollResult r = poll_file(kData + "nan_loss.jsonl");
    QVERIFY2(r.diagnostics.empty(), format_all(r.diagnostics).c_str());
    QCOMPARE(r.events.size(), std::size_t(4));
    QVERIFY(std::isnan(std::get<StepEvent>(r.events[0].event).loss));
    QCOMPARE(std::get<StepEvent>(r.events[1].event).loss, kInf);
    QCOMPARE(std::get<StepEvent>(r.events[2].event).loss, -kInf);
    QVERIFY(std::isnan(std::get<StepEvent>(r.events[3].event).loss));
  }

  void halfLineWaitsForItsEnd() {
    const std::string path = file("half.jsonl");
    const std::string l1 = good_line(1), l2 = good_line(2);
    put(path, l1 + l2.substr(0, 17), false);
    EventReader r(path);
    PollResult p = r.poll();
    QCOMPARE(event_lines(p), std::vector<int>{1});
    QVERIFY(p.diagnostics.empty());
    QVERIFY(r.has_partial_line());
    put(path, l2.substr(17), true);
    p = r.poll();
    QCOMPARE(event_lines(p), std::vector<int>{2});
    QCOMPARE(std::get<StepEvent>(p.events[0].event).step, std::int64_t(2));
    QVERIFY(!r.has_partial_line());
    QVERIFY(r.poll().events.empty());
  }

  void byteByByteAppendReadsEverything() {
    const std::string golden = slurp(kData + "golden.jsonl");
    const std::string path = file("trickle.jsonl");
    put(path, "", false);
    EventReader r(path);
    std::size_t events = 0;
    for (char c : golden) {
      put(path, std::string(1, c), true);
      PollResult p = r.poll();
      QVERIFY2(p.diagnostics.empty(), format_all(p.diagnostics).c_str());
      events += p.events.size();
    }
    QCOMPARE(events, sample_events().size());
  }

  void truncatedLastLineFixture() {
    EventReader r(kData + "truncated_last_line.jsonl");
    const PollResult p = r.poll();
    QVERIFY2(p.diagnostics.empty(), format_all(p.diagnostics).c_str());
    QCOMPARE(event_lines(p), (std::vector<int>{1, 2}));
    QVERIFY(r.has_partial_line());
  }

  void garbageLinesReportedWithLineNumbers() {
    const PollResult p = poll_file(kData + "garbage.jsonl");
    QCOMPARE(event_lines(p), (std::vector<int>{1, 4, 9, 11}));
    QCOMPARE(lines_of(p), (std::vector<int>{2, 3, 5, 6, 7, 8, 10}));
    const std::string all = format_all(p.diagnostics);
    QVERIFY2(all.find("garbage.jsonl:2: error: not valid JSON") != std::string::npos, all.c_str());
    QVERIFY2(all.find(":5: error: loss: must be a number") != std::string::npos, all.c_str());
    QVERIFY2(all.find(":6: error: step: missing required field") != std::string::npos, all.c_str());
    QVERIFY2(all.find(":7: error: memory[1].rank: must be an integer") != std::string::npos, all.c_str());
    QVERIFY2(all.find(":8: error: status: unknown run status 'exploded'") != std::string::npos, all.c_str());
    QVERIFY2(all.find(":10: error: not a JSON object") != std::string::npos, all.c_str());
  }

  void binaryJunkIsSkipped() {
    const PollResult p = poll_file(kData + "binary_junk.jsonl");
    QCOMPARE(event_lines(p), (std::vector<int>{1, 5}));
    QCOMPARE(lines_of(p), (std::vector<int>{2, 3, 4}));
  }

  void unknownFieldsAndTypesAreIgnored() {
    const PollResult p = poll_file(kData + "unknown_fields.jsonl");
    QCOMPARE(lines_of(p), std::vector<int>{});
    QCOMPARE(event_lines(p), (std::vector<int>{1, 2, 3}));
    QCOMPARE(std::get<StepEvent>(p.events[0].event).loss, 0.5);
    const auto& u = std::get<UnknownEvent>(p.events[1].event);
    QCOMPARE(q(u.type), QByteArray("profile_trace"));
    QCOMPARE(u.time, 1700000001.0);
    QVERIFY(u.raw.find("\"kernel\"") != std::string::npos);
    QCOMPARE(std::get<StepEvent>(p.events[2].event).step, std::int64_t(3));
    // A newer minor version is read, with one note saying so.
    QCOMPARE(lines_of(p, Severity::Note), std::vector<int>{2});
  }

  void newerMajorVersionIsRefused() {
    const std::string path = file("newer.jsonl");
    put(path, slurp(kData + "newer_major.jsonl"), false);
    EventReader r(path);
    PollResult p = r.poll();
    QCOMPARE(event_lines(p), std::vector<int>{1});
    QCOMPARE(lines_of(p), std::vector<int>{2});
    const std::string msg = p.diagnostics.at(0).format();
    QVERIFY2(msg.find("newer.jsonl:2: error: schema version 2.x is newer than this Odyssey "
                      "understands (1.x); update Odyssey") != std::string::npos,
             msg.c_str());
    QVERIFY(r.refused());
    put(path, good_line(9), true);
    p = r.poll();  // nothing after the refused line is read, however valid
    QVERIFY(p.events.empty() && p.diagnostics.empty());
  }

  void truncationAndReplacementRestart() {
    const std::string path = file("restart.jsonl");
    put(path, good_line(1) + good_line(2) + good_line(3), false);
    EventReader r(path);
    QCOMPARE(r.poll().events.size(), std::size_t(3));

    put(path, good_line(7), false);  // truncated in place: smaller
    PollResult p = r.poll();
    QVERIFY(p.restarted);
    QCOMPARE(lines_of(p, Severity::Warning), std::vector<int>{0});
    QCOMPARE(event_lines(p), std::vector<int>{1});
    QCOMPARE(std::get<StepEvent>(p.events[0].event).step, std::int64_t(7));

    // Replaced by another file (new inode) that is longer than what was read.
    const std::string other = file("other.jsonl");
    put(other, good_line(4) + good_line(5) + good_line(6) + good_line(8), false);
    QVERIFY(std::rename(other.c_str(), path.c_str()) == 0);
    p = r.poll();
    QVERIFY(p.restarted);
    QCOMPARE(event_lines(p), (std::vector<int>{1, 2, 3, 4}));

    // Rewritten in place (same inode) and already longer: the first bytes tell.
    put(path, good_line(100) + good_line(101) + good_line(102) + good_line(103) + good_line(104), false);
    p = r.poll();
    QVERIFY(p.restarted);
    QCOMPARE(p.events.size(), std::size_t(5));
    QVERIFY(!r.poll().restarted);
  }

  void overlongLineIsSkippedWithoutHoldingIt() {
    const std::string path = file("long.jsonl");
    put(path, good_line(1) + "{\"v\":\"1.0\",\"type\":\"warning\",\"message\":\"" + std::string(3u << 20, 'x'), false);
    EventReader r(path);
    PollResult p = r.poll();
    QCOMPARE(event_lines(p), std::vector<int>{1});
    QCOMPARE(lines_of(p), std::vector<int>{2});  // reported before its end arrives
    QVERIFY(p.diagnostics[0].message.find("longer than 1048576 bytes") != std::string::npos);
    put(path, std::string(1u << 20, 'y') + "\"}\n" + good_line(3), true);
    p = r.poll();
    QCOMPARE(event_lines(p), std::vector<int>{3});
    QVERIFY(p.diagnostics.empty());  // the same line is not reported twice
    // A complete long line arriving in one poll.
    put(path, std::string(2u << 20, 'z') + "\n" + good_line(5), true);
    p = r.poll();
    QCOMPARE(lines_of(p), std::vector<int>{4});
    QCOMPARE(event_lines(p), std::vector<int>{5});
  }

  void missingFileIsNoEventsYet() {
    const std::string path = file("later.jsonl");
    EventReader r(path);
    PollResult p = r.poll();
    QVERIFY(!p.file_exists);
    QVERIFY(p.events.empty() && p.diagnostics.empty());
    put(path, good_line(1), false);
    p = r.poll();
    QVERIFY(p.file_exists && !p.restarted);
    QCOMPARE(event_lines(p), std::vector<int>{1});
  }

  void writerEndsHalfLineAndStamps() {
    const std::string path = file("resumed.jsonl");
    put(path, good_line(1) + "{\"v\":\"1.0\",\"type\":\"st", false);  // a writer died mid-line
    auto w = EventWriter::open(path);
    QVERIFY(w.ok());
    const double before = unix_seconds();
    QVERIFY(w.value.write(RunEndEvent{0, 0, RunOutcome::Killed, "signal 9", 137, 1, 0}).empty());
    const PollResult p = poll_file(path);
    QCOMPARE(event_lines(p), (std::vector<int>{1, 3}));
    QCOMPARE(lines_of(p), std::vector<int>{2});
    const auto& end = std::get<RunEndEvent>(p.events[1].event);
    QVERIFY(end.status == RunOutcome::Killed);
    QVERIFY(end.time >= before && end.time < before + 60);
    QVERIFY(end.elapsed_s >= 0 && end.elapsed_s < 60);
  }

  // A write that fails is reported, and leaves no half line: RLIMIT_FSIZE just past the file's
  // end makes the kernel take a few bytes of the line and then refuse (EFBIG), a real short
  // write; the writer cuts those bytes off again.
  void failedAppendIsCutBackAndReported() {
    const std::string path = file("limited.jsonl");
    auto w = EventWriter::open(path);
    QVERIFY(w.ok());
    QVERIFY(w.value.write(StageEvent{0, 0, "load_model", "before the limit"}).empty());
    const std::string before = slurp(path);
    void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
    rlimit old{};
    QVERIFY(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    rlimit lim = old;
    lim.rlim_cur = before.size() + 10;
    QVERIFY(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
    const Diagnostics d = w.value.write(StageEvent{0, 0, "train", std::string(200, 'x')});
    QVERIFY(::setrlimit(RLIMIT_FSIZE, &old) == 0);
    std::signal(SIGXFSZ, old_handler);
    QCOMPARE(d.size(), std::size_t{1});
    QVERIFY2(d[0].message.find("File too large") != std::string::npos, d[0].message.c_str());
    QCOMPARE(d[0].file, path);
    QCOMPARE(slurp(path), before);  // the 10 bytes it took are gone
    // The file stays usable once the limit is lifted.
    QVERIFY(w.value.write(StageEvent{0, 0, "train", "after"}).empty());
    QCOMPARE(event_lines(poll_file(path)), (std::vector<int>{1, 2}));
  }

  // The file replaced or removed under the writer: the next append fails naming it, instead of
  // going on into an inode nobody reads.
  void replacedOrRemovedFileFailsTheAppend() {
    const std::string path = file("replaced.jsonl");
    auto w = EventWriter::open(path);
    QVERIFY(w.ok());
    QVERIFY(w.value.write(StageEvent{0, 0, "load_model", ""}).empty());
    QVERIFY(std::rename(path.c_str(), (path + ".moved").c_str()) == 0);
    Diagnostics d = w.value.write(StageEvent{0, 0, "train", ""});
    QCOMPARE(d.size(), std::size_t{1});
    QVERIFY2(d[0].message.find("No such file") != std::string::npos, d[0].message.c_str());
    QVERIFY(QDir().mkdir(QString::fromStdString(path)));
    d = w.value.write(StageEvent{0, 0, "train", ""});
    QCOMPARE(d.size(), std::size_t{1});
    QVERIFY2(d[0].message.find("directory") != std::string::npos, d[0].message.c_str());
    QVERIFY(QDir().rmdir(QString::fromStdString(path)));
    QVERIFY(QFile::link("/dev/full", QString::fromStdString(path)));
    d = w.value.write(StageEvent{0, 0, "train", ""});
    QCOMPARE(d.size(), std::size_t{1});
    QVERIFY2(d[0].message.find("character device") != std::string::npos, d[0].message.c_str());
    QCOMPARE(event_lines(poll_file(path + ".moved")), std::vector<int>{1});
  }

  void pollBudgetAndProblemCap() {
    const std::string path = file("many.jsonl");
    std::string text;
    for (int i = 0; i < 150; ++i) text += "not json\n";
    text += good_line(1);
    put(path, text, false);
    EventReaderOptions o;
    o.max_bytes_per_poll = 100;
    EventReader r(path, o);
    std::size_t errors = 0, notes = 0, events = 0, polls = 0;
    for (PollResult p = r.poll();; p = r.poll()) {
      ++polls;
      errors += lines_of(p).size();
      notes += lines_of(p, Severity::Note).size();
      events += p.events.size();
      if (!p.more) break;
    }
    QVERIFY(polls > 10);
    QCOMPARE(errors, std::size_t(100));
    QCOMPARE(notes, std::size_t(1));
    QCOMPARE(events, std::size_t(1));
    QCOMPARE(r.problem_count(), std::size_t(150));
  }

  void randomLinesNeverThrow() {
    std::mt19937 rng(7);
    const std::string golden = slurp(kData + "golden.jsonl");
    QVERIFY(!golden.empty());
    for (int i = 0; i < 3000; ++i) {
      std::string line = golden.substr(rng() % golden.size(), rng() % 400);
      for (int k = 0; k < 3; ++k)
        if (!line.empty()) line[rng() % line.size()] = static_cast<char>(rng() % 256);
      const DecodedLine d = decode_event_line(line, "x", 1);
      QVERIFY(d.event.has_value() || !d.diagnostics.empty() || line.find_first_not_of(" \t\r") == std::string::npos);
    }
  }

  void busBandwidthFactors() {
    QCOMPARE(bus_bandwidth_factor("all_reduce", 8), 1.75);
    QCOMPARE(bus_bandwidth_factor("all_to_all", 4), 0.75);
    QCOMPARE(bus_bandwidth_factor("all_gather", 2), 0.5);
    QCOMPARE(bus_bandwidth_factor("broadcast", 8), 1.0);
    QCOMPARE(bus_bandwidth_factor("barrier", 8), 0.0);
  }

 private:
  static double unix_seconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
};

QTEST_APPLESS_MAIN(TstEventLog)
#include "tst_event_log.moc"
