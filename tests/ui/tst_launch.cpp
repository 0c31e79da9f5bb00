// Start, Stop and re-attach with the real engine: odyssey-train trains the quickstart on the
// CPU (a few seconds per run). The engine comes from $ODYSSEY_TRAIN_BIN, else the build's
// own odyssey-train; a build without LibTorch cannot train, and then these tests skip.
#include <QDir>
#include <QFile>
#include <QApplication>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QProcess>
#include <QPushButton>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>

#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <filesystem>
#include <memory>

#include "config_form.h"
#include "../support/message_box.h"
#include "launch.h"
#include "main_window.h"
#include "message_area.h"
#include "run/status_file.h"
#include "settings.h"
#include "train_page.h"
#ifdef ODYSSEY_HAVE_MONITOR
#include "monitor/monitor_page.h"
#endif

using namespace odyssey;
using namespace odyssey::ui;

namespace {

QString quickstart() { return QStringLiteral(ODYSSEY_SOURCE_DIR "/presets/quickstart.yaml"); }

QString train_bin() {
  QString bin = qEnvironmentVariable("ODYSSEY_TRAIN_BIN");
#ifdef ODYSSEY_TRAIN_BIN
  if (bin.isEmpty()) bin = QStringLiteral(ODYSSEY_TRAIN_BIN);
#endif
  return bin;
}

std::optional<run::RunStatus> status_of(const QString& run_dir) {
  auto st = run::StatusFile(std::filesystem::path(run_dir.toStdString()) / "status.json").read();
  if (!st.ok()) return std::nullopt;
  return st.value;
}

QString yaml_quoted(const QString& s) { return QLatin1Char('"') + s + QLatin1Char('"'); }

using testing::answer_next_box;

bool process_exists(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

}  // namespace

class TstLaunch : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QString skip_;  // why the engine tests cannot run ("" when they can)
  std::unique_ptr<MainWindow> w_;
  QProcess cli_;
  pid_t frozen_pid_ = 0;  // an engine the Kill test froze (killed in cleanup if the test fails)

  std::unique_ptr<MainWindow> window() {
    return std::make_unique<MainWindow>(std::make_unique<Settings>(tmp_.filePath(QStringLiteral("s.ini"))));
  }
  QString text_of_job() const { return w_ ? w_->job_status()->text() : QString(); }

 private slots:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
#ifndef ODYSSEY_HAVE_MONITOR
    skip_ = QStringLiteral("built without the Monitor page");
    return;
#endif
    const QString bin = train_bin();
    if (bin.isEmpty()) {
      skip_ = QStringLiteral("no odyssey-train (set ODYSSEY_TRAIN_BIN)");
      return;
    }
    QProcess p;
    p.start(bin, {QStringLiteral("env")});
    if (!p.waitForFinished(60000)) {
      skip_ = QStringLiteral("%1 env did not answer").arg(bin);
      return;
    }
    if (p.readAllStandardOutput().contains("LibTorch: not linked")) {
      skip_ = QStringLiteral("%1 was built without LibTorch and cannot train; set ODYSSEY_TRAIN_BIN to one that can")
                  .arg(bin);
      return;
    }
    qputenv("ODYSSEY_TRAIN_BIN", bin.toLocal8Bit());
  }

  void cleanup() {
    w_.reset();
    if (frozen_pid_ > 0 && process_exists(frozen_pid_)) ::kill(frozen_pid_, SIGKILL);
    frozen_pid_ = 0;
    if (cli_.state() != QProcess::NotRunning) {
      cli_.kill();
      cli_.waitForFinished(10000);
    }
    // A failed test must not leave a detached engine training for 100000 steps.
    for (QString dir = newest_alive_run(tmp_.filePath(QStringLiteral("stop"))); !dir.isEmpty();
         dir = newest_alive_run(tmp_.filePath(QStringLiteral("stop")))) {
      const auto st = status_of(dir);
      if (!st || st->pid <= 0) break;
      ::kill(static_cast<pid_t>(st->pid), SIGKILL);
      QTest::qWait(500);
    }
  }

  void launch_log_parsing() {
    QCOMPARE(run_directory_from_log(QStringLiteral("config\nrun directory: /o/x")), QString());  // line not complete
    QCOMPARE(run_directory_from_log(QStringLiteral("config\nrun directory: /o/x\nstep 1\n")), QStringLiteral("/o/x"));
    QCOMPARE(run_directory_from_log(QStringLiteral("run directory: /o/y\n")), QStringLiteral("/o/y"));
    QVERIFY(!exit_status_from_log(QStringLiteral("run directory: /o/y\n")).has_value());
    QCOMPARE(exit_status_from_log(QStringLiteral("error\n[odyssey-train exited with status 2]\n")),
             std::optional<int>(2));
    QCOMPARE(last_lines(QStringLiteral("a\nb\n\nc\n"), 2), (QStringList{QStringLiteral("b"), QStringLiteral("c")}));
  }

#ifdef ODYSSEY_HAVE_MONITOR
  void start_trains_and_the_monitor_follows() {
    if (!skip_.isEmpty()) QSKIP(qPrintable(skip_));
    const QString out = tmp_.filePath(QStringLiteral("start"));
    w_ = window();
    QVERIFY(w_->open_preset(quickstart()));
    QVERIFY(w_->form()->set_text("max_steps", "5").empty());
    QVERIFY(w_->form()->set_text("output_dir", yaml_quoted(out).toStdString()).empty());
    QTRY_VERIFY2(w_->start_button()->isEnabled(), qPrintable(w_->start_button()->toolTip()));
    w_->start_button()->click();
    QVERIFY2(w_->launching(), qPrintable(text_of_job()));
    QVERIFY(!w_->start_button()->isEnabled());
    QTRY_VERIFY2_WITH_TIMEOUT(!w_->monitor()->attached_run().isEmpty(), qPrintable(text_of_job()), 60000);
    const QString run_dir = w_->monitor()->attached_run();
    QVERIFY2(run_dir.startsWith(out + QLatin1Char('/')), qPrintable(run_dir));
    QCOMPARE(w_->current_page(), static_cast<QWidget*>(w_->monitor()));
    QVERIFY(!w_->start_button()->isEnabled());  // the job started here still runs
    // Detached: the engine runs in a session of its own (a Ctrl-C aimed at ours misses it).
    if (const auto st = status_of(run_dir); st && st->pid > 0) {
      const pid_t sid = ::getsid(static_cast<pid_t>(st->pid));
      if (sid > 0) QVERIFY(sid != ::getsid(0));
    }
    // The staged preset and the engine's output sit in the staging folder.
    QVERIFY(w_->launch_log().startsWith(out + QStringLiteral("/.odyssey-launch/")));
    const QStringList staged = QDir(out + QStringLiteral("/.odyssey-launch")).entryList({QStringLiteral("*.yaml")});
    QCOMPARE(staged.size(), 1);
    QTRY_COMPARE_WITH_TIMEOUT(w_->monitor()->state_text(), QStringLiteral("completed"), 120000);
    QTRY_COMPARE(w_->monitor()->latest_step(), std::int64_t{5});
    const auto st = status_of(run_dir);
    QVERIFY(st);
    QCOMPARE(st->step, std::int64_t{5});
    QVERIFY(QFileInfo(run_dir + QStringLiteral("/checkpoints/checkpoint-5")).isDir());
    // Once it ended Start is available again and there is nothing to stop.
    QTRY_VERIFY(w_->start_button()->isEnabled());
    QVERIFY(!w_->stop_button()->isEnabled());
    // The wrapper recorded the engine's exit status.
    const auto log_text = [this] {
      QFile log(w_->launch_log());
      return log.open(QIODevice::ReadOnly) ? QString::fromUtf8(log.readAll()) : QString();
    };
    QTRY_COMPARE(exit_status_from_log(log_text()), std::optional<int>(0));
    QCOMPARE(run_directory_from_log(log_text()), run_dir);
    // The line under the pages no longer says "Training in …".
    QVERIFY2(text_of_job().contains(QStringLiteral("The run in %1 ended: completed.").arg(run_dir)),
             qPrintable(text_of_job()));
  }

  // Issue 23, runs as history: a finished run's menu loads its configuration (untitled, so its
  // config.yaml is never overwritten) and resumes it from one of its checkpoints; the resumed
  // run starts from that checkpoint's step.
  // The README's quickstart with a display: `odyssey --start` trains the embedded default
  // once its files are checked, and the Monitor follows it.
  void start_when_ready_trains_the_embedded_quickstart() {
    if (!skip_.isEmpty()) QSKIP(qPrintable(skip_));
    const QString out = tmp_.filePath(QStringLiteral("quick"));
    w_ = window();
    QVERIFY(w_->form()->file().isEmpty());  // the embedded quickstart
    QVERIFY(w_->form()->set_text("max_steps", "3").empty());
    QVERIFY(w_->form()->set_text("output_dir", yaml_quoted(out).toStdString()).empty());
    QVERIFY(w_->form()->files_pending());
    w_->start_when_ready();
    QVERIFY(!w_->launching());  // not before the check
    QTRY_VERIFY_WITH_TIMEOUT(!w_->monitor()->attached_run().isEmpty(), 60000);
    QTRY_COMPARE_WITH_TIMEOUT(w_->monitor()->state_text(), QStringLiteral("completed"), 120000);
    QCOMPARE(w_->current_page(), static_cast<QWidget*>(w_->monitor()));
    // A configuration the engine refuses is not started; the line under the pages says why.
    QVERIFY(!has_errors(w_->form()->set_text(
        "dataset", (QLatin1Char('[') + yaml_quoted(tmp_.filePath(QStringLiteral("none.jsonl"))) + QLatin1Char(']'))
                       .toStdString())));
    w_->start_when_ready();
    QTRY_VERIFY(w_->banner()->text().contains(QStringLiteral("Not started")));
    QVERIFY2(w_->banner()->text().contains(QStringLiteral("red")), qPrintable(w_->banner()->text()));
    QVERIFY(!w_->launching());
  }

  void a_past_run_loads_and_resumes() {
    if (!skip_.isEmpty()) QSKIP(qPrintable(skip_));
    const QString out = tmp_.filePath(QStringLiteral("history"));
    w_ = window();
    QVERIFY(w_->open_preset(quickstart()));
    QVERIFY(w_->form()->set_text("max_steps", "4").empty());
    QVERIFY(w_->form()->set_text("save_steps", "2").empty());
    QVERIFY(w_->form()->set_text("save_total_limit", "0").empty());
    QVERIFY(w_->form()->set_text("output_dir", yaml_quoted(out).toStdString()).empty());
    QTRY_VERIFY2(w_->start_button()->isEnabled(), qPrintable(w_->start_button()->toolTip()));
    w_->start_button()->click();
    QTRY_VERIFY_WITH_TIMEOUT(!w_->monitor()->attached_run().isEmpty(), 60000);
    const QString first = w_->monitor()->attached_run();
    QTRY_COMPARE_WITH_TIMEOUT(w_->monitor()->state_text(), QStringLiteral("completed"), 120000);
    QCOMPARE(MonitorPage::checkpoints_of(first), (QStringList{first + QStringLiteral("/checkpoints/checkpoint-4"),
                                                              first + QStringLiteral("/checkpoints/checkpoint-2")}));

    // The menu of the run: its actions, and "Load this run's configuration".
    bool answered = false;
    answer_next_box(QMessageBox::Discard, &answered);  // the form has unsaved edits
    std::unique_ptr<QMenu> menu(w_->monitor()->run_menu(first, nullptr));
    QStringList texts;
    QAction* load = nullptr;
    QMenu* resume = nullptr;
    for (QAction* a : menu->actions()) {
      texts << a->text();
      if (a->text() == QStringLiteral("Load this run's configuration")) load = a;
      if (a->menu()) resume = a->menu();
    }
    QVERIFY2(load && resume && texts.contains(QStringLiteral("Open output folder")),
             qPrintable(texts.join(QLatin1Char('|'))));
    load->trigger();
    QVERIFY(answered);
    QVERIFY(w_->form()->file().isEmpty());  // untitled
    QCOMPARE(w_->form()->config().max_steps, std::int64_t{4});
    QCOMPARE(w_->form()->config().save_steps, std::int64_t{2});
    QVERIFY(w_->form()->config().resume_from_checkpoint.empty());
    QCOMPARE(w_->current_page(), static_cast<QWidget*>(w_->train_page()));

    // "Resume from checkpoint" › checkpoint-2, then Start: the new run resumes at step 2.
    QStringList names;
    QAction* from2 = nullptr;
    for (QAction* a : resume->actions()) {
      names << a->text();
      if (a->text() == QStringLiteral("checkpoint-2")) from2 = a;
    }
    QCOMPARE(names, (QStringList{QStringLiteral("checkpoint-4"), QStringLiteral("checkpoint-2")}));
    from2->trigger();  // unchanged form: no question
    QCOMPARE(QString::fromStdString(w_->form()->config().resume_from_checkpoint),
             first + QStringLiteral("/checkpoints/checkpoint-2"));
    QTRY_VERIFY2(w_->start_button()->isEnabled(), qPrintable(w_->start_button()->toolTip()));
    w_->start_button()->click();
    QTRY_VERIFY_WITH_TIMEOUT(w_->monitor()->attached_run() != first && !w_->monitor()->attached_run().isEmpty(), 60000);
    const QString second = w_->monitor()->attached_run();
    QTRY_COMPARE_WITH_TIMEOUT(w_->monitor()->state_text(), QStringLiteral("completed"), 120000);
    QFile events(second + QStringLiteral("/events.jsonl"));
    QVERIFY(events.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(events.readAll());
    QVERIFY2(text.contains(QStringLiteral("\"stage\":\"resume\"")) && text.contains(QStringLiteral("checkpoint-2")),
             qPrintable(text.left(3000)));
    QVERIFY2(!text.contains(QStringLiteral("\"step\":1,")), "the resumed run trained step 1 again");
    QVERIFY(text.contains(QStringLiteral("\"step\":3,")));
  }

  void a_launch_that_fails_shows_the_log() {
    if (!skip_.isEmpty()) QSKIP(qPrintable(skip_));
    w_ = window();
    QVERIFY(w_->open_preset(quickstart()));
    QVERIFY(
        w_->form()->set_text("output_dir", yaml_quoted(tmp_.filePath(QStringLiteral("fail"))).toStdString()).empty());
    // The window checked a dataset that was there; it is removed before Start (from a shell,
    // a sync tool): the engine's own check at `run` refuses, and the window shows why.
    const QString data = tmp_.filePath(QStringLiteral("vanishing.jsonl"));
    QVERIFY(QFile::copy(QStringLiteral(ODYSSEY_SOURCE_DIR "/resources/quickstart/data/val.jsonl"), data));
    QVERIFY(!has_errors(
        w_->form()->set_text("dataset", (QLatin1Char('[') + yaml_quoted(data) + QLatin1Char(']')).toStdString())));
    QTRY_VERIFY(w_->start_button()->isEnabled());
    QVERIFY(QFile::remove(data));
    w_->start_button()->click();
    QTRY_VERIFY_WITH_TIMEOUT(!w_->launching(), 60000);
    QVERIFY(w_->monitor()->attached_run().isEmpty());
    QVERIFY2(text_of_job().contains(QStringLiteral("exited with status")), qPrintable(text_of_job()));
    QVERIFY2(text_of_job().contains(QStringLiteral("vanishing.jsonl")), qPrintable(text_of_job()));
  }

  void stop_asks_the_job_to_stop() {
    if (!skip_.isEmpty()) QSKIP(qPrintable(skip_));
    const QString out = tmp_.filePath(QStringLiteral("stop"));
    w_ = window();
    QVERIFY(w_->open_preset(quickstart()));
    QVERIFY(w_->form()->set_text("max_steps", "100000").empty());
    QVERIFY(w_->form()->set_text("output_dir", yaml_quoted(out).toStdString()).empty());
    QTRY_VERIFY(w_->start_button()->isEnabled());
    QVERIFY(!w_->stop_button()->isEnabled());
    w_->start_button()->click();
    QTRY_VERIFY2_WITH_TIMEOUT(!w_->monitor()->attached_run().isEmpty(), qPrintable(text_of_job()), 60000);
    const QString run_dir = w_->monitor()->attached_run();
    QTRY_VERIFY_WITH_TIMEOUT(w_->monitor()->latest_step() >= 1, 120000);
    QTRY_VERIFY(w_->stop_button()->isEnabled());
    QCOMPARE(w_->stop_button()->text(), QStringLiteral("Stop"));
    w_->stop_button()->click();
    QVERIFY2(text_of_job().contains(QStringLiteral("SIGTERM")), qPrintable(text_of_job()));
    // Until it has stopped, the next click would kill.
    QCOMPARE(w_->stop_button()->text(), QStringLiteral("Kill…"));
    QTRY_COMPARE_WITH_TIMEOUT(w_->monitor()->state_text(), QStringLiteral("stopped"), 120000);
    const auto st = status_of(run_dir);
    QVERIFY(st);
    QCOMPARE(st->state, run::RunState::Stopped);
    QVERIFY(st->step >= 1 && st->step < 100000);
    QVERIFY(QFileInfo(run_dir + QStringLiteral("/checkpoints/checkpoint-%1").arg(st->step)).isDir());
    QTRY_VERIFY(!w_->stop_button()->isEnabled());
    QTRY_VERIFY(w_->start_button()->isEnabled());
  }

  void kill_ends_a_stopping_job_at_once() {
    if (!skip_.isEmpty()) QSKIP(qPrintable(skip_));
    const QString out = tmp_.filePath(QStringLiteral("kill"));
    w_ = window();
    QVERIFY(w_->open_preset(quickstart()));
    QVERIFY(w_->form()->set_text("max_steps", "100000").empty());
    QVERIFY(w_->form()->set_text("output_dir", yaml_quoted(out).toStdString()).empty());
    QTRY_VERIFY(w_->start_button()->isEnabled());
    w_->start_button()->click();
    QTRY_VERIFY2_WITH_TIMEOUT(!w_->monitor()->attached_run().isEmpty(), qPrintable(text_of_job()), 60000);
    const QString run_dir = w_->monitor()->attached_run();
    QTRY_VERIFY_WITH_TIMEOUT(w_->monitor()->latest_step() >= 1, 120000);
    QTRY_VERIFY(w_->stop_button()->isEnabled());
    const auto before = status_of(run_dir);
    QVERIFY(before && before->pid > 0);
    const auto pid = static_cast<pid_t>(before->pid);
    // The quickstart stops within a fraction of a second of SIGTERM (one small step and a
    // 3 MB checkpoint); frozen, it stays in the stopping phase that Kill is for, however
    // slow this machine is. SIGTERM stays pending; SIGKILL ends a stopped process too.
    QCOMPARE(::kill(pid, SIGSTOP), 0);
    frozen_pid_ = pid;
    w_->stop_button()->click();
    QVERIFY2(text_of_job().contains(QStringLiteral("SIGTERM")), qPrintable(text_of_job()));
    QCOMPARE(w_->stop_button()->text(), QStringLiteral("Kill…"));

    // Kill… asks first; "No" leaves the job alone.
    bool answered = false;
    answer_next_box(QMessageBox::No, &answered);
    w_->stop_button()->click();
    QVERIFY(answered);
    QVERIFY(process_exists(pid));
    QCOMPARE(w_->stop_button()->text(), QStringLiteral("Kill…"));

    // "Yes" sends SIGKILL: the engine is gone at once, and the window says so.
    answer_next_box(QMessageBox::Yes, &answered);
    w_->stop_button()->click();
    QVERIFY(answered);
    // "Killed pid N (SIGKILL)", or already "… ended: killed (SIGKILL) …" if it went that fast.
    QVERIFY2(text_of_job().contains(QStringLiteral("Killed pid %1 (SIGKILL)").arg(pid)) ||
                 text_of_job().contains(QStringLiteral("ended: killed (SIGKILL)")),
             qPrintable(text_of_job()));
    QTRY_VERIFY_WITH_TIMEOUT(!process_exists(pid), 10000);
    frozen_pid_ = 0;
    // The shell that ran it recorded the signal (128 + 9).
    const auto log_text = [this] {
      QFile log(w_->launch_log());
      return log.open(QIODevice::ReadOnly) ? QString::fromUtf8(log.readAll()) : QString();
    };
    QTRY_COMPARE(exit_status_from_log(log_text()), std::optional<int>(128 + SIGKILL));
    // No final word from the engine: status.json still claims a live state, and the Monitor
    // shows the run as failed because its process is gone.
    const auto st = status_of(run_dir);
    QVERIFY(st);
    QVERIFY(!run::is_terminal(st->state));
    QTRY_COMPARE_WITH_TIMEOUT(w_->monitor()->state_text(), QStringLiteral("failed (stopped responding)"), 30000);
    QTRY_VERIFY(!w_->stop_button()->isEnabled());
    QCOMPARE(w_->stop_button()->text(), QStringLiteral("Stop"));
    QTRY_VERIFY(w_->start_button()->isEnabled());
    QVERIFY2(text_of_job().contains(QStringLiteral("The run in %1 ended: killed (SIGKILL)").arg(run_dir)),
             qPrintable(text_of_job()));
  }

  void a_new_window_reattaches_to_a_running_job() {
    if (!skip_.isEmpty()) QSKIP(qPrintable(skip_));
    const QString out = tmp_.filePath(QStringLiteral("reattach"));
    // A job started from a terminal (not from a window).
    cli_.setProgram(train_bin());
    cli_.setArguments({QStringLiteral("run"), quickstart(), QStringLiteral("--set"), QStringLiteral("max_steps=100000"),
                       QStringLiteral("--set"), QStringLiteral("output_dir=") + out});
    cli_.setProcessChannelMode(QProcess::MergedChannels);
    cli_.start();
    QVERIFY(cli_.waitForStarted());
    QString printed, run_dir;
    QTRY_VERIFY_WITH_TIMEOUT(
        !(run_dir = run_directory_from_log(printed += QString::fromUtf8(cli_.readAll()))).isEmpty() &&
            status_of(run_dir).has_value(),
        60000);
    // A window opened afterwards on the same output folder attaches to it.
    w_ = window();
    QVERIFY(w_->open_preset(quickstart()));
    QVERIFY(w_->form()->set_text("output_dir", yaml_quoted(out).toStdString()).empty());
    QTRY_COMPARE(w_->monitor()->attached_run(), run_dir);
    QVERIFY(w_->job_status()->text().contains(run_dir));
    QTRY_VERIFY(w_->stop_button()->isEnabled());
    // Issue 23, finding 9: Start stays disabled while that job runs in this output folder.
    QTRY_VERIFY(!w_->form()->model_pending());
    QVERIFY(!w_->form()->has_errors());
    QVERIFY(!w_->start_button()->isEnabled());
    QVERIFY2(w_->start_button()->toolTip().contains(QStringLiteral("running in this output folder")),
             qPrintable(w_->start_button()->toolTip()));
    // It can stop it too; the engine exits 0.
    QTRY_VERIFY_WITH_TIMEOUT(w_->monitor()->latest_step() >= 1, 120000);
    w_->stop_button()->click();
    QTRY_COMPARE_WITH_TIMEOUT(cli_.state(), QProcess::NotRunning, 120000);
    QCOMPARE(cli_.exitStatus(), QProcess::NormalExit);
    QCOMPARE(cli_.exitCode(), 0);
    QTRY_COMPARE(w_->monitor()->state_text(), QStringLiteral("stopped"));
    QTRY_VERIFY(w_->start_button()->isEnabled());  // the folder is free again

    // Nothing alive: a fresh window attaches to nothing.
    w_ = window();
    QVERIFY(w_->form()->set_text("output_dir", yaml_quoted(out).toStdString()).empty());
    QTest::qWait(200);
    QVERIFY(w_->monitor()->attached_run().isEmpty());
    QVERIFY(!w_->reattach_running());
  }
#endif
};

QTEST_MAIN(TstLaunch)
#include "tst_launch.moc"
