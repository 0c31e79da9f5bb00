// Config diff of several runs: each run's config.yaml read through core's preset loader
// and compared key by key over the TrainConfig field table (so two spellings of one value,
// or a key left at its default in one file, compare equal).
#pragma once

#include <QAbstractTableModel>
#include <QString>

#include <map>
#include <string>
#include <vector>

namespace odyssey::ui {

struct ConfigColumn {
  QString run_id;
  std::map<std::string, std::string> values;  // field key -> canonical text
  QString error;                              // the loader's diagnostics, when it failed
};

// Parses config.yaml text (not on the GUI thread for big files; configs are a page).
ConfigColumn config_column(const QString& run_id, const std::string& yaml, const std::string& file);

class ConfigDiffModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  explicit ConfigDiffModel(QObject* parent = nullptr) : QAbstractTableModel(parent) {}

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  void set_columns(std::vector<ConfigColumn> columns);
  void set_only_differences(bool on);
  const std::vector<std::string>& keys() const { return keys_; }

 private:
  void rebuild();
  bool differs(const std::string& key) const;

  std::vector<ConfigColumn> columns_;
  std::vector<std::string> keys_;  // rows shown
  bool only_diff_ = true;
};

}  // namespace odyssey::ui
