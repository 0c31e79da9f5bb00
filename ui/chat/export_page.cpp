#include "export_page.h"

#include <QComboBox>
#include <QDir>
#include <QDirIterator>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QVBoxLayout>

#include "chat/checkpoints.h"
#include "launch.h"
#include "message_area.h"
#include "palette.h"

namespace odyssey::ui {

namespace {

const QString kOther = QStringLiteral("\x01other");

qint64 tree_size(const QString& dir, int* files) {
  qint64 total = 0;
  *files = 0;
  QDirIterator it(dir, QDir::Files, QDirIterator::Subdirectories);
  while (it.hasNext()) {
    it.next();
    total += it.fileInfo().size();
    ++*files;
  }
  return total;
}

}  // namespace

ExportPage::ExportPage(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("exportPage"));
  auto* v = new QVBoxLayout(this);
  auto* form = new QFormLayout;
  checkpoint_ = new QComboBox(this);
  checkpoint_->setObjectName(QStringLiteral("exportCheckpoint"));
  checkpoint_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  checkpoint_->setMinimumContentsLength(20);
  form->addRow(tr("Checkpoint (LoRA adapter):"), checkpoint_);
  base_ = new QLineEdit(this);
  base_->setObjectName(QStringLiteral("exportBase"));
  base_->setPlaceholderText(tr("the adapter's base_model_name_or_path"));
  form->addRow(tr("Base model:"), base_);
  auto* out_row = new QHBoxLayout;
  out_ = new QLineEdit(this);
  out_->setObjectName(QStringLiteral("exportOutput"));
  out_->setPlaceholderText(tr("a new directory (default: the checkpoint's path + -merged)"));
  auto* browse = new QPushButton(tr("Browse…"), this);
  out_row->addWidget(out_, 1);
  out_row->addWidget(browse);
  form->addRow(tr("Output directory:"), out_row);
  dtype_ = new QComboBox(this);
  dtype_->setObjectName(QStringLiteral("exportDtype"));
  dtype_->addItem(tr("As the base model (auto)"), QStringLiteral("auto"));
  dtype_->addItem(QStringLiteral("bfloat16"), QStringLiteral("bfloat16"));
  dtype_->addItem(QStringLiteral("float16"), QStringLiteral("float16"));
  dtype_->addItem(QStringLiteral("float32"), QStringLiteral("float32"));
  form->addRow(tr("Weights:"), dtype_);
  quant_ = new QComboBox(this);
  quant_->addItem(tr("16-bit (or as chosen above)"), QString());
  quant_->addItem(tr("4-bit NF4 (bitsandbytes)"), QStringLiteral("nf4"));
  quant_->addItem(tr("4-bit FP4 (bitsandbytes)"), QStringLiteral("fp4"));
  form->addRow(tr("Quantization:"), quant_);
  v->addLayout(form);
  auto* buttons = new QHBoxLayout;
  export_ = new QPushButton(tr("Export merged model"), this);
  export_->setObjectName(QStringLiteral("exportStart"));
  cancel_ = new QPushButton(tr("Cancel"), this);
  open_ = new QPushButton(tr("Open in Chat"), this);
  open_->setObjectName(QStringLiteral("exportOpenInChat"));
  buttons->addWidget(export_);
  buttons->addWidget(cancel_);
  buttons->addStretch(1);
  buttons->addWidget(open_);
  v->addLayout(buttons);
  progress_ = new QProgressBar(this);
  progress_->setObjectName(QStringLiteral("exportProgress"));
  progress_->setRange(0, 4);
  progress_->setValue(0);
  v->addWidget(progress_);
  stage_ = new QLabel(this);
  stage_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  v->addWidget(stage_);
  result_ = new QLabel(this);
  result_->setObjectName(QStringLiteral("exportResult"));
  result_->setWordWrap(true);
  result_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  result_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  v->addWidget(result_);
  error_ = new MessageArea(this);
  error_->setObjectName(QStringLiteral("exportError"));
  error_->hide();
  v->addWidget(error_);
  v->addStretch(1);

  cancel_->setEnabled(false);
  open_->setEnabled(false);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString d =
        QFileDialog::getSaveFileName(this, tr("The merged model's directory (must not exist)"), runs_root_);
    if (!d.isEmpty()) out_->setText(d);
  });
  connect(checkpoint_, &QComboBox::activated, this, [this](int i) {
    if (checkpoint_->itemData(i).toString() != kOther) return;
    const QString d = QFileDialog::getExistingDirectory(
        this, tr("A LoRA adapter (a directory with adapter_config.json)"), runs_root_);
    if (d.isEmpty()) checkpoint_->setCurrentIndex(0);
    else set_checkpoint(d);
  });
  connect(export_, &QPushButton::clicked, this, &ExportPage::start_export);
  connect(cancel_, &QPushButton::clicked, this, &ExportPage::cancel);
  connect(open_, &QPushButton::clicked, this, [this] { Q_EMIT open_in_chat(output_); });
  connect(&process_, &QProcess::readyReadStandardOutput, this, &ExportPage::read_output);
  connect(&process_, &QProcess::readyReadStandardError, this, [this] { stderr_ += process_.readAllStandardError(); });
  connect(&process_, &QProcess::finished, this, &ExportPage::on_finished);
  connect(&process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;
    error_->set_message(tr("odyssey-train could not be started: %1").arg(process_.errorString().toHtmlEscaped()),
                        error_color(palette()));
    error_->show();
    export_->setEnabled(true);
    cancel_->setEnabled(false);
  });
  refresh();
}

ExportPage::~ExportPage() {
  if (running()) {
    process_.disconnect(this);
    process_.kill();
    process_.waitForFinished(2000);
  }
}

void ExportPage::set_runs_root(const QString& root) {
  runs_root_ = root;
  refresh();
}

void ExportPage::refresh() {
  const QString keep = checkpoint_->currentData().toString();
  checkpoint_->clear();
  for (const CheckpointEntry& c : list_checkpoints(runs_root_)) checkpoint_->addItem(c.label(), c.dir);
  if (!keep.isEmpty() && keep != kOther && checkpoint_->findData(keep) < 0) checkpoint_->addItem(keep, keep);
  checkpoint_->addItem(tr("Other adapter…"), kOther);
  const int at = checkpoint_->findData(keep);
  checkpoint_->setCurrentIndex(at >= 0 ? at : 0);
}

void ExportPage::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  if (!running()) refresh();
}

void ExportPage::set_checkpoint(const QString& dir) {
  int at = checkpoint_->findData(dir);
  if (at < 0) {
    checkpoint_->insertItem(checkpoint_->count() - 1, dir, dir);
    at = checkpoint_->findData(dir);
  }
  checkpoint_->setCurrentIndex(at);
}

void ExportPage::set_output(const QString& dir) { out_->setText(dir); }

void ExportPage::set_dtype(const QString& dtype) {
  const int at = dtype_->findData(dtype);
  if (at >= 0) dtype_->setCurrentIndex(at);
}

void ExportPage::start_export() {
  if (running()) return;
  error_->hide();
  result_->clear();
  const QString ckpt = checkpoint_->currentData().toString();
  if (ckpt.isEmpty() || ckpt == kOther) {
    error_->set_message(tr("Choose a checkpoint (a directory with adapter_config.json)."), error_color(palette()));
    error_->show();
    return;
  }
  const QString bin = find_train_binary();
  if (bin.isEmpty()) {
    error_->set_message(tr("odyssey-train was not found (beside this program, in $ODYSSEY_TRAIN_BIN or on PATH)."),
                        error_color(palette()));
    error_->show();
    return;
  }
  output_ = out_->text().trimmed().isEmpty()
                ? QDir::cleanPath(ckpt) + QStringLiteral("-merged")
                : QDir::cleanPath(QDir::current().absoluteFilePath(out_->text().trimmed()));
  QStringList args{QStringLiteral("export"),        ckpt,    QStringLiteral("--merge"),
                   QStringLiteral("--output"),      output_, QStringLiteral("--dtype"),
                   dtype_->currentData().toString()};
  if (!base_->text().trimmed().isEmpty()) args << QStringLiteral("--base") << base_->text().trimmed();
  if (!quant_->currentData().toString().isEmpty())
    args << QStringLiteral("--quantize") << quant_->currentData().toString();
  stdout_.clear();
  stderr_.clear();
  cancelled_ = false;
  progress_->setValue(0);
  stage_->setText(tr("Starting…"));
  export_->setEnabled(false);
  cancel_->setEnabled(true);
  open_->setEnabled(false);
  process_.start(bin, args);
}

void ExportPage::cancel() {
  if (!running()) return;
  cancelled_ = true;
  const qint64 pid = process_.processId();
  process_.kill();
  process_.waitForFinished(5000);
  // export writes <output>.tmp-<pid> and renames it when complete: an interrupted one is removed.
  QDir(output_ + QStringLiteral(".tmp-") + QString::number(pid)).removeRecursively();
}

void ExportPage::read_output() {
  stdout_ += process_.readAllStandardOutput();
  static const QRegularExpression re(QStringLiteral("^progress (\\d+)/(\\d+): (.*)$"),
                                     QRegularExpression::MultilineOption);
  auto it = re.globalMatch(QString::fromUtf8(stdout_));
  while (it.hasNext()) {
    const auto m = it.next();
    progress_->setRange(0, m.captured(2).toInt());
    progress_->setValue(m.captured(1).toInt());
    stage_->setText(m.captured(3));
  }
}

void ExportPage::on_finished(int code, QProcess::ExitStatus status) {
  read_output();
  stderr_ += process_.readAllStandardError();
  export_->setEnabled(true);
  cancel_->setEnabled(false);
  const bool ok = !cancelled_ && status == QProcess::NormalExit && code == 0 && QFileInfo(output_).isDir();
  if (ok) {
    int files = 0;
    const qint64 bytes = tree_size(output_, &files);
    result_->setText(tr("Written %1: %2 in %3 files.").arg(output_, QLocale().formattedDataSize(bytes)).arg(files));
    stage_->setText(tr("Done."));
    open_->setEnabled(true);
  } else {
    progress_->setValue(0);
    stage_->clear();
    const QString why = cancelled_
                            ? tr("Cancelled; nothing was written.")
                            : tr("The export failed (exit code %1):").arg(status == QProcess::NormalExit ? code : -1) +
                                  QStringLiteral("<pre>") + QString::fromUtf8(stderr_).toHtmlEscaped() +
                                  QStringLiteral("</pre>");
    error_->set_message(why, error_color(palette()));
    error_->show();
  }
  Q_EMIT finished(ok, output_);
}

QString ExportPage::result_text() const { return result_->text(); }
QString ExportPage::error_text() const { return error_->isHidden() ? QString() : error_->text(); }

}  // namespace odyssey::ui
