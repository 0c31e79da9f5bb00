#include "compare_view.h"

#include <QCheckBox>
#include <QCoreApplication>
#include <QEvent>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTableView>
#include <QThread>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../palette.h"
#include "chart_panel.h"
#include "run/event_reader.h"
#include "run/run_dir.h"

namespace odyssey::ui {

namespace fs = std::filesystem;

namespace {
const QColor kPalette[] = {QColor(0x1f, 0x77, 0xb4), QColor(0xff, 0x7f, 0x0e), QColor(0x2c, 0xa0, 0x2c),
                           QColor(0xd6, 0x27, 0x28), QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b)};
}

std::vector<CompareRun> load_compare_runs(const QStringList& dirs, const std::atomic<bool>& cancel) {
  std::vector<CompareRun> out;
  for (const QString& d : dirs) {
    const run::RunDir rd{fs::path(d.toStdString())};
    CompareRun r;
    r.run_id = QString::fromStdString(rd.run_id());
    std::ifstream in(rd.config(), std::ios::binary);
    if (in) {
      std::ostringstream ss;
      ss << in.rdbuf();
      r.config = config_column(r.run_id, ss.str(), rd.config().string());
    } else {
      r.config.run_id = r.run_id;
      r.config.error = QCoreApplication::translate("CompareView", "no config.yaml");
    }
    run::EventReaderOptions ro;
    ro.max_bytes_per_poll = std::size_t{8} << 20;
    run::EventReader reader(rd.events(), ro);
    double ema = 0, norm = 0;
    for (bool more = true; more && !cancel.load();) {
      run::PollResult p = reader.poll();
      more = p.more;
      for (const auto& dg : p.diagnostics) r.problems << QString::fromStdString(dg.format());
      for (const auto& rec : p.events) {
        if (const auto* s = std::get_if<run::StepEvent>(&rec.event)) {
          const auto x = static_cast<double>(s->step);
          r.loss.append(x, s->loss);
          if (std::isfinite(s->loss)) {
            ema = 0.9 * ema + 0.1 * s->loss;
            norm = 0.9 * norm + 0.1;
            r.loss_ema.append(x, ema / norm);
          }
        } else if (const auto* e = std::get_if<run::EvalEvent>(&rec.event)) {
          r.eval_loss.append(static_cast<double>(e->step), e->loss);
        }
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  note_ = new QLabel(tr("Select two or more runs in the list and press Compare."), this);
  note_->setWordWrap(true);
  log_ = new QCheckBox(tr("Log scale"), this);
  only_diff_ = new QCheckBox(tr("Only differing keys"), this);
  only_diff_->setChecked(true);
  bar->addWidget(note_, 1);
  bar->addWidget(log_);
  bar->addWidget(only_diff_);
  layout->addLayout(bar);
  auto* split = new QSplitter(Qt::Vertical, this);
  plot_ = new QCustomPlot(split);
  plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  plot_->xAxis->setLabel(tr("step"));
  plot_->yAxis->setLabel(tr("loss (smoothed; faint: raw)"));
  plot_->legend->setVisible(true);
  plot_->setMinimumHeight(220);
  style_plot(plot_, palette());
  table_ = new QTableView(split);
  diff_ = new ConfigDiffModel(this);
  table_->setModel(diff_);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->verticalHeader()->setVisible(false);
  split->addWidget(plot_);
  split->addWidget(table_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  layout->addWidget(split);
  connect(only_diff_, &QCheckBox::toggled, diff_, &ConfigDiffModel::set_only_differences);
  connect(log_, &QCheckBox::toggled, this, [this](bool on) {
    plot_->yAxis->setScaleType(on ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (on) plot_->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    else plot_->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    plot_->rescaleAxes();
    plot_->replot();
  });
}

void CompareView::changeEvent(QEvent* e) {
  QWidget::changeEvent(e);
  if (e->type() == QEvent::PaletteChange) {
    style_plot(plot_, palette());
    plot_->replot(QCustomPlot::rpQueuedReplot);
  }
}

CompareView::~CompareView() {
  if (cancel_) cancel_->store(true);
  // The loaders deliver to this object: they must be done before it goes.
  for (QThread* t : findChildren<QThread*>()) t->wait();
}

void CompareView::compare(const QStringList& dirs) {
  if (cancel_) cancel_->store(true);  // the previous request is stale
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  const std::uint64_t gen = ++generation_;
  pending_ = gen;
  note_->setText(tr("Reading %n run(s)…", nullptr, static_cast<int>(dirs.size())));
  auto cancel = cancel_;
  QThread* t = QThread::create([this, dirs, cancel, gen] {
    auto runs = load_compare_runs(dirs, *cancel);
    if (cancel->load()) return;
    QMetaObject::invokeMethod(
        this, [this, gen, r = std::move(runs)]() mutable { show_result(gen, std::move(r)); }, Qt::QueuedConnection);
  });
  t->setParent(this);
  connect(t, &QThread::finished, t, &QObject::deleteLater);
  t->start();
}

void CompareView::show_result(std::uint64_t generation, std::vector<CompareRun> runs) {
  if (generation != generation_) return;  // a newer request is on its way
  pending_ = 0;
  runs_ = std::move(runs);
  plot_->clearGraphs();
  std::vector<ConfigColumn> cols;
  QStringList problems;
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    const CompareRun& r = runs_[i];
    QColor c = kPalette[i % std::size(kPalette)];
    if (is_dark(palette())) c = c.lighter(135);
    QColor faint = c;
    faint.setAlpha(60);
    auto add = [&](const SeriesBuffer& b, const QPen& pen, const QString& name) {
      QCPGraph* g = plot_->addGraph();
      g->setPen(pen);
      g->setName(name);
      g->setData(QVector<double>(b.xs().begin(), b.xs().end()), QVector<double>(b.ys().begin(), b.ys().end()), true);
      return g;
    };
    add(r.loss, QPen(faint, 1), QString())->removeFromLegend();
    add(r.loss_ema, QPen(c, 2), r.run_id);
    if (r.eval_loss.size() > 0) {
      QCPGraph* e = add(r.eval_loss, QPen(c, 1, Qt::DashLine), r.run_id + tr(" eval"));
      e->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, c, 6));
    }
    if (!r.loss.marks().empty())
      problems << tr("%1: %n non-finite loss step(s)", nullptr, static_cast<int>(r.loss.marks().size())).arg(r.run_id);
    if (!r.problems.isEmpty()) problems << tr("%1: %2").arg(r.run_id, r.problems.first());
    cols.push_back(r.config);
  }
  diff_->set_columns(std::move(cols));
  plot_->rescaleAxes();
  plot_->replot();
  note_->setText(problems.isEmpty() ? tr("%n run(s) compared.", nullptr, static_cast<int>(runs_.size()))
                                    : problems.join(QStringLiteral("; ")));
  emit finished();
}

}  // namespace odyssey::ui
