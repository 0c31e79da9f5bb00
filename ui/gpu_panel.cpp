#include "gpu_panel.h"

#include <QHeaderView>
#include <QLabel>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>

#include "async.h"
#include "config_form.h"
#include "gpu_list_model.h"
#include "palette.h"

namespace odyssey::ui {

GpuPanel::GpuPanel(ConfigForm* form, std::shared_ptr<GpuProbe> probe, QWidget* parent)
    : QWidget(parent), form_(form), probe_(std::move(probe)), model_(new GpuListModel(form, this)) {
  setObjectName(QStringLiteral("gpuPanel"));
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(0, 0, 0, 0);
  status_ = new QLabel(this);
  status_->setObjectName(QStringLiteral("gpuStatus"));
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  v->addWidget(status_);
  table_ = new QTableView(this);
  table_->setObjectName(QStringLiteral("gpuTable"));
  table_->setModel(model_);
  table_->verticalHeader()->hide();
  table_->setSelectionMode(QAbstractItemView::NoSelection);
  table_->horizontalHeader()->setSectionResizeMode(GpuListModel::Gpu, QHeaderView::Stretch);
  for (int c : {int(GpuListModel::Use), int(GpuListModel::Memory), int(GpuListModel::Utilization)})
    table_->horizontalHeader()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
  table_->setMaximumHeight(200);
  table_->hide();
  v->addWidget(table_);
  connect(form_, &ConfigForm::changed, this, &GpuPanel::update_status);
  connect(model_, &QAbstractItemModel::modelReset, this, &GpuPanel::update_status);
  refresh_.setInterval(2000);
  connect(&refresh_, &QTimer::timeout, this, &GpuPanel::probe_now);
  status_->setText(probe_ ? tr("Looking for NVIDIA GPUs…") : tr("GPUs are not probed."));
  if (probe_) probe_now();
}

void GpuPanel::probe_now() {
  if (probing_ || !probe_) return;  // a hung driver call must not pile up requests
  probing_ = true;
  auto probe = probe_;
  run_off_gui_thread(
      this, [probe]() { return probe->probe(); },
      [this](GpuProbeResult r) {
        probing_ = false;
        ++probes_done_;
        set_probe_result(r);
      });
}

void GpuPanel::set_probe_result(const GpuProbeResult& r) {
  last_ = r;
  has_result_ = true;
  model_->set_gpus(r.gpus);
  // Utilisation is live while there are GPUs; without NVML nothing will change.
  if (probe_ && r.nvml && !r.gpus.empty()) refresh_.start();
  else refresh_.stop();
  update_status();
}

double GpuPanel::capacity_gib() const {
  double gib = 0;
  for (const GpuInfo& g : model_->gpus()) {
    if (!model_->used(g.index) || g.memory_total <= 0) continue;
    const double v = static_cast<double>(g.memory_total) / (1024.0 * 1024.0 * 1024.0);
    gib = gib == 0 ? v : std::min(gib, v);
  }
  return gib;
}

void GpuPanel::update_status() {
  if (!has_result_) return;
  const TrainConfig& c = form_->config();
  const QPalette& p = palette();
  const auto& gpus = model_->gpus();
  table_->setVisible(!gpus.empty());
  if (gpus.empty()) {
    QString why = QString::fromStdString(last_.problem);
    if (why.isEmpty()) why = tr("NVML lists no device");
    QString text = tr("<b>No NVIDIA GPU found: training runs on the CPU.</b> <span style='font-size:small'>(%1)</span>")
                       .arg(why.toHtmlEscaped());
    if (c.device == "cuda")
      text += QStringLiteral("<br><span style='color:%1'>%2</span>")
                  .arg(error_color(p).name(),
                       tr("device is cuda: a run started here will fail; set device to auto or cpu."));
    status_->setText(text);
  } else {
    QStringList missing;
    for (std::int64_t id : c.gpu_ids) {
      const bool found = std::any_of(gpus.begin(), gpus.end(), [id](const GpuInfo& g) { return g.index == id; });
      if (!found) missing << QString::number(id);
    }
    QString text =
        c.device == "cpu"
            ? tr("%n NVIDIA GPU(s); device is cpu, so none is used.", "", static_cast<int>(gpus.size()))
            : (c.gpu_ids.empty()
                   ? tr("%n NVIDIA GPU(s); training uses every one (gpu_ids empty).", "", static_cast<int>(gpus.size()))
                   : tr("%n NVIDIA GPU(s); training uses the checked ones.", "", static_cast<int>(gpus.size())));
    if (!last_.driver.empty()) text += tr(" Driver %1.").arg(QString::fromStdString(last_.driver).toHtmlEscaped());
    if (!missing.isEmpty())
      text +=
          QStringLiteral("<br><span style='color:%1'>%2</span>")
              .arg(error_color(p).name(),
                   tr("gpu_ids lists %1, which this machine does not have.").arg(missing.join(QStringLiteral(", "))));
    status_->setText(text);
  }
  const double cap = c.device == "cpu" ? 0 : capacity_gib();
  if (cap > 0 && cap != last_capacity_) {
    last_capacity_ = cap;
    emit capacity_detected(cap);
  }
}

}  // namespace odyssey::ui
