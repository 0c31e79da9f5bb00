#include "monitor_page.h"

#include <QCheckBox>
#include <QDesktopServices>
#include <QDir>
#include <QFileInfo>
#include <QMenu>
#include <QUrl>
#include <QDoubleSpinBox>
#include <QEvent>
#include <QFileDialog>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollBar>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>

#include "../palette.h"
#include "chart_panel.h"
#include "run/run_dir.h"
#include "compare_view.h"
#include "log_view.h"
#include "run_scanner.h"
#include "run_watcher.h"
#include "runs_model.h"

namespace odyssey::ui {

namespace {
void registerTypes() {
  static const bool once = [] {
    qRegisterMetaType<WatchBatch>();
    qRegisterMetaType<RunSummary>();
    qRegisterMetaType<std::vector<RunSummary>>();
    return true;
  }();
  (void)once;
}
// Calls `f` after each resize of the object it filters.
class ResizeHook : public QObject {
 public:
  ResizeHook(QObject* parent, std::function<void()> f) : QObject(parent), f_(std::move(f)) {}
  bool eventFilter(QObject*, QEvent* e) override {
    if (e->type() == QEvent::Resize) f_();
    return false;
  }

 private:
  std::function<void()> f_;
};

const QColor kBlue(0x1f, 0x77, 0xb4), kOrange(0xff, 0x7f, 0x0e), kGreen(0x2c, 0xa0, 0x2c), kPurple(0x94, 0x67, 0xbd);
}  // namespace

MonitorPage::MonitorPage(QWidget* parent) : QWidget(parent) {
  registerTypes();
  build_ui();
  redraw_timer_.setSingleShot(true);
  redraw_timer_.setInterval(40);
  connect(&redraw_timer_, &QTimer::timeout, this, &MonitorPage::redraw);

  io_thread_.setObjectName(QStringLiteral("monitor-io"));
  scanner_ = new RunScanner;
  scanner_->moveToThread(&io_thread_);
  connect(&io_thread_, &QThread::started, scanner_, &RunScanner::start);
  // Objects living on the io thread are deleted there, when it finishes (their timers
  // belong to that thread).
  connect(&io_thread_, &QThread::finished, scanner_, &QObject::deleteLater);
  connect(scanner_, &RunScanner::scanned, this, &MonitorPage::on_scanned, Qt::QueuedConnection);
  io_thread_.start();
  apply_palette();
}

QStringList MonitorPage::checkpoints_of(const QString& run_dir) {
  std::vector<std::pair<long long, QString>> found;
  const QDir dir(QString::fromStdString(run::RunDir(run_dir.toStdString()).checkpoints_dir().string()));
  for (const QFileInfo& f : dir.entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    bool ok = false;
    const long long step = f.fileName().startsWith(QStringLiteral("checkpoint-"))
                               ? f.fileName().mid(int(std::strlen("checkpoint-"))).toLongLong(&ok)
                               : 0;
    if (ok) found.emplace_back(step, f.absoluteFilePath());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  QStringList out;
  for (const auto& [step, path] : found) out << path;
  return out;
}

QMenu* MonitorPage::run_menu(const QString& run_dir, QWidget* parent) {
  auto* menu = new QMenu(parent);
  const QString name = QFileInfo(run_dir).fileName();
  menu->addAction(tr("Show on the Monitor"), this, [this, run_dir] { attach_run_directory(run_dir); });
  QAction* load = menu->addAction(tr("Load this run's configuration"), this,
                                  [this, run_dir] { emit load_run_requested(run_dir, QString()); });
  const bool has_config =
      QFileInfo(QString::fromStdString(run::RunDir(run_dir.toStdString()).config().string())).isFile();
  load->setEnabled(has_config);
  load->setToolTip(has_config ? tr("Fill the form with the configuration %1 trained with (its config.yaml), as an "
                                   "untitled preset.")
                                    .arg(name)
                              : tr("%1 has no config.yaml.").arg(name));
  QMenu* resume = menu->addMenu(tr("Resume from checkpoint"));
  const QStringList checkpoints = checkpoints_of(run_dir);
  for (const QString& c : checkpoints)
    resume->addAction(QFileInfo(c).fileName(), this, [this, run_dir, c] { emit load_run_requested(run_dir, c); });
  if (checkpoints.isEmpty()) resume->addAction(tr("(no checkpoints saved)"))->setEnabled(false);
  resume->setEnabled(has_config);
  menu->addSeparator();
  menu->addAction(tr("Open output folder"), this,
                  [run_dir] { QDesktopServices::openUrl(QUrl::fromLocalFile(run_dir)); });
  return menu;
}

void MonitorPage::apply_palette() {
  banner_->setStyleSheet(notice_style(palette(), true));
  messages_label_->setStyleSheet(notice_style(palette(), false));
  update_header();
}

void MonitorPage::changeEvent(QEvent* e) {
  QWidget::changeEvent(e);
  if (e->type() == QEvent::PaletteChange) apply_palette();
}

MonitorPage::~MonitorPage() {
  if (watcher_) watcher_->cancel();
  io_thread_.quit();
  io_thread_.wait();  // at teardown only: the io thread finishes its current poll
}

void MonitorPage::build_ui() {
  auto* outer = new QVBoxLayout(this);
  auto* split = new QSplitter(Qt::Horizontal, this);
  outer->addWidget(split);

  // Left: the runs of the output root.
  auto* left = new QWidget(split);
  auto* ll = new QVBoxLayout(left);
  ll->setContentsMargins(0, 0, 0, 0);
  root_label_ = new QLabel(tr("No output folder set."), left);
  root_label_->setWordWrap(true);
  runs_model_ = new RunsModel(this);
  runs_view_ = new QTableView(left);
  runs_view_->setModel(runs_model_);
  runs_view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  runs_view_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  runs_view_->verticalHeader()->setVisible(false);
  // Every column in view: the figures at a width their usual text fits (a longer one, like
  // "failed (stopped responding)", is elided; the row's tooltip says it whole), the run id
  // takes the rest, elided in its middle (the date and the preset name stay).
  runs_view_->setTextElideMode(Qt::ElideMiddle);
  runs_view_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  auto fit_runs_list = [this, left] {
    QHeaderView* h = runs_view_->horizontalHeader();
    h->setStretchLastSection(false);
    h->setSectionResizeMode(QHeaderView::Fixed);
    h->setSectionResizeMode(RunsModel::RunColumn, QHeaderView::Stretch);
    const QFontMetrics cell = runs_view_->fontMetrics(), head = h->fontMetrics();
    const QString usual[] = {QString(),
                             QStringLiteral("completed"),
                             QStringLiteral("1000/1000"),
                             QStringLiteral("0.0000"),
                             QStringLiteral("59m 59s"),
                             QStringLiteral("59m 59s")};
    int need = cell.horizontalAdvance(QStringLiteral("20261202-…start")) + 8;
    for (int c = RunsModel::StateColumn; c < RunsModel::ColumnCount; ++c) {
      const int w = std::max(head.horizontalAdvance(runs_model_->headerData(c, Qt::Horizontal).toString()) + 16,
                             cell.horizontalAdvance(usual[c]) + 12);
      h->resizeSection(c, w);
      need += w;
    }
    need += runs_view_->verticalScrollBar()->sizeHint().width() + 2 * runs_view_->frameWidth() + 4;
    left->setMinimumWidth(need);
  };
  fit_runs_list();
  auto* open = new QPushButton(tr("Open run directory…"), left);
  auto* cmp = new QPushButton(tr("Compare selected"), left);
  cmp->setToolTip(tr("Overlay the loss curves of the selected runs and diff their configs"));
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(open);
  buttons->addWidget(cmp);
  ll->addWidget(root_label_);
  ll->addWidget(runs_view_, 1);
  ll->addLayout(buttons);
  connect(open, &QPushButton::clicked, this, &MonitorPage::open_run_dialog);
  connect(runs_view_, &QTableView::activated, this,
          [this](const QModelIndex& i) { attach_run_directory(i.data(RunsModel::PathRole).toString()); });
  runs_view_->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(runs_view_, &QWidget::customContextMenuRequested, this, [this](const QPoint& pos) {
    const QModelIndex i = runs_view_->indexAt(pos);
    if (!i.isValid()) return;
    QMenu* menu = run_menu(i.data(RunsModel::PathRole).toString(), this);
    menu->setAttribute(Qt::WA_DeleteOnClose);
    menu->popup(runs_view_->viewport()->mapToGlobal(pos));
  });
  connect(cmp, &QPushButton::clicked, this, [this] {
    QStringList dirs;
    for (const QModelIndex& i : runs_view_->selectionModel()->selectedRows())
      dirs << i.data(RunsModel::PathRole).toString();
    if (!dirs.isEmpty()) compare_runs(dirs);
  });

  // Right: the attached run.
  auto* right = new QWidget(split);
  auto* rl = new QVBoxLayout(right);
  rl->setContentsMargins(0, 0, 0, 0);
  auto* head = new QHBoxLayout;
  title_ = new QLabel(tr("No run attached. Double-click a run, or open a run directory."), right);
  QFont tf = title_->font();
  tf.setBold(true);
  tf.setPointSize(tf.pointSize() + 2);
  title_->setFont(tf);
  title_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  title_->setWordWrap(true);  // a long header (model, mesh, optimizer) wraps instead of widening the window
  state_label_ = new QLabel(right);
  head->addWidget(title_, 1);
  head->addWidget(state_label_);
  rl->addLayout(head);
  banner_ = new QLabel(right);
  banner_->setWordWrap(true);
  banner_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  banner_->hide();
  rl->addWidget(banner_);
  messages_label_ = new QLabel(right);
  messages_label_->setWordWrap(true);
  messages_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  messages_label_->hide();
  rl->addWidget(messages_label_);
  auto* prog = new QHBoxLayout;
  progress_bar_ = new QProgressBar(right);
  progress_bar_->setRange(0, 1000);
  progress_bar_->setValue(0);
  progress_bar_->setTextVisible(false);
  progress_label_ = new QLabel(right);
  // Step, loss, elapsed and ETA take what the bar leaves; they never widen the page.
  progress_label_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  progress_label_->setMinimumWidth(120);
  prog->addWidget(progress_bar_, 2);
  prog->addWidget(progress_label_, 3);
  rl->addLayout(prog);

  tabs_ = new QTabWidget(right);
  auto* charts = new QWidget(tabs_);
  auto* cl = new QVBoxLayout(charts);
  auto* tools = new QHBoxLayout;
  log_scale_ = new QCheckBox(tr("Log-scale loss"), charts);
  link_spin_ = new QDoubleSpinBox(charts);
  link_spin_->setRange(0, 10000);
  link_spin_->setDecimals(0);
  link_spin_->setSuffix(tr(" GB/s"));
  link_spin_->setSpecialValueText(tr("off"));
  link_spin_->setToolTip(
      tr("The link's measured bus bandwidth, drawn as a reference line "
         "(two H200 over NVLink: all-to-all about 240-330 GB/s)"));
  tools->addWidget(log_scale_);
  tools->addSpacing(16);
  tools->addWidget(new QLabel(tr("Link reference:"), charts));
  tools->addWidget(link_spin_);
  tools->addStretch(1);
  cl->addLayout(tools);
  auto* grid = new QGridLayout;
  loss_ = new ChartPanel(tr("Loss"), tr("loss"), charts);
  loss_->add_series(QStringLiteral("loss"), tr("train (raw)"), kBlue, ChartPanel::Style::Thin);
  loss_->add_series(QStringLiteral("loss_ema"), tr("train (EMA 0.9)"), kBlue, ChartPanel::Style::Emphasis);
  loss_->add_series(QStringLiteral("eval_loss"), tr("eval"), kOrange, ChartPanel::Style::Dots);
  lr_ = new ChartPanel(tr("Learning rate"), tr("lr"), charts);
  lr_->add_series(QStringLiteral("lr"), tr("lr"), kGreen);
  tokens_ = new ChartPanel(tr("Throughput"), tr("tokens/s (all ranks)"), charts);
  tokens_->add_series(QStringLiteral("tokens_per_s"), tr("tokens/s"), kPurple);
  grad_ = new ChartPanel(tr("Gradient norm (before clipping)"), tr("norm"), charts);
  grad_->add_series(QStringLiteral("grad_norm"), tr("grad norm"), kOrange);
  vram_ = new ChartPanel(tr("GPU memory per rank"), tr("GiB"), charts);
  vram_->add_family(QStringLiteral("vram_peak/"), tr("peak "));
  vram_->add_family(QStringLiteral("vram_reserved/"), tr("reserved "), ChartPanel::Style::Dashed);
  busbw_ = new ChartPanel(tr("Collective bus bandwidth"), tr("GB/s (nccl-tests busbw)"), charts);
  busbw_->add_family(QStringLiteral("busbw/"), QString());
  // Two columns of charts where they fit, one below that (a laptop with the plan docked).
  const QList<ChartPanel*> order{loss_, lr_, tokens_, grad_, vram_, busbw_};
  for (ChartPanel* c : order)
    c->setToolTip(tr("Drag to pan, wheel to zoom, double-click to follow the run again, right-click to export"));
  auto reflow = [grid, order, charts, placed = std::make_shared<int>(0)] {
    const int columns = charts->width() >= 2 * order.front()->minimumWidth() + 40 ? 2 : 1;
    if (*placed == columns) return;
    *placed = columns;
    for (ChartPanel* c : order) grid->removeWidget(c);
    for (int i = 0; i < order.size(); ++i) grid->addWidget(order[i], i / columns, i % columns);
  };
  charts->installEventFilter(new ResizeHook(charts, reflow));
  reflow();
  cl->addLayout(grid, 1);
  tabs_->addTab(charts, tr("Charts"));
  log_ = new LogView(tabs_);
  tabs_->addTab(log_, tr("Log"));
  compare_ = new CompareView(tabs_);
  tabs_->addTab(compare_, tr("Compare"));
  rl->addWidget(tabs_, 1);
  split->addWidget(left);
  split->addWidget(right);
  split->setStretchFactor(0, 0);  // a wider window widens the charts
  split->setStretchFactor(1, 1);
  split->setSizes({std::max(left->minimumWidth(), 360), 1120});

  connect(log_scale_, &QCheckBox::toggled, loss_, &ChartPanel::set_log_scale);
  connect(link_spin_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, &MonitorPage::set_link_bandwidth);
}

ChartPanel* MonitorPage::chart(const QString& id) const {
  if (id == QLatin1String("loss")) return loss_;
  if (id == QLatin1String("lr")) return lr_;
  if (id == QLatin1String("tokens")) return tokens_;
  if (id == QLatin1String("grad")) return grad_;
  if (id == QLatin1String("vram")) return vram_;
  if (id == QLatin1String("busbw")) return busbw_;
  return nullptr;
}

void MonitorPage::set_link_bandwidth(double gb_per_s) {
  link_gbps_ = gb_per_s;
  if (link_spin_->value() != gb_per_s) link_spin_->setValue(gb_per_s);
  busbw_->set_reference_line(gb_per_s, tr("link measured %1 GB/s").arg(gb_per_s, 0, 'f', 0));
}

void MonitorPage::set_output_root(const QString& root) {
  root_ = root;
  root_label_->setText(tr("Runs in %1").arg(root));
  const quint64 gen = ++scan_generation_;
  QMetaObject::invokeMethod(
      scanner_, [s = scanner_, root, gen] { s->set_root(root, gen); }, Qt::QueuedConnection);
}

void MonitorPage::on_scanned(quint64 generation, const std::vector<RunSummary>& runs, const QString& error) {
  if (generation != scan_generation_) return;  // a scan of the previous root
  runs_model_->set_runs(runs);
  QString text = error;
  if (text.isEmpty())
    text = runs.empty()
               ? tr("No runs yet in %1: Start training creates the first, or open a run folder (Open run…).").arg(root_)
               : tr("Runs in %1 (%n run(s))", nullptr, static_cast<int>(runs.size())).arg(root_);
  root_label_->setText(notice_.isEmpty() ? text : notice_ + QStringLiteral("\n") + text);
}

QString MonitorPage::root_text() const { return root_label_->text(); }

void MonitorPage::open_run_dialog() {
  auto* dlg = new QFileDialog(this, tr("Open run directory"), root_);
  dlg->setFileMode(QFileDialog::Directory);
  dlg->setOption(QFileDialog::ShowDirsOnly);
  dlg->setAttribute(Qt::WA_DeleteOnClose);
  connect(dlg, &QFileDialog::fileSelected, this, &MonitorPage::open_run_folder);
  dlg->open();  // asynchronous: no nested event loop
}

void MonitorPage::stop_watcher() {
  if (!watcher_) return;
  watcher_->cancel();
  watcher_->deleteLater();  // deleted on the io thread, between two of its events
  watcher_ = nullptr;
}

bool MonitorPage::open_run_folder(const QString& dir) {
  // A folder the user picked that is not a run (no status.json, no events.jsonl) is not
  // attached: the page would show state "unknown" on the previous run's axes (issue 23,
  // finding 7). The launch path attaches a run directory before its first file exists and
  // goes through attach_run_directory directly.
  if (!run::RunDir::looks_like_run(std::filesystem::path(dir.toStdString()))) {
    notice_ = tr("%1 is not a run directory (it has neither status.json nor events.jsonl); still showing %2.")
                  .arg(dir, attached_.isEmpty() ? tr("no run") : attached_);
    root_label_->setText(notice_);
    return false;
  }
  attach_run_directory(dir);
  return true;
}

void MonitorPage::attach_run_directory(const QString& dir) {
  notice_.clear();
  stop_watcher();
  attached_ = dir;
  ++watch_generation_;
  store_.clear();
  status_.reset();
  run_start_.reset();
  run_end_.reset();
  progress_.reset();
  stage_.clear();
  messages_.clear();
  message_count_ = 0;
  dir_missing_ = false;
  caught_up_ = false;
  events_read_ = bytes_read_ = bytes_total_ = 0;
  batches_ = 0;
  log_->clear();
  log_->set_source(tr("%1/logs/rank-0.log").arg(dir));
  watcher_ = new RunWatcher(dir, watch_generation_);
  watcher_->moveToThread(&io_thread_);
  connect(&io_thread_, &QThread::finished, watcher_, &QObject::deleteLater);
  connect(watcher_, &RunWatcher::batch_ready, this, &MonitorPage::on_batch, Qt::QueuedConnection);
  QMetaObject::invokeMethod(watcher_, &RunWatcher::start, Qt::QueuedConnection);
  update_header();
  redraw_timer_.start();
  tabs_->setCurrentIndex(0);
  const int row = runs_model_->row_of_path(dir);
  if (row >= 0) runs_view_->selectRow(row);
  emit run_attached(dir);
}

void MonitorPage::compare_runs(const QStringList& dirs) {
  compare_->compare(dirs);
  tabs_->setCurrentWidget(compare_);
}

}  // namespace odyssey::ui
