#include "job_controller.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QMetaObject>
#include <QUrl>

#include <signal.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "run/status_file.h"

namespace odyssey::ui {
namespace {

// The launch log kept in memory: enough for the `run directory:` line, the wrapper's exit
// line and the last lines shown when a launch fails.
constexpr qsizetype kLogTailChars = 64 * 1024;

std::optional<run::RunStatus> read_status(const QString& run_dir) {
  if (run_dir.isEmpty()) return std::nullopt;
  auto st = run::StatusFile(std::filesystem::path(run_dir.toStdString()) / "status.json").read();
  if (!st.ok()) return std::nullopt;
  return st.value;
}

bool is_alive(const run::RunStatus& st) {
  return !run::is_terminal(st.state) && run::liveness(st, run::unix_now()) == run::Liveness::Alive;
}

}  // namespace

void LaunchLogReader::open(const QString& path, quint64 generation) {
  path_ = path;
  generation_ = generation;
  offset_ = 0;
  decoder_ = QStringDecoder(QStringDecoder::Utf8);
}

void LaunchLogReader::read() {
  QString text;
  bool restarted = false;
  QFile f(path_);
  if (!path_.isEmpty() && f.open(QIODevice::ReadOnly)) {
    if (f.size() < offset_) {
      offset_ = 0;
      decoder_ = QStringDecoder(QStringDecoder::Utf8);
      restarted = true;
    }
    if (f.size() > offset_ && f.seek(offset_)) {
      const QByteArray grown_bytes = f.readAll();
      offset_ += grown_bytes.size();
      text = decoder_.decode(grown_bytes);
    }
  }
  emit grown(text, offset_, generation_, restarted);  // also when empty: the read is over
}

JobController::JobController(QObject* parent) : QObject(parent), reader_(new LaunchLogReader) {
  launch_poll_.setInterval(200);
  connect(&launch_poll_, &QTimer::timeout, this, &JobController::poll_launch);
  job_poll_.setInterval(1000);
  connect(&job_poll_, &QTimer::timeout, this, &JobController::poll);
  job_poll_.start();
  io_.setObjectName(QStringLiteral("job-io"));
  reader_->moveToThread(&io_);
  connect(&io_, &QThread::finished, reader_, &QObject::deleteLater);
  connect(reader_, &LaunchLogReader::grown, this, &JobController::on_log_grown, Qt::QueuedConnection);
  io_.start();
}

JobController::~JobController() {
  io_.quit();
  io_.wait();  // a read in progress finishes; the reader is deleted on its thread
}

bool JobController::start(const QString& bin, const StagedLaunch& launch) {
  if (launching() || !launched_run_.isEmpty()) {
    emit message(tr("<b>Not started:</b> the job started from this window is still starting or running."), true);
    return false;
  }
  QString error;
  if (start_detached_train(bin, launch, &error) == 0) {
    emit message(tr("<b>Not started:</b> %1").arg(error.toHtmlEscaped()), true);
    return false;
  }
  launch_log_ = launch.log;
  launch_output_dir_ = launch.output_dir;
  launch_started_ms_ = QDateTime::currentMSecsSinceEpoch();
  log_read_ = 0;
  log_tail_.clear();
  read_pending_ = false;
  const quint64 generation = ++log_generation_;
  const QString path = launch.log;
  QMetaObject::invokeMethod(
      reader_, [r = reader_, path, generation] { r->open(path, generation); }, Qt::QueuedConnection);
  emit message(tr("Starting <tt>odyssey-train run %1</tt> … (output in %2)")
                   .arg(launch.preset.toHtmlEscaped(), launch.log.toHtmlEscaped()),
               false);
  launch_poll_.start();
  emit changed();
  return true;
}

void JobController::request_log_read() {
  if (read_pending_) return;
  read_pending_ = true;
  QMetaObject::invokeMethod(reader_, &LaunchLogReader::read, Qt::QueuedConnection);
}

void JobController::on_log_grown(const QString& text, qint64 bytes_read, quint64 generation, bool restarted) {
  if (generation != log_generation_) return;  // an earlier launch's log
  read_pending_ = false;
  if (restarted) log_tail_.clear();
  log_read_ = bytes_read;
  log_tail_ += text;
  if (log_tail_.size() > kLogTailChars) {
    // Cut at a line start so that no half line is parsed; the run directory line, when
    // complete, was seen by the check that followed the read that brought it.
    const qsizetype nl = log_tail_.indexOf(QLatin1Char('\n'), log_tail_.size() - kLogTailChars);
    log_tail_ = nl < 0 ? log_tail_.right(kLogTailChars) : log_tail_.mid(nl + 1);
  }
  if (launching()) check_launch();
}

void JobController::poll_launch() {
  request_log_read();
  check_launch();  // the timeout, while a read is slow
}

void JobController::check_launch() {
  QString dir = run_directory_from_log(log_tail_);
  if (!dir.isEmpty()) {
    launch_poll_.stop();
    dir = QDir(launch_output_dir_).absoluteFilePath(dir);
    launched_run_ = dir;
    term_sent_for_.clear();
    emit message(tr("Training in %1 (engine output: %2).").arg(dir.toHtmlEscaped(), launch_log_.toHtmlEscaped()),
                 false);
    emit run_started(dir);
    poll();
    return;
  }
  const auto rc = exit_status_from_log(log_tail_);
  const bool timed_out = QDateTime::currentMSecsSinceEpoch() - launch_started_ms_ > kLaunchTimeoutMs;
  if (!rc && !timed_out) return;
  launch_poll_.stop();
  const QString head = rc ? tr("<b>odyssey-train exited with status %1 before it started a run.</b>").arg(*rc)
                          : tr("<b>odyssey-train printed no run directory in %1 s</b>; it may still be checking the "
                               "configuration.")
                                .arg(kLaunchTimeoutMs / 1000);
  QStringList tail = last_lines(log_tail_, 12);
  if (rc && !tail.isEmpty()) tail.removeLast();  // the wrapper's exit line
  const QString html =
      head +
      tr(" Last lines of <a href='%1'>%2</a> (click for the whole log):")
          .arg(QUrl::fromLocalFile(launch_log_).toString().toHtmlEscaped(), launch_log_.toHtmlEscaped()) +
      QStringLiteral("<pre>") + tail.join(QLatin1Char('\n')).toHtmlEscaped() + QStringLiteral("</pre>");
  emit message(html, true);
  emit launch_failed(html);
  emit changed();
}

void JobController::follow(const QString& run_dir) {
  followed_ = run_dir;
  poll();
}

void JobController::poll() {
  const auto st = read_status(followed_);
  alive_ = st && is_alive(*st);
  kill_next_ = alive_ && (st->state == run::RunState::Stopping || term_sent_for_ == followed_);
  pid_ = st ? st->pid : 0;
  host_ = st ? QString::fromStdString(st->hostname) : QString();
  if (!launched_run_.isEmpty()) {
    const auto own = launched_run_ == followed_ ? st : read_status(launched_run_);
    // Without a status.json (not written yet, or unreadable) only the wrapper's exit line says
    // the job is over.
    bool over = false;
    if (own) {
      over = !is_alive(*own);
    } else {
      request_log_read();  // answered before the next poll
      over = exit_status_from_log(log_tail_).has_value();
    }
    if (over) {
      // The "Training in …" line would go on claiming a job that is over.
      QString how = tr("its process is gone");
      if (killed_run_ == launched_run_) {
        how = tr("killed (SIGKILL), without a final checkpoint");
      } else if (own && run::is_terminal(own->state)) {
        const std::string_view state = run::to_string(own->state);
        how = QString::fromUtf8(state.data(), static_cast<qsizetype>(state.size()));
      }
      const QString ended = launched_run_;
      launched_run_.clear();
      emit message(tr("The run in %1 ended: %2.").arg(ended.toHtmlEscaped(), how), false);
      emit run_ended(ended, how);
    }
  }
  emit changed();
}

bool JobController::stop(bool kill) {
  const auto st = read_status(followed_);
  if (!st || !is_alive(*st)) {
    emit message(tr("The attached run is not running any more."), false);
    poll();
    return false;
  }
  if (st->hostname != run::this_hostname() || st->pid <= 0) {
    emit message(tr("<b>Not stopped:</b> the job runs on host %1 (this is %2); stop it there.")
                     .arg(QString::fromStdString(st->hostname).toHtmlEscaped(),
                          QString::fromStdString(run::this_hostname()).toHtmlEscaped()),
                 true);
    return false;
  }
  const bool sent = ::kill(static_cast<pid_t>(st->pid), kill ? SIGKILL : SIGTERM) == 0;
  if (!sent) {
    const QString why = QString::fromLocal8Bit(std::strerror(errno)).toHtmlEscaped();
    emit message(
        (kill ? tr("<b>Kill failed:</b> pid %1: %2") : tr("<b>Stop failed:</b> pid %1: %2")).arg(st->pid).arg(why),
        true);
  } else if (kill) {
    killed_run_ = followed_;
    emit message(tr("Killed pid %1 (SIGKILL).").arg(st->pid), false);
  } else {
    term_sent_for_ = followed_;
    emit message(tr("Asked pid %1 to stop (SIGTERM): it finishes the step, saves a checkpoint and exits. "
                    "Click Kill… to end it at once.")
                     .arg(st->pid),
                 false);
  }
  poll();
  return sent;
}

}  // namespace odyssey::ui
