#include "command_preview.h"

#include <QApplication>
#include <QClipboard>
#include <QFontDatabase>
#include <QGridLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>

#include "common/text.h"
#include "config/swift_bridge.h"
#include "config/validate.h"
#include "config_form.h"

namespace odyssey::ui {

QStringList odyssey_train_arguments(const ConfigForm& form, const QString& command) {
  QStringList args{command};
  TrainConfig base;
  TrainConfig c = form.config();
  if (!form.file().isEmpty()) {
    args << form.file();
    base = form.baseline();
  } else {
    // The embedded quickstart is the base; its relative paths resolve elsewhere, so the
    // form's paths go in absolute where they exist.
    auto q = load_embedded_quickstart();
    base = q.value.config;
    c = resolve_paths(form.loaded(), form.model_pending() ? ModelLocation{} : form.location());
  }
  for (const auto& f : train_config_fields()) {
    const std::string v = field_value_text(c, f);
    if (v != field_value_text(base, f))
      args << QStringLiteral("--set") << QString::fromStdString(std::string(f.key) + "=" + v);
  }
  return args;
}

QString shell_command_text(const QString& program, const QStringList& args) {
  QString out = QString::fromStdString(text::shell_quote(program.toStdString()));
  for (qsizetype i = 0; i < args.size(); ++i) {
    const bool set = args[i] == QStringLiteral("--set") && i + 1 < args.size();
    out += set ? QStringLiteral(" \\\n  ") : QStringLiteral(" ");
    out += QString::fromStdString(text::shell_quote(args[i].toStdString()));
    if (set) out += QLatin1Char(' ') + QString::fromStdString(text::shell_quote(args[++i].toStdString()));
  }
  return out;
}

QString swift_command_text(const ConfigForm& form) {
  // While a new model is being looked up the old location would rewrite it: leave it as typed.
  const ModelLocation loc = form.model_pending() ? ModelLocation{} : form.location();
  return QString::fromStdString(export_swift_command(resolve_paths(form.loaded(), loc)));
}

CommandPreview::CommandPreview(ConfigForm* form, QWidget* parent) : QWidget(parent), form_(form) {
  setObjectName(QStringLiteral("commandPreview"));
  auto* g = new QGridLayout(this);
  const QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
  auto make = [&](const QString& title, const QString& tip, int row, int stretch) {
    auto* label = new QLabel(title, this);
    label->setToolTip(tip);
    auto* copy = new QPushButton(tr("Copy"), this);
    auto* edit = new QPlainTextEdit(this);
    edit->setReadOnly(true);
    edit->setFont(mono);
    edit->setLineWrapMode(QPlainTextEdit::WidgetWidth);  // a narrow dock shows it all; Copy takes the text
    connect(copy, &QPushButton::clicked, this, [edit] { QApplication::clipboard()->setText(edit->toPlainText()); });
    g->addWidget(label, row, 0);
    g->addWidget(copy, row, 1, Qt::AlignRight);
    g->addWidget(edit, row + 1, 0, 1, 2);
    g->setRowStretch(row + 1, stretch);
    return edit;
  };
  odyssey_ =
      make(tr("<b>odyssey-train</b>"),
           tr("The preset plus one --set per value changed in the window; runs the same job from a terminal."), 0, 1);
  odyssey_->setObjectName(QStringLiteral("odysseyCommand"));
  swift_ =
      make(tr("<b>ms-swift</b> (swift sft)"),
           tr("The equivalent ms-swift command, as 'odyssey-train export-swift' prints it. Settings ms-swift cannot "
              "express are listed in a trailing comment."),
           2, 2);
  swift_->setObjectName(QStringLiteral("swiftCommand"));
  connect(form_, &ConfigForm::changed, this, &CommandPreview::refresh);
  connect(form_, &ConfigForm::model_changed, this, &CommandPreview::refresh);
  connect(form_, &ConfigForm::file_changed, this, &CommandPreview::refresh);
  refresh();
}

QString CommandPreview::odyssey_text() const { return odyssey_->toPlainText(); }
QString CommandPreview::swift_text() const { return swift_->toPlainText(); }

void CommandPreview::refresh() {
  odyssey_->setPlainText(shell_command_text(QStringLiteral("odyssey-train"), odyssey_train_arguments(*form_)));
  swift_->setPlainText(swift_command_text(*form_));
}

}  // namespace odyssey::ui
