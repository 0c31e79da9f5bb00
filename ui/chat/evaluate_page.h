// The Evaluate page (docs/gui.md, "Evaluate"): how a run's checkpoints compare with the base
// model. Loss and perplexity of a file ({"text": ...} lines) for the base and for every
// checkpoint of the chosen run (`odyssey-train score [--adapter]`, one child process after the
// other), as a table and a chart against the step; and a prompts file continued by the base or a
// checkpoint (`odyssey-train generate`), the outputs beside the references.
#pragma once

#include <QJsonObject>
#include <QProcess>
#include <QStringList>
#include <QWidget>

#include <deque>

class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QCustomPlot;

namespace odyssey::ui {

class MessageArea;

class EvaluatePage : public QWidget {
  Q_OBJECT
 public:
  explicit EvaluatePage(QWidget* parent = nullptr);
  ~EvaluatePage() override;

  void set_model(const QString& model);
  QString model() const;
  void set_runs_root(const QString& root);
  void refresh();
  void set_run(const QString& run);
  void set_score_file(const QString& path);
  void set_prompts_file(const QString& path);
  void set_generate_adapter(const QString& dir);  // "" = the base
  void score_all();
  void generate();
  void cancel();
  bool running() const { return process_.state() != QProcess::NotRunning || !jobs_.empty(); }

  QTableWidget* score_table() const { return scores_; }
  QTableWidget* generate_table() const { return outputs_; }
  QString error_text() const;

 Q_SIGNALS:
  void finished();  // the queued jobs are done (or one failed, or cancelled)

 protected:
  void showEvent(QShowEvent* e) override;
  void changeEvent(QEvent* e) override;  // a palette change (light/dark) restyles the chart

 private:
  struct Job {
    enum Kind { Score, Generate } kind = Score;
    QString label;
    qint64 step = -1;  // -1: the base model
    QStringList args;
  };
  void next_job();
  void on_finished(int code, QProcess::ExitStatus status);
  void fail(const QString& html);
  void plot();
  QString runs_root_;
  QLineEdit* model_ = nullptr;
  QComboBox* run_ = nullptr;
  QLineEdit* score_file_ = nullptr;
  QLineEdit* prompts_file_ = nullptr;
  QComboBox* gen_adapter_ = nullptr;
  QSpinBox* max_new_ = nullptr;
  QPushButton *score_ = nullptr, *generate_ = nullptr, *cancel_ = nullptr;
  QTableWidget* scores_ = nullptr;
  QTableWidget* outputs_ = nullptr;
  QCustomPlot* chart_ = nullptr;
  QLabel* status_ = nullptr;
  MessageArea* error_ = nullptr;
  QProcess process_;
  std::deque<Job> jobs_;
  Job current_;
  QByteArray stdout_, stderr_;
  QStringList prompt_texts_;
};

}  // namespace odyssey::ui
