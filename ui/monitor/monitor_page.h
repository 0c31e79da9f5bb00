// MonitorPage: the runs of an output root, and live charts, progress, log and failure
// reason of the attached run; compare several runs. Everything it knows comes from run
// directories (docs/run-contract.md), read on a worker thread (RunScanner, RunWatcher);
// the GUI thread only appends numbers to bounded buffers and redraws from a 40 ms
// single-shot timer. See docs/monitor.md.
#pragma once

#include <QPointer>
#include <QStringList>
#include <QThread>
#include <QTimer>
#include <QWidget>

#include <cstdint>
#include <optional>

#include "monitor_types.h"
#include "series_store.h"

class QLabel;
class QProgressBar;
class QTableView;
class QTabWidget;
class QCheckBox;
class QDoubleSpinBox;
class QPushButton;

class QMenu;

namespace odyssey::ui {

class ChartPanel;
class CompareView;
class LogView;
class RunsModel;
class RunScanner;
class RunWatcher;

class MonitorPage : public QWidget {
  Q_OBJECT
 public:
  explicit MonitorPage(QWidget* parent = nullptr);
  ~MonitorPage() override;

  void set_output_root(const QString& root);
  void attach_run_directory(const QString& dir);
  // A folder the user opened (Open run…): attached when it is a run, else refused with a
  // notice above the runs list; returns whether it was attached.
  bool open_run_folder(const QString& dir);

  // A past run as history: its checkpoints (checkpoints/checkpoint-N, newest first) and the
  // menu the runs list opens on it (attach, load its configuration, resume from a checkpoint,
  // open its folder). The caller owns the menu.
  static QStringList checkpoints_of(const QString& run_dir);
  QMenu* run_menu(const QString& run_dir, QWidget* parent);
  void compare_runs(const QStringList& dirs);
  // The link's measured bus bandwidth (GB/s) drawn on the bandwidth chart; <= 0 hides it.
  void set_link_bandwidth(double gb_per_s);

  // Read-outs (tests, screenshots and the main window's status bar).
  QString output_root() const { return root_; }
  QString attached_run() const { return attached_; }
  RunsModel* runs_model() const { return runs_model_; }
  ChartPanel* chart(const QString& id) const;  // loss, lr, tokens, grad, vram, busbw
  CompareView* compare_view() const { return compare_; }
  LogView* log_view() const { return log_; }
  const SeriesStore& series() const { return store_; }
  DisplayState state() const;
  QString title_text() const;  // run id, model, mesh and optimizer
  QString state_text() const;
  QString progress_text() const;
  QString banner_text() const;    // the failure banner, "" when hidden
  QString messages_text() const;  // diagnostics and notes, "" when none
  QString root_text() const;      // above the runs list: the folder, "No runs yet", a folder that is not a run
  std::int64_t latest_step() const { return progress_ ? progress_->step : 0; }
  std::int64_t events_read() const { return events_read_; }
  bool caught_up() const { return caught_up_; }
  int batches_received() const { return batches_; }

 signals:
  void run_attached(const QString& dir);
  // "Load this run's configuration" (checkpoint empty) or "Resume from checkpoint".
  void load_run_requested(const QString& run_dir, const QString& checkpoint);

 protected:
  void changeEvent(QEvent* e) override;

 private:
  void apply_palette();  // notices and the state label follow the palette (light, dark)
  void build_ui();
  void on_batch(const odyssey::ui::WatchBatch& batch);
  void on_scanned(quint64 generation, const std::vector<odyssey::ui::RunSummary>& runs, const QString& error);
  void redraw();
  void update_header();
  void add_messages(const QStringList& lines);
  void open_run_dialog();
  void stop_watcher();

  QString root_;
  QString attached_;
  quint64 scan_generation_ = 0;
  std::uint64_t watch_generation_ = 0;
  QThread io_thread_;              // runs the scanner and the watcher
  RunScanner* scanner_ = nullptr;  // lives on io_thread_ (no parent across threads)
  RunWatcher* watcher_ = nullptr;  // lives on io_thread_
  QTimer redraw_timer_;
  SeriesStore store_;

  std::optional<run::RunStatus> status_;
  run::Liveness liveness_ = run::Liveness::Alive;
  std::optional<run::RunStartEvent> run_start_;
  std::optional<run::RunEndEvent> run_end_;
  std::optional<StepProgress> progress_;
  QString stage_;
  QStringList messages_;
  int message_count_ = 0;
  bool dir_missing_ = false;
  bool caught_up_ = true;
  std::int64_t events_read_ = 0, bytes_read_ = 0, bytes_total_ = 0;
  int batches_ = 0;
  int next_chart_ = 0;  // round-robin position of redraw()
  double link_gbps_ = 0;

  RunsModel* runs_model_ = nullptr;
  QTableView* runs_view_ = nullptr;
  QLabel* root_label_ = nullptr;
  QString notice_;  // the last folder refused as not a run (shown above the runs list)
  QLabel* title_ = nullptr;
  QLabel* state_label_ = nullptr;
  QLabel* banner_ = nullptr;
  QLabel* messages_label_ = nullptr;
  QProgressBar* progress_bar_ = nullptr;
  QLabel* progress_label_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  QCheckBox* log_scale_ = nullptr;
  QDoubleSpinBox* link_spin_ = nullptr;
  ChartPanel* loss_ = nullptr;
  ChartPanel* lr_ = nullptr;
  ChartPanel* tokens_ = nullptr;
  ChartPanel* grad_ = nullptr;
  ChartPanel* vram_ = nullptr;
  ChartPanel* busbw_ = nullptr;
  LogView* log_ = nullptr;
  CompareView* compare_ = nullptr;
};

}  // namespace odyssey::ui
