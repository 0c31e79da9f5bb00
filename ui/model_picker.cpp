#include "model_picker.h"

#include <QComboBox>
#include <QFileDialog>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QPushButton>

#include <algorithm>

#include "async.h"
#include "config_form.h"
#include "field_row.h"
#include "palette.h"
#include "settings.h"

namespace odyssey::ui {

QString format_parameters(std::int64_t n) {
  const double v = static_cast<double>(n);
  if (v >= 1e9) return QStringLiteral("%1 B").arg(v / 1e9, 0, 'f', 2);
  if (v >= 1e6) return QStringLiteral("%1 M").arg(v / 1e6, 0, 'f', 1);
  return QLocale().toString(static_cast<qlonglong>(n));
}

ModelPicker::ModelPicker(ConfigForm* form, Settings* settings, QWidget* parent)
    : QWidget(parent), form_(form), settings_(settings) {
  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(0, 0, 0, 0);
  row_ = new FieldRow(form_, "model", this);
  auto* browse = new QPushButton(tr("Browse…"), this);
  browse->setToolTip(tr("Choose a local Hugging Face model directory (config.json, *.safetensors, tokenizer.json)."));
  connect(browse, &QPushButton::clicked, this, &ModelPicker::browse);
  grid->addWidget(row_, 0, 0);
  grid->addWidget(browse, 0, 1, Qt::AlignTop);
  cached_ = new QComboBox(this);
  cached_->setObjectName(QStringLiteral("cachedModels"));
  cached_->addItem(tr("Looking in the Hugging Face and ModelScope caches…"));
  cached_->setEnabled(false);
  cached_->setToolTip(tr("Models already downloaded to the Hugging Face or ModelScope cache on this machine."));
  connect(cached_, &QComboBox::activated, this, [this](int i) {
    const QString id = cached_->itemData(i).toString();
    if (!id.isEmpty()) row_->set_shown_text(id);
  });
  grid->addWidget(cached_, 1, 0, 1, 2);
  info_ = new QLabel(this);
  info_->setObjectName(QStringLiteral("modelInfo"));
  info_->setWordWrap(true);
  info_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  grid->addWidget(info_, 2, 0, 1, 2);
  grid->setColumnStretch(0, 1);

  connect(form_, &ConfigForm::model_changed, this, &ModelPicker::show_model);
  show_model();
  run_off_gui_thread(
      this, [] { return scan_cached(); }, [this](std::vector<Cached> m) { fill_cached(m); });
}

std::vector<ModelPicker::Cached> ModelPicker::scan_cached() {
  std::vector<Cached> out;
  for (const auto& [id, dir] : cached_models()) {
    Cached c;
    c.id = id;
    c.dir = dir;
    const QString q = QString::fromStdString(id);
    const auto cfg = load_model_config(dir);
    c.supported = cfg.ok();
    if (cfg.ok()) {
      // A multimodal checkpoint trains as its text model: its family and size are the text model's.
      c.label = (cfg.value.wrapper_architecture.empty() ? tr("%1 — %2 · %3") : tr("%1 — %2 (text model) · %3"))
                    .arg(q, QString::fromStdString(cfg.value.family), format_parameters(cfg.value.parameter_count()));
      c.tooltip = QString::fromStdString(dir);
    } else {
      // The first error says what is missing (an architecture not supported lists those that are).
      std::string why;
      for (const auto& d : cfg.diagnostics)
        if (d.severity == Severity::Error) {
          why = d.message;
          break;
        }
      c.label = tr("%1 — not supported: %2").arg(q, QString::fromStdString(why).left(80));
      c.tooltip = QString::fromStdString(dir + "\n" + format_all(cfg.diagnostics));
    }
    out.push_back(std::move(c));
  }
  return out;
}

void ModelPicker::fill_cached(const std::vector<Cached>& models) {
  cached_->clear();
  if (models.empty()) {
    cached_->addItem(tr("No models in the Hugging Face or ModelScope cache"));
    return;
  }
  const auto ok = std::count_if(models.begin(), models.end(), [](const Cached& c) { return c.supported; });
  cached_->addItem(tr("Cached models (%1, %2 supported)…").arg(models.size()).arg(ok));
  for (const auto& c : models) {
    cached_->addItem(c.label, QString::fromStdString(c.id));
    cached_->setItemData(cached_->count() - 1, c.tooltip, Qt::ToolTipRole);
    if (!c.supported) cached_->setItemData(cached_->count() - 1, warning_color(palette()), Qt::ForegroundRole);
  }
  cached_->setEnabled(true);
}

void ModelPicker::browse() {
  const QString dir =
      QFileDialog::getExistingDirectory(this, tr("Model directory"), settings_->last_dir(QStringLiteral("model")));
  if (dir.isEmpty()) return;
  settings_->set_last_dir(QStringLiteral("model"), dir);
  row_->set_shown_text(dir);
}

void ModelPicker::show_model() {
  const QPalette& pal = palette();
  if (form_->model_pending()) {
    info_->setStyleSheet({});
    info_->setText(tr("Looking for the model…"));
    return;
  }
  const HfModelConfig* m = form_->model();
  if (!m) {
    info_->setStyleSheet(QStringLiteral("color:%1;").arg(warning_color(pal).name()));
    info_->setText(form_->model_problem());
    return;
  }
  settings_->add_recent_model(QString::fromStdString(form_->config().model));
  const ModelLocation& loc = form_->location();
  // Where the model was found, as core's ModelLocation::describe() says it, in the window's words.
  const QString path = QString::fromStdString(loc.path);
  QString where;
  switch (loc.source) {
    case ModelLocation::Directory: where = tr("directory %1").arg(path); break;
    case ModelLocation::HuggingFaceCache:
      where = loc.revision.empty()
                  ? tr("Hugging Face cache %1").arg(path)
                  : tr("Hugging Face cache %1 (revision %2)").arg(path, QString::fromStdString(loc.revision));
      break;
    case ModelLocation::ModelScopeCache: where = tr("ModelScope cache %1").arg(path); break;
    case ModelLocation::BundledShape: where = tr("bundled shape only (weights not on this machine)"); break;
    default: where = QString::fromStdString(loc.describe()); break;
  }
  info_->setStyleSheet({});
  const QLocale l;
  info_->setText(
      tr("<b>%1</b> · %2 parameters · %3 layers · %4 heads · %5 KV heads · head dim %6 · max positions "
         "%7<br><small>%8</small>")
          .arg(QString::fromStdString(m->architecture).toHtmlEscaped(), format_parameters(m->parameter_count()))
          .arg(m->num_hidden_layers)
          .arg(m->num_attention_heads)
          .arg(m->num_key_value_heads)
          .arg(m->head_dim)
          .arg(l.toString(static_cast<qlonglong>(m->max_position_embeddings)), where.toHtmlEscaped()));
}

}  // namespace odyssey::ui
