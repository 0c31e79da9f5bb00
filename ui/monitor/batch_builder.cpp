#include "batch_builder.h"

#include <cmath>
#include <type_traits>

namespace odyssey::ui {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
double gib(std::int64_t bytes) { return static_cast<double>(bytes) / kGiB; }
}  // namespace

void BatchBuilder::reset() {
  ema_ = 0;
  ema_norm_ = 0;
}

void BatchBuilder::begin(WatchBatch* batch) {
  batch_ = batch;
  index_.clear();
}

const QString& BatchBuilder::name_for(const std::string& key) {
  auto it = names_.find(key);
  if (it == names_.end()) it = names_.emplace(key, QString::fromStdString(key)).first;
  return it->second;
}

void BatchBuilder::point(const QString& name, double x, double y) {
  auto it = index_.find(name);
  std::size_t i = 0;
  if (it == index_.end()) {
    i = batch_->series.size();
    batch_->series.push_back(SeriesChunk{name, {}, {}});
    index_.insert(name, i);
  } else {
    i = it.value();
  }
  batch_->series[i].x.push_back(x);
  batch_->series[i].y.push_back(y);
}

void BatchBuilder::add_step(const run::StepEvent& s) {
  const auto x = static_cast<double>(s.step);
  static const QString kLoss = QStringLiteral("loss"), kEma = QStringLiteral("loss_ema"), kLr = QStringLiteral("lr"),
                       kGrad = QStringLiteral("grad_norm"), kTps = QStringLiteral("tokens_per_s");
  point(kLoss, x, s.loss);
  if (std::isfinite(s.loss)) {
    // A NaN step is shown as a mark on the raw series; it must not poison the smoothed
    // curve for the rest of the run.
    ema_ = smoothing_ * ema_ + (1 - smoothing_) * s.loss;
    ema_norm_ = smoothing_ * ema_norm_ + (1 - smoothing_);
    point(kEma, x, ema_norm_ > 0 ? ema_ / ema_norm_ : s.loss);
  }
  point(kLr, x, s.lr);
  point(kGrad, x, s.grad_norm);
  point(kTps, x, s.tokens_per_s);
  for (const auto& m : s.memory) {
    // A CPU rank reports no device memory at all (a CUDA rank always holds some): charting
    // its zeros would draw a flat line on a meaningless axis.
    if (m.vram_peak_bytes == 0 && m.vram_reserved_bytes == 0 && m.vram_allocated_bytes == 0) continue;
    const std::string r = std::to_string(m.rank);
    point(name_for("vram_peak/rank " + r), x, gib(m.vram_peak_bytes));
    point(name_for("vram_reserved/rank " + r), x, gib(m.vram_reserved_bytes));
  }
  for (const auto& c : s.collectives) {
    if (c.op == "barrier") continue;  // no bandwidth to speak of
    point(name_for("busbw/" + c.op + "/" + c.group), x, c.bus_bandwidth_gb_per_s);
  }
  StepProgress p;
  p.step = s.step;
  p.total_steps = s.total_steps;
  p.loss = s.loss;
  p.elapsed_s = s.elapsed_s;
  p.eta_s = s.eta_s;
  p.tokens_per_s = s.tokens_per_s;
  batch_->progress = p;
}

void BatchBuilder::add(const run::Event& e) {
  std::visit(
      [this](const auto& ev) {
        using T = std::decay_t<decltype(ev)>;
        if constexpr (std::is_same_v<T, run::StepEvent>) {
          add_step(ev);
        } else if constexpr (std::is_same_v<T, run::EvalEvent>) {
          static const QString kEval = QStringLiteral("eval_loss");
          point(kEval, static_cast<double>(ev.step), ev.loss);
        } else if constexpr (std::is_same_v<T, run::RunStartEvent>) {
          batch_->run_start = ev;
        } else if constexpr (std::is_same_v<T, run::RunEndEvent>) {
          batch_->run_end = ev;
        } else if constexpr (std::is_same_v<T, run::StageEvent>) {
          batch_->stage = QString::fromStdString(ev.message.empty() ? ev.stage : ev.stage + ": " + ev.message);
        } else if constexpr (std::is_same_v<T, run::CheckpointEvent>) {
          batch_->log_lines << QStringLiteral("[monitor] checkpoint saved at step %1: %2")
                                   .arg(ev.step)
                                   .arg(QString::fromStdString(ev.path));
        } else if constexpr (std::is_same_v<T, run::WarningEvent>) {
          batch_->messages << QStringLiteral("warning (%1, step %2): %3")
                                  .arg(QString::fromStdString(ev.code))
                                  .arg(ev.step)
                                  .arg(QString::fromStdString(ev.message));
        }
      },
      e);
}

}  // namespace odyssey::ui
