#include "planner_gauge.h"

#include <QDoubleSpinBox>
#include <QHelpEvent>
#include <QFormLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QPainter>
#include <QTableView>
#include <QToolTip>
#include <QVBoxLayout>
#include <map>

#include "config_form.h"
#include "palette.h"
#include "plan_items_model.h"
#include "settings.h"

namespace odyssey::ui {
namespace {

// The planner's phase of the peak (core/planner/memory_planner.cpp), as the window says it.
QString phase_name(const std::string& phase) {
  static const std::map<std::string, const char*> names{
      {"loss", QT_TRANSLATE_NOOP("odyssey::ui::PlannerGauge", "the loss")},
      {"backward", QT_TRANSLATE_NOOP("odyssey::ui::PlannerGauge", "the backward pass")},
      {"optimizer step", QT_TRANSLATE_NOOP("odyssey::ui::PlannerGauge", "the optimizer step")}};
  const auto it = names.find(phase);
  return it != names.end() ? PlannerGauge::tr(it->second) : QString::fromStdString(phase);
}

}  // namespace

// One horizontal bar: a segment per plan group, a tick at the capacity.
class StackedBar : public QWidget {
 public:
  explicit StackedBar(QWidget* parent) : QWidget(parent) {
    setMinimumHeight(44);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
    setMouseTracking(true);
  }
  void set(std::vector<std::pair<std::string, std::int64_t>> groups, std::int64_t capacity, bool fits) {
    groups_ = std::move(groups);
    capacity_ = capacity;
    fits_ = fits;
    update();
  }

 protected:
  void paintEvent(QPaintEvent*) override {
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    const QRectF area = QRectF(rect()).adjusted(1, 4, -1, -16);
    std::int64_t total = 0;
    for (const auto& g : groups_) total += g.second;
    const double scale_max = static_cast<double>(std::max(total, capacity_)) * 1.02;
    p.setPen(palette().color(QPalette::Mid));
    p.setBrush(palette().color(QPalette::Base));
    p.drawRoundedRect(area, 3, 3);
    if (scale_max <= 0) return;
    double x = area.left();
    for (const auto& [name, bytes] : groups_) {
      const double w = area.width() * static_cast<double>(bytes) / scale_max;
      p.fillRect(QRectF(x, area.top() + 1, w, area.height() - 2), group_color(name));
      x += w;
    }
    const double cx = area.left() + area.width() * static_cast<double>(capacity_) / scale_max;
    if (!fits_) {  // the part past the capacity, hatched in the error colour
      QBrush hatch(error_color(palette()), Qt::BDiagPattern);
      p.fillRect(QRectF(cx, area.top() + 1, x - cx, area.height() - 2), hatch);
    }
    QPen cap(fits_ ? palette().color(QPalette::WindowText) : error_color(palette()), 2);
    p.setPen(cap);
    p.drawLine(QPointF(cx, area.top() - 3), QPointF(cx, area.bottom() + 3));
    p.setPen(palette().color(QPalette::WindowText));
    QFont f = font();
    f.setPointSizeF(f.pointSizeF() * 0.85);
    p.setFont(f);
    const QString label = PlannerGauge::tr("capacity %1").arg(gib_text(capacity_));
    const int tw = QFontMetrics(f).horizontalAdvance(label);
    p.drawText(QPointF(std::clamp(cx - tw / 2.0, 0.0, width() - tw - 1.0), height() - 3.0), label);
  }
  bool event(QEvent* e) override {
    if (e->type() == QEvent::ToolTip) {
      QStringList lines;
      for (const auto& [name, bytes] : groups_)
        lines << QStringLiteral("%1: %2").arg(group_name(name), gib_text(bytes));
      QToolTip::showText(static_cast<QHelpEvent*>(e)->globalPos(), lines.join(QLatin1Char('\n')), this);
      return true;
    }
    return QWidget::event(e);
  }

 private:
  std::vector<std::pair<std::string, std::int64_t>> groups_;
  std::int64_t capacity_ = 0;
  bool fits_ = true;
};

PlannerGauge::PlannerGauge(ConfigForm* form, Settings* settings, QWidget* parent)
    : QWidget(parent), form_(form), settings_(settings) {
  setObjectName(QStringLiteral("plannerGauge"));
  auto* v = new QVBoxLayout(this);
  headline_ = new QLabel(this);
  headline_->setObjectName(QStringLiteral("planHeadline"));
  headline_->setWordWrap(true);
  headline_->setTextFormat(Qt::RichText);
  v->addWidget(headline_);
  bar_ = new StackedBar(this);
  v->addWidget(bar_);
  answers_ = new QLabel(this);
  answers_->setObjectName(QStringLiteral("planAnswers"));
  answers_->setWordWrap(true);
  answers_->setTextFormat(Qt::RichText);
  v->addWidget(answers_);
  auto* f = new QFormLayout;
  capacity_ = new QDoubleSpinBox(this);
  capacity_->setRange(1.0, 4096.0);
  capacity_->setDecimals(1);
  capacity_->setSuffix(QStringLiteral(" GiB"));
  capacity_->setValue(settings_->gpu_memory_gib());
  capacity_->setToolTip(
      tr("Memory of each GPU as CUDA reports it (an H200: 139.8 GiB). When NVIDIA GPUs are detected (Advanced, GPUs) "
         "this follows the smallest one used; you can still edit it."));
  connect(capacity_, &QDoubleSpinBox::valueChanged, this, [this](double gib) {
    settings_->set_gpu_memory_gib(gib);
    recompute();
  });
  f->addRow(tr("GPU memory"), capacity_);
  v->addLayout(f);
  items_ = new PlanItemsModel(this);
  table_ = new QTableView(this);
  table_->setModel(items_);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setSectionResizeMode(PlanItemsModel::Item, QHeaderView::Stretch);
  table_->horizontalHeader()->setSectionResizeMode(PlanItemsModel::Group, QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(PlanItemsModel::Size, QHeaderView::ResizeToContents);
  table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 6);
  table_->setSelectionMode(QAbstractItemView::NoSelection);
  v->addWidget(table_, 1);
  connect(form_, &ConfigForm::changed, this, &PlannerGauge::recompute);
  connect(form_, &ConfigForm::model_changed, this, &PlannerGauge::recompute);
  recompute();
}

// What offloading parks in host memory against what the host may pin: a plan can fit the GPU
// and still not fit because of it (docs/memory-planner.md), so the headline says so.
QString PlannerGauge::host_line() const {
  if (!plan_ || plan_->device == "cpu" || plan_->host_bytes <= 0) return {};
  const bool short_of_host = plan_->host_bytes > plan_->host_capacity_bytes;
  const QColor col = short_of_host ? error_color(palette()) : palette().color(QPalette::WindowText);
  return tr("<br><small style='color:%1'>in host memory (offloaded): %2 of the %3 this machine may pin%4</small>")
      .arg(col.name(), gib_text(plan_->host_bytes), gib_text(plan_->host_capacity_bytes),
           short_of_host ? tr(" — too much") : QString());
}

PlannerOptions PlannerGauge::options() const {
  PlannerOptions o;
  o.gpu_memory_bytes = static_cast<std::int64_t>(capacity_->value() * static_cast<double>(planner::kGiB));
  return o;
}

void PlannerGauge::recompute() {
  const HfModelConfig* m = form_->model();
  if (!m) {
    plan_.reset();
    largest_ = smallest_sp_ = 0;
    items_->clear();
    bar_->set({}, 0, true);
    headline_->setText(form_->model_pending() ? tr("Looking for the model…")
                                              : tr("No memory plan: the planner needs the model's config.json."));
    answers_->clear();
    return;
  }
  const TrainConfig& c = form_->config();
  const PlannerOptions o = options();
  plan_ = plan_memory(c, *m, o);
  largest_ = largest_max_length(c, *m, o);
  const ParallelLayout lay = parallel_layout(c, m->num_key_value_heads);
  smallest_sp_ = smallest_sequence_parallel_size(c, *m, o, std::max<std::int64_t>(8, lay.world_size));
  items_->set_plan(*plan_);
  std::map<std::string, std::int64_t> by_group;
  std::vector<std::pair<std::string, std::int64_t>> groups;
  for (const auto& it : plan_->items)
    if (it.at_peak) by_group[it.group] += it.bytes;
  for (const char* g : {"model", "gradients", "optimizer", "activations", "loss", "communication", "runtime"})
    if (auto f = by_group.find(g); f != by_group.end()) groups.emplace_back(g, f->second), by_group.erase(f);
  for (const auto& [g, b] : by_group) groups.emplace_back(g, b);
  bar_->set(groups, plan_->capacity_bytes, plan_->fits);
  capacity_->setEnabled(plan_->device != "cpu");  // on the CPU the capacity is the host's RAM
  const QColor col = plan_->fits ? ok_color(palette()) : error_color(palette());
  const QString where = plan_->device == "cpu" ? tr("per process in host memory") : tr("per GPU");
  headline_->setText(tr("<span style='font-size:large;color:%1'><b>%2</b></span> predicted peak %3 of %4 "
                        "<b style='color:%1'>%5</b><br><small>peak during %6 · %7 tokens per GPU · %8 of %9 layers "
                        "recomputed</small>")
                         .arg(col.name(), gib_text(plan_->peak_bytes), where, gib_text(plan_->capacity_bytes),
                              plan_->fits ? tr("— fits") : tr("— does not fit"), phase_name(plan_->peak_phase))
                         .arg(QLocale().toString(static_cast<qlonglong>(plan_->tokens_per_gpu)))
                         .arg(plan_->checkpointed_layers)
                         .arg(plan_->total_layers) +
                     host_line());
  const QLocale l;
  QString a =
      largest_ > 0
          ? tr("Largest max_length that fits: <b>%1</b> tokens").arg(l.toString(static_cast<qlonglong>(largest_)))
          : tr("Largest max_length that fits: <b>none</b> (even the shortest does not)");
  a += QStringLiteral("<br>");
  a += smallest_sp_ > 0 ? tr("Smallest sequence-parallel size that fits: <b>%1</b>").arg(smallest_sp_)
                        : tr("Smallest sequence-parallel size that fits: <b>none up to %1 GPUs</b>")
                              .arg(std::max<std::int64_t>(8, lay.world_size));
  for (const auto& n : plan_->notes)
    a += QStringLiteral("<br><small>") + QString::fromStdString(n).toHtmlEscaped() + QStringLiteral("</small>");
  answers_->setText(a);
}

}  // namespace odyssey::ui
