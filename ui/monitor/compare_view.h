// CompareView: several runs' loss curves overlaid, and their configs diffed key by key.
// The runs are read on a thread of their own (whole events files can be large); a result
// of an older request is dropped when a newer one was made.
#pragma once

#include <QStringList>
#include <QWidget>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "config_diff.h"
#include "series_buffer.h"

class QCustomPlot;
class QLabel;
class QTableView;
class QCheckBox;

namespace odyssey::ui {

struct CompareRun {
  QString run_id;
  SeriesBuffer loss{5000};
  SeriesBuffer loss_ema{5000};
  SeriesBuffer eval_loss{5000};
  ConfigColumn config;
  QStringList problems;
};

// Reads the runs (worker thread). `cancel` is polled between slices.
std::vector<CompareRun> load_compare_runs(const QStringList& dirs, const std::atomic<bool>& cancel);

class CompareView : public QWidget {
  Q_OBJECT
 public:
  explicit CompareView(QWidget* parent = nullptr);
  ~CompareView() override;

  void compare(const QStringList& dirs);
  ConfigDiffModel* diff_model() const { return diff_; }
  QCustomPlot* plot() const { return plot_; }
  int run_count() const { return static_cast<int>(runs_.size()); }
  bool busy() const { return pending_ != 0; }

 signals:
  void finished();

 protected:
  void changeEvent(QEvent* e) override;

 private:
  void show_result(std::uint64_t generation, std::vector<CompareRun> runs);

  QCustomPlot* plot_ = nullptr;
  QTableView* table_ = nullptr;
  QCheckBox* only_diff_ = nullptr;
  QCheckBox* log_ = nullptr;
  QLabel* note_ = nullptr;
  ConfigDiffModel* diff_ = nullptr;
  std::vector<CompareRun> runs_;
  std::uint64_t generation_ = 0;
  std::uint64_t pending_ = 0;  // generation being loaded, 0 when idle
  std::shared_ptr<std::atomic<bool>> cancel_;
};

}  // namespace odyssey::ui
