// CommandPreview: the exact `odyssey-train run PRESET --set …` command for the form (the
// preset it was loaded from plus one --set per key changed in the window; with no preset,
// the embedded quickstart plus the changes) and the equivalent `swift sft` command, as
// `odyssey-train export-swift` prints it. Read-only, each with a Copy button.
#pragma once

#include <QStringList>
#include <QWidget>

class QPlainTextEdit;

namespace odyssey::ui {

class ConfigForm;

// odyssey-train's argument list for the form, without the program name.
QStringList odyssey_train_arguments(const ConfigForm& form, const QString& command = QStringLiteral("run"));
// Program and arguments, shell-quoted, one --set per continued line.
QString shell_command_text(const QString& program, const QStringList& args);
// export_swift_command of the form's config with paths made absolute, as the CLI does.
QString swift_command_text(const ConfigForm& form);

class CommandPreview : public QWidget {
  Q_OBJECT
 public:
  CommandPreview(ConfigForm* form, QWidget* parent);
  QString odyssey_text() const;
  QString swift_text() const;

 private:
  void refresh();
  ConfigForm* form_;
  QPlainTextEdit* odyssey_;
  QPlainTextEdit* swift_;
};

}  // namespace odyssey::ui
