// Renders the Monitor page attached to realistic run directories (a 2-rank Ulysses run of
// 500 steps, still running, with a NaN step; a failed run; a completed one) and saves
// PNGs: to $ODYSSEY_SCREENSHOT_DIR (docs/screenshots when refreshing the docs) or to the
// test's temporary directory. The checks are that the page renders non-empty images; a
// person looks at the pictures.
#include <QTabWidget>
#include <QtTest>

#include <filesystem>

#include "chart_panel.h"
#include "compare_view.h"
#include "log_view.h"
#include "monitor_page.h"
#include "run_fixture.h"
#include "runs_model.h"

using namespace odyssey;
using namespace odyssey::ui;
namespace fs = std::filesystem;

class TstMonitorScreenshots : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QString out_;

  void save(QWidget& w, const QString& name) {
    QTest::qWait(150);  // the last 40 ms redraw
    const QImage img = w.grab().toImage();
    QVERIFY(!img.isNull());
    const QString path = QDir(out_).filePath(name);
    QVERIFY2(img.save(path), qPrintable(path));
    qInfo("saved %s", qPrintable(path));
  }

 private slots:
  void initTestCase() {
    out_ = qEnvironmentVariable("ODYSSEY_SCREENSHOT_DIR", tmp_.path());
    QDir().mkpath(out_);
  }

  void screenshots() {
    const fs::path root = fs::path(tmp_.path().toStdString()) / "output";
    testing::FakeRun live;
    live.steps = 500;
    live.total_steps = 800;
    live.nan_step = 312;
    live.write_run_end = false;
    live.log_lines_per_step = 1;
    testing::FakeRun done = live;
    done.steps = done.total_steps = 400;
    done.nan_step = -1;
    done.learning_rate = 1e-4;
    done.seed = 7;
    done.write_run_end = true;
    testing::FakeRun failed = done;
    failed.steps = 137;
    failed.total_steps = 800;
    failed.final_state = run::RunState::Failed;
    failed.reason = "rank 1: CUDA out of memory during backward at max_length 131072";
    failed.seed = 11;
    const auto d_done = testing::write_run(root, "20250106-091500-qwen7b-sp2-lr1e-4", done);
    const auto d_failed = testing::write_run(root, "20250106-104210-qwen7b-sp2-128k", failed);
    const auto d_live = testing::write_run(root, "20250106-113005-qwen7b-sp2-64k", live);

    MonitorPage page;
    page.resize(1600, 1000);
    page.set_link_bandwidth(281);
    page.set_output_root(QString::fromStdString(root.string()));
    page.show();
    QVERIFY(QTest::qWaitForWindowExposed(&page));
    QTRY_COMPARE_WITH_TIMEOUT(page.runs_model()->rowCount(), 3, 10000);

    page.attach_run_directory(QString::fromStdString(d_live.string()));
    QTRY_VERIFY_WITH_TIMEOUT(page.latest_step() == 500 && page.caught_up(), 20000);
    save(page, "monitor-live.png");
    QVERIFY(page.chart("loss")->export_png(QDir(out_).filePath("monitor-loss-chart.png"), 900, 500));

    page.chart("loss")->set_log_scale(true);
    page.log_view()->set_filter(QString());
    page.findChild<QTabWidget*>()->setCurrentIndex(1);
    save(page, "monitor-log.png");
    page.findChild<QTabWidget*>()->setCurrentIndex(0);
    page.chart("loss")->set_log_scale(false);

    page.attach_run_directory(QString::fromStdString(d_failed.string()));
    QTRY_VERIFY_WITH_TIMEOUT(!page.banner_text().isEmpty(), 20000);
    save(page, "monitor-failed.png");

    page.compare_runs({QString::fromStdString(d_done.string()), QString::fromStdString(d_live.string())});
    QTRY_COMPARE_WITH_TIMEOUT(page.compare_view()->run_count(), 2, 20000);
    save(page, "monitor-compare.png");
  }
};

QTEST_MAIN(TstMonitorScreenshots)
#include "tst_monitor_screenshots.moc"
