// FieldRow: one TrainConfig key as an editor, built from the field table (type, range,
// choices, help, ms-swift name), bound to the ConfigForm. Edits go through
// ConfigForm::set_text; the row shows the key's diagnostics at the field: a red (error) or
// amber (warning) frame, the reason under the editor and in the tooltip.
#pragma once

#include <QWidget>
#include <string>

#include "config/train_config.h"

class QFormLayout;
class QFrame;
class QLabel;

namespace odyssey::ui {

class ConfigForm;

class FieldRow : public QWidget {
  Q_OBJECT
 public:
  FieldRow(ConfigForm* form, std::string key, QWidget* parent);

  const std::string& key() const { return key_; }
  QWidget* editor() const { return editor_; }
  // Enable or disable the editor; a row that shows an error stays enabled so it can be fixed.
  void set_available(bool available);
  // Show only the key's diagnostics, not an editor (for keys edited by a custom widget).
  void show_problem_only();
  // What the row shows now, for tests and screenshots.
  QString shown_text() const;
  QString problem_text() const;  // "" when the field has no error or warning
  bool shows_error() const { return state_ == 2; }

  // The field table's help, its YAML key and ms-swift's name for it.
  static QString tooltip_for(const FieldSpec& f);
  // A short human label ("LoRA rank"), the key when none is defined.
  static QString label_for(std::string_view key);

 public slots:
  // Type into the editor as a user would (tests, and the model picker's text).
  void set_shown_text(const QString& text);

 private:
  void build();
  void commit(const QString& text);
  void refresh(bool force);
  void show_diagnostics();

  ConfigForm* form_;
  std::string key_;
  const FieldSpec* spec_;
  QFrame* frame_ = nullptr;
  QWidget* editor_ = nullptr;
  QLabel* problem_ = nullptr;
  bool available_ = true;
  bool writing_ = false;
  int state_ = 0;  // 0 clean, 1 warning, 2 error
};

// Adds "label: editor" for `key` to a form layout and returns the row.
FieldRow* add_field(QFormLayout* layout, ConfigForm* form, const std::string& key);

}  // namespace odyssey::ui
