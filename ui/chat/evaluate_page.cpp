#include "evaluate_page.h"

#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>

#include <cmath>

#ifdef ODYSSEY_HAVE_QCUSTOMPLOT
#include <qcustomplot.h>
#endif

#include "chat/checkpoints.h"
#include "monitor/chart_panel.h"
#include "launch.h"
#include "message_area.h"
#include "palette.h"

namespace odyssey::ui {

namespace {

QLineEdit* file_row(QWidget* parent, QFormLayout* form, const QString& label, const QString& placeholder,
                    const QString& object_name) {
  auto* row = new QHBoxLayout;
  auto* edit = new QLineEdit(parent);
  edit->setObjectName(object_name);
  edit->setPlaceholderText(placeholder);
  auto* browse = new QPushButton(QObject::tr("Browse…"), parent);
  row->addWidget(edit, 1);
  row->addWidget(browse);
  form->addRow(label, row);
  QObject::connect(browse, &QPushButton::clicked, parent, [parent, edit] {
    const QString f =
        QFileDialog::getOpenFileName(parent, QString(), edit->text(), QStringLiteral("JSON Lines (*.jsonl *.json)"));
    if (!f.isEmpty()) edit->setText(f);
  });
  return edit;
}

QTableWidgetItem* cell(const QString& text) {
  auto* it = new QTableWidgetItem(text);
  it->setFlags(it->flags() & ~Qt::ItemIsEditable);
  it->setToolTip(text);
  return it;
}

}  // namespace

EvaluatePage::EvaluatePage(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("evaluatePage"));
  auto* v = new QVBoxLayout(this);
  auto* top = new QFormLayout;
  model_ = new QLineEdit(this);
  model_->setObjectName(QStringLiteral("evaluateModel"));
  model_->setPlaceholderText(tr("the base model (the Train page's model by default)"));
  top->addRow(tr("Base model:"), model_);
  run_ = new QComboBox(this);
  run_->setObjectName(QStringLiteral("evaluateRun"));
  run_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  run_->setMinimumContentsLength(20);
  top->addRow(tr("Run:"), run_);
  v->addLayout(top);

  auto* score_box = new QGroupBox(tr("Loss and perplexity"), this);
  auto* sv = new QVBoxLayout(score_box);
  auto* sf = new QFormLayout;
  score_file_ = file_row(this, sf, tr("Data file:"),
                         tr("{\"text\": ...} lines, or a chat dataset (messages, sharegpt, alpaca) scored on the "
                            "answers through the run's template"),
                         QStringLiteral("evaluateScoreFile"));
  sv->addLayout(sf);
  score_ = new QPushButton(tr("Score the base and every checkpoint"), this);
  score_->setObjectName(QStringLiteral("evaluateScore"));
  sv->addWidget(score_, 0, Qt::AlignLeft);
  auto* results = new QHBoxLayout;
  scores_ = new QTableWidget(0, 4, this);
  scores_->setObjectName(QStringLiteral("evaluateScores"));
  scores_->setHorizontalHeaderLabels({tr("Model"), tr("Step"), tr("Loss"), tr("Perplexity")});
  scores_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  scores_->verticalHeader()->hide();
  scores_->setMinimumHeight(fontMetrics().lineSpacing() * 6);
  results->addWidget(scores_, 1);
#ifdef ODYSSEY_HAVE_QCUSTOMPLOT
  chart_ = new QCustomPlot(this);
  chart_->setObjectName(QStringLiteral("evaluateChart"));
  chart_->setMinimumSize(240, 160);
  results->addWidget(chart_, 1);
#endif
  sv->addLayout(results, 1);
  v->addWidget(score_box, 1);

  auto* gen_box = new QGroupBox(tr("Generate"), this);
  auto* gv = new QVBoxLayout(gen_box);
  auto* gf = new QFormLayout;
  prompts_file_ =
      file_row(this, gf, tr("Prompts file:"),
               tr("JSON Lines: {\"prompt\": ...} or {\"messages\": [...]} (a last assistant turn is the reference)"),
               QStringLiteral("evaluatePromptsFile"));
  auto* opts = new QHBoxLayout;
  gen_adapter_ = new QComboBox(this);
  gen_adapter_->setObjectName(QStringLiteral("evaluateGenerateAdapter"));
  gen_adapter_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  gen_adapter_->setMinimumContentsLength(16);
  opts->addWidget(gen_adapter_, 1);
  opts->addWidget(new QLabel(tr("Max new tokens"), this));
  max_new_ = new QSpinBox(this);
  max_new_->setObjectName(QStringLiteral("evaluateMaxNewTokens"));
  max_new_->setRange(1, 32768);
  max_new_->setValue(256);
  opts->addWidget(max_new_);
  generate_ = new QPushButton(tr("Generate"), this);
  generate_->setObjectName(QStringLiteral("evaluateGenerate"));
  opts->addWidget(generate_);
  gf->addRow(tr("With:"), opts);
  gv->addLayout(gf);
  outputs_ = new QTableWidget(0, 3, this);
  outputs_->setObjectName(QStringLiteral("evaluateOutputs"));
  outputs_->setHorizontalHeaderLabels({tr("Prompt"), tr("Reference"), tr("Output")});
  outputs_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  outputs_->setWordWrap(true);
  outputs_->setMinimumHeight(fontMetrics().lineSpacing() * 6);
  gv->addWidget(outputs_, 1);
  v->addWidget(gen_box, 1);

  auto* bottom = new QHBoxLayout;
  status_ = new QLabel(this);
  status_->setObjectName(QStringLiteral("evaluateStatus"));
  status_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  bottom->addWidget(status_, 1);
  cancel_ = new QPushButton(tr("Cancel"), this);
  cancel_->setEnabled(false);
  bottom->addWidget(cancel_);
  v->addLayout(bottom);
  error_ = new MessageArea(this);
  error_->setObjectName(QStringLiteral("evaluateError"));
  error_->hide();
  v->addWidget(error_);

  connect(score_, &QPushButton::clicked, this, &EvaluatePage::score_all);
  connect(generate_, &QPushButton::clicked, this, &EvaluatePage::generate);
  connect(cancel_, &QPushButton::clicked, this, &EvaluatePage::cancel);
  connect(run_, &QComboBox::currentIndexChanged, this, [this] {
    const QString keep = gen_adapter_->currentData().toString();
    gen_adapter_->clear();
    gen_adapter_->addItem(tr("Base model (no adapter)"), QString());
    for (const CheckpointEntry& c : list_checkpoints(runs_root_))
      if (c.run == run_->currentText()) gen_adapter_->addItem(c.label(), c.dir);
    // The run's newest checkpoint by default; a checkpoint chosen before stays chosen.
    const int at = keep.isEmpty() ? -1 : gen_adapter_->findData(keep);
    gen_adapter_->setCurrentIndex(at >= 0 ? at : (gen_adapter_->count() > 1 ? 1 : 0));
  });
  connect(&process_, &QProcess::readyReadStandardOutput, this, [this] { stdout_ += process_.readAllStandardOutput(); });
  connect(&process_, &QProcess::readyReadStandardError, this, [this] { stderr_ += process_.readAllStandardError(); });
  connect(&process_, &QProcess::finished, this, &EvaluatePage::on_finished);
  connect(&process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart)
      fail(tr("odyssey-train could not be started: %1").arg(process_.errorString().toHtmlEscaped()));
  });
  refresh();
  plot();  // the empty chart in the palette's colours
}

EvaluatePage::~EvaluatePage() {
  jobs_.clear();
  if (process_.state() != QProcess::NotRunning) {
    process_.disconnect(this);
    process_.kill();
    process_.waitForFinished(2000);
  }
}

void EvaluatePage::set_model(const QString& model) { model_->setText(model.trimmed()); }
QString EvaluatePage::model() const { return model_->text().trimmed(); }

void EvaluatePage::set_runs_root(const QString& root) {
  runs_root_ = root;
  refresh();
}

void EvaluatePage::refresh() {
  const QString keep = run_->currentText();
  run_->clear();
  run_->addItems(runs_with_checkpoints(runs_root_));
  const int at = run_->findText(keep);
  if (at >= 0) run_->setCurrentIndex(at);
}

void EvaluatePage::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  if (!running()) refresh();
}

void EvaluatePage::changeEvent(QEvent* e) {
  QWidget::changeEvent(e);
  if (e->type() == QEvent::PaletteChange) plot();
}

void EvaluatePage::set_run(const QString& run) { run_->setCurrentIndex(run_->findText(run)); }
void EvaluatePage::set_score_file(const QString& path) { score_file_->setText(path); }
void EvaluatePage::set_prompts_file(const QString& path) { prompts_file_->setText(path); }
void EvaluatePage::set_generate_adapter(const QString& dir) {
  const int at = gen_adapter_->findData(dir);
  if (at >= 0) gen_adapter_->setCurrentIndex(at);
}

void EvaluatePage::fail(const QString& html) {
  jobs_.clear();
  error_->set_message(html, error_color(palette()));
  error_->show();
  status_->clear();
  score_->setEnabled(true);
  generate_->setEnabled(true);
  cancel_->setEnabled(false);
  Q_EMIT finished();
}

void EvaluatePage::score_all() {
  if (running()) return;
  error_->hide();
  if (model().isEmpty() || score_file_->text().trimmed().isEmpty())
    return fail(tr("Choose the base model and a data file first."));
  scores_->setRowCount(0);
  QStringList common{QStringLiteral("--model"), model(), QStringLiteral("--data"), score_file_->text().trimmed()};
  // A chat dataset goes through the run's template, system prompt and max_length (its
  // config.yaml), so a run's validation file scores as the run's eval did; raw text ignores it.
  const QString config = QDir(runs_root_).filePath(run_->currentText() + QStringLiteral("/config.yaml"));
  if (!run_->currentText().isEmpty() && QFileInfo::exists(config)) common << QStringLiteral("--config") << config;
  jobs_.push_back({Job::Score, tr("Base model"), -1, QStringList{QStringLiteral("score")} + common});
  QList<CheckpointEntry> mine;
  for (const CheckpointEntry& c : list_checkpoints(runs_root_))
    if (c.run == run_->currentText()) mine.prepend(c);  // ascending steps
  for (const CheckpointEntry& c : mine)
    jobs_.push_back({Job::Score, c.label(), c.step,
                     QStringList{QStringLiteral("score")} + common + QStringList{QStringLiteral("--adapter"), c.dir}});
  plot();
  next_job();
}

void EvaluatePage::generate() {
  if (running()) return;
  error_->hide();
  const QString file = prompts_file_->text().trimmed();
  if (model().isEmpty() || file.isEmpty()) return fail(tr("Choose the base model and a prompts file first."));
  // The prompts as shown in the table: the raw text, or the conversation's last user turn.
  prompt_texts_.clear();
  QFile f(file);
  if (f.open(QIODevice::ReadOnly)) {
    for (const QByteArray& line : f.readAll().split('\n')) {
      if (line.trimmed().isEmpty()) continue;
      const QJsonObject o = QJsonDocument::fromJson(line).object();
      QString shown = o.value(QStringLiteral("prompt")).toString();
      for (const auto& m : o.value(QStringLiteral("messages")).toArray())
        if (m.toObject().value(QStringLiteral("role")) == QLatin1String("user"))
          shown = m.toObject().value(QStringLiteral("content")).toString();
      prompt_texts_ << shown;
    }
  }
  outputs_->setRowCount(0);
  QStringList args{
      QStringLiteral("generate"),         QStringLiteral("--model"),         model(), QStringLiteral("--prompts"), file,
      QStringLiteral("--max-new-tokens"), QString::number(max_new_->value())};
  const QString adapter = gen_adapter_->currentData().toString();
  if (!adapter.isEmpty()) args << QStringLiteral("--adapter") << adapter;
  jobs_.push_back({Job::Generate, gen_adapter_->currentText(), -1, args});
  next_job();
}

void EvaluatePage::cancel() {
  jobs_.clear();
  if (process_.state() != QProcess::NotRunning) process_.kill();
}

void EvaluatePage::next_job() {
  if (jobs_.empty()) {
    status_->setText(tr("Done."));
    score_->setEnabled(true);
    generate_->setEnabled(true);
    cancel_->setEnabled(false);
    Q_EMIT finished();
    return;
  }
  const QString bin = find_train_binary();
  if (bin.isEmpty())
    return fail(tr("odyssey-train was not found (beside this program, in $ODYSSEY_TRAIN_BIN or on PATH)."));
  current_ = jobs_.front();
  jobs_.pop_front();
  stdout_.clear();
  stderr_.clear();
  status_->setText(current_.kind == Job::Score ? tr("Scoring with %1…").arg(current_.label)
                                               : tr("Generating with %1…").arg(current_.label));
  score_->setEnabled(false);
  generate_->setEnabled(false);
  cancel_->setEnabled(true);
  process_.start(bin, current_.args);
}

void EvaluatePage::on_finished(int code, QProcess::ExitStatus status) {
  stdout_ += process_.readAllStandardOutput();
  stderr_ += process_.readAllStandardError();
  if (status != QProcess::NormalExit || code != 0) {
    if (jobs_.empty() && status != QProcess::NormalExit && stderr_.isEmpty()) return fail(tr("Cancelled."));
    // Which step failed (the file or the model may be at fault: the engine's message says which).
    const int exit = status == QProcess::NormalExit ? code : -1;
    return fail((current_.kind == Job::Score ? tr("Scoring with %1 failed (exit code %2):")
                                             : tr("Generating with %1 failed (exit code %2):"))
                    .arg(current_.label)
                    .arg(exit) +
                QStringLiteral("<pre>") + QString::fromUtf8(stderr_).toHtmlEscaped() + QStringLiteral("</pre>"));
  }
  const QList<QByteArray> lines = stdout_.split('\n');
  if (current_.kind == Job::Score) {
    for (const QByteArray& l : lines) {
      const QJsonObject o = QJsonDocument::fromJson(l).object();
      if (!o.contains(QStringLiteral("total"))) continue;
      const double loss = o.value(QStringLiteral("total")).toObject().value(QStringLiteral("loss")).toDouble(NAN);
      const int row = scores_->rowCount();
      scores_->insertRow(row);
      scores_->setItem(row, 0, cell(current_.label));
      scores_->setItem(row, 1, cell(current_.step < 0 ? QStringLiteral("–") : QString::number(current_.step)));
      scores_->setItem(row, 2, cell(QString::number(loss, 'f', 4)));
      scores_->setItem(row, 3, cell(QString::number(std::exp(loss), 'f', 3)));
    }
    plot();
  } else {
    for (const QByteArray& l : lines) {
      const QJsonObject o = QJsonDocument::fromJson(l).object();
      if (!o.contains(QStringLiteral("index"))) continue;
      const int i = o.value(QStringLiteral("index")).toInt();
      const int row = outputs_->rowCount();
      outputs_->insertRow(row);
      outputs_->setItem(row, 0, cell(i < prompt_texts_.size() ? prompt_texts_.at(i) : QString::number(i)));
      outputs_->setItem(row, 1, cell(o.value(QStringLiteral("reference")).toString()));
      outputs_->setItem(row, 2, cell(o.value(QStringLiteral("text")).toString()));
    }
    outputs_->resizeRowsToContents();
  }
  next_job();
}

void EvaluatePage::plot() {
#ifdef ODYSSEY_HAVE_QCUSTOMPLOT
  chart_->clearGraphs();
  chart_->clearItems();
  QVector<double> steps, losses;
  double base = NAN;
  for (int r = 0; r < scores_->rowCount(); ++r) {
    const double loss = scores_->item(r, 2)->text().toDouble();
    bool ok = false;
    const double step = scores_->item(r, 1)->text().toDouble(&ok);
    if (ok) {
      steps << step;
      losses << loss;
    } else {
      base = loss;
    }
  }
  style_plot(chart_, palette());  // the Monitor page's charts' colours, light or dark
  chart_->xAxis->setLabel(tr("step"));
  chart_->yAxis->setLabel(tr("loss"));
  QCPGraph* g = chart_->addGraph();
  g->setData(steps, losses);
  g->setPen(QPen(palette().color(QPalette::Highlight), 2));
  g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 6));
  g->setName(tr("checkpoints"));
  double lo = std::isnan(base) ? INFINITY : base, hi = std::isnan(base) ? -INFINITY : base;
  for (double l : losses) {
    lo = std::min(lo, l);
    hi = std::max(hi, l);
  }
  const double x0 = steps.isEmpty() ? 0 : steps.front(), x1 = steps.isEmpty() ? 1 : steps.back();
  if (!std::isnan(base)) {
    QCPGraph* b = chart_->addGraph();
    b->setData(QVector<double>{std::min(0.0, x0), std::max(x1, 1.0)}, QVector<double>{base, base});
    b->setPen(QPen(warning_color(palette()), 1.5, Qt::DashLine));
    b->setName(tr("base model"));
  }
  chart_->xAxis->setRange(std::min(0.0, x0), std::max(x1, 1.0) * 1.05);
  if (std::isfinite(lo))
    chart_->yAxis->setRange(lo - 0.05 * std::max(hi - lo, 0.1), hi + 0.05 * std::max(hi - lo, 0.1));
  else chart_->yAxis->setRange(0, 1);  // nothing scored (e.g. after an error): no stale range
  chart_->legend->setVisible(!steps.isEmpty() || !std::isnan(base));  // no legend on an empty chart
  chart_->replot();
#endif
}

QString EvaluatePage::error_text() const { return error_->isHidden() ? QString() : error_->text(); }

}  // namespace odyssey::ui
