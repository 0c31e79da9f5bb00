// The window's side of `odyssey-train chat --json` (docs/inference.md): one child process per
// client, requests written as JSON lines to its standard input, events read from its standard
// output and turned into signals. The window never links LibTorch; the engine process is started
// once and reused across prompts (adapters switch inside it), and stopped with its page.
#pragma once

#include <QByteArray>
#include <QJsonObject>
#include <QObject>
#include <QProcess>
#include <QString>
#include <QStringList>

namespace odyssey::ui {

class EngineClient : public QObject {
  Q_OBJECT
 public:
  explicit EngineClient(QObject* parent = nullptr);
  ~EngineClient() override;

  // Starts `<bin> chat --json --model <model> [extra args]`. A running engine is stopped first.
  void start(const QString& bin, const QString& model, const QStringList& extra_args = {});
  // Asks the engine to end ({"type": "shutdown"}, then the input closed); killed if it has not
  // ended after `grace_ms`.
  void stop(int grace_ms = 3000);
  bool running() const { return process_.state() != QProcess::NotRunning; }
  qint64 process_id() const { return process_.processId(); }
  bool ready() const { return ready_; }
  const QJsonObject& info() const { return info_; }  // the ready event

  // Sends one request (an object with "id" and the prompt); returns false when no engine runs.
  bool send(const QJsonObject& request);
  void cancel();  // {"type": "cancel"}: stops the running generation

  // The last lines the engine wrote to standard error (what it said before dying).
  QString stderr_tail() const;

 Q_SIGNALS:
  void ready_changed(const QJsonObject& info);            // the engine loaded its model
  void token(const QJsonValue& id, const QString& text);  // a piece of an answer
  void done(const QJsonValue& id, const QJsonObject& result);
  void failed(const QJsonValue& id, const QString& message);  // an error event
  // The engine ended. `expected`: stop() asked for it; otherwise it died (crash, kill, a model
  // that could not be loaded) and `message` says what is known.
  void exited(bool expected, const QString& message);

 private:
  void read_stdout();
  void on_finished(int code, QProcess::ExitStatus status);
  QProcess process_;
  QByteArray pending_;  // a partial line
  QByteArray stderr_;   // the last few KiB
  QJsonObject info_;
  bool ready_ = false;
  bool stopping_ = false;
  bool quiet_ = false;  // a restart or the destructor ends the process: no exited() signal
};

}  // namespace odyssey::ui
