#include "config_diff.h"

#include <QBrush>
#include <QColor>
#include <QGuiApplication>

#include <optional>

#include "../palette.h"
#include "config/preset_io.h"
#include "config/train_config.h"

namespace odyssey::ui {

ConfigColumn config_column(const QString& run_id, const std::string& yaml, const std::string& file) {
  ConfigColumn c;
  c.run_id = run_id;
  auto loaded = load_preset_text(yaml, file, "");
  if (!loaded.ok()) {
    c.error = QString::fromStdString(format_all(loaded.diagnostics));
    return c;
  }
  for (const FieldSpec& f : train_config_fields())
    c.values[std::string(f.key)] = field_value_text(loaded.value.config, f);
  return c;
}

int ConfigDiffModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(keys_.size());
}

int ConfigDiffModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : 1 + static_cast<int>(columns_.size());
}

QVariant ConfigDiffModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  if (section == 0) return tr("Key");
  if (section > 0 && section <= static_cast<int>(columns_.size()))
    return columns_[static_cast<std::size_t>(section - 1)].run_id;
  return {};
}

QVariant ConfigDiffModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const std::string& key = keys_[static_cast<std::size_t>(index.row())];
  if (role == Qt::BackgroundRole && index.column() > 0 && differs(key))
    return QBrush(is_dark(QGuiApplication::palette()) ? QColor(0x4a, 0x3b, 0x00) : QColor(255, 243, 205));
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
  if (index.column() == 0) return QString::fromStdString(key);
  const ConfigColumn& c = columns_[static_cast<std::size_t>(index.column() - 1)];
  if (!c.error.isEmpty()) return role == Qt::ToolTipRole ? c.error : tr("(unreadable config)");
  auto it = c.values.find(key);
  return it == c.values.end() ? QString() : QString::fromStdString(it->second);
}

bool ConfigDiffModel::differs(const std::string& key) const {
  std::optional<std::string> first;
  for (std::size_t i = 0; i < columns_.size(); ++i) {
    auto it = columns_[i].values.find(key);
    std::optional<std::string> v;
    if (it != columns_[i].values.end()) v = it->second;
    if (i == 0) first = std::move(v);
    else if (v != first) return true;
  }
  return false;
}

void ConfigDiffModel::rebuild() {
  keys_.clear();
  if (columns_.empty()) return;
  for (const FieldSpec& f : train_config_fields()) {
    const std::string key(f.key);
    if (!only_diff_ || differs(key)) keys_.push_back(key);
  }
}

void ConfigDiffModel::set_columns(std::vector<ConfigColumn> columns) {
  beginResetModel();
  columns_ = std::move(columns);
  rebuild();
  endResetModel();
}

void ConfigDiffModel::set_only_differences(bool on) {
  beginResetModel();
  only_diff_ = on;
  rebuild();
  endResetModel();
}

}  // namespace odyssey::ui
