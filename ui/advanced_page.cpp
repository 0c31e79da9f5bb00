#include "advanced_page.h"

#include <algorithm>
#include <cmath>

#include <QCheckBox>
#include <QComboBox>
#include <QEvent>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QScrollArea>
#include <QVBoxLayout>
#include <numeric>

#include "config_form.h"
#include "field_row.h"
#include "gpu_panel.h"

namespace odyssey::ui {

AdvancedPage::AdvancedPage(ConfigForm* form, QWidget* parent) : QWidget(parent), form_(form) {
  setObjectName(QStringLiteral("advancedPage"));
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  auto* content = new QWidget(scroll);
  columns_ = new QHBoxLayout(content);
  for (int i = 0; i < 3; ++i) {
    auto* slot = new QVBoxLayout;
    slot->addStretch(1);
    columns_->addLayout(slot, 1);
    slots_.push_back(slot);
  }
  auto* c1 = new QVBoxLayout;
  c1->addWidget(parallel_group());
  c1->addWidget(
      group(tr("Precision and devices"), {"torch_dtype", "seed", "device", "gpu_ids", "nproc_per_node", "nnodes"}));
  c1->addWidget(group(tr("Model source"), {"model_revision", "template_file", "adapters"}));
  auto* gpus = new QGroupBox(tr("GPUs on this machine"), content);
  gpus->setObjectName(QStringLiteral("gpuGroup"));
  auto* gv = new QVBoxLayout(gpus);
  gpu_panel_ = new GpuPanel(form_, std::make_shared<GpuProbe>(), gpus);
  gv->addWidget(gpu_panel_);
  c1->addWidget(gpus);
  auto* c2 = new QVBoxLayout;
  c2->addWidget(
      group(tr("Kernels and activations"),
            {"attn_impl", "fused_kernels", "packing", "padding_free", "activation_checkpointing", "offload_activations",
             "mlp_tile_tokens", "keep_attention", "layers_per_checkpoint", "gpu_memory_budget_gib"}));
  c2->addWidget(group(tr("Base weights (QLoRA)"), {"quant_bits", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant",
                                                   "bnb_4bit_compute_dtype", "quant_method"}));
  c2->addWidget(group(tr("Optimizer memory"),
                      {"zero_stage", "offload_optimizer", "optimizer_dtype", "use_galore", "galore_quantization",
                       "galore_rank", "galore_update_proj_gap", "galore_scale", "galore_target_modules"}));
  c2->addWidget(group(tr("Mixture of experts"), {"target_parameters", "router_aux_loss_coef", "freeze_router"}));
  auto* c3 = new QVBoxLayout;
  c3->addWidget(
      group(tr("Optimizer and schedule"), {"lr_scheduler_type", "warmup_ratio", "warmup_steps", "weight_decay",
                                           "max_grad_norm", "adam_beta1", "adam_beta2", "adam_epsilon"}));
  c3->addWidget(group(tr("Data handling"), {"truncation_strategy", "split_dataset_ratio", "max_bad_sample_ratio"}));
  c3->addWidget(group(tr("Logging and checkpoints"), {"logging_steps", "report_to", "eval_steps", "save_steps",
                                                      "save_total_limit", "resume_from_checkpoint"}));
  for (QVBoxLayout* c : {c1, c2, c3}) {
    auto* w = new QWidget(content);
    c->setContentsMargins(0, 0, 0, 0);
    w->setLayout(c);
    column_widgets_.push_back(w);
  }
  scroll->setWidget(content);
  // Three columns where the page is wide enough, else two or one (a 1366×768 laptop beside the
  // docks): the columns follow the scroll area's visible width, not the content's.
  viewport_ = scroll->viewport();
  viewport_->installEventFilter(this);
  reflow();
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  outer->addWidget(scroll);
  connect(form_, &ConfigForm::changed, this, &AdvancedPage::update);
  connect(form_, &ConfigForm::model_changed, this, &AdvancedPage::update);
  update();
}

int AdvancedPage::column_count() const { return columns_count_; }

bool AdvancedPage::eventFilter(QObject* watched, QEvent* event) {
  if (watched == viewport_ && event->type() == QEvent::Resize) reflow();
  return QWidget::eventFilter(watched, event);
}

// The slot (column of the page) that column widget i stands in with n columns: with two,
// the third goes under the second (the first, with the GPU list, is the longest).
static int slot_of(int i, int n) { return n == 2 && i == 2 ? 1 : i % n; }

void AdvancedPage::reflow() {
  const int spacing = columns_->spacing() > 0 ? columns_->spacing() : 6;
  const QMargins m = columns_->contentsMargins();
  const int room = viewport_->width() - m.left() - m.right();
  // The most columns whose widest members, side by side, fit the visible width.
  const int total = static_cast<int>(column_widgets_.size());
  int n = total;
  for (; n > 1; --n) {
    std::vector<int> need(static_cast<std::size_t>(n), 0);
    for (int i = 0; i < total; ++i) {
      const auto c = static_cast<std::size_t>(slot_of(i, n));
      need[c] = std::max(need[c], column_widgets_[static_cast<std::size_t>(i)]->minimumSizeHint().width());
    }
    int width = (n - 1) * spacing;
    for (int w : need) width += w;
    if (width <= room) break;
  }
  if (n == columns_count_) return;
  columns_count_ = n;
  for (QWidget* w : column_widgets_)
    for (QVBoxLayout* slot : slots_) slot->removeWidget(w);
  for (int i = 0; i < total; ++i) {
    QVBoxLayout* slot = slots_[static_cast<std::size_t>(slot_of(i, n))];
    slot->insertWidget(slot->count() - 1, column_widgets_[static_cast<std::size_t>(i)]);  // before the stretch
  }
  for (int c = 0; c < static_cast<int>(slots_.size()); ++c) columns_->setStretch(c, c < n ? 1 : 0);
}

QWidget* AdvancedPage::group(const QString& title, std::initializer_list<const char*> keys) {
  auto* g = new QGroupBox(title, this);
  auto* f = new QFormLayout(g);
  f->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  for (const char* k : keys) {
    FieldRow* r = add_field(f, form_, k);
    if (std::string_view(k).substr(0, 7) == "galore_") galore_rows_.push_back(r);
    if (std::string_view(k).substr(0, 9) == "bnb_4bit_" || std::string_view(k) == "quant_method")
      quant_rows_.push_back(r);
    if (std::string_view(k) == "offload_optimizer") offload_row_ = r;
    if (std::string_view(k) == "optimizer_dtype") optimizer_dtype_row_ = r;
    if (std::string_view(k) == "gpu_memory_budget_gib") {
      card_preset_ = new QComboBox(g);
      card_preset_->setObjectName(QStringLiteral("cardPreset"));
      // The card names are long: the box may be narrower than them (its list shows them whole),
      // so the page keeps its columns at 1366 px.
      card_preset_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
      card_preset_->setMinimumContentsLength(8);
      card_preset_->addItem(tr("Choose a card…"), 0);
      card_preset_->addItem(tr("24 GiB (RTX 4090, RTX 3090)"), 24);
      card_preset_->addItem(tr("32 GiB (RTX 5090)"), 32);
      card_preset_->addItem(tr("48 GiB (RTX 6000 Ada, A6000, L40S)"), 48);
      card_preset_->addItem(tr("80 GiB (A100, H100 80 GB)"), 80);
      card_preset_->setToolTip(
          tr("Sets the GPU memory budget to a card's memory: the planner then chooses "
             "checkpointing, recomputation and offload to fit it, and a run caps its "
             "allocator there, so a larger GPU trains as that card would."));
      connect(card_preset_, &QComboBox::activated, this, [this](int i) {
        const int gib = card_preset_->itemData(i).toInt();
        if (gib > 0) form_->set_text("gpu_memory_budget_gib", std::to_string(gib));
      });
      f->addRow(tr("Card preset"), card_preset_);
    }
  }
  return g;
}

QWidget* AdvancedPage::parallel_group() {
  auto* g = new QGroupBox(tr("Sequence parallelism"), this);
  auto* f = new QFormLayout(g);
  f->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  enable_sp_ = new QCheckBox(tr("Enable Ulysses sequence parallelism"), g);
  enable_sp_->setObjectName(QStringLiteral("enableUlysses"));
  enable_sp_->setToolTip(
      tr("Split every sequence across several GPUs: DeepSpeed-Ulysses all-to-all over attention heads, "
         "ring attention for what the heads cannot split.\n\nms-swift: --sequence_parallel_size N"));
  f->addRow(enable_sp_);
  connect(enable_sp_, &QCheckBox::toggled, this, [this](bool on) {
    if (updating_) return;
    const TrainConfig& c = form_->config();
    if (on && c.sequence_parallel_size == 1) {
      if (resolved_nproc_per_node(c) * c.nnodes < 2 && c.gpu_ids.empty()) form_->set_text("nproc_per_node", "2");
      form_->set_text("sequence_parallel_size", "2");
    } else if (!on) {
      form_->set_text("ulysses_size", "auto");
      form_->set_text("expert_parallel_size", "1");
      form_->set_text("sequence_parallel_size", "1");
    }
  });
  sp_row_ = add_field(f, form_, "sequence_parallel_size");
  split_ = new QComboBox(g);
  split_->setObjectName(QStringLiteral("splitMode"));
  split_->addItems({tr("Automatic: Ulysses = gcd(KV heads, size)"), tr("Explicit Ulysses degree")});
  split_->setToolTip(FieldRow::tooltip_for(*find_field("ulysses_size")));
  f->addRow(tr("Ulysses × ring split"), split_);
  connect(split_, &QComboBox::currentIndexChanged, this, [this](int i) {
    if (updating_) return;
    if (i == 0) {
      form_->set_text("ulysses_size", "auto");
    } else {
      const HfModelConfig* m = form_->model();
      const auto p = parallel_layout(form_->config(), m ? m->num_key_value_heads : 0);
      form_->set_text("ulysses_size", std::to_string(p.ulysses));
    }
  });
  ulysses_row_ = add_field(f, form_, "ulysses_size");
  ep_row_ = add_field(f, form_, "expert_parallel_size");
  add_field(f, form_, "max_length");
  derived_ = new QLabel(g);
  derived_->setObjectName(QStringLiteral("derivedLength"));
  derived_->setWordWrap(true);
  derived_->setTextFormat(Qt::RichText);
  f->addRow(derived_);
  return g;
}

QString AdvancedPage::derived_text(const ConfigForm& form) {
  const TrainConfig& c = form.config();
  const HfModelConfig* m = form.model();
  const std::int64_t kv = m ? m->num_key_value_heads : 0;
  const ParallelLayout p = parallel_layout(c, kv);
  const QLocale l;
  auto n = [&](std::int64_t v) { return l.toString(static_cast<qlonglong>(v)); };
  QStringList lines;
  const std::int64_t sp = std::max<std::int64_t>(1, c.sequence_parallel_size);
  const QString per = c.max_length % sp == 0 ? n(c.max_length / sp) : QStringLiteral("≈ ") + n(c.max_length / sp);
  lines << tr("Per-GPU sequence length: <b>%1</b> tokens (max_length %2 ÷ %3)").arg(per, n(c.max_length), n(sp));
  QString how;
  if (c.ulysses_size > 0) how = tr("explicit");
  else if (kv > 0) how = tr("auto: gcd(%1 KV heads, %2) = %3").arg(kv).arg(sp).arg(std::gcd(kv, sp));
  else how = tr("auto; the model's KV heads are unknown, so Ulysses = size until it is found");
  lines << tr("Split: Ulysses <b>%1</b> × ring <b>%2</b> (%3)").arg(p.ulysses).arg(p.ring).arg(how);
  if (sp > 1) lines << tr("Packed sequences are padded to a multiple of %1.").arg(sequence_pad_multiple(p));
  if (p.world_size % p.sp == 0)
    lines << tr("Mesh: %1 processes = %2 data-parallel × %3 sequence-parallel").arg(p.world_size).arg(p.dp).arg(p.sp);
  else lines << tr("Mesh: %1 processes cannot be split into groups of %2").arg(p.world_size).arg(p.sp);
  return lines.join(QStringLiteral("<br>"));
}

void AdvancedPage::update() {
  updating_ = true;
  const TrainConfig& c = form_->config();
  const bool sp_on = c.sequence_parallel_size > 1;
  enable_sp_->setChecked(sp_on);
  sp_row_->set_available(sp_on);
  split_->setEnabled(sp_on);
  split_->setCurrentIndex(c.ulysses_size > 0 ? 1 : 0);
  ulysses_row_->set_available(sp_on && c.ulysses_size > 0);
  const HfModelConfig* m = form_->model();
  ep_row_->set_available(sp_on && (!m || m->is_moe()));  // unknown model: it may be a MoE one
  for (auto* r : galore_rows_) r->set_available(c.use_galore);
  for (auto* r : quant_rows_) r->set_available(c.quant_bits == 4);
  if (offload_row_) offload_row_->set_available(c.zero_stage > 0 || c.offload_optimizer);
  // LoRA adapters train in fp32 whatever it says (validate warns when it is set).
  if (optimizer_dtype_row_) optimizer_dtype_row_->set_available(c.tuner_type == "full" || c.optimizer_dtype != "auto");
  if (card_preset_) {                          // shows the card whose memory the budget is, else the prompt
    const double b = c.gpu_memory_budget_gib;  // a card's whole GiB, or a budget of no card (32.3)
    const int at = b > 0 && b == std::floor(b) && b <= 1e6 ? card_preset_->findData(static_cast<int>(b)) : -1;
    card_preset_->setCurrentIndex(at > 0 ? at : 0);
  }
  derived_->setText(derived_text(*form_));
  updating_ = false;
}

}  // namespace odyssey::ui
