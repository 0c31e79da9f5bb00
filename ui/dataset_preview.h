// DatasetPreview: one training file as the model will see it — its first samples rendered
// through the chat template with the trained (label) tokens highlighted, and a histogram of
// the token lengths of its first kMaxPreviewSamples samples with max_length marked and the
// samples over it counted. Tokenization runs on the thread pool with core's code
// (token_preview.h); a newer request drops the result of an older one; the tokenizer is
// loaded once per model directory. Without a model directory holding tokenizer.json it
// says so inline.
#pragma once

#include <QTimer>
#include <QWidget>
#include <atomic>
#include <memory>
#include <string>

#include "token_preview.h"

class QLabel;
class QTextBrowser;
class QCustomPlot;

namespace odyssey::ui {

class ConfigForm;
class DatasetListModel;

class DatasetPreview : public QWidget {
  Q_OBJECT
 public:
  DatasetPreview(ConfigForm* form, DatasetListModel* datasets, QWidget* parent);
  ~DatasetPreview() override;

  // Preview the dataset list's row `row` (the first row when it is out of range).
  void set_row(int row);

  // Tokenizing now (tests wait for false).
  bool busy() const { return busy_; }
  // The state line: what is shown, what is missing, or the error.
  QLabel* status() const { return status_; }
  QTextBrowser* text() const { return text_; }
  QLabel* stats() const { return stats_; }
  // The last preview computed ("error" set when there is none).
  const TokenPreview& result() const { return result_; }
  const LengthHistogram& histogram() const { return histogram_; }
  // The dataset file the preview shows ("" when none).
  const std::string& dataset_path() const { return shown_path_; }
#ifdef ODYSSEY_HAVE_QCUSTOMPLOT
  QCustomPlot* plot() const { return plot_; }
#endif

 signals:
  void updated();  // a preview, or the reason there is none, is shown

 private:
  void schedule();
  void start();
  void show_message(const QString& text, bool error);
  void show_result(TokenPreview p);
  void render_samples();
  void render_histogram();

  ConfigForm* form_;
  DatasetListModel* datasets_;
  QLabel* status_;
  QTextBrowser* text_;
  QLabel* stats_;
  QWidget* panes_;  // the text and the histogram, hidden while there is no preview
#ifdef ODYSSEY_HAVE_QCUSTOMPLOT
  QCustomPlot* plot_ = nullptr;
#endif
  QTimer debounce_;
  int row_ = 0;
  int generation_ = 0;
  bool busy_ = false;
  std::string requested_key_;  // what the running or shown preview was computed for
  std::string shown_path_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  TokenPreview result_;
  LengthHistogram histogram_;
  Tokenizer tokenizer_;  // reused while the model directory stays the same
  std::string tokenizer_dir_;
};

}  // namespace odyssey::ui
