// RunsModel: the runs list of an output root (one row per run directory).
#pragma once

#include <QAbstractTableModel>

#include <vector>

#include "monitor_types.h"

namespace odyssey::ui {

class RunsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { RunColumn, StateColumn, StepColumn, LossColumn, ElapsedColumn, EtaColumn, ColumnCount };
  static constexpr int PathRole = Qt::UserRole + 1;   // the run directory
  static constexpr int StateRole = Qt::UserRole + 2;  // DisplayState as int

  explicit RunsModel(QObject* parent = nullptr) : QAbstractTableModel(parent) {}

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  // Replaces the rows. When the same runs are listed in the same order only changed rows
  // are signalled, so selection and scroll position survive the periodic rescan.
  void set_runs(std::vector<RunSummary> runs);
  const std::vector<RunSummary>& runs() const { return runs_; }
  int row_of_path(const QString& path) const;

 private:
  std::vector<RunSummary> runs_;
};

}  // namespace odyssey::ui
