// TensorBoard output (core/run/tensorboard.h, docs/tensorboard.md): CRC-32C against published
// vectors, and every file read back by TensorBoard itself (tests/reference/tensorboard_oracle.py:
// its record reader, which checks both CRCs of each frame, and EventAccumulator). The expected
// tags and values are spelled out here, not computed by the mapping under test.
#include <QtTest>

#include <sys/resource.h>

#include <csignal>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "run/event_reader.h"
#include "run/event_writer.h"
#include "run/run_dir.h"
#include "run/tensorboard.h"

using namespace odyssey;
using namespace odyssey::run;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kFNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kFInf = std::numeric_limits<float>::infinity();
constexpr float kFMax = std::numeric_limits<float>::max();

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void put(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::vector<fs::path> tfevents_in(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().find("tfevents") != std::string::npos) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

double oracle_number(const json& v) {
  if (v.is_number()) return v.get<double>();
  const std::string s = v.get<std::string>();
  if (s == "NaN") return kNaN;
  return s == "Infinity" ? kInf : -kInf;
}

struct Point {
  std::int64_t step;
  float value;
  double wall_time;
};
struct Text {
  std::int64_t step;
  std::string text;
};
struct Expected {
  std::map<std::string, std::vector<Point>> scalars;
  std::map<std::string, std::vector<Text>> texts;
};

// The run the live and the converted output are both checked on: one event of every type, a
// NaN loss, values beyond float's range, several ranks and collectives.
const char* const kConfig =
    "model: Qwen/Qwen2.5-0.5B-Instruct\n"
    "learning_rate: 1.0e-05\n"
    "system: \"answer in a ``` fenced block\"\n";

std::vector<Event> run_events() {
  RunStartEvent start;
  start.time = 1732900000.25;
  start.run_id = "20241129-170640-tb";
  start.config_path = "config.yaml";
  start.hostname = "gpu-node-1";

  StepEvent s1;
  s1.time = 1732900060.125;
  s1.elapsed_s = 59.875;
  s1.step = 1;
  s1.total_steps = 3;
  s1.epoch = 0.25;
  s1.loss = 2.3456789;
  s1.lr = 1e-05;
  s1.grad_norm = 0.8125;
  s1.tokens_total = 65536;
  s1.tokens_per_s = 12345.5;
  s1.step_time_s = 5.3085;
  s1.memory = {{0, 60129542144, 98784247808, 107374182400}, {1, 60129542144, 97710505984, 105226698752}};
  s1.collectives = {{"all_to_all", "ulysses", 2, 112, 7516192768, 0.0625, 60.129542144},
                    {"all_reduce", "world", 2, 4, 30462466048, 0.25, 121.849864192},
                    {"broadcast", "world", 2, 0, 0, 0, 0}};  // not called this step: no point
  s1.comm_wait_s = 0.3125;

  StepEvent s2;  // diverged: a NaN loss and an overflowing gradient must reach the chart
  s2.time = 1732900065.5;
  s2.step = 2;
  s2.epoch = 0.5;
  s2.loss = kNaN;
  s2.lr = 5e-06;
  s2.grad_norm = kInf;
  s2.tokens_total = 131072;
  s2.tokens_per_s = 12000;
  s2.step_time_s = 5.5;

  StepEvent s3;  // beyond float32: rounds to +inf, and to FLT_MAX within half an ulp of it
  s3.time = 1732900071.0;
  s3.step = 3;
  s3.epoch = 0.75;
  s3.loss = 1e39;
  s3.lr = -1e300;
  s3.grad_norm = static_cast<double>(kFMax) * (1 + std::ldexp(1.0, -26));
  s3.tokens_total = 196608;
  s3.tokens_per_s = 0;
  s3.step_time_s = 5.25;

  EvalEvent eval{1732900068.0, 0, 2, 1.875, 409600, 200, 12.5, {{"accuracy", 0.625}, {"loss", 9.5}}};
  CheckpointEvent ckpt{1732900069.0, 0, 2, "checkpoints/checkpoint-2", 1024, 1.5};
  WarningEvent warn{1732900069.5, 0, "loss_spike", "loss rose 4.2x in one step \xe2\x80\x94 check lr", 1, 2};
  RunEndEvent end{1732900072.0, 0, RunOutcome::Completed, "", 0, 3, -1};
  return {start, StageEvent{1732900001.0, 0, "load_model", "loading"}, s1, s2, eval, ckpt, warn, s3, end};
}

Expected run_expected() {
  const double t1 = 1732900060.125, t2 = 1732900065.5, t3 = 1732900071.0, te = 1732900068.0;
  Expected x;
  x.scalars["train/loss"] = {{1, 2.3456789f, t1}, {2, kFNaN, t2}, {3, kFInf, t3}};
  x.scalars["train/learning_rate"] = {{1, 1e-05f, t1}, {2, 5e-06f, t2}, {3, -kFInf, t3}};
  x.scalars["train/grad_norm"] = {{1, 0.8125f, t1}, {2, kFInf, t2}, {3, kFMax, t3}};
  x.scalars["train/epoch"] = {{1, 0.25f, t1}, {2, 0.5f, t2}, {3, 0.75f, t3}};
  x.scalars["train/tokens_per_second"] = {{1, 12345.5f, t1}, {2, 12000.0f, t2}, {3, 0.0f, t3}};
  x.scalars["train/num_input_tokens_seen"] = {{1, 65536.0f, t1}, {2, 131072.0f, t2}, {3, 196608.0f, t3}};
  x.scalars["train/step_time_seconds"] = {{1, 5.3085f, t1}, {2, 5.5f, t2}, {3, 5.25f, t3}};
  x.scalars["memory/vram_peak_gib/rank0"] = {{1, 92.0f, t1}};
  x.scalars["memory/vram_peak_gib/rank1"] = {{1, 91.0f, t1}};
  x.scalars["memory/vram_reserved_gib/rank0"] = {{1, 100.0f, t1}};
  x.scalars["memory/vram_reserved_gib/rank1"] = {{1, 98.0f, t1}};
  x.scalars["comm/all_to_all_ulysses_busbw_gbps"] = {{1, 60.129542144f, t1}};
  x.scalars["comm/all_reduce_world_busbw_gbps"] = {{1, 121.849864192f, t1}};
  x.scalars["comm/wait_seconds"] = {{1, 0.3125f, t1}};
  x.scalars["eval/loss"] = {{2, 1.875f, te}};
  x.scalars["eval/runtime"] = {{2, 12.5f, te}};
  x.scalars["eval/accuracy"] = {{2, 0.625f, te}};
  x.scalars["eval/metrics/loss"] = {{2, 9.5f, te}};
  // The config holds a run of three backticks, so the fence is four.
  x.texts["config"] = {{0, std::string("````yaml\n") + kConfig + "````"}};
  x.texts["warnings"] = {{2, "**loss_spike** (rank 1): loss rose 4.2x in one step \xe2\x80\x94 check lr"}};
  return x;
}

bool same_float(float want, double got) {
  if (std::isnan(want)) return std::isnan(got);
  // float32 -> Python float is exact, so equality of the doubles is float32 equality.
  return static_cast<double>(want) == got;
}

}  // namespace

class TstTensorBoard : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

  fs::path dir(const char* name) {
    const fs::path p = tmp_.filePath(name).toStdString();
    fs::create_directories(p);
    return p;
  }

  // TensorBoard's reading of the tfevents files in `logdir`; fails the test when it cannot run.
  json oracle(const fs::path& logdir) {
    const QString python = QStringLiteral(ODYSSEY_PYTHON);
    if (python.isEmpty())
      QTest::qSkip(
          "ODYSSEY_PYTHON is empty: configure with -DODYSSEY_PYTHON=<the reference venv's python, which "
          "packaging/install-deps.sh gives tensorboard>",
          __FILE__, __LINE__);
    if (python.isEmpty()) return {};
    QProcess p;
    p.start(python, {QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/tensorboard_oracle.py"),
                     QString::fromStdString(logdir.string())});
    const bool ran = p.waitForFinished(300000) && p.exitStatus() == QProcess::NormalExit;
    const QByteArray out = p.readAllStandardOutput(), err = p.readAllStandardError();
    if (!ran || p.exitCode() != 0) {
      const QString why = p.exitCode() == 3 ? QStringLiteral("tensorboard is not installed in ") + python +
                                                  " (bash packaging/install-deps.sh installs it)"
                                            : QStringLiteral("tensorboard_oracle.py failed");
      QTest::qFail(qPrintable(why + ":\n" + QString::fromUtf8(err)), __FILE__, __LINE__);
      return {};
    }
    return json::parse(out.toStdString());
  }

  // Every file read to its end without a framing or CRC error, each starting with the
  // file_version record; `records` in all.
  static void check_files(const json& o, std::size_t files, int records) {
    QCOMPARE(o["files"].size(), files);
    int total = 0;
    for (const json& f : o["files"]) {
      QVERIFY2(f["error"].is_null(), f["error"].dump().c_str());
      QCOMPARE(f["file_version"].get<std::string>(), std::string("brain.Event:2"));
      total += f["records"].get<int>();
    }
    QCOMPARE(total, records);
  }

  static void check_expected(const json& o, const Expected& x) {
    std::set<std::string> got_tags, want_tags;
    for (const auto& [tag, _] : o["scalars"].items()) got_tags.insert(tag);
    for (const auto& [tag, _] : x.scalars) want_tags.insert(tag);
    QCOMPARE(got_tags, want_tags);
    for (const auto& [tag, want] : x.scalars) {
      const json& got = o["scalars"][tag];
      QVERIFY2(got.size() == want.size(), (tag + ": " + got.dump()).c_str());
      for (std::size_t i = 0; i < want.size(); ++i) {
        const std::string where = tag + " point " + std::to_string(i) + ": " + got[i].dump();
        QVERIFY2(got[i][0].get<std::int64_t>() == want[i].step, where.c_str());
        QVERIFY2(same_float(want[i].value, oracle_number(got[i][1])), where.c_str());
        QVERIFY2(got[i][2].get<double>() == want[i].wall_time, where.c_str());
      }
    }
    QCOMPARE(o["texts"].size(), x.texts.size());
    for (const auto& [tag, want] : x.texts) {
      const json& got = o["texts"][tag];
      QVERIFY2(got.size() == want.size(), (tag + ": " + got.dump()).c_str());
      for (std::size_t i = 0; i < want.size(); ++i) {
        QCOMPARE(got[i][0].get<std::int64_t>(), want[i].step);
        QCOMPARE(got[i][1].get<std::string>(), want[i].text);
        QCOMPARE(got[i][2].get<std::string>(), std::string("text"));  // what the text plugin lists
      }
    }
  }

  // A run directory with config.yaml and events.jsonl written through the real EventWriter.
  fs::path write_run(const char* name, bool tensorboard) {
    const fs::path run = dir(name);
    put(run / "config.yaml", kConfig);
    EventWriterOptions o;
    o.tensorboard = tensorboard;
    auto w = EventWriter::open(RunDir(run).events(), o);
    if (!w.ok()) return {};
    for (Event& e : run_events())
      if (!w.value.write(e).empty()) return {};
    return run;
  }

 private slots:
  // Published CRC-32C check values: the catalogue's "123456789" and RFC 3720 B.4's vectors.
  void crc32cKnownVectors() {
    QCOMPARE(crc32c(""), 0u);
    QCOMPARE(crc32c("123456789"), 0xe3069283u);
    QCOMPARE(crc32c(std::string(32, '\0')), 0x8a9136aau);
    QCOMPARE(crc32c(std::string(32, '\xff')), 0x62a8ab43u);
    std::string up, down;
    for (int i = 0; i < 32; ++i) {
      up += static_cast<char>(i);
      down += static_cast<char>(31 - i);
    }
    QCOMPARE(crc32c(up), 0x46dd794eu);
    QCOMPARE(crc32c(down), 0x113fdb5cu);
    // The TFRecord mask: rotate right by 15, add 0xa282ead8.
    const std::uint32_t c = 0xe3069283u;
    QCOMPARE(masked_crc32c("123456789"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
    QCOMPARE(masked_crc32c("123456789"), 0xc78ab0e5u);
  }

  void frameLayout() {
    const std::string f = tfrecord("123456789");
    QCOMPARE(f.size(), std::size_t{8 + 4 + 9 + 4});
    QCOMPARE(f.substr(0, 8), std::string("\x09\0\0\0\0\0\0\0", 8));
    const auto u32 = [&](std::size_t at) {
      std::uint32_t v = 0;
      for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(f[at + i]);
      return v;
    };
    QCOMPARE(u32(8), masked_crc32c(f.substr(0, 8)));
    QCOMPARE(f.substr(12, 9), std::string("123456789"));
    QCOMPARE(u32(21), 0xc78ab0e5u);
  }

  // Records written directly: scalars of every kind of float, large and negative steps,
  // several values in one event, texts with Unicode and Markdown.
  void writerReadBackByTensorBoard() {
    const fs::path logdir = dir("direct");
    auto w = TensorBoardWriter::open(logdir, 1700000000.5);
    QVERIFY2(w.ok(), format_all(w.diagnostics).c_str());
    const fs::path file = w.value.path();
    QVERIFY2(file.filename().string().rfind("events.out.tfevents.1700000000.", 0) == 0, w.value.path().c_str());
    QVERIFY(file.filename().string().find("." + std::to_string(::getpid()) + ".0") != std::string::npos);
    const std::int64_t big = std::int64_t{1} << 40;
    const std::vector<TbRecord> records = {
        {1700000001.25, 0, {{"a/zero", 0.0f}, {"a/tiny", 1e-38f}, {"b", -3.5f}}, {}},
        {1700000002.0,
         1,
         {{"a/zero", kFNaN}, {"a/tiny", kFInf}, {"b", -kFInf}},
         {{"notes", "**bold** \xe4\xbd\xa0\xe5\xa5\xbd"}}},
        {1700000003.0,
         big,
         {{"a/zero", kFMax}, {"a/tiny", -0.0f}, {"b", 16777215.0f}},
         {{"notes", std::string(5000, 'x')}}},
        {0, -7, {{"b", 1.0f}}, {}},
    };
    for (const TbRecord& r : records) QVERIFY(w.value.write(r).empty());
    // A second writer in the same second takes the next file name.
    auto w2 = TensorBoardWriter::open(logdir, 1700000000.5);
    QVERIFY(w2.ok());
    QVERIFY(w2.value.path().ends_with(".1"));
    QVERIFY(w2.value.write({1700000004.0, 9, {{"c", 2.0f}}, {}}).empty());

    const json o = oracle(logdir);
    if (QTest::currentTestFailed() || o.is_null()) return;
    check_files(o, 2, 1 + 4 + 1 + 1);
    if (QTest::currentTestFailed()) return;
    Expected x;
    x.scalars["a/zero"] = {{0, 0.0f, 1700000001.25}, {1, kFNaN, 1700000002.0}, {big, kFMax, 1700000003.0}};
    x.scalars["a/tiny"] = {{0, 1e-38f, 1700000001.25}, {1, kFInf, 1700000002.0}, {big, -0.0f, 1700000003.0}};
    x.scalars["b"] = {
        {0, -3.5f, 1700000001.25}, {1, -kFInf, 1700000002.0}, {big, 16777215.0f, 1700000003.0}, {-7, 1.0f, 0.0}};
    x.scalars["c"] = {{9, 2.0f, 1700000004.0}};
    x.texts["notes"] = {{1, "**bold** \xe4\xbd\xa0\xe5\xa5\xbd"}, {big, std::string(5000, 'x')}};
    check_expected(o, x);
  }

  // The oracle is strict: a cut or a flipped byte in our own good file is reported, so a
  // framing or CRC mistake in the writer cannot pass as missing data.
  void oracleCatchesBadFrames() {
    const fs::path good = dir("frames-good");
    auto w = TensorBoardWriter::open(good, 1700000000);
    QVERIFY(w.ok());
    QVERIFY(w.value.write({1700000001, 1, {{"x", 1.0f}}, {}}).empty());
    const std::string bytes = slurp(w.value.path());
    const fs::path cut = dir("frames-cut"), flipped = dir("frames-flipped");
    put(cut / fs::path(w.value.path()).filename(), bytes.substr(0, bytes.size() - 3));
    std::string bad = bytes;
    bad[bad.size() - 6] ^= 0x01;  // inside the last record's data
    put(flipped / fs::path(w.value.path()).filename(), bad);
    json o = oracle(cut);
    if (QTest::currentTestFailed() || o.is_null()) return;
    QVERIFY2(o["files"][0]["error"].get<std::string>().find("truncated") != std::string::npos, o.dump().c_str());
    QCOMPARE(o["files"][0]["records"].get<int>(), 1);
    o = oracle(flipped);
    QVERIFY2(o["files"][0]["error"].get<std::string>().find("crc32") != std::string::npos, o.dump().c_str());
  }

  // EventWriter feeds TensorBoard as it appends: after each event, the file holds it.
  void eventWriterWritesTensorBoardLive() {
    const fs::path run = write_run("live", true);
    QVERIFY(!run.empty());
    const auto files = tfevents_in(RunDir(run).tensorboard_dir());
    QCOMPARE(files.size(), std::size_t{1});
    // Named after run_start's time, the first event with something for TensorBoard.
    QVERIFY2(files[0].filename().string().rfind("events.out.tfevents.1732900000.", 0) == 0, files[0].c_str());
    const json o = oracle(RunDir(run).tensorboard_dir());
    if (QTest::currentTestFailed() || o.is_null()) return;
    // file_version, run_start, 3 steps, eval, warning.
    check_files(o, 1, 1 + 1 + 3 + 1 + 1);
    if (QTest::currentTestFailed()) return;
    check_expected(o, run_expected());
  }

  void eventWriterStepIsVisibleWhenWriteReturns() {
    const fs::path run = dir("visible");
    auto w = EventWriter::open(RunDir(run).events());
    QVERIFY(w.ok());
    StepEvent s;
    s.time = 1700000000;
    s.step = 1;
    s.loss = 1.5;
    QVERIFY(w.value.write(s).empty());
    const auto files = tfevents_in(RunDir(run).tensorboard_dir());
    QCOMPARE(files.size(), std::size_t{1});
    const std::string first = slurp(files[0]);
    s.step = 2;
    QVERIFY(w.value.write(s).empty());
    const std::string second = slurp(files[0]);
    QVERIFY(second.size() > first.size());
    QCOMPARE(second.substr(0, first.size()), first);
    QCOMPARE(second.substr(first.size()), tfrecord(encode_summary_event(*tensorboard_record(s, run))));
  }

  // A writer that only appends a run_end (the launcher's, for a rank 0 that died) leaves no
  // TensorBoard file; options.tensorboard = false writes none at all.
  void nothingToShowWritesNoFile() {
    const fs::path run = dir("launcher");
    auto w = EventWriter::open(RunDir(run).events());
    QVERIFY(w.ok());
    QVERIFY(w.value.write(RunEndEvent{0, 0, RunOutcome::Failed, "rank 0 died", 1, 0, 0}).empty());
    QVERIFY(!fs::exists(RunDir(run).tensorboard_dir()));
    const fs::path off = write_run("off", false);
    QVERIFY(!off.empty());
    QVERIFY(!fs::exists(RunDir(off).tensorboard_dir()));
  }

  // RLIMIT_FSIZE just past the file's end: the kernel takes a few bytes of the record, then
  // refuses (EFBIG). The writer cuts them off, so TensorBoard reads every record before and
  // after without a framing error.
  void failedWriteIsCutBack() {
    const fs::path logdir = dir("limited");
    auto w = TensorBoardWriter::open(logdir, 1700000000);
    QVERIFY(w.ok());
    QVERIFY(w.value.write({1700000001, 1, {{"x", 1.0f}}, {}}).empty());
    const std::string before = slurp(w.value.path());
    void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);
    rlimit old{};
    QVERIFY(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    rlimit lim = old;
    lim.rlim_cur = before.size() + 10;
    QVERIFY(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
    const Diagnostics d = w.value.write({1700000002, 2, {{"x", 2.0f}}, {{"t", std::string(200, 'y')}}});
    QVERIFY(::setrlimit(RLIMIT_FSIZE, &old) == 0);
    std::signal(SIGXFSZ, old_handler);
    QCOMPARE(d.size(), std::size_t{1});
    QCOMPARE(d[0].file, w.value.path());
    QVERIFY2(d[0].message.find("File too large") != std::string::npos, d[0].message.c_str());
    QCOMPARE(slurp(w.value.path()), before);
    QVERIFY(w.value.write({1700000003, 3, {{"x", 3.0f}}, {}}).empty());
    const json o = oracle(logdir);
    if (QTest::currentTestFailed() || o.is_null()) return;
    check_files(o, 1, 3);
    if (QTest::currentTestFailed()) return;
    Expected x;
    x.scalars["x"] = {{1, 1.0f, 1700000001}, {3, 3.0f, 1700000003}};
    check_expected(o, x);
  }

  // TensorBoard failing never fails the run: EventWriter::write succeeds, events.jsonl gets
  // one warning naming the TensorBoard path, and TensorBoard output stops.
  void tensorBoardFailureIsOneWarning() {
    // The directory cannot be made: a file has its name.
    const fs::path run = dir("blocked");
    put(RunDir(run).tensorboard_dir(), "not a directory");
    auto w = EventWriter::open(RunDir(run).events());
    QVERIFY(w.ok());
    for (Event& e : run_events()) QVERIFY(w.value.write(e).empty());
    EventReader reader(RunDir(run).events());
    PollResult p = reader.poll();
    QVERIFY(p.diagnostics.empty());
    QCOMPARE(p.events.size(), run_events().size() + 1);
    const auto* warn = std::get_if<WarningEvent>(&p.events[1].event);  // right after run_start
    QVERIFY(warn != nullptr);
    QCOMPARE(warn->code, std::string("tensorboard_write_failed"));
    QVERIFY2(warn->message.find(RunDir(run).tensorboard_dir().string()) != std::string::npos, warn->message.c_str());
    int warnings = 0;
    for (const auto& r : p.events)
      if (const auto* x = std::get_if<WarningEvent>(&r.event); x && x->code == "tensorboard_write_failed") ++warnings;
    QCOMPARE(warnings, 1);

    // The file replaced by a directory mid-run: the next step warns, naming the file.
    const fs::path run2 = dir("replaced");
    auto w2 = EventWriter::open(RunDir(run2).events());
    QVERIFY(w2.ok());
    StepEvent s;
    s.time = 1700000000;
    s.step = 1;
    QVERIFY(w2.value.write(s).empty());
    const fs::path file = tfevents_in(RunDir(run2).tensorboard_dir()).at(0);
    fs::rename(file, file.string() + ".moved");
    fs::create_directory(file);
    for (std::int64_t step : {2, 3}) {
      s.step = step;
      QVERIFY(w2.value.write(s).empty());
    }
    EventReader reader2(RunDir(run2).events());
    p = reader2.poll();
    QCOMPARE(p.events.size(), std::size_t{4});  // step 1, step 2, the warning, step 3
    warn = std::get_if<WarningEvent>(&p.events[2].event);
    QVERIFY(warn != nullptr);
    QCOMPARE(warn->step, std::int64_t{2});
    QVERIFY2(
        warn->message.find(file.string() + ": error: cannot open for appending: Is a directory") != std::string::npos,
        warn->message.c_str());
    QVERIFY(std::holds_alternative<StepEvent>(p.events[3].event));
  }

  // A run made without TensorBoard converted afterwards: the same tags, steps and values as
  // live writing, read by TensorBoard.
  void converterMatchesLiveWriting() {
    const fs::path run = write_run("old-run", false);
    QVERIFY(!run.empty());
    auto r = convert_events_to_tensorboard(run);
    QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
    QCOMPARE(r.value.parent_path(), RunDir(run).tensorboard_dir());
    const json o = oracle(RunDir(run).tensorboard_dir());
    if (QTest::currentTestFailed() || o.is_null()) return;
    check_files(o, 1, 1 + 1 + 3 + 1 + 1);
    if (QTest::currentTestFailed()) return;
    check_expected(o, run_expected());
    const fs::path live = write_run("live-2", true);
    QVERIFY(!live.empty());
    const json l = oracle(RunDir(live).tensorboard_dir());
    QCOMPARE(l["scalars"].dump(), o["scalars"].dump());
    QCOMPARE(l["texts"].dump(), o["texts"].dump());

    // Converting again would double every point: refused, naming the file that is there.
    auto again = convert_events_to_tensorboard(run);
    QVERIFY(!again.ok());
    QCOMPARE(again.diagnostics.at(0).file, r.value.string());
    QVERIFY(again.diagnostics[0].message.find("already") != std::string::npos);
  }

  void converterErrors() {
    const fs::path missing = fs::path(tmp_.path().toStdString()) / "no-such-run";
    auto r = convert_events_to_tensorboard(missing);
    QVERIFY(!r.ok());
    QCOMPARE(r.diagnostics.at(0).format(), missing.string() + ": error: no such run directory");

    const fs::path empty = dir("empty-run");
    r = convert_events_to_tensorboard(empty);
    QVERIFY(!r.ok());
    QCOMPARE(r.diagnostics.at(0).file, RunDir(empty).events().string());
    QVERIFY(r.diagnostics[0].message.find("not found") != std::string::npos);

    // Malformed lines: file:line and what a line must be; nothing is written.
    const fs::path bad = write_run("bad-line", false);
    const std::string good = slurp(RunDir(bad).events());
    put(RunDir(bad).events(),
        good + "{\"v\":\"1.0\",\"type\":\"step\",\"time\":1,\"elapsed_s\":0,\"step\":\"four\",\"loss\":1}\n" +
            "garbage\n");
    r = convert_events_to_tensorboard(bad);
    QVERIFY(!r.ok());
    QCOMPARE(r.diagnostics.size(), std::size_t{2});
    const int n = static_cast<int>(run_events().size());
    QCOMPARE(r.diagnostics[0].line, n + 1);
    QCOMPARE(r.diagnostics[0].key, std::string("step"));
    QVERIFY2(r.diagnostics[0].message.find("must be an integer") != std::string::npos,
             r.diagnostics[0].message.c_str());
    QCOMPARE(r.diagnostics[1].format(), RunDir(bad).events().string() + ":" + std::to_string(n + 2) +
                                            ": error: not valid JSON; expected one JSON event object a line "
                                            "(docs/run-contract.md)");
    QVERIFY(!fs::exists(RunDir(bad).tensorboard_dir()));

    // No step: said, nothing written.
    const fs::path nostep = dir("no-steps");
    {
      EventWriterOptions o;
      o.tensorboard = false;
      auto w = EventWriter::open(RunDir(nostep).events(), o);
      QVERIFY(w.ok());
      QVERIFY(w.value.write(run_events()[0]).empty());
      QVERIFY(w.value.write(RunEndEvent{1732900010, 0, RunOutcome::Failed, "out of memory", 1, 0, 0}).empty());
    }
    r = convert_events_to_tensorboard(nostep);
    QVERIFY(!r.ok());
    QVERIFY2(r.diagnostics.at(0).message.find("no step events") != std::string::npos, r.diagnostics[0].message.c_str());
    QVERIFY(!fs::exists(RunDir(nostep).tensorboard_dir()));

    // A half last line (the run died mid-write): converted without it, with a warning.
    const fs::path half = write_run("half-line", false);
    put(RunDir(half).events(), slurp(RunDir(half).events()) + "{\"v\":\"1.0\",\"type\":\"st");
    r = convert_events_to_tensorboard(half, dir("half-out"));
    QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
    QCOMPARE(r.diagnostics.size(), std::size_t{1});
    QVERIFY(r.diagnostics[0].severity == Severity::Warning);
    QCOMPARE(r.diagnostics[0].line, n + 1);
  }
};

QTEST_GUILESS_MAIN(TstTensorBoard)
#include "tst_tensorboard.moc"
