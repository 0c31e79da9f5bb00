// RunScanner: lists the runs of an output root for the runs list, on a worker thread.
// Per run it reads status.json and only the tail of events.jsonl (the last step and
// run_end), so a rescan of a root holding hundreds of long runs stays cheap.
#pragma once

#include <QObject>
#include <QString>
#include <QTimer>

#include <atomic>
#include <cstdint>
#include <vector>

#include "monitor_types.h"

namespace odyssey::ui {

// The summary of one run directory (readable without a watcher). `now` is unix seconds.
RunSummary summarize_run(const QString& dir, double now);

class RunScanner : public QObject {
  Q_OBJECT
 public:
  explicit RunScanner(int interval_ms = 3000) : interval_ms_(interval_ms) {}

 public slots:
  void start();  // on the worker thread
  // A new root (generation numbers let the GUI drop results of the previous root).
  void set_root(const QString& root, quint64 generation);
  void scan();

 signals:
  void scanned(quint64 generation, const std::vector<odyssey::ui::RunSummary>& runs, const QString& error);

 private:
  int interval_ms_;
  QString root_;
  quint64 generation_ = 0;
  QTimer* timer_ = nullptr;
};

}  // namespace odyssey::ui
