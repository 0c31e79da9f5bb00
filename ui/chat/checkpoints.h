// The checkpoints of the runs under an output folder that hold a LoRA adapter
// (<root>/<run>/checkpoints/checkpoint-N/adapter_config.json): what the Chat, Evaluate and Export
// pages offer.
#pragma once

#include <QList>
#include <QString>

namespace odyssey::ui {

struct CheckpointEntry {
  QString run;  // the run directory's name
  QString dir;  // the checkpoint directory (absolute)
  qint64 step = -1;
  QString label() const { return run + QStringLiteral(" / checkpoint-") + QString::number(step); }
};

// Newest run first (directory time), within a run the highest step first.
QList<CheckpointEntry> list_checkpoints(const QString& root);

// The runs of list_checkpoints, in its order, without repeats.
QStringList runs_with_checkpoints(const QString& root);

}  // namespace odyssey::ui
