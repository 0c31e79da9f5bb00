// GpuListModel: the detected GPUs as a table (use, GPU, memory, utilisation) whose "Use"
// check boxes are the config's gpu_ids, written through the ConfigForm: every GPU checked is
// gpu_ids [] (every visible GPU, the default), a subset is that list. The GPUs come from
// set_gpus(), which the panel calls with each probe's result and tests call directly.
#pragma once

#include <QAbstractTableModel>
#include <vector>

#include "gpu_probe.h"

namespace odyssey::ui {

class ConfigForm;

class GpuListModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Use, Gpu, Memory, Utilization, ColumnCount };
  explicit GpuListModel(ConfigForm* form, QObject* parent = nullptr);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

  // Replace the list; rows of the same GPUs update in place (the refresh timer's case).
  void set_gpus(std::vector<GpuInfo> gpus);
  const std::vector<GpuInfo>& gpus() const { return gpus_; }
  // Whether the config trains on GPU `index` (gpu_ids empty = every GPU).
  bool used(int index) const;
  // Unchecking is refused when it would leave no GPU (gpu_ids [] means all of them).
  bool set_used(int row, bool use);

 private:
  void config_changed();

  ConfigForm* form_;
  std::vector<GpuInfo> gpus_;
  std::vector<std::int64_t> shown_ids_;  // gpu_ids the check boxes show
  bool shown_cpu_ = false;
};

// "12.3 / 139.8 GiB"
QString memory_text(std::int64_t used, std::int64_t total);

}  // namespace odyssey::ui
