#include "runs_model.h"

#include <QBrush>
#include <QColor>
#include <QGuiApplication>

#include "../palette.h"

#include <cmath>

namespace odyssey::ui {

int RunsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(runs_.size());
}

int RunsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant RunsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case RunColumn: return tr("Run");
    case StateColumn: return tr("State");
    case StepColumn: return tr("Step");
    case LossColumn: return tr("Loss");
    case ElapsedColumn: return tr("Elapsed");
    case EtaColumn: return tr("ETA");
    default: return {};
  }
}

QVariant RunsModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const RunSummary& r = runs_[static_cast<std::size_t>(index.row())];
  if (role == PathRole) return r.path;
  if (role == StateRole) return static_cast<int>(r.state);
  if (role == Qt::ToolTipRole) {
    QString tip = r.path;
    if (!r.reason.isEmpty()) tip += QLatin1Char('\n') + r.reason;
    return tip;
  }
  if (role == Qt::ForegroundRole && index.column() == StateColumn) {
    const QPalette pal = QGuiApplication::palette();
    if (is_failure(r.state)) return QBrush(error_color(pal));
    if (r.state == DisplayState::Running) return QBrush(ok_color(pal));
    return {};
  }
  if (role == Qt::TextAlignmentRole && index.column() >= StepColumn)
    return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case RunColumn: return r.run_id;
    case StateColumn: return display_state_name(r.state);
    case StepColumn:
      if (r.total_steps > 0) return QStringLiteral("%1/%2").arg(r.step).arg(r.total_steps);
      return r.step > 0 ? QString::number(r.step) : QStringLiteral("–");
    case LossColumn:
      if (!r.has_loss) return QStringLiteral("–");
      return std::isfinite(r.last_loss) ? QString::number(r.last_loss, 'g', 4) : QString::number(r.last_loss);
    case ElapsedColumn: return format_duration(r.elapsed_s);
    case EtaColumn: return format_duration(r.eta_s);
    default: return {};
  }
}

void RunsModel::set_runs(std::vector<RunSummary> runs) {
  bool same_rows = runs.size() == runs_.size();
  for (std::size_t i = 0; same_rows && i < runs.size(); ++i) same_rows = runs[i].path == runs_[i].path;
  if (!same_rows) {
    beginResetModel();
    runs_ = std::move(runs);
    endResetModel();
    return;
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (runs[i] == runs_[i]) continue;
    runs_[i] = std::move(runs[i]);
    const int row = static_cast<int>(i);
    emit dataChanged(index(row, 0), index(row, ColumnCount - 1));
  }
}

int RunsModel::row_of_path(const QString& path) const {
  for (std::size_t i = 0; i < runs_.size(); ++i)
    if (runs_[i].path == path) return static_cast<int>(i);
  return -1;
}

}  // namespace odyssey::ui
