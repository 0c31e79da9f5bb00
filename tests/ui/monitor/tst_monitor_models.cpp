// The Monitor page's non-widget parts: bounded series buffers (decimation keeps extremes
// and non-finite points), the runs list model and the config diff model (both checked by
// QAbstractItemModelTester), run summaries read from real run directories.
#include <QAbstractItemModelTester>
#include <QtTest>

#include <cmath>

#include "config_diff.h"
#include "log_view.h"
#include "run/run_dir.h"
#include "run_fixture.h"
#include "run_scanner.h"
#include "runs_model.h"
#include "series_buffer.h"

using namespace odyssey;
using namespace odyssey::ui;
namespace fs = std::filesystem;

class TstMonitorModels : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path root() const { return fs::path(tmp_.path().toStdString()); }

 private slots:
  // Issue 23, finding 5: the Log tab opened scrolled to the right, every line cut at the left.
  // Lines appended while the view is hidden (another tab) or shown start at the left edge.
  void logViewShowsLinesFromTheirStart() {
    LogView log(nullptr, 100);
    log.resize(320, 200);
    QStringList lines;
    for (int i = 0; i < 30; ++i) lines << QStringLiteral("[rank0] step %1/30 ").arg(i) + QString(300, QLatin1Char('='));
    log.append_lines(lines.mid(0, 15));  // hidden, as the Log tab is until clicked
    log.show();
    QVERIFY(QTest::qWaitForWindowExposed(&log));
    QCOMPARE(log.horizontal_offset(), 0);
    log.append_lines(lines.mid(15));
    QCOMPARE(log.horizontal_offset(), 0);
    log.set_filter(QStringLiteral("step 2"));
    QCOMPARE(log.horizontal_offset(), 0);
  }

  void bufferStaysBoundedAndKeepsExtremes() {
    SeriesBuffer b(1000);
    for (int i = 1; i <= 200000; ++i) {
      double y = 2.0 + std::sin(i * 0.01);
      if (i == 3000) y = 50.0;  // a spike long ago
      if (i == 4000) y = 0.001;
      if (i % 50000 == 0) y = std::nan("");
      if (i == 77777) y = INFINITY;
      b.append(i, y);
    }
    QVERIFY(b.size() <= 1000);
    QCOMPARE(b.total_appended(), std::size_t(200000));
    QCOMPARE(b.max_y(), 50.0);
    QCOMPARE(b.min_y(), 0.001);
    QVERIFY(std::find(b.ys().begin(), b.ys().end(), 50.0) != b.ys().end());
    QVERIFY(std::find(b.ys().begin(), b.ys().end(), 0.001) != b.ys().end());
    QVERIFY(std::is_sorted(b.xs().begin(), b.xs().end()));
    QCOMPARE(b.xs().back(), 199999.0);  // step 200000 is NaN: a mark
    QCOMPARE(b.last_x(), 200000.0);
    QCOMPARE(b.marks().size(), std::size_t(5));  // 4 NaN + 1 inf, none dropped
    QVERIFY(b.marks()[1].kind == NonFinite::PosInf);
  }

  void bufferBoundsANanStorm() {
    SeriesBuffer b(100);
    for (int i = 0; i < 100000; ++i) b.append(i, std::nan(""));
    QVERIFY(b.marks().size() <= 100);
    QVERIFY(!b.marks().empty());
  }

  void runsModelPassesTester() {
    RunsModel m;
    QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
    testing::FakeRun done;
    done.steps = 40;
    done.total_steps = 40;
    testing::FakeRun failed = done;
    failed.final_state = run::RunState::Failed;
    failed.reason = "rank 1: CUDA out of memory";
    testing::FakeRun live = done;
    live.steps = 20;
    live.write_run_end = false;
    testing::write_run(root(), "20250101-000001-a", done);
    testing::write_run(root(), "20250101-000002-b", failed);
    testing::write_run(root(), "20250101-000003-c", live);
    std::vector<RunSummary> runs;
    for (const char* n : {"20250101-000003-c", "20250101-000002-b", "20250101-000001-a"})
      runs.push_back(summarize_run(QString::fromStdString((root() / n).string()), run::unix_now()));
    m.set_runs(runs);
    QCOMPARE(m.rowCount(), 3);
    QCOMPARE(m.index(0, RunsModel::StateColumn).data().toString(), QStringLiteral("running"));
    QCOMPARE(m.index(0, RunsModel::StepColumn).data().toString(), QStringLiteral("20/40"));
    QVERIFY(m.index(0, RunsModel::EtaColumn).data().toString() != QStringLiteral("–"));
    QCOMPARE(m.index(1, RunsModel::StateColumn).data().toString(), QStringLiteral("failed"));
    QVERIFY(m.index(1, 0).data(Qt::ToolTipRole).toString().contains("CUDA out of memory"));
    QCOMPARE(m.index(2, RunsModel::StateColumn).data().toString(), QStringLiteral("completed"));
    QCOMPARE(m.index(2, RunsModel::EtaColumn).data().toString(), QStringLiteral("–"));
    // Same rows again: values change in place, no reset.
    QSignalSpy reset(&m, &QAbstractItemModel::modelReset);
    runs[0].step = 21;
    m.set_runs(runs);
    QCOMPARE(reset.count(), 0);
    QCOMPARE(m.index(0, RunsModel::StepColumn).data().toString(), QStringLiteral("21/40"));
    runs.pop_back();
    m.set_runs(runs);
    QCOMPARE(m.rowCount(), 2);
  }

  void staleRunIsFailed() {
    testing::FakeRun live;
    live.steps = 5;
    live.write_run_end = false;
    const fs::path dir = testing::write_run(root(), "20250101-000004-stale", live);
    // A heartbeat of long ago from a pid on this host that no longer exists.
    auto st = run::StatusFile(run::RunDir(dir).status()).read().value;
    st.pid = 999999999;
    st.heartbeat = run::unix_now() - 3600;
    run::StatusFile(run::RunDir(dir).status()).write(st);
    const RunSummary s = summarize_run(QString::fromStdString(dir.string()), run::unix_now());
    QVERIFY(s.state == DisplayState::Stale);
    QVERIFY(s.reason.contains("stopped responding"));
  }

  void configDiffPassesTesterAndShowsDifferences() {
    ConfigDiffModel m;
    QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
    const std::string a = "model: Qwen/Qwen2.5-7B\nlearning_rate: 1e-4\nmax_length: 32768\n";
    const std::string b =
        "model: Qwen/Qwen2.5-7B\nlearning_rate: 0.0002\nmax_length: 32768\nsequence_parallel_size: 2\n";
    std::vector<ConfigColumn> cols{config_column("a", a, "a.yaml"), config_column("b", b, "b.yaml")};
    QVERIFY2(cols[0].error.isEmpty(), qPrintable(cols[0].error));
    m.set_columns(cols);
    QCOMPARE(m.columnCount(), 3);
    QCOMPARE(m.rowCount(), 2);  // learning_rate and sequence_parallel_size
    QStringList keys;
    for (int r = 0; r < m.rowCount(); ++r) keys << m.index(r, 0).data().toString();
    QVERIFY(keys.contains("learning_rate"));
    QVERIFY(keys.contains("sequence_parallel_size"));
    m.set_only_differences(false);
    QVERIFY(m.rowCount() > 20);
    std::vector<ConfigColumn> bad{config_column("x", "learning_rate: [oops", "x.yaml")};
    QVERIFY(!bad[0].error.isEmpty());
    m.set_columns(bad);
    QCOMPARE(m.index(0, 1).data().toString(), QStringLiteral("(unreadable config)"));
  }
};

QTEST_MAIN(TstMonitorModels)
#include "tst_monitor_models.moc"
