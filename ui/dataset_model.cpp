#include "dataset_model.h"

#include <QDir>
#include <QFileInfo>
#include <algorithm>
#include <filesystem>

#include "async.h"
#include "config_form.h"

namespace odyssey::ui {
namespace fs = std::filesystem;

DatasetListModel::DatasetListModel(ConfigForm* form, QObject* parent) : QAbstractTableModel(parent), form_(form) {
  sync_from_form();
  connect(form_, &ConfigForm::changed, this, &DatasetListModel::sync_from_form);
}

DatasetListModel::~DatasetListModel() { cancel_->store(true); }

int DatasetListModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int DatasetListModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

std::string DatasetListModel::resolved_path(int row) const {
  if (row < 0 || row >= rowCount()) return {};
  return rows_[static_cast<std::size_t>(row)].resolved;
}

std::string DatasetListModel::resolve(const DatasetSpec& d) const {
  const fs::path p(d.path);
  if (p.is_absolute()) return p.lexically_normal().string();
  const std::string& base = form_->loaded().origin.base_dir;
  std::error_code ec;
  if (!base.empty() && fs::exists(fs::path(base) / p, ec)) return (fs::path(base) / p).lexically_normal().string();
  return (fs::current_path(ec) / p).lexically_normal().string();
}

QVariant DatasetListModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  const Row& r = rows_[static_cast<std::size_t>(index.row())];
  const std::string path = resolved_path(index.row());
  auto scan = scans_.find(path);
  switch (index.column()) {
    case File:
      if (role == Qt::DisplayRole)
        return QFileInfo(QString::fromStdString(r.valid ? r.parsed.path : r.spec)).fileName();
      if (role == Qt::ToolTipRole || role == Qt::EditRole) return QString::fromStdString(r.spec);
      break;
    case Samples:
      if (role == Qt::DisplayRole)
        return r.valid && r.parsed.samples > 0 ? QStringLiteral("#%1").arg(r.parsed.samples) : tr("all");
      if (role == Qt::EditRole)
        return r.valid && r.parsed.samples > 0 ? QVariant(QString::number(r.parsed.samples)) : QVariant(QString());
      if (role == Qt::ToolTipRole)
        return tr("Samples drawn from this file with the seed (path#N); empty = every sample.");
      break;
    case Contents:
      if (role == Qt::DisplayRole || role == Qt::ToolTipRole) {
        if (!r.valid) return tr("not a valid entry: expected path or path#N");
        if (scan == scans_.end()) return tr("scanning…");
        return QString::fromStdString(describe_scan(scan->second));
      }
      break;
    default: break;
  }
  return {};
}

QVariant DatasetListModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case File: return tr("File");
    case Samples: return tr("Use");
    case Contents: return tr("Format and samples");
    default: return {};
  }
}

Qt::ItemFlags DatasetListModel::flags(const QModelIndex& index) const {
  Qt::ItemFlags f = QAbstractTableModel::flags(index);
  if (index.isValid() && index.column() == Samples) f |= Qt::ItemIsEditable;
  return f;
}

bool DatasetListModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid) || index.column() != Samples || role != Qt::EditRole)
    return false;
  const Row& r = rows_[static_cast<std::size_t>(index.row())];
  if (!r.valid) return false;
  QString t = value.toString().trimmed();
  if (t.startsWith(QLatin1Char('#'))) t.remove(0, 1);
  std::int64_t n = -1;
  if (!t.isEmpty() && t != tr("all")) {
    bool ok = false;
    n = t.toLongLong(&ok);
    if (!ok || n < 1) return false;
  }
  std::vector<std::string> specs = form_->config().dataset;
  specs[static_cast<std::size_t>(index.row())] = r.parsed.path + (n > 0 ? "#" + std::to_string(n) : "");
  write_to_form(specs);
  return true;
}

void DatasetListModel::add_files(const QStringList& paths) {
  std::vector<std::string> specs = form_->config().dataset;
  for (const QString& p : paths) {
    const std::string s = QDir::cleanPath(QFileInfo(p).absoluteFilePath()).toStdString();
    if (std::find(specs.begin(), specs.end(), s) == specs.end()) specs.push_back(s);
  }
  write_to_form(specs);
}

void DatasetListModel::remove_rows(std::vector<int> rows) {
  std::vector<std::string> specs = form_->config().dataset;
  std::sort(rows.rbegin(), rows.rend());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  for (int r : rows)
    if (r >= 0 && r < static_cast<int>(specs.size())) specs.erase(specs.begin() + r);
  write_to_form(specs);
}

void DatasetListModel::write_to_form(const std::vector<std::string>& specs) {
  std::string yaml = "[";
  for (std::size_t i = 0; i < specs.size(); ++i) {
    std::string q = "\"";
    for (char ch : specs[i]) {
      if (ch == '"' || ch == '\\') q += '\\';
      q += ch;
    }
    yaml += (i ? ", " : "") + q + "\"";
  }
  form_->set_text("dataset", yaml + "]");
}

void DatasetListModel::sync_from_form() {
  const auto& specs = form_->config().dataset;
  bool same = specs.size() == rows_.size();
  for (std::size_t i = 0; same && i < specs.size(); ++i) same = rows_[i].spec == specs[i];
  if (same && base_dir_ == form_->loaded().origin.base_dir) return;
  base_dir_ = form_->loaded().origin.base_dir;
  beginResetModel();
  rows_.clear();
  for (const auto& s : specs) {
    Row r;
    r.spec = s;
    r.valid = parse_dataset_spec(s, &r.parsed, nullptr);
    if (r.valid) r.resolved = resolve(r.parsed);
    rows_.push_back(r);
  }
  endResetModel();
  for (int i = 0; i < rowCount(); ++i) {
    const std::string p = resolved_path(i);
    if (!p.empty() && !scans_.count(p)) request_scan(p);
  }
}

void DatasetListModel::request_scan(const std::string& path) {
  ++pending_;
  auto cancel = cancel_;
  run_off_gui_thread(
      this, [path, cancel]() { return scan_dataset(path, cancel.get()); },
      [this, path](DatasetScan s) {
        --pending_;
        scans_[path] = s;
        for (int i = 0; i < rowCount(); ++i)
          if (resolved_path(i) == path) emit dataChanged(index(i, Contents), index(i, Contents));
        if (pending_ == 0) emit scans_finished();
      });
}

}  // namespace odyssey::ui
