#include "checkpoints.h"

#include <QDir>
#include <QFileInfo>

#include <algorithm>

namespace odyssey::ui {

QList<CheckpointEntry> list_checkpoints(const QString& root) {
  QList<CheckpointEntry> out;
  if (root.isEmpty()) return out;
  for (const QFileInfo& run : QDir(root).entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Time)) {
    const QDir ck(run.absoluteFilePath() + QStringLiteral("/checkpoints"));
    QList<CheckpointEntry> mine;
    for (const QString& n : ck.entryList({QStringLiteral("checkpoint-*")}, QDir::Dirs)) {
      bool ok = false;
      const qint64 step = n.section(QLatin1Char('-'), 1).toLongLong(&ok);
      if (!ok || !QFileInfo::exists(ck.filePath(n) + QStringLiteral("/adapter_config.json"))) continue;
      mine.append({run.fileName(), ck.absoluteFilePath(n), step});
    }
    std::sort(mine.begin(), mine.end(),
              [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step > b.step; });
    out += mine;
  }
  return out;
}

QStringList runs_with_checkpoints(const QString& root) {
  QStringList runs;
  for (const auto& c : list_checkpoints(root))
    if (!runs.contains(c.run)) runs << c.run;
  return runs;
}

}  // namespace odyssey::ui
