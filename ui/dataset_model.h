// DatasetListModel: the training files of the form's config as a table (file, #N samples
// drawn, detected format and sample count). The scan of each file runs on the thread pool;
// results are cached per resolved path and stale ones dropped. Edits (add, remove, #N)
// write the dataset key through the ConfigForm.
#pragma once

#include <QAbstractTableModel>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "dataset_scan.h"

namespace odyssey::ui {

class ConfigForm;

class DatasetListModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { File, Samples, Contents, ColumnCount };
  explicit DatasetListModel(ConfigForm* form, QObject* parent = nullptr);
  ~DatasetListModel() override;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

  void add_files(const QStringList& paths);
  void remove_rows(std::vector<int> rows);
  // Scans still running (tests wait for 0).
  int pending_scans() const { return pending_; }
  // The path a row's file resolves to ("" when it does not parse).
  std::string resolved_path(int row) const;

 signals:
  void scans_finished();

 private:
  struct Row {
    std::string spec;
    DatasetSpec parsed;
    bool valid = false;
    std::string resolved;  // where the file is looked for
  };
  std::string resolve(const DatasetSpec& d) const;
  void sync_from_form();
  void write_to_form(const std::vector<std::string>& specs);
  void request_scan(const std::string& path);

  ConfigForm* form_;
  std::vector<Row> rows_;
  std::map<std::string, DatasetScan> scans_;  // resolved path -> result
  std::shared_ptr<std::atomic<bool>> cancel_ = std::make_shared<std::atomic<bool>>(false);
  std::string base_dir_;
  int pending_ = 0;
};

}  // namespace odyssey::ui
