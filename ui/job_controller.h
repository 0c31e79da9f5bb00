// The job the window starts and follows, kept out of the window (docs/gui.md, "Job control"):
// the detached launch of a staged preset, its log read as it grows until the engine prints its
// run directory (or exits), the run the Monitor follows and whether it is alive, and Stop
// (SIGTERM) / Kill (SIGKILL) sent to the pid in that run's status.json. It says what happens in
// HTML messages and `changed`; the window owns the buttons, the confirmation and the Monitor.
#pragma once

#include <QObject>
#include <QString>
#include <QStringDecoder>
#include <QThread>
#include <QTimer>

#include "launch.h"

namespace odyssey::ui {

// Reads a launch log as it grows, on JobController's I/O thread: each read() sends what was
// appended since the last one (decoded; a UTF-8 sequence split between reads is kept for the
// next) with the log's generation, so a read of an earlier launch's log is recognised.
class LaunchLogReader : public QObject {
  Q_OBJECT

 public:
  void open(const QString& path, quint64 generation);  // from the start of the file
  void read();

 signals:
  // `restarted`: the file was shorter than what had been read (replaced or truncated), so
  // `text` is read from its start again.
  void grown(const QString& text, qint64 bytes_read, quint64 generation, bool restarted);

 private:
  QString path_;
  quint64 generation_ = 0;
  qint64 offset_ = 0;
  QStringDecoder decoder_{QStringDecoder::Utf8};
};

class JobController : public QObject {
  Q_OBJECT

 public:
  explicit JobController(QObject* parent = nullptr);
  ~JobController() override;

  // How long a launch waits for the engine's `run directory:` line (it checks the model and
  // every dataset file first) before it is reported as silent.
  static constexpr qint64 kLaunchTimeoutMs = 180'000;

  // Starts `bin run <preset>` for a staged launch, detached (closing the window does not stop
  // it), and polls its log. False, with an error message, when it could not start or a job
  // started here is still starting or running.
  bool start(const QString& bin, const StagedLaunch& launch);
  // While a start waits for the engine's `run directory:` line.
  bool launching() const { return launch_poll_.isActive(); }
  // The run started here, from its `run directory:` line until it ends ("" otherwise).
  const QString& launched_run() const { return launched_run_; }
  // The log of the last launch ("" before the first) and how many of its bytes were read: the
  // log is read on an I/O thread from where the last read stopped, never again from its start.
  const QString& launch_log() const { return launch_log_; }
  qint64 log_bytes_read() const { return log_read_; }
  // The thread the launch log is read on (its own, not the caller's).
  const QThread* log_thread() const { return &io_; }

  // The run directory to watch (the one the Monitor shows; "" for none); checked now and each
  // second after.
  void follow(const QString& run_dir);
  const QString& followed() const { return followed_; }
  // What the followed run's status.json says, as of the last check.
  bool followed_alive() const { return alive_; }
  qint64 followed_pid() const { return pid_; }
  const QString& followed_host() const { return host_; }
  // The next Stop is a Kill: the run already stops (it said so, or was sent SIGTERM from here).
  bool kill_next() const { return alive_ && kill_next_; }

  // Asks the followed run to stop (SIGTERM: it finishes the step, saves a checkpoint and
  // exits) or, with `kill`, ends it at once (SIGKILL; the caller offers it when kill_next() and
  // confirms it first). False (with a message) when the run is gone, runs on another host or
  // the signal failed.
  bool stop(bool kill);
  // Re-reads the followed run's status and the launched run's end now.
  void poll();

 signals:
  // What happened, for the job area under the pages (`error`: show in the error colour).
  void message(const QString& html, bool error);
  // The launched engine printed its run directory (absolute).
  void run_started(const QString& run_dir);
  // The launch ended without a run: the engine exited first, or printed no run directory in
  // time (`html` also went out as an error message, with the log's last lines).
  void launch_failed(const QString& html);
  // The run started here is over: `how` is its terminal state ("completed", "stopped",
  // "failed"), "killed (SIGKILL)…" or that its process is gone.
  void run_ended(const QString& run_dir, const QString& how);
  // launching(), launched_run(), followed_alive() or kill_next() may have changed.
  void changed();

 private:
  void poll_launch();
  // Asks the I/O thread for what the launch log gained (answered by on_log_grown).
  void request_log_read();
  // Appends the log's growth to log_tail_ (its last 64 KiB); while launching, looks for the
  // run directory or the exit line in it.
  void on_log_grown(const QString& text, qint64 bytes_read, quint64 generation, bool restarted);
  void check_launch();

  QTimer launch_poll_;
  QTimer job_poll_;
  QThread io_;
  LaunchLogReader* reader_;
  quint64 log_generation_ = 0;
  bool read_pending_ = false;
  QString launch_log_;
  QString launch_output_dir_;
  qint64 launch_started_ms_ = 0;
  qint64 log_read_ = 0;
  QString log_tail_;
  QString launched_run_;
  QString followed_;
  bool alive_ = false;
  bool kill_next_ = false;
  qint64 pid_ = 0;
  QString host_;
  QString term_sent_for_;  // the run sent SIGTERM from here (the next Stop offers Kill)
  QString killed_run_;     // the run sent SIGKILL from here (its end is reported as killed)
};

}  // namespace odyssey::ui
