#include "train_page.h"

#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QTableView>
#include <QVBoxLayout>

#include "config_form.h"
#include "dataset_model.h"
#include "dataset_preview.h"
#include "field_row.h"
#include "model_picker.h"
#include "settings.h"

namespace odyssey::ui {

TrainPage::TrainPage(ConfigForm* form, Settings* settings, QWidget* parent)
    : QWidget(parent), form_(form), settings_(settings) {
  setObjectName(QStringLiteral("trainPage"));
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  auto* content = new QWidget(scroll);
  auto* page = new QVBoxLayout(content);
  auto* columns = new QHBoxLayout;
  auto* left = new QVBoxLayout;
  left->addWidget(model_group());
  left->addWidget(data_group());
  left->addStretch(1);
  auto* right = new QVBoxLayout;
  right->addWidget(training_group());
  right->addStretch(1);
  columns->addLayout(left, 3);
  columns->addLayout(right, 2);
  page->addLayout(columns);
  page->addWidget(preview_group(), 1);
  scroll->setWidget(content);
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  outer->addWidget(scroll);
  connect(form_, &ConfigForm::changed, this, &TrainPage::update_availability);
  connect(form_, &ConfigForm::reloaded, this, &TrainPage::update_availability);
  update_availability();
}

QWidget* TrainPage::model_group() {
  auto* g = new QGroupBox(tr("Model"), this);
  auto* f = new QFormLayout(g);
  f->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  add_field(f, form_, "description");
  picker_ = new ModelPicker(form_, settings_, g);
  auto* label = new QLabel(FieldRow::label_for("model"), g);
  label->setToolTip(FieldRow::tooltip_for(*find_field("model")));
  f->addRow(label, picker_);
  add_field(f, form_, "template");
  add_field(f, form_, "system");
  return g;
}

QWidget* TrainPage::data_group() {
  auto* g = new QGroupBox(tr("Training data"), this);
  auto* v = new QVBoxLayout(g);
  datasets_ = new DatasetListModel(form_, this);
  table_ = new QTableView(g);
  table_->setObjectName(QStringLiteral("datasetTable"));
  table_->setModel(datasets_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setSectionResizeMode(DatasetListModel::File, QHeaderView::Stretch);
  table_->horizontalHeader()->setSectionResizeMode(DatasetListModel::Samples, QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(DatasetListModel::Contents, QHeaderView::ResizeToContents);
  table_->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed |
                          QAbstractItemView::SelectedClicked);
  table_->setToolTip(FieldRow::tooltip_for(*find_field("dataset")) +
                     tr("\n\nDouble-click \"Use\" to draw N samples (path#N)."));
  table_->setMinimumHeight(90);
  table_->setMaximumHeight(130);
  v->addWidget(table_);
  auto* dataset_row = new FieldRow(form_, "dataset", g);  // shows the key's diagnostics
  dataset_row->show_problem_only();
  v->addWidget(dataset_row);
  auto* buttons = new QHBoxLayout;
  auto* add = new QPushButton(tr("Add files…"), g);
  auto* remove = new QPushButton(tr("Remove"), g);
  remove->setEnabled(false);
  connect(add, &QPushButton::clicked, this, &TrainPage::add_datasets);
  connect(remove, &QPushButton::clicked, this, [this] {
    std::vector<int> rows;
    for (const auto& i : table_->selectionModel()->selectedRows()) rows.push_back(i.row());
    datasets_->remove_rows(rows);
  });
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, remove,
          [this, remove] { remove->setEnabled(table_->selectionModel()->hasSelection()); });
  connect(datasets_, &QAbstractItemModel::modelReset, remove, [remove] { remove->setEnabled(false); });
  buttons->addWidget(add);
  buttons->addWidget(remove);
  buttons->addStretch(1);
  v->addLayout(buttons);
  auto* f = new QFormLayout;
  add_field(f, form_, "val_dataset");
  add_field(f, form_, "max_length");
  v->addLayout(f);
  return g;
}

QWidget* TrainPage::training_group() {
  auto* g = new QGroupBox(tr("Training"), this);
  auto* f = new QFormLayout(g);
  f->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  add_field(f, form_, "tuner_type");
  // One choice for the base's precision (quant_bits, bnb_4bit_quant_type); the Advanced page
  // has every 4-bit key. Leaving 4-bit stashes the 4-bit keys (ConfigForm), coming back restores
  // them, then the type chosen here applies.
  base_weights_ = new QComboBox(g);
  base_weights_->setObjectName(QStringLiteral("baseWeights"));
  base_weights_->addItem(tr("16-bit (the model's dtype)"));
  base_weights_->addItem(tr("4-bit NF4 (QLoRA)"));
  base_weights_->addItem(tr("4-bit FP4 (QLoRA)"));
  base_weights_->setToolTip(
      tr("quant_bits and bnb_4bit_quant_type: the frozen base quantized to 4 bits as it loads, in "
         "bitsandbytes' layout, under LoRA adapters (QLoRA; ms-swift: --quant_bits 4). Double quantization "
         "and the compute dtype are on the Advanced page."));
  connect(base_weights_, &QComboBox::activated, this, [this](int i) {
    form_->set_text("quant_bits", i == 0 ? "0" : "4");
    if (i > 0) form_->set_text("bnb_4bit_quant_type", i == 1 ? "nf4" : "fp4");
  });
  auto* weights_label = new QLabel(tr("Base weights"), g);
  weights_label->setToolTip(base_weights_->toolTip());
  f->addRow(weights_label, base_weights_);
  for (const char* k : {"lora_rank", "lora_alpha", "lora_dropout", "target_modules", "use_rslora"})
    lora_rows_.push_back(add_field(f, form_, k));
  add_field(f, form_, "learning_rate");
  epochs_ = add_field(f, form_, "num_train_epochs");
  add_field(f, form_, "max_steps");
  add_field(f, form_, "per_device_train_batch_size");
  add_field(f, form_, "gradient_accumulation_steps");
  auto* out = new QWidget(g);
  auto* h = new QHBoxLayout(out);
  h->setContentsMargins(0, 0, 0, 0);
  auto* out_row = new FieldRow(form_, "output_dir", out);
  auto* browse = new QPushButton(tr("Browse…"), out);
  connect(browse, &QPushButton::clicked, this, [this, out_row] {
    const QString d =
        QFileDialog::getExistingDirectory(this, tr("Output folder"), settings_->last_dir(QStringLiteral("output")));
    if (d.isEmpty()) return;
    settings_->set_last_dir(QStringLiteral("output"), d);
    out_row->set_shown_text(d);
  });
  h->addWidget(out_row, 1);
  h->addWidget(browse, 0, Qt::AlignTop);
  auto* label = new QLabel(FieldRow::label_for("output_dir"), g);
  label->setToolTip(FieldRow::tooltip_for(*find_field("output_dir")));
  f->addRow(label, out);
  return g;
}

QWidget* TrainPage::preview_group() {
  auto* g = new QGroupBox(tr("Data preview"), this);
  g->setObjectName(QStringLiteral("previewGroup"));
  auto* v = new QVBoxLayout(g);
  preview_ = new DatasetPreview(form_, datasets_, g);
  v->addWidget(preview_);
  // The selected file (the first when none is selected).
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, preview_,
          [this](const QModelIndex& current) { preview_->set_row(current.isValid() ? current.row() : 0); });
  return g;
}

void TrainPage::add_datasets() {
  const QStringList files =
      QFileDialog::getOpenFileNames(this, tr("Training files"), settings_->last_dir(QStringLiteral("dataset")),
                                    tr("JSON Lines or JSON (*.jsonl *.json);;All files (*)"));
  if (files.isEmpty()) return;
  settings_->set_last_dir(QStringLiteral("dataset"), QFileInfo(files.first()).absolutePath());
  datasets_->add_files(files);
}

void TrainPage::update_availability() {
  const bool lora = uses_lora(form_->config());
  for (auto* r : lora_rows_) r->set_available(lora);
  epochs_->set_available(form_->config().max_steps < 0);
  sync_base_weights();
}

void TrainPage::sync_base_weights() {
  const TrainConfig& c = form_->config();
  base_weights_->setCurrentIndex(c.quant_bits == 4 ? (c.bnb_4bit_quant_type == "fp4" ? 2 : 1) : 0);
  // A 4-bit base is frozen under adapters: offered with LoRA, and left enabled while 4-bit is
  // chosen so a full fine-tune can come back to 16-bit here.
  base_weights_->setEnabled(uses_lora(c) || c.quant_bits == 4);
}

}  // namespace odyssey::ui
