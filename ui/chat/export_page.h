// The Export page (docs/gui.md, "Export"): merge a run's checkpoint (a LoRA adapter) into its base
// model as a Hugging Face directory with `odyssey-train export --merge` in a child process: the
// dtype, optionally bitsandbytes 4-bit, a progress bar from the engine's stages, the result's
// size, and "Open in Chat" for the merged directory. Cancel kills the engine and removes its
// unfinished directory (export writes under a temporary name and renames it when complete).
#pragma once

#include <QProcess>
#include <QWidget>

class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;

namespace odyssey::ui {

class MessageArea;

class ExportPage : public QWidget {
  Q_OBJECT
 public:
  explicit ExportPage(QWidget* parent = nullptr);
  ~ExportPage() override;

  void set_runs_root(const QString& root);
  void refresh();
  void set_checkpoint(const QString& dir);
  void set_output(const QString& dir);
  void set_dtype(const QString& dtype);  // auto, bfloat16, float16, float32
  void start_export();
  void cancel();
  bool running() const { return process_.state() != QProcess::NotRunning; }
  QString result_text() const;
  QString error_text() const;

 Q_SIGNALS:
  void finished(bool ok, const QString& dir);
  void open_in_chat(const QString& dir);

 protected:
  void showEvent(QShowEvent* e) override;

 private:
  void read_output();
  void on_finished(int code, QProcess::ExitStatus status);
  QString runs_root_, output_;
  QComboBox* checkpoint_ = nullptr;
  QLineEdit* base_ = nullptr;
  QLineEdit* out_ = nullptr;
  QComboBox* dtype_ = nullptr;
  QComboBox* quant_ = nullptr;
  QPushButton *export_ = nullptr, *cancel_ = nullptr, *open_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* stage_ = nullptr;
  QLabel* result_ = nullptr;
  MessageArea* error_ = nullptr;
  QProcess process_;
  QByteArray stdout_, stderr_;
  bool cancelled_ = false;
};

}  // namespace odyssey::ui
