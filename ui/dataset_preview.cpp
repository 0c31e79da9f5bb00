#include "dataset_preview.h"

#include <QFileInfo>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QSplitter>
#include <QTextBrowser>
#include <QTextCursor>
#include <QVBoxLayout>

#ifdef ODYSSEY_HAVE_QCUSTOMPLOT
#include <qcustomplot.h>
#endif

#include "async.h"
#include "config/validate.h"
#include "config_form.h"
#include "dataset_model.h"
#include "palette.h"

namespace odyssey::ui {
namespace {

QString file_name(const std::string& path) { return QFileInfo(QString::fromStdString(path)).fileName(); }

QString number(std::int64_t v) { return QLocale().toString(static_cast<qlonglong>(v)); }

#ifdef ODYSSEY_HAVE_QCUSTOMPLOT
void style_axis(QCPAxis* a, const QPalette& p) {
  const QColor fg = p.color(QPalette::WindowText);
  a->setBasePen(QPen(fg));
  a->setTickPen(QPen(fg));
  a->setSubTickPen(QPen(fg));
  a->setTickLabelColor(fg);
  a->setLabelColor(fg);
  a->grid()->setPen(QPen(p.color(QPalette::Mid), 0, Qt::DotLine));
}
#endif

}  // namespace

DatasetPreview::DatasetPreview(ConfigForm* form, DatasetListModel* datasets, QWidget* parent)
    : QWidget(parent), form_(form), datasets_(datasets) {
  setObjectName(QStringLiteral("datasetPreview"));
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(0, 0, 0, 0);
  status_ = new QLabel(this);
  status_->setObjectName(QStringLiteral("previewStatus"));
  status_->setWordWrap(true);
  status_->setAlignment(Qt::AlignLeft | Qt::AlignTop);  // alone (no preview) it stays at the top
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  v->addWidget(status_);
  auto* split = new QSplitter(Qt::Horizontal, this);
  text_ = new QTextBrowser(split);
  text_->setObjectName(QStringLiteral("previewText"));
  text_->setToolTip(
      tr("The first samples of the file as the chat template renders them. Highlighted: the tokens the "
         "loss trains on (the assistant's answers and their end-of-turn tokens); the rest is context "
         "(label -100)."));
  text_->setMinimumHeight(220);
  split->addWidget(text_);
  auto* right = new QWidget(split);
  auto* rv = new QVBoxLayout(right);
  rv->setContentsMargins(0, 0, 0, 0);
#ifdef ODYSSEY_HAVE_QCUSTOMPLOT
  plot_ = new QCustomPlot(right);
  plot_->setObjectName(QStringLiteral("lengthHistogram"));
  plot_->setMinimumSize(260, 200);
  plot_->xAxis->setLabel(tr("tokens per sample"));
  plot_->yAxis->setLabel(tr("samples"));
  plot_->setToolTip(tr("Token length of each sample, untruncated; the red line is max_length."));
  rv->addWidget(plot_, 1);
#endif
  stats_ = new QLabel(right);
  stats_->setObjectName(QStringLiteral("previewStats"));
  stats_->setWordWrap(true);
  stats_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  rv->addWidget(stats_);
  split->addWidget(right);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  v->addWidget(split, 1);
  panes_ = split;

  debounce_.setSingleShot(true);
  debounce_.setInterval(150);
  connect(&debounce_, &QTimer::timeout, this, &DatasetPreview::start);
  connect(form_, &ConfigForm::changed, this, &DatasetPreview::schedule);
  connect(form_, &ConfigForm::model_changed, this, &DatasetPreview::schedule);
  connect(datasets_, &QAbstractItemModel::modelReset, this, &DatasetPreview::schedule);
  schedule();
}

DatasetPreview::~DatasetPreview() {
  if (cancel_) cancel_->store(true);
}

void DatasetPreview::set_row(int row) {
  row_ = row;
  schedule();
}

void DatasetPreview::schedule() { debounce_.start(); }

void DatasetPreview::show_message(const QString& text, bool error) {
  ++generation_;  // a result still on its way is stale now
  if (cancel_) cancel_->store(true);
  busy_ = false;
  requested_key_.clear();
  shown_path_.clear();
  result_ = TokenPreview{};
  result_.error = text.toStdString();
  const QColor c = error ? error_color(palette()) : palette().color(QPalette::WindowText);
  status_->setStyleSheet(QStringLiteral("QLabel#previewStatus{color:%1;}").arg(c.name()));
  status_->setText(text);
  text_->clear();
  stats_->clear();
  panes_->hide();  // no empty text pane and stale axes under the message
  histogram_ = LengthHistogram{};
#ifdef ODYSSEY_HAVE_QCUSTOMPLOT
  plot_->clearPlottables();
  plot_->clearItems();
  plot_->replot();
#endif
  emit updated();
}

void DatasetPreview::start() {
  const int rows = datasets_->rowCount();
  if (rows == 0) {
    show_message(tr("Add a training file to preview its samples and token lengths."), false);
    return;
  }
  const int row = row_ >= 0 && row_ < rows ? row_ : 0;
  const std::string path = datasets_->resolved_path(row);
  if (path.empty()) {
    show_message(tr("Row %1 is not a valid dataset entry (path or path#N).").arg(row + 1), true);
    return;
  }
  if (form_->model_pending()) {
    status_->setText(tr("Looking for the model…"));
    return;  // model_changed schedules again
  }
  const ModelLocation& loc = form_->location();
  const bool has_dir = loc.source == ModelLocation::Directory || loc.source == ModelLocation::HuggingFaceCache ||
                       loc.source == ModelLocation::ModelScopeCache;
  if (!has_dir) {
    show_message(loc.source == ModelLocation::BundledShape
                     ? tr("No preview: only the bundled shape of %1 is known on this machine, without its tokenizer. "
                          "Choose the model's directory (with tokenizer.json) to see %2 through the chat template and "
                          "its token lengths.")
                           .arg(QString::fromStdString(form_->config().model).toHtmlEscaped(), file_name(path))
                     : tr("No preview: choose a model directory with tokenizer.json (Model, above) to see %1 through "
                          "its chat template and its token lengths.")
                           .arg(file_name(path)),
                 false);
    return;
  }
  const TrainConfig& c = form_->config();
  const std::string family = form_->model() ? form_->model()->family : std::string();
  const std::string template_file = resolve_paths(form_->loaded(), loc).template_file;
  const std::string key =
      path + '\n' + loc.path + '\n' + family + '\n' + c.template_name + '\n' + template_file + '\n' + c.system;
  if (key == requested_key_) {
    if (!busy_ && result_.error.empty()) render_histogram();  // max_length or truncation changed
    return;
  }
  if (cancel_) cancel_->store(true);
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  requested_key_ = key;
  busy_ = true;
  const int generation = ++generation_;
  status_->setStyleSheet(QString());
  status_->setText(tr("Tokenizing the first %1 samples of %2 with the tokenizer of %3…")
                       .arg(number(static_cast<std::int64_t>(kMaxPreviewSamples)), file_name(path),
                            QString::fromStdString(loc.path).toHtmlEscaped()));
  TokenPreviewRequest r;
  r.dataset_path = path;
  r.model_dir = loc.path;
  r.model_family = family;
  r.template_name = c.template_name;
  r.template_file = template_file;
  r.system = c.system;
  r.max_length = c.max_length;
  r.truncation = c.truncation_strategy;
  r.tokenizer = tokenizer_;
  r.tokenizer_dir = tokenizer_dir_;
  auto cancel = cancel_;
  run_off_gui_thread(
      this, [r, cancel]() { return build_token_preview(r, cancel.get()); },
      [this, generation, path](TokenPreview p) {
        if (generation != generation_) return;
        busy_ = false;
        shown_path_ = path;
        show_result(std::move(p));
      });
}

void DatasetPreview::show_result(TokenPreview p) {
  result_ = std::move(p);
  if (result_.tokenizer.valid()) {
    tokenizer_ = result_.tokenizer;
    tokenizer_dir_ = result_.tokenizer_dir;
  }
  if (!result_.error.empty()) {
    const std::string error = result_.error;
    const std::string key = requested_key_;
    show_message(tr("No preview of %1: %2").arg(file_name(shown_path_), QString::fromStdString(error)), true);
    requested_key_ = key;  // the same inputs give the same error: not retried until one changes
    return;
  }
  QString head = tr("%1 through the <b>%2</b> template; highlighted: the tokens the loss trains on.")
                     .arg(file_name(shown_path_).toHtmlEscaped(), QString::fromStdString(result_.template_name));
  for (const auto& n : result_.notes) head += QStringLiteral("<br>") + QString::fromStdString(n).toHtmlEscaped();
  status_->setStyleSheet(QString());
  status_->setText(head);
  panes_->show();
  render_samples();
  render_histogram();
  emit updated();
}

void DatasetPreview::render_samples() {
  text_->clear();
  QTextCursor cur(text_->document());
  QTextCharFormat header;
  header.setFontWeight(QFont::Bold);
  QTextCharFormat plain;
  plain.setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  QTextCharFormat trained = plain;
  trained.setBackground(trained_color(palette()));
  bool first = true;
  for (const auto& s : result_.samples) {
    if (!first) cur.insertBlock();
    first = false;
    // "train.jsonl:17": the folder is the dataset list's.
    cur.insertText(
        tr("%1 · %2 tokens, %3 trained")
            .arg(QFileInfo(QString::fromStdString(s.origin)).fileName(), number(s.tokens), number(s.trained_tokens)),
        header);
    cur.insertBlock();
    for (const auto& seg : s.segments) cur.insertText(QString::fromStdString(seg.text), seg.trained ? trained : plain);
    cur.insertBlock();
  }
  if (result_.samples.empty()) cur.insertText(tr("No sample of this file has tokens to train on."));
  text_->moveCursor(QTextCursor::Start);
}

void DatasetPreview::render_histogram() {
  const TrainConfig& c = form_->config();
  histogram_ = length_histogram(result_.lengths, c.max_length);
  const LengthHistogram& h = histogram_;
  const auto n = static_cast<std::int64_t>(result_.lengths.size());
  QString which =
      result_.file_has_more
          ? tr("the first %1 samples of the file").arg(number(static_cast<std::int64_t>(kMaxPreviewSamples)))
          : tr("every sample of the file");
  QString text = tr("<b>%1</b> samples (%2): median %3, 95th percentile %4, longest %5 tokens.")
                     .arg(number(n), which, number(h.median), number(h.p95), number(h.longest));
  QString over = tr("%1 longer than max_length %2").arg(number(h.over_max), number(c.max_length));
  if (h.over_max > 0) {
    QString what;
    if (c.truncation_strategy == "delete") what = tr("dropped from training (truncation_strategy delete)");
    else if (c.truncation_strategy == "raise") what = tr("the run fails (truncation_strategy raise)");
    else what = tr("cut to max_length (truncation_strategy %1)").arg(QString::fromStdString(c.truncation_strategy));
    over = QStringLiteral("<span style='color:%1'><b>%2</b>: %3</span>").arg(error_color(palette()).name(), over, what);
  }
  text += QStringLiteral(" ") + over + QLatin1Char('.');
  if (result_.malformed > 0) text += tr(" %1 malformed records skipped.").arg(number(result_.malformed));
  if (result_.without_labels > 0)
    text += tr(" %1 samples have nothing to train on.").arg(number(result_.without_labels));
  stats_->setText(text);
#ifdef ODYSSEY_HAVE_QCUSTOMPLOT
  const QPalette& p = palette();
  plot_->setBackground(p.color(QPalette::Base));
  style_axis(plot_->xAxis, p);
  style_axis(plot_->yAxis, p);
  plot_->clearPlottables();
  plot_->clearItems();
  auto* bars = new QCPBars(plot_->xAxis, plot_->yAxis);
  bars->setName(tr("samples"));
  bars->setWidthType(QCPBars::wtPlotCoords);
  bars->setWidth(h.bin_width);
  const QColor accent = p.color(QPalette::Highlight);
  bars->setPen(QPen(accent.darker(120)));
  bars->setBrush(accent);
  QVector<double> keys, values;
  double top = 1;
  for (std::size_t i = 0; i < h.counts.size(); ++i) {
    keys << (static_cast<double>(i) + 0.5) * h.bin_width;
    values << static_cast<double>(h.counts[i]);
    top = std::max(top, static_cast<double>(h.counts[i]));
  }
  bars->setData(keys, values, true);
  const double right = static_cast<double>(h.counts.size()) * h.bin_width;
  plot_->xAxis->setRange(0, std::max(right, static_cast<double>(c.max_length)) * 1.04);
  plot_->yAxis->setRange(0, top * 1.15);
  const QColor red = error_color(p);
  auto* line = new QCPItemStraightLine(plot_);
  line->setPen(QPen(red, 2, Qt::DashLine));
  line->point1->setCoords(static_cast<double>(c.max_length), 0);
  line->point2->setCoords(static_cast<double>(c.max_length), 1);
  auto* label = new QCPItemText(plot_);
  label->setColor(red);
  label->setText(tr("max_length %1").arg(number(c.max_length)));
  label->position->setTypeX(QCPItemPosition::ptPlotCoords);
  label->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
  label->position->setCoords(static_cast<double>(c.max_length), 0.02);
  const bool near_right = static_cast<double>(c.max_length) > plot_->xAxis->range().center();
  label->setPositionAlignment((near_right ? Qt::AlignRight : Qt::AlignLeft) | Qt::AlignTop);
  label->setPadding(QMargins(4, 0, 4, 0));
  plot_->replot();
#endif
}

}  // namespace odyssey::ui
