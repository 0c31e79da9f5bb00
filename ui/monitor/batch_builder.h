// BatchBuilder: turns decoded events into per-series points (SeriesChunk) on the worker
// thread, so the GUI thread only appends numbers. It holds the only cross-batch state of
// a watch: the smoothed loss.
#pragma once

#include <QHash>
#include <QString>

#include <map>
#include <string>

#include "monitor_types.h"
#include "run/event_schema.h"

namespace odyssey::ui {

class BatchBuilder {
 public:
  // smoothing: TensorBoard's EMA weight (0 = raw, 0.99 = very smooth), debiased so the
  // first steps are not pulled towards 0.
  explicit BatchBuilder(double smoothing = 0.9) : smoothing_(smoothing) {}

  void reset();                   // the events file restarted
  void begin(WatchBatch* batch);  // subsequent add()s fill `batch`
  void add(const run::Event& e);

 private:
  void add_step(const run::StepEvent& s);
  void point(const QString& name, double x, double y);
  const QString& name_for(const std::string& key);

  double smoothing_;
  double ema_ = 0;
  double ema_norm_ = 0;  // 1 - smoothing^n, the debiasing denominator
  WatchBatch* batch_ = nullptr;
  QHash<QString, std::size_t> index_;     // series name -> position in batch_->series
  std::map<std::string, QString> names_;  // interned names of per-rank/collective series
};

}  // namespace odyssey::ui
