// The JobController alone (no window), observed through its signals with QSignalSpy: a real
// odyssey-train trains the quickstart on the CPU, is stopped with SIGTERM and ends; a launch
// that the engine refuses reports its log; the controller refuses a second start and a stop of
// a run that is over; a launch log is decoded across reads that split a UTF-8 sequence.
// The engine comes from $ODYSSEY_TRAIN_BIN, else the build's own; without LibTorch the
// engine tests skip.
#include <QFile>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

#include <signal.h>

#include <filesystem>

#include "config_form.h"
#include "job_controller.h"
#include "launch.h"
#include "run/status_file.h"

using namespace odyssey;
using namespace odyssey::ui;

namespace {

QString quickstart() { return QStringLiteral(ODYSSEY_SOURCE_DIR "/presets/quickstart.yaml"); }
QString yaml_quoted(const QString& s) { return QLatin1Char('"') + s + QLatin1Char('"'); }

// All messages a spy saw, joined (newest last).
QString messages(const QSignalSpy& spy) {
  QStringList all;
  for (const auto& args : spy) all << args.at(0).toString();
  return all.join(QLatin1Char('\n'));
}

}  // namespace

class TstJobController : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QString bin_;
  QString skip_;

  // The quickstart staged as the window stages it, into output folder `out`.
  std::optional<StagedLaunch> staged(const QString& out, const QString& max_steps, const QString& dataset = {}) {
    ConfigForm form;
    if (has_errors(form.load_file(quickstart()))) return std::nullopt;
    if (!form.set_text("output_dir", yaml_quoted(tmp_.filePath(out)).toStdString()).empty()) return std::nullopt;
    if (!form.set_text("max_steps", max_steps.toStdString()).empty()) return std::nullopt;
    if (!dataset.isEmpty() && has_errors(form.set_text("dataset", ("[" + yaml_quoted(dataset) + "]").toStdString())))
      return std::nullopt;
    QString error;
    auto s = stage_launch(form, &error);
    if (!s) qWarning("%s", qPrintable(error));
    return s;
  }

 private slots:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    bin_ = qEnvironmentVariable("ODYSSEY_TRAIN_BIN");
#ifdef ODYSSEY_TRAIN_BIN
    if (bin_.isEmpty()) bin_ = QStringLiteral(ODYSSEY_TRAIN_BIN);
#endif
    if (bin_.isEmpty()) {
      skip_ = QStringLiteral("no odyssey-train (set ODYSSEY_TRAIN_BIN)");
      return;
    }
    QProcess p;
    p.start(bin_, {QStringLiteral("env")});
    if (!p.waitForFinished(60000) || p.readAllStandardOutput().contains("LibTorch: not linked"))
      skip_ = QStringLiteral("%1 cannot train (no LibTorch, or env did not answer)").arg(bin_);
  }

  void a_run_starts_is_followed_stopped_and_ends() {
    if (!skip_.isEmpty()) QSKIP(qPrintable(skip_));
    JobController jobs;
    QSignalSpy started(&jobs, &JobController::run_started);
    QSignalSpy said(&jobs, &JobController::message);
    QSignalSpy changed(&jobs, &JobController::changed);
    QSignalSpy ended(&jobs, &JobController::run_ended);
    const auto launch = staged(QStringLiteral("stop"), QStringLiteral("100000"));
    QVERIFY(launch);
    QVERIFY(jobs.start(bin_, *launch));
    QVERIFY(jobs.launching());
    QVERIFY(jobs.log_thread() != QThread::currentThread() && jobs.log_thread()->isRunning());
    QVERIFY(changed.count() >= 1);
    QVERIFY(messages(said).contains(QStringLiteral("Starting")));
    // A second Start while the first is starting is refused, and says why.
    QVERIFY(!jobs.start(bin_, *launch));
    QVERIFY(said.last().at(1).toBool());
    QVERIFY(said.last().at(0).toString().contains(QStringLiteral("still starting or running")));

    QVERIFY2(started.wait(120000) || started.count() == 1, qPrintable(messages(said)));
    const QString dir = started.first().at(0).toString();
    QVERIFY(QDir::isAbsolutePath(dir));
    QVERIFY(QFileInfo(dir + QStringLiteral("/status.json")).isFile() || QFileInfo(dir).isDir());
    QVERIFY(!jobs.launching());
    QCOMPARE(jobs.launched_run(), dir);
    // The log was read as it grew: no more than the file holds.
    QVERIFY(jobs.log_bytes_read() > 0 && jobs.log_bytes_read() <= QFileInfo(jobs.launch_log()).size());

    jobs.follow(dir);
    QTRY_VERIFY_WITH_TIMEOUT(jobs.followed_alive(), 60000);
    QVERIFY(jobs.followed_pid() > 0);
    QCOMPARE(jobs.followed_host(), QString::fromStdString(run::this_hostname()));
    QVERIFY(!jobs.kill_next());
    QVERIFY(jobs.stop(false));
    QVERIFY(said.last().at(0).toString().contains(QStringLiteral("SIGTERM")));
    QVERIFY(jobs.kill_next());  // until it has stopped, the next Stop is a Kill
    QTRY_VERIFY_WITH_TIMEOUT(jobs.launched_run().isEmpty(), 120000);
    QVERIFY2(said.last().at(0).toString().contains(QStringLiteral("The run in %1 ended: stopped").arg(dir)),
             qPrintable(messages(said)));
    QCOMPARE(ended.count(), 1);
    QCOMPARE(ended.first().at(0).toString(), dir);
    QCOMPARE(ended.first().at(1).toString(), QStringLiteral("stopped"));
    QVERIFY(!jobs.followed_alive());
    QVERIFY(!jobs.kill_next());
    auto st = run::StatusFile(std::filesystem::path(dir.toStdString()) / "status.json").read();
    QVERIFY(st.ok());
    QCOMPARE(st.value.state, run::RunState::Stopped);

    // Stop on a run that is over says so and sends nothing.
    QVERIFY(!jobs.stop(false));
    QVERIFY(said.last().at(0).toString().contains(QStringLiteral("not running any more")));
    QVERIFY(!said.last().at(1).toBool());
  }

  void a_refused_launch_reports_its_log() {
    if (!skip_.isEmpty()) QSKIP(qPrintable(skip_));
    const QString data = tmp_.filePath(QStringLiteral("vanishing.jsonl"));
    QVERIFY(QFile::copy(QStringLiteral(ODYSSEY_SOURCE_DIR "/resources/quickstart/data/val.jsonl"), data));
    const auto launch = staged(QStringLiteral("fail"), QStringLiteral("5"), data);
    QVERIFY(launch);
    QVERIFY(QFile::remove(data));  // gone before the engine reads it
    JobController jobs;
    QSignalSpy said(&jobs, &JobController::message);
    QSignalSpy started(&jobs, &JobController::run_started);
    QSignalSpy failed(&jobs, &JobController::launch_failed);
    QVERIFY(jobs.start(bin_, *launch));
    QTRY_VERIFY_WITH_TIMEOUT(!jobs.launching(), 60000);
    QCOMPARE(started.count(), 0);
    QCOMPARE(failed.count(), 1);
    QCOMPARE(failed.first().at(0).toString(), said.last().at(0).toString());
    QVERIFY(jobs.launched_run().isEmpty());
    const QString last = said.last().at(0).toString();
    QVERIFY(said.last().at(1).toBool());
    QVERIFY2(last.contains(QStringLiteral("exited with status")), qPrintable(last));
    QVERIFY2(last.contains(QStringLiteral("vanishing.jsonl")), qPrintable(last));
    QCOMPARE(jobs.log_bytes_read(), QFileInfo(jobs.launch_log()).size());
  }

  // The launch log is read in pieces as it grows; a character split between two reads is
  // decoded whole. The "engine" here is a shell script that writes its output in two parts
  // and exits 3, as an engine refusing a configuration does.
  void a_log_read_in_pieces_keeps_utf8_whole() {
    const QString script = tmp_.filePath(QStringLiteral("slow-engine.sh"));
    {
      QFile f(script);
      QVERIFY(f.open(QIODevice::WriteOnly));
      // 检 is E6 A3 80: the first read ends after E6 A3.
      f.write("#!/bin/sh\nprintf 'error: \\346\\243'\nsleep 1\nprintf '\\200\\346\\237\\245 failed\\n'\nexit 3\n");
      f.close();
      QVERIFY(f.setPermissions(f.permissions() | QFileDevice::ExeOwner));
    }
    StagedLaunch launch;
    launch.output_dir = tmp_.path();
    launch.name = QStringLiteral("script");
    launch.preset = tmp_.filePath(QStringLiteral("none.yaml"));
    launch.log = tmp_.filePath(QStringLiteral("script.log"));
    JobController jobs;
    QSignalSpy said(&jobs, &JobController::message);
    QVERIFY(jobs.start(script, launch));
    QTRY_VERIFY_WITH_TIMEOUT(jobs.log_bytes_read() > 0, 5000);
    QTRY_VERIFY_WITH_TIMEOUT(!jobs.launching(), 10000);
    const QString last = said.last().at(0).toString();
    QVERIFY2(last.contains(QStringLiteral("exited with status 3")), qPrintable(last));
    QVERIFY2(last.contains(QStringLiteral("error: 检查 failed")), qPrintable(last));
  }
};

QTEST_GUILESS_MAIN(TstJobController)
#include "tst_job_controller.moc"
