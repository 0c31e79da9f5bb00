#include "launch.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QRegularExpression>
#include <QSaveFile>
#include <QStandardPaths>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "config/model_config.h"
#include "config/preset_io.h"
#include "config/validate.h"
#include "config_form.h"
#include "run/run_dir.h"
#include "run/status_file.h"

namespace odyssey::ui {
namespace fs = std::filesystem;

namespace {
const QString kExitPrefix = QStringLiteral("[odyssey-train exited with status ");
const QString kRunDirPrefix = QStringLiteral("run directory: ");
}  // namespace

QString find_train_binary() {
  const QString env = qEnvironmentVariable("ODYSSEY_TRAIN_BIN");
  if (!env.isEmpty()) return QFileInfo(env).isExecutable() ? QFileInfo(env).absoluteFilePath() : QString();
  const QString here = QCoreApplication::applicationDirPath();
  for (const QString& candidate :
       {here + QStringLiteral("/odyssey-train"), here + QStringLiteral("/../app/odyssey-train"),
        here + QStringLiteral("/../../app/odyssey-train")}) {
    const QFileInfo fi(candidate);
    if (fi.isFile() && fi.isExecutable()) return fi.canonicalFilePath();
  }
  return QStandardPaths::findExecutable(QStringLiteral("odyssey-train"));
}

QString resolved_output_dir(const ConfigForm& form) {
  const QString out = QString::fromStdString(form.config().output_dir);
  return QDir::cleanPath(QDir::current().absoluteFilePath(out.isEmpty() ? QStringLiteral(".") : out));
}

QString launch_name(const ConfigForm& form) {
  return form.file().isEmpty() ? QStringLiteral("quickstart") : QFileInfo(form.file()).completeBaseName();
}

std::optional<StagedLaunch> stage_launch(const ConfigForm& form, QString* error) {
  StagedLaunch s;
  s.output_dir = resolved_output_dir(form);
  s.name = launch_name(form);
  const QString staging = s.output_dir + QStringLiteral("/.odyssey-launch");
  if (!QDir().mkpath(staging)) {
    *error = QCoreApplication::translate("Launch", "cannot create %1").arg(staging);
    return std::nullopt;
  }
  const QString stem =
      QDateTime::currentDateTimeUtc().toString(QStringLiteral("yyyyMMdd-HHmmss-zzz")) + QLatin1Char('-') + s.name;
  s.preset = staging + QLatin1Char('/') + stem + QStringLiteral(".yaml");
  s.log = staging + QLatin1Char('/') + stem + QStringLiteral(".log");

  const LoadedConfig& lc = form.loaded();
  TrainConfig c = resolve_paths(lc, locate_model(lc.config.model, lc.origin.base_dir, lc.config.model_revision));
  c.output_dir = s.output_dir.toStdString();
  QSaveFile f(s.preset);
  const std::string text =
      "# Staged by the odyssey window for `odyssey-train run`; paths are absolute.\n" + save_preset_text(c, true);
  if (!f.open(QIODevice::WriteOnly) || f.write(text.data(), static_cast<qint64>(text.size())) < 0 || !f.commit()) {
    *error = QCoreApplication::translate("Launch", "cannot write %1: %2").arg(s.preset, f.errorString());
    return std::nullopt;
  }
  return s;
}

qint64 start_detached_train(const QString& bin, const StagedLaunch& launch, QString* error) {
  QProcess p;
  p.setProgram(QStringLiteral("/bin/sh"));
  // $0 is the engine; the trailing line records its exit status for the window.
  p.setArguments({QStringLiteral("-c"),
                  QStringLiteral("\"$0\" \"$@\"; echo \"") + kExitPrefix + QStringLiteral("$?]\""), bin,
                  QStringLiteral("run"), launch.preset, QStringLiteral("--name"), launch.name});
  p.setWorkingDirectory(launch.output_dir);
  p.setStandardInputFile(QProcess::nullDevice());
  p.setStandardOutputFile(launch.log, QIODevice::Append);
  p.setStandardErrorFile(launch.log, QIODevice::Append);
  qint64 pid = 0;
  if (!p.startDetached(&pid)) {
    *error = QCoreApplication::translate("Launch", "cannot start %1: %2").arg(bin, p.errorString());
    return 0;
  }
  return pid;
}

QString run_directory_from_log(const QString& log_text) {
  const qsizetype at = log_text.indexOf(QLatin1Char('\n') + kRunDirPrefix);
  qsizetype begin = -1;
  if (log_text.startsWith(kRunDirPrefix)) begin = kRunDirPrefix.size();
  else if (at >= 0) begin = at + 1 + kRunDirPrefix.size();
  if (begin < 0) return {};
  const qsizetype end = log_text.indexOf(QLatin1Char('\n'), begin);
  if (end < 0) return {};  // the line is not complete yet
  return log_text.mid(begin, end - begin).trimmed();
}

std::optional<int> exit_status_from_log(const QString& log_text) {
  const qsizetype at = log_text.lastIndexOf(kExitPrefix);
  if (at < 0) return std::nullopt;
  const qsizetype begin = at + kExitPrefix.size();
  const qsizetype end = log_text.indexOf(QLatin1Char(']'), begin);
  if (end < 0) return std::nullopt;
  bool ok = false;
  const int v = log_text.mid(begin, end - begin).toInt(&ok);
  return ok ? std::optional<int>(v) : std::nullopt;
}

QStringList last_lines(const QString& text, int n) {
  QStringList lines = text.split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  if (lines.size() > n) lines = lines.mid(lines.size() - n);
  return lines;
}

QString newest_alive_run(const QString& root) {
  std::error_code ec;
  std::vector<fs::path> runs;
  for (fs::directory_iterator it(fs::path(root.toStdString()), ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->is_directory(ec2) && run::RunDir::looks_like_run(it->path())) runs.push_back(it->path());
  }
  // Newest first: run ids start with a UTC timestamp.
  std::sort(runs.begin(), runs.end(), [](const fs::path& a, const fs::path& b) { return a.filename() > b.filename(); });
  const double now = run::unix_now();
  for (const fs::path& dir : runs) {
    auto st = run::StatusFile(dir / "status.json").read();
    if (!st.ok() || run::is_terminal(st.value.state)) continue;
    if (run::liveness(st.value, now) == run::Liveness::Alive) return QString::fromStdString(dir.string());
  }
  return {};
}

}  // namespace odyssey::ui
