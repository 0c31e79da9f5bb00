#include "gpu_list_model.h"

#include <algorithm>

#include "config_form.h"

namespace odyssey::ui {

QString memory_text(std::int64_t used, std::int64_t total) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return QStringLiteral("%1 / %2 GiB")
      .arg(static_cast<double>(used) / kGiB, 0, 'f', 1)
      .arg(static_cast<double>(total) / kGiB, 0, 'f', 1);
}

GpuListModel::GpuListModel(ConfigForm* form, QObject* parent) : QAbstractTableModel(parent), form_(form) {
  shown_ids_ = form_->config().gpu_ids;
  shown_cpu_ = form_->config().device == "cpu";
  connect(form_, &ConfigForm::changed, this, &GpuListModel::config_changed);
}

int GpuListModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(gpus_.size());
}

int GpuListModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

bool GpuListModel::used(int index) const {
  const auto& ids = form_->config().gpu_ids;
  return ids.empty() || std::find(ids.begin(), ids.end(), index) != ids.end();
}

QVariant GpuListModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  const GpuInfo& g = gpus_[static_cast<std::size_t>(index.row())];
  const bool cpu = form_->config().device == "cpu";
  switch (index.column()) {
    case Use:
      if (role == Qt::CheckStateRole) return used(g.index) && !cpu ? Qt::Checked : Qt::Unchecked;
      if (role == Qt::DisplayRole) return QString::number(g.index);
      if (role == Qt::ToolTipRole)
        return cpu ? tr("device is cpu: no GPU is used (set device to auto or cuda to choose GPUs).")
                   : tr("Train on GPU %1 (gpu_ids). Every GPU checked = gpu_ids [] (all visible GPUs).").arg(g.index);
      break;
    case Gpu:
      if (role == Qt::DisplayRole) return QString::fromStdString(g.name);
      if (role == Qt::ToolTipRole) return QString::fromStdString(g.uuid.empty() ? g.name : g.name + "\n" + g.uuid);
      break;
    case Memory:
      if (role == Qt::DisplayRole) return memory_text(g.memory_used, g.memory_total);
      if (role == Qt::ToolTipRole) return tr("Memory in use / total, as NVML reports it.");
      if (role == Qt::TextAlignmentRole) return QVariant(Qt::AlignRight | Qt::AlignVCenter);
      break;
    case Utilization:
      if (role == Qt::DisplayRole) return g.utilization < 0 ? tr("–") : QStringLiteral("%1 %").arg(g.utilization);
      if (role == Qt::ToolTipRole) return tr("Share of the last sample period in which a kernel ran (NVML).");
      if (role == Qt::TextAlignmentRole) return QVariant(Qt::AlignRight | Qt::AlignVCenter);
      break;
    default: break;
  }
  return {};
}

QVariant GpuListModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Use: return tr("Use");
    case Gpu: return tr("GPU");
    case Memory: return tr("Memory");
    case Utilization: return tr("Utilisation");
    default: return {};
  }
}

Qt::ItemFlags GpuListModel::flags(const QModelIndex& index) const {
  Qt::ItemFlags f = QAbstractTableModel::flags(index);
  if (index.isValid() && index.column() == Use) {
    f |= Qt::ItemIsUserCheckable;
    if (form_->config().device == "cpu") f &= ~Qt::ItemIsEnabled;
  }
  return f;
}

bool GpuListModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid) || index.column() != Use || role != Qt::CheckStateRole)
    return false;
  return set_used(index.row(), value.value<Qt::CheckState>() == Qt::Checked);
}

bool GpuListModel::set_used(int row, bool use) {
  if (row < 0 || row >= rowCount() || form_->config().device == "cpu") return false;
  std::vector<std::int64_t> ids;
  for (const GpuInfo& g : gpus_) {
    const bool on = g.index == gpus_[static_cast<std::size_t>(row)].index ? use : used(g.index);
    if (on) ids.push_back(g.index);
  }
  if (ids.empty()) return false;
  std::string yaml = "[";
  if (ids.size() != gpus_.size())
    for (std::size_t i = 0; i < ids.size(); ++i) yaml += (i ? ", " : "") + std::to_string(ids[i]);
  yaml += "]";
  return !has_errors(form_->set_text("gpu_ids", yaml));
}

void GpuListModel::set_gpus(std::vector<GpuInfo> gpus) {
  bool same_devices = gpus.size() == gpus_.size();
  for (std::size_t i = 0; same_devices && i < gpus.size(); ++i)
    same_devices = gpus[i].index == gpus_[i].index && gpus[i].uuid == gpus_[i].uuid && gpus[i].name == gpus_[i].name;
  if (!same_devices) {
    beginResetModel();
    gpus_ = std::move(gpus);
    endResetModel();
    return;
  }
  if (gpus == gpus_) return;
  gpus_ = std::move(gpus);
  if (rowCount() > 0) emit dataChanged(index(0, Memory), index(rowCount() - 1, Utilization), {Qt::DisplayRole});
}

void GpuListModel::config_changed() {
  const bool cpu = form_->config().device == "cpu";
  if (form_->config().gpu_ids == shown_ids_ && cpu == shown_cpu_) return;
  shown_ids_ = form_->config().gpu_ids;
  shown_cpu_ = cpu;
  if (rowCount() > 0) emit dataChanged(index(0, Use), index(rowCount() - 1, Use));
}

}  // namespace odyssey::ui
