// PlanItemsModel: a MemoryPlan's items as a table (item, group, GiB), the at-peak items
// first; the detail of each figure is its tooltip. Reset whenever the plan changes.
#pragma once

#include <QAbstractTableModel>

#include "planner/memory_planner.h"

namespace odyssey::ui {

class PlanItemsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Item, Group, Size, ColumnCount };
  using QAbstractTableModel::QAbstractTableModel;

  void set_plan(const MemoryPlan& plan);
  void clear();

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 private:
  std::vector<MemoryItem> items_;
};

// The colour a plan group is drawn in (gauge segments and the table's swatches).
QColor group_color(const std::string& group);
QString gib_text(std::int64_t bytes);
// A planner group ("activations") as the window shows it, translated.
QString group_name(const std::string& group);

}  // namespace odyssey::ui
