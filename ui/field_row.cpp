#include "field_row.h"

#include <QCheckBox>
#include <QCoreApplication>
#include <QComboBox>
#include <QFormLayout>
#include <QFrame>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QVBoxLayout>
#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <optional>

#include "config_form.h"
#include "palette.h"

namespace odyssey::ui {
namespace {

enum class Kind { Check, Spin, Combo, EditableCombo, Line, StringLine, StringList, IntList };

Kind kind_of(const FieldSpec& f) {
  switch (f.member.index()) {
    case 0: return Kind::Check;
    case 1: return (f.min >= INT_MIN && f.max <= INT_MAX) ? Kind::Spin : Kind::Line;
    case 2: return Kind::Line;
    case 3:
      if (f.key == "activation_checkpointing") return Kind::EditableCombo;
      return f.choices.empty() ? Kind::StringLine : Kind::Combo;
    case 4: return Kind::StringList;
    default: return Kind::IntList;
  }
}

// A string as a YAML double-quoted scalar, so any text the user types stays text.
std::string yaml_quote(const QString& s) {
  std::string out = "\"";
  for (char ch : s.toStdString()) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    if (ch == '\t') {
      out += "\\t";
      continue;
    }
    out += ch;
  }
  return out + "\"";
}

// The value as the user reads and edits it: strings unquoted, lists without brackets.
QString display_text(const TrainConfig& c, const FieldSpec& f) {
  return std::visit(
      [&](auto m) -> QString {
        using M = std::remove_cvref_t<decltype(c.*m)>;
        const auto& v = c.*m;
        if constexpr (std::is_same_v<M, std::string>) {
          return QString::fromStdString(v);
        } else if constexpr (std::is_same_v<M, std::vector<std::string>>) {
          QStringList l;
          for (const auto& s : v) l << QString::fromStdString(s);
          return l.join(QStringLiteral(", "));
        } else if constexpr (std::is_same_v<M, std::vector<std::int64_t>>) {
          QStringList l;
          for (auto i : v) l << QString::number(i);
          return l.join(QStringLiteral(", "));
        } else if constexpr (std::is_same_v<M, double>) {
          // The saved text keeps a whole number recognisable as a float ("48.0"); a field shows
          // it as typed ("48", a budget of 48 GiB).
          QString t = QString::fromStdString(field_value_text(c, f));
          if (t.endsWith(QStringLiteral(".0"))) t.chop(2);
          return t;
        } else {
          return QString::fromStdString(field_value_text(c, f));
        }
      },
      f.member);
}

const std::map<std::string_view, const char*>& labels() {
  static const std::map<std::string_view, const char*> m{
      {"description", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Description")},
      {"template", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Chat template")},
      {"system", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "System prompt")},
      {"torch_dtype", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Compute dtype")},
      {"quant_bits", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Base weight bits")},
      {"quant_method", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Quantization format")},
      {"bnb_4bit_quant_type", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "4-bit type")},
      {"bnb_4bit_use_double_quant", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Double quantization")},
      {"bnb_4bit_compute_dtype", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "4-bit compute dtype")},
      {"model_revision", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Hub revision")},
      {"template_file", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Chat template file")},
      {"val_dataset", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Validation files")},
      {"split_dataset_ratio", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Validation split")},
      {"max_length", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Max length (tokens)")},
      {"truncation_strategy", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Too-long samples")},
      {"packing", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Packing")},
      {"padding_free", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Padding-free")},
      {"max_bad_sample_ratio", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Tolerated bad samples")},
      {"tuner_type", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Tuner")},
      {"lora_rank", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "LoRA rank")},
      {"lora_alpha", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "LoRA alpha")},
      {"lora_dropout", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "LoRA dropout")},
      {"use_rslora", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "rsLoRA")},
      {"target_modules", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "LoRA targets")},
      {"target_parameters", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Expert LoRA parameters")},
      {"router_aux_loss_coef", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Router balance loss weight")},
      {"freeze_router", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Freeze routers")},
      {"learning_rate", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Learning rate")},
      {"lr_scheduler_type", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "LR schedule")},
      {"warmup_ratio", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Warmup ratio")},
      {"warmup_steps", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Warmup steps")},
      {"weight_decay", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Weight decay")},
      {"max_grad_norm", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Max grad norm")},
      {"adam_beta1", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Adam beta1")},
      {"adam_beta2", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Adam beta2")},
      {"adam_epsilon", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Adam epsilon")},
      {"num_train_epochs", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Epochs")},
      {"max_steps", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Max steps")},
      {"per_device_train_batch_size", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Batch per GPU")},
      {"gradient_accumulation_steps", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Grad accumulation")},
      {"seed", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Seed")},
      {"use_galore", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "GaLore")},
      {"galore_quantization", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Q-GaLore (int4 projections)")},
      {"galore_rank", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "GaLore rank")},
      {"galore_update_proj_gap", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Projection update gap")},
      {"galore_scale", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "GaLore scale")},
      {"galore_target_modules", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "GaLore targets")},
      {"zero_stage", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "ZeRO stage")},
      {"offload_optimizer", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Offload optimizer to CPU")},
      {"optimizer_dtype", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Optimizer precision")},
      {"attn_impl", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Attention kernel")},
      {"fused_kernels", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Fused kernels")},
      {"activation_checkpointing", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Activation checkpointing")},
      {"offload_activations", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Offload activations to CPU")},
      {"mlp_tile_tokens", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Tiled MLP (tokens per tile)")},
      {"keep_attention", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Keep attention outputs")},
      {"layers_per_checkpoint", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Layers per stored checkpoint")},
      {"gpu_memory_budget_gib", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "GPU memory budget (GiB)")},
      {"sequence_parallel_size", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Sequence-parallel size")},
      {"ulysses_size", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Ulysses degree")},
      {"expert_parallel_size", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Expert parallel degree")},
      {"device", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Device")},
      {"gpu_ids", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "GPU ids")},
      {"nproc_per_node", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Processes per node")},
      {"nnodes", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Nodes")},
      {"logging_steps", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Log every")},
      {"eval_steps", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Evaluate every")},
      {"save_steps", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Save every")},
      {"save_total_limit", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Checkpoints kept")},
      {"output_dir", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Output folder")},
      {"model", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Model")},
      {"dataset", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Training files")},
      {"resume_from_checkpoint", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Resume from checkpoint")},
      {"adapters", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Start from adapter")},
      {"report_to", QT_TRANSLATE_NOOP("odyssey::ui::FieldRow", "Report to")}};
  return m;
}

// A spin box that lets a number outside its range be typed (QSpinBox drops the keystroke, so
// 99999999999 silently became 9,999,999); the field then shows the engine's range error.
class RangeSpinBox : public QSpinBox {
 public:
  using QSpinBox::QSpinBox;
  QLineEdit* edit() const { return lineEdit(); }
  int value_of(const QString& text) const { return valueFromText(text); }
  // The typed integer when it lies outside the range.
  std::optional<qlonglong> out_of_range(QString text) const {
    text.remove(locale().groupSeparator());
    bool ok = false;
    const qlonglong v = text.trimmed().toLongLong(&ok);
    if (!ok || (v >= minimum() && v <= maximum())) return std::nullopt;
    return v;
  }

 protected:
  QValidator::State validate(QString& input, int& pos) const override {
    const QValidator::State st = QSpinBox::validate(input, pos);
    return st == QValidator::Invalid && out_of_range(input) ? QValidator::Intermediate : st;
  }
};

int spin_value(const QSpinBox& s, const QString& text) {
  if (!s.specialValueText().isEmpty() && text == s.specialValueText()) return s.minimum();
  bool ok = false;
  const qlonglong v = text.toLongLong(&ok);
  return ok ? static_cast<int>(std::clamp<qlonglong>(v, s.minimum(), s.maximum())) : s.minimum();
}

}  // namespace

QString FieldRow::label_for(std::string_view key) {
  auto it = labels().find(key);
  return it != labels().end() ? tr(it->second) : QString::fromUtf8(key.data(), static_cast<qsizetype>(key.size()));
}

QString FieldRow::tooltip_for(const FieldSpec& f) {
  auto q = [](std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); };
  // The help is the field table's (core, English like the CLI's); the key and the ms-swift
  // flag are what a preset and a swift command spell.
  QString t = q(f.help) + QStringLiteral("\n\n") + tr("Preset key: %1").arg(q(f.key));
  t += QLatin1Char('\n') + (f.swift_name.empty() ? tr("ms-swift: no equivalent (Odyssey only)")
                                                 : tr("ms-swift: %1").arg(QStringLiteral("--") + q(f.swift_name)));
  return t;
}

FieldRow::FieldRow(ConfigForm* form, std::string key, QWidget* parent)
    : QWidget(parent), form_(form), key_(std::move(key)), spec_(find_field(key_)) {
  setObjectName(QStringLiteral("field:") + QString::fromStdString(key_));
  build();
  refresh(true);
  show_diagnostics();
  connect(form_, &ConfigForm::changed, this, [this] { refresh(false); });
  connect(form_, &ConfigForm::reloaded, this, [this] { refresh(true); });
  connect(form_, &ConfigForm::diagnostics_changed, this, &FieldRow::show_diagnostics);
}

void FieldRow::build() {
  auto* box = new QVBoxLayout(this);
  box->setContentsMargins(0, 0, 0, 0);
  box->setSpacing(2);
  frame_ = new QFrame(this);
  frame_->setObjectName(QStringLiteral("fieldFrame"));
  auto* fl = new QVBoxLayout(frame_);
  fl->setContentsMargins(2, 2, 2, 2);
  const FieldSpec& f = *spec_;
  switch (kind_of(f)) {
    case Kind::Check: {
      auto* c = new QCheckBox(frame_);
      connect(c, &QCheckBox::toggled, this,
              [this](bool on) { commit(on ? QStringLiteral("true") : QStringLiteral("false")); });
      editor_ = c;
      break;
    }
    case Kind::Spin: {
      auto* s = new RangeSpinBox(frame_);
      s->setRange(static_cast<int>(std::isinf(f.min) ? INT_MIN : f.min),
                  static_cast<int>(std::isinf(f.max) ? INT_MAX : f.max));
      if (!f.special.empty())
        s->setSpecialValueText(QString::fromUtf8(f.special.data(), static_cast<qsizetype>(f.special.size())));
      s->setGroupSeparatorShown(true);
      connect(s, &QSpinBox::valueChanged, this, [this, s](int v) {
        commit(v == s->minimum() && !s->specialValueText().isEmpty() ? s->specialValueText() : QString::number(v));
      });
      // Out of range: the form refuses it with the engine's words and keeps the last valid value
      // (the field shows the error, Start waits) until a valid number is typed.
      connect(s->edit(), &QLineEdit::textEdited, this, [this, s](const QString& t) {
        if (const auto v = s->out_of_range(t)) commit(QString::number(*v));
        else if (form_->has_edit_error(key_)) commit(QString::number(s->value_of(t)));  // the same value again
      });
      editor_ = s;
      break;
    }
    case Kind::Combo:
    case Kind::EditableCombo: {
      auto* c = new QComboBox(frame_);
      for (auto ch : f.choices) c->addItem(QString::fromUtf8(ch.data(), static_cast<qsizetype>(ch.size())));
      if (kind_of(f) == Kind::EditableCombo) {
        c->setEditable(true);
        c->addItems({QStringLiteral("auto"), QStringLiteral("all"), QStringLiteral("none"), QStringLiteral("every:2"),
                     QStringLiteral("every:4")});
        connect(c, &QComboBox::editTextChanged, this, [this](const QString& t) { commit(t); });
      } else {
        connect(c, &QComboBox::currentTextChanged, this, [this](const QString& t) { commit(t); });
      }
      editor_ = c;
      break;
    }
    default: {
      auto* e = new QLineEdit(frame_);
      e->setClearButtonEnabled(kind_of(f) == Kind::StringLine || kind_of(f) == Kind::StringList);
      connect(e, &QLineEdit::textEdited, this, [this](const QString& t) { commit(t); });
      connect(e, &QLineEdit::editingFinished, this, [this] { refresh(true); });
      editor_ = e;
      break;
    }
  }
  editor_->setToolTip(tooltip_for(f));
  fl->addWidget(editor_);
  box->addWidget(frame_);
  problem_ = new QLabel(this);
  problem_->setWordWrap(true);
  problem_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  problem_->hide();
  box->addWidget(problem_);
}

void FieldRow::commit(const QString& text) {
  if (writing_) return;
  std::string yaml;
  switch (kind_of(*spec_)) {
    case Kind::StringLine:
    case Kind::EditableCombo: yaml = yaml_quote(text); break;
    case Kind::StringList:
    case Kind::IntList: {
      std::vector<std::string> items;
      for (const QString& part : text.split(QLatin1Char(','), Qt::SkipEmptyParts)) {
        const QString t = part.trimmed();
        if (t.isEmpty()) continue;
        items.push_back(kind_of(*spec_) == Kind::StringList ? yaml_quote(t) : t.toStdString());
      }
      yaml = "[";
      for (std::size_t i = 0; i < items.size(); ++i) yaml += (i ? ", " : "") + items[i];
      yaml += "]";
      break;
    }
    default: yaml = text.trimmed().toStdString();
  }
  writing_ = true;
  form_->set_text(key_, yaml);
  writing_ = false;
}

void FieldRow::set_shown_text(const QString& text) {
  if (auto* c = qobject_cast<QCheckBox*>(editor_)) c->setChecked(text == QStringLiteral("true"));
  else if (auto* s = qobject_cast<QSpinBox*>(editor_)) s->setValue(spin_value(*s, text));
  else if (auto* cb = qobject_cast<QComboBox*>(editor_))
    cb->isEditable() ? cb->setEditText(text) : cb->setCurrentText(text);
  else if (auto* e = qobject_cast<QLineEdit*>(editor_)) {
    e->setText(text);
    commit(text);  // setText emits no textEdited
  }
}

QString FieldRow::shown_text() const {
  if (auto* c = qobject_cast<QCheckBox*>(editor_))
    return c->isChecked() ? QStringLiteral("true") : QStringLiteral("false");
  if (auto* s = qobject_cast<QSpinBox*>(editor_))
    return s->value() == s->minimum() && !s->specialValueText().isEmpty() ? s->specialValueText()
                                                                          : QString::number(s->value());
  if (auto* cb = qobject_cast<QComboBox*>(editor_)) return cb->currentText();
  if (auto* e = qobject_cast<QLineEdit*>(editor_)) return e->text();
  return {};
}

void FieldRow::refresh(bool force) {
  if (writing_) return;
  auto* line = qobject_cast<QLineEdit*>(editor_);
  // Keep what the user is typing until they leave the field; an entry the form refused
  // stays visible beside its error until it is corrected or the whole config reloads.
  if (line && !force && line->hasFocus()) return;
  if (line && form_->has_edit_error(key_)) return;
  const QString text = display_text(form_->config(), *spec_);
  writing_ = true;
  if (auto* c = qobject_cast<QCheckBox*>(editor_)) c->setChecked(text == QStringLiteral("true"));
  else if (auto* s = qobject_cast<QSpinBox*>(editor_)) s->setValue(spin_value(*s, text));
  else if (auto* cb = qobject_cast<QComboBox*>(editor_)) {
    if (cb->isEditable()) {
      if (cb->currentText() != text) cb->setEditText(text);
    } else {
      cb->setCurrentText(text);
    }
  } else if (line && line->text() != text) {
    line->setText(text);
    if (!line->hasFocus()) line->setCursorPosition(0);  // a long path shows its start, not a clipped one
  }
  writing_ = false;
}

void FieldRow::show_diagnostics() {
  QStringList errors, warnings;
  for (const auto& d : form_->diagnostics_for(key_)) {
    if (d.severity == Severity::Error) errors << QString::fromStdString(d.message);
    else if (d.severity == Severity::Warning) warnings << QString::fromStdString(d.message);
  }
  state_ = !errors.isEmpty() ? 2 : !warnings.isEmpty() ? 1 : 0;
  const QStringList& shown = state_ == 2 ? errors : warnings;
  const QColor color = state_ == 2 ? error_color(palette()) : warning_color(palette());
  frame_->setStyleSheet(
      state_ == 0 ? QStringLiteral("QFrame#fieldFrame{border:2px solid transparent;border-radius:3px;}")
                  : QStringLiteral("QFrame#fieldFrame{border:2px solid %1;border-radius:3px;}").arg(color.name()));
  problem_->setText(shown.join(QLatin1Char('\n')));
  problem_->setStyleSheet(QStringLiteral("color:%1;").arg(color.name()));
  problem_->setVisible(state_ != 0);
  QString tip = tooltip_for(*spec_);
  if (state_ != 0)
    tip =
        (state_ == 2 ? tr("Error: ") : tr("Warning: ")) + shown.join(QLatin1Char('\n')) + QStringLiteral("\n\n") + tip;
  editor_->setToolTip(tip);
  editor_->setEnabled(available_ || state_ == 2);
}

QString FieldRow::problem_text() const { return problem_->isHidden() ? QString() : problem_->text(); }

void FieldRow::set_available(bool available) {
  available_ = available;
  editor_->setEnabled(available_ || state_ == 2);
}

void FieldRow::show_problem_only() { frame_->hide(); }

FieldRow* add_field(QFormLayout* layout, ConfigForm* form, const std::string& key) {
  auto* row = new FieldRow(form, key, layout->parentWidget());
  auto* label = new QLabel(FieldRow::label_for(key), layout->parentWidget());
  label->setToolTip(FieldRow::tooltip_for(*find_field(key)));
  label->setBuddy(row->editor());
  layout->addRow(label, row);
  return row;
}

}  // namespace odyssey::ui
