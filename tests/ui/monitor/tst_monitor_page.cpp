// The Monitor page against run directories written by the real run-contract writers:
// charts, state and progress of a finished run (NaN loss shown as a marker), live
// appends (a line split across writes), garbage lines, a run directory deleted while
// watched, a failed run's banner, the runs list and compare.
#include <QtTest>
#include <qcustomplot.h>

#include <cmath>
#include <filesystem>

#include "chart_panel.h"
#include "compare_view.h"
#include "config_diff.h"
#include "log_view.h"
#include "monitor_page.h"
#include "run/event_schema.h"
#include "run/run_dir.h"
#include "run_fixture.h"
#include "runs_model.h"

using namespace odyssey;
using namespace odyssey::ui;
namespace fs = std::filesystem;

namespace {
QString qs(const fs::path& p) { return QString::fromStdString(p.string()); }
constexpr int kWait = 10000;
}  // namespace

class TstMonitorPage : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path root() const { return fs::path(tmp_.path().toStdString()); }

 private slots:
  void finishedRunIsCharted() {
    testing::FakeRun f;
    f.steps = f.total_steps = 120;
    f.nan_step = 37;
    f.eval_every = 50;
    f.checkpoint_every = 60;
    const fs::path dir = testing::write_run(root(), "20250102-000000-done", f);
    MonitorPage page;
    page.attachRunDirectory(qs(dir));
    QTRY_COMPARE_WITH_TIMEOUT(page.latestStep(), std::int64_t(120), kWait);
    QTRY_COMPARE_WITH_TIMEOUT(page.chart("loss")->pointCount("loss"), 119, kWait);  // 120 minus the NaN
    QCOMPARE(page.chart("loss")->markerCount("loss"), 1);
    QCOMPARE(page.series().find("loss")->buffer.marks().front().x, 37.0);
    QTRY_COMPARE_WITH_TIMEOUT(page.chart("loss")->pointCount("loss_ema"), 119, kWait);
    QTRY_COMPARE_WITH_TIMEOUT(page.chart("loss")->pointCount("eval_loss"), 2, kWait);
    QTRY_COMPARE_WITH_TIMEOUT(page.chart("lr")->pointCount("lr"), 120, kWait);
    QTRY_COMPARE_WITH_TIMEOUT(page.chart("vram")->pointCount("vram_peak/rank 1"), 120, kWait);
    QTRY_COMPARE_WITH_TIMEOUT(page.chart("vram")->pointCount("vram_reserved/rank 0"), 120, kWait);
    QTRY_COMPARE_WITH_TIMEOUT(page.chart("busbw")->pointCount("busbw/all_to_all/ulysses"), 120, kWait);
    QTRY_COMPARE_WITH_TIMEOUT(page.chart("busbw")->pointCount("busbw/all_reduce/world"), 120, kWait);
    QCOMPARE(page.stateText(), QStringLiteral("completed"));
    QVERIFY2(page.progressText().contains("step 120 / 120"), qPrintable(page.progressText()));
    QVERIFY(!page.progressText().contains("ETA"));  // finished: no ETA
    QVERIFY(page.bannerText().isEmpty());
    QTRY_VERIFY_WITH_TIMEOUT(page.logView()->visibleText().contains("step 120/120"), kWait);
    QVERIFY(page.logView()->visibleText().contains("checkpoint saved at step 60"));
    // The hover read-out names the NaN step.
    page.chart("loss")->hoverAt(37);
    QVERIFY2(page.chart("loss")->hoverText().contains("NaN at step 37"), qPrintable(page.chart("loss")->hoverText()));
    // Exports.
    const QString png = tmp_.filePath("loss.png"), csv = tmp_.filePath("loss.csv");
    QVERIFY(page.chart("loss")->exportPng(png, 600, 400));
    QVERIFY(QFileInfo(png).size() > 1000);
    QVERIFY(page.chart("loss")->exportCsv(csv));
    QFile c(csv);
    QVERIFY(c.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(c.readAll());
    QVERIFY(text.startsWith("series,step,value\n"));
    QVERIFY(text.contains("loss,37,NaN\n"));
  }

  void headerNamesTheOptimizer() {
    testing::FakeRun f;
    f.steps = f.total_steps = 3;
    f.optimizer = {"zero2_adamw", std::int64_t{27510} << 20, std::int64_t{84767} << 20, 2};
    const fs::path dir = testing::write_run(root(), "20250102-000003-zero", f);
    MonitorPage page;
    page.attachRunDirectory(qs(dir));
    QTRY_COMPARE_WITH_TIMEOUT(page.latestStep(), std::int64_t(3), kWait);
    // The header follows on the next redraw tick, not with the batch that set the step.
    QTRY_VERIFY2_WITH_TIMEOUT(
        page.titleText().contains("ZeRO-2, 26.9 GiB optimizer state + 82.8 GiB in host memory per rank"),
        qPrintable(page.titleText()), kWait);
  }

  void liveAppendsAppear() {
    testing::FakeRun f;
    f.steps = 10;
    f.total_steps = 100;
    f.write_run_end = false;
    const fs::path dir = testing::write_run(root(), "20250102-000001-live", f);
    MonitorPage page;
    page.attachRunDirectory(qs(dir));
    QTRY_COMPARE_WITH_TIMEOUT(page.latestStep(), std::int64_t(10), kWait);
    QCOMPARE(page.stateText(), QStringLiteral("running"));
    QVERIFY(page.progressText().contains("ETA"));
    std::mt19937 rng(5);
    const std::string line = run::encode_event(testing::make_step(11, f, rng)) + "\n";
    const fs::path events = run::RunDir(dir).events();
    testing::append_raw(events, line.substr(0, 40));  // half a line: not an event yet
    QTest::qWait(700);
    QCOMPARE(page.latestStep(), std::int64_t(10));
    QVERIFY(page.messagesText().isEmpty());
    testing::append_raw(events, line.substr(40));
    QTRY_COMPARE_WITH_TIMEOUT(page.latestStep(), std::int64_t(11), kWait);
    QTRY_COMPARE_WITH_TIMEOUT(page.chart("loss")->pointCount("loss"), 11, kWait);
    testing::append_raw(run::RunDir(dir).rank_log(0), "[rank0] a new log line\n");
    QTRY_VERIFY_WITH_TIMEOUT(page.logView()->visibleText().contains("a new log line"), kWait);
    page.logView()->setFilter("new log");
    QCOMPARE(page.logView()->visibleText(), QStringLiteral("[rank0] a new log line"));
  }

  void garbageIsReportedAndLaterLinesCharted() {
    testing::FakeRun f;
    f.steps = 5;
    f.total_steps = 50;
    f.write_run_end = false;
    const fs::path dir = testing::write_run(root(), "20250102-000002-garbage", f);
    const fs::path events = run::RunDir(dir).events();
    testing::append_raw(events, "{\"v\":\"1.0\",\"type\":\"step\",\"time\":1,\"step\":6,\"loss\":\"oops\"}\n");
    testing::append_raw(events, std::string("\x00\xff garbage \x01\n", 13));
    std::mt19937 rng(3);
    testing::append_raw(events, run::encode_event(testing::make_step(7, f, rng)) + "\n");
    MonitorPage page;
    page.attachRunDirectory(qs(dir));
    QTRY_COMPARE_WITH_TIMEOUT(page.latestStep(), std::int64_t(7), kWait);
    QTRY_VERIFY_WITH_TIMEOUT(page.messagesText().contains("events.jsonl:"), kWait);
    QVERIFY2(page.messagesText().contains(":9:"), qPrintable(page.messagesText()));  // line numbers
    QTRY_COMPARE_WITH_TIMEOUT(page.chart("loss")->pointCount("loss"), 6, kWait);  // charts redraw on a timer
  }

  void truncatedFileRestartsTheCharts() {
    testing::FakeRun f;
    f.steps = 30;
    f.total_steps = 30;
    const fs::path dir = testing::write_run(root(), "20250102-000003-trunc", f);
    MonitorPage page;
    page.attachRunDirectory(qs(dir));
    QTRY_COMPARE_WITH_TIMEOUT(page.chart("loss")->pointCount("loss"), 30, kWait);
    // Replace the events file by a shorter one (another run written over it).
    testing::FakeRun g = f;
    g.steps = 8;
    g.seed = 9;
    fs::remove_all(dir);
    testing::write_run(root(), "20250102-000003-trunc", g);
    QTRY_COMPARE_WITH_TIMEOUT(page.chart("loss")->pointCount("loss"), 8, kWait);
    QVERIFY(page.messagesText().contains("restart"));
  }

  void deletedRunDirectoryIsReported() {
    testing::FakeRun f;
    f.steps = 12;
    f.write_run_end = false;
    const fs::path dir = testing::write_run(root(), "20250102-000004-deleted", f);
    MonitorPage page;
    page.show();
    page.attachRunDirectory(qs(dir));
    QTRY_COMPARE_WITH_TIMEOUT(page.latestStep(), std::int64_t(12), kWait);
    fs::remove_all(dir);
    QTRY_VERIFY_WITH_TIMEOUT(page.messagesText().contains("no longer exists"), kWait);
    QTRY_COMPARE_WITH_TIMEOUT(page.chart("loss")->pointCount("loss"), 12, kWait);  // what was read stays shown
    QTest::qWait(400);  // and the page keeps running
    QVERIFY(page.isVisible());
  }

  // Issue 23, finding 7: an output folder that does not exist yet is "No runs yet", not an
  // error; a folder opened that is not a run is refused with a notice, the previous run stays.
  void emptyStatesAndFoldersThatAreNotRuns() {
    MonitorPage page;
    page.setOutputRoot(tmp_.filePath("not-created-yet"));
    QTRY_VERIFY_WITH_TIMEOUT(page.rootText().contains("No runs yet"), kWait);
    QVERIFY2(!page.rootText().contains("Cannot list"), qPrintable(page.rootText()));
    testing::FakeRun f;
    f.steps = f.total_steps = 10;
    const fs::path dir = testing::write_run(root(), "20250102-000009-done", f);
    QVERIFY(page.openRunFolder(qs(dir)));
    QTRY_COMPARE_WITH_TIMEOUT(page.latestStep(), std::int64_t(10), kWait);
    QVERIFY(QDir().mkpath(tmp_.filePath("just-a-folder")));
    QVERIFY(!page.openRunFolder(tmp_.filePath("just-a-folder")));
    QVERIFY2(page.rootText().contains("is not a run directory"), qPrintable(page.rootText()));
    QCOMPARE(page.attachedRun(), qs(dir));
    QTest::qWait(300);
    QCOMPARE(page.latestStep(), std::int64_t(10));
    QVERIFY(page.stateText() != QStringLiteral("unknown"));
  }

  void missingDirectoryIsReportedAtAttach() {
    MonitorPage page;
    page.attachRunDirectory(tmp_.filePath("no-such-run"));
    QTRY_VERIFY_WITH_TIMEOUT(page.messagesText().contains("no longer exists"), kWait);
  }

  void failedRunShowsBanner() {
    testing::FakeRun f;
    f.steps = 25;
    f.total_steps = 100;
    f.final_state = run::RunState::Failed;
    f.reason = "rank 1: CUDA out of memory";
    const fs::path dir = testing::write_run(root(), "20250102-000005-failed", f);
    MonitorPage page;
    page.attachRunDirectory(qs(dir));
    QTRY_VERIFY_WITH_TIMEOUT(!page.bannerText().isEmpty(), kWait);
    QCOMPARE(page.stateText(), QStringLiteral("failed"));
    QVERIFY(page.bannerText().contains("CUDA out of memory"));
    QVERIFY(page.bannerText().contains("rank 1"));
    QVERIFY(page.bannerText().contains("Tried to allocate 9.28 GiB"));
  }

  void runsListAndCompare() {
    const fs::path out = root() / "outputs";
    testing::FakeRun a;
    a.steps = a.total_steps = 60;
    testing::FakeRun b = a;
    b.learning_rate = 5e-5;
    b.seed = 2;
    const fs::path da = testing::write_run(out, "20250103-000000-a", a);
    const fs::path db = testing::write_run(out, "20250103-000001-b", b);
    fs::create_directories(out / "not-a-run");
    MonitorPage page;
    page.setOutputRoot(qs(out));
    QTRY_COMPARE_WITH_TIMEOUT(page.runsModel()->rowCount(), 2, kWait);
    QCOMPARE(page.runsModel()->index(0, 0).data().toString(), QStringLiteral("20250103-000001-b"));
    page.compareRuns({qs(da), qs(db)});
    QTRY_COMPARE_WITH_TIMEOUT(page.compareView()->runCount(), 2, kWait);
    ConfigDiffModel* diff = page.compareView()->diffModel();
    QCOMPARE(diff->rowCount(), 1);
    QCOMPARE(diff->index(0, 0).data().toString(), QStringLiteral("learning_rate"));
    QCOMPARE(diff->headerData(2, Qt::Horizontal).toString(), QStringLiteral("20250103-000001-b"));
    QVERIFY(page.compareView()->plot()->graphCount() >= 4);
  }

  void attachingAnotherRunDropsTheOld() {
    testing::FakeRun a;
    a.steps = a.total_steps = 50;
    testing::FakeRun b = a;
    b.steps = b.total_steps = 20;
    const fs::path da = testing::write_run(root(), "20250104-000000-a", a);
    const fs::path db = testing::write_run(root(), "20250104-000001-b", b);
    MonitorPage page;
    page.attachRunDirectory(qs(da));
    page.attachRunDirectory(qs(db));
    QTRY_COMPARE_WITH_TIMEOUT(page.latestStep(), std::int64_t(20), kWait);
    QTest::qWait(300);
    QTRY_COMPARE_WITH_TIMEOUT(page.chart("loss")->pointCount("loss"), 20, kWait);
  }
};

QTEST_MAIN(TstMonitorPage)
#include "tst_monitor_page.moc"
