#include "plan_items_model.h"

#include <QColor>
#include <QFont>
#include <QGuiApplication>
#include <QPalette>
#include <algorithm>
#include <map>

namespace odyssey::ui {

QColor group_color(const std::string& g) {
  if (g == "runtime") return QColor(0x90, 0x90, 0x90);
  if (g == "model") return QColor(0x42, 0x85, 0xf4);
  if (g == "gradients") return QColor(0x9c, 0x27, 0xb0);
  if (g == "optimizer") return QColor(0xef, 0x8f, 0x00);
  if (g == "activations") return QColor(0x43, 0xa0, 0x47);
  if (g == "loss") return QColor(0x00, 0x97, 0xa7);
  if (g == "communication") return QColor(0x8d, 0x6e, 0x63);
  return QColor(0x78, 0x90, 0x9c);
}

QString group_name(const std::string& g) {
  // The planner's group names (core/planner/memory_planner.h), as the table and the bar show them.
  static const std::map<std::string, const char*> names{
      {"runtime", QT_TRANSLATE_NOOP("odyssey::ui::PlanItemsModel", "runtime")},
      {"model", QT_TRANSLATE_NOOP("odyssey::ui::PlanItemsModel", "model")},
      {"gradients", QT_TRANSLATE_NOOP("odyssey::ui::PlanItemsModel", "gradients")},
      {"optimizer", QT_TRANSLATE_NOOP("odyssey::ui::PlanItemsModel", "optimizer")},
      {"activations", QT_TRANSLATE_NOOP("odyssey::ui::PlanItemsModel", "activations")},
      {"loss", QT_TRANSLATE_NOOP("odyssey::ui::PlanItemsModel", "loss")},
      {"communication", QT_TRANSLATE_NOOP("odyssey::ui::PlanItemsModel", "communication")}};
  const auto it = names.find(g);
  return it != names.end() ? PlanItemsModel::tr(it->second) : QString::fromStdString(g);
}

QString gib_text(std::int64_t bytes) {
  const double g = static_cast<double>(bytes) / static_cast<double>(planner::kGiB);
  return QStringLiteral("%1 GiB").arg(g, 0, 'f', g < 10 ? 2 : 1);
}

void PlanItemsModel::set_plan(const MemoryPlan& plan) {
  beginResetModel();
  items_ = plan.items;
  std::stable_sort(items_.begin(), items_.end(), [](const MemoryItem& a, const MemoryItem& b) {
    return a.at_peak != b.at_peak ? a.at_peak : a.bytes > b.bytes;
  });
  endResetModel();
}

void PlanItemsModel::clear() {
  beginResetModel();
  items_.clear();
  endResetModel();
}

int PlanItemsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(items_.size());
}

int PlanItemsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant PlanItemsModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  const MemoryItem& it = items_[static_cast<std::size_t>(index.row())];
  switch (role) {
    case Qt::DisplayRole:
      if (index.column() == Item) return QString::fromStdString(it.name);
      if (index.column() == Group) return group_name(it.group);
      return gib_text(it.bytes);
    case Qt::ToolTipRole: {
      QString t = QString::fromStdString(it.detail);
      if (!it.at_peak) t += tr("\n(Not live at the peak: a working set of another phase.)");
      return t;
    }
    case Qt::DecorationRole:
      if (index.column() == Group) return group_color(it.group);
      break;
    case Qt::TextAlignmentRole:
      if (index.column() == Size) return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
      break;
    case Qt::ForegroundRole:
      if (!it.at_peak) return QGuiApplication::palette().color(QPalette::Disabled, QPalette::Text);
      break;
    default: break;
  }
  return {};
}

QVariant PlanItemsModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Item: return tr("Item");
    case Group: return tr("Group");
    case Size: return tr("Per GPU");
    default: return {};
  }
}

}  // namespace odyssey::ui
