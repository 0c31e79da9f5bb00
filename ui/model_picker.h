// ModelPicker: the model key as a path or hub id, a Browse… button, a list of the models
// found in the Hugging Face and ModelScope caches (scanned off the GUI thread), and the
// located model's shape from config.json — or, inline, why there is none.
#pragma once

#include <QString>
#include <QWidget>

#include <string>
#include <vector>

class QComboBox;
class QLabel;

namespace odyssey::ui {

class ConfigForm;
class FieldRow;
class Settings;

class ModelPicker : public QWidget {
  Q_OBJECT
 public:
  ModelPicker(ConfigForm* form, Settings* settings, QWidget* parent);
  FieldRow* row() const { return row_; }
  QComboBox* cached() const { return cached_; }
  QLabel* info() const { return info_; }

 private:
  void browse();
  void show_model();
  struct Cached {
    std::string id, dir;
    QString label;    // "org/name — family · size", or why Odyssey cannot train it
    QString tooltip;  // the directory, and the whole reason when unsupported
    bool supported = false;
  };
  static std::vector<Cached> scan_cached();  // off the GUI thread: reads each config.json
  void fill_cached(const std::vector<Cached>& models);

  ConfigForm* form_;
  Settings* settings_;
  FieldRow* row_;
  QComboBox* cached_;
  QLabel* info_;
};

// "7.62 B" for a parameter count.
QString format_parameters(std::int64_t n);

}  // namespace odyssey::ui
