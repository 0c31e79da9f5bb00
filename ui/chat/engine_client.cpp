#include "engine_client.h"

#include <QJsonDocument>
#include <QTimer>

namespace odyssey::ui {

namespace {
constexpr qsizetype kStderrKeep = 8192;
}

EngineClient::EngineClient(QObject* parent) : QObject(parent) {
  connect(&process_, &QProcess::readyReadStandardOutput, this, &EngineClient::read_stdout);
  connect(&process_, &QProcess::readyReadStandardError, this, [this] {
    stderr_ += process_.readAllStandardError();
    if (stderr_.size() > kStderrKeep) stderr_ = stderr_.right(kStderrKeep);
  });
  connect(&process_, &QProcess::finished, this, &EngineClient::on_finished);
  connect(&process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart) {
      ready_ = false;
      Q_EMIT exited(false, tr("The engine could not be started: %1").arg(process_.errorString()));
    }
  });
}

EngineClient::~EngineClient() {
  if (running()) {
    quiet_ = true;
    process_.kill();
    process_.waitForFinished(2000);
  }
}

void EngineClient::start(const QString& bin, const QString& model, const QStringList& extra_args) {
  if (running()) {
    quiet_ = true;
    process_.kill();
    process_.waitForFinished(2000);
    quiet_ = false;
  }
  ready_ = false;
  stopping_ = false;
  info_ = {};
  pending_.clear();
  stderr_.clear();
  QStringList args{QStringLiteral("chat"), QStringLiteral("--json"), QStringLiteral("--model"), model};
  args << extra_args;
  process_.start(bin, args);
}

void EngineClient::stop(int grace_ms) {
  if (!running()) return;
  stopping_ = true;
  process_.write("{\"type\": \"shutdown\"}\n");
  process_.closeWriteChannel();
  QTimer::singleShot(grace_ms, this, [this] {
    if (running() && stopping_) process_.kill();
  });
}

bool EngineClient::send(const QJsonObject& request) {
  if (!running()) return false;
  process_.write(QJsonDocument(request).toJson(QJsonDocument::Compact) + '\n');
  return true;
}

void EngineClient::cancel() {
  if (running()) process_.write("{\"type\": \"cancel\"}\n");
}

QString EngineClient::stderr_tail() const {
  QStringList lines = QString::fromUtf8(stderr_).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  while (lines.size() > 6) lines.removeFirst();
  return lines.join(QLatin1Char('\n'));
}

void EngineClient::read_stdout() {
  pending_ += process_.readAllStandardOutput();
  qsizetype nl;
  while ((nl = pending_.indexOf('\n')) >= 0) {
    const QByteArray line = pending_.left(nl);
    pending_.remove(0, nl + 1);
    QJsonParseError err{};
    const QJsonDocument doc = QJsonDocument::fromJson(line, &err);
    if (err.error != QJsonParseError::NoError || !doc.isObject()) continue;  // not an event (never expected)
    const QJsonObject e = doc.object();
    const QString kind = e.value(QStringLiteral("event")).toString();
    if (kind == QLatin1String("ready")) {
      ready_ = true;
      info_ = e;
      Q_EMIT ready_changed(e);
    } else if (kind == QLatin1String("token")) {
      Q_EMIT token(e.value(QStringLiteral("id")), e.value(QStringLiteral("text")).toString());
    } else if (kind == QLatin1String("done")) {
      Q_EMIT done(e.value(QStringLiteral("id")), e);
    } else if (kind == QLatin1String("error")) {
      Q_EMIT failed(e.value(QStringLiteral("id")), e.value(QStringLiteral("message")).toString());
    }
  }
}

void EngineClient::on_finished(int code, QProcess::ExitStatus status) {
  if (quiet_) return;
  read_stdout();
  stderr_ += process_.readAllStandardError();
  const bool expected = stopping_;
  stopping_ = false;
  ready_ = false;
  QString message;
  if (!expected) {
    message = status == QProcess::CrashExit ? tr("The engine stopped unexpectedly (killed or crashed).")
                                            : tr("The engine ended with exit code %1.").arg(code);
    const QString tail = stderr_tail();
    if (!tail.isEmpty()) message += QLatin1Char('\n') + tail;
  }
  Q_EMIT exited(expected, message);
}

}  // namespace odyssey::ui
