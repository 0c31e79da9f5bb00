#include "main_window.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenuBar>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTabWidget>
#include <QVBoxLayout>

#include "advanced_page.h"
#include "command_preview.h"
#include "config_form.h"
#include "palette.h"
#include "planner_gauge.h"
#include "settings.h"
#include "train_page.h"
#ifdef ODYSSEY_HAVE_MONITOR
#include "monitor/monitor_page.h"
#endif

namespace odyssey::ui {
namespace {

QString diagnostics_html(const Diagnostics& ds) {
  QStringList lines;
  for (const auto& d : ds) lines << QString::fromStdString(d.format()).toHtmlEscaped();
  return lines.join(QStringLiteral("<br>"));
}

}  // namespace

MainWindow::MainWindow(std::unique_ptr<Settings> settings, QWidget* parent)
    : QMainWindow(parent), settings_(std::move(settings)), form_(new ConfigForm(this)) {
  setObjectName(QStringLiteral("mainWindow"));
  setAcceptDrops(true);
  auto* central = new QWidget(this);
  auto* v = new QVBoxLayout(central);
  v->setContentsMargins(6, 6, 6, 6);
  banner_ = new QLabel(central);
  banner_->setObjectName(QStringLiteral("presetBanner"));
  banner_->setWordWrap(true);
  banner_->setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::LinksAccessibleByMouse);
  banner_->hide();
  connect(banner_, &QLabel::linkActivated, banner_, &QLabel::hide);
  v->addWidget(banner_);
  tabs_ = new QTabWidget(central);
  train_ = new TrainPage(form_, settings_.get(), tabs_);
  advanced_ = new AdvancedPage(form_, tabs_);
  tabs_->addTab(train_, tr("&Train"));
  tabs_->addTab(advanced_, tr("&Advanced"));
#ifdef ODYSSEY_HAVE_MONITOR
  tabs_->addTab(new MonitorPage(tabs_), tr("&Monitor"));
#endif
  v->addWidget(tabs_, 1);
  auto* bottom = new QHBoxLayout;
  status_ = new QLabel(central);
  status_->setObjectName(QStringLiteral("statusSummary"));
  status_->setWordWrap(true);
  start_ = new QPushButton(tr("Start training"), central);
  start_->setEnabled(false);
  bottom->addWidget(status_, 1);
  bottom->addWidget(start_);
  v->addLayout(bottom);
  setCentralWidget(central);

  gauge_ = new PlannerGauge(form_, settings_.get(), this);
  auto* plan_dock = new QDockWidget(tr("Memory plan"), this);
  plan_dock->setObjectName(QStringLiteral("planDock"));
  plan_dock->setWidget(gauge_);
  addDockWidget(Qt::RightDockWidgetArea, plan_dock);
  commands_ = new CommandPreview(form_, this);
  auto* cmd_dock = new QDockWidget(tr("Commands"), this);
  cmd_dock->setObjectName(QStringLiteral("commandDock"));
  cmd_dock->setWidget(commands_);
  addDockWidget(Qt::RightDockWidgetArea, cmd_dock);

  resizeDocks({plan_dock, cmd_dock}, {480, 480}, Qt::Horizontal);
  resizeDocks({plan_dock, cmd_dock}, {520, 380}, Qt::Vertical);
  build_menus();
  menuBar()->addMenu(tr("&View"))->addActions({plan_dock->toggleViewAction(), cmd_dock->toggleViewAction()});
  connect(form_, &ConfigForm::diagnostics_changed, this, &MainWindow::update_status);
  connect(form_, &ConfigForm::file_changed, this, &MainWindow::update_title);
  update_status();
  update_title();
  resize(1500, 950);
  if (!restoreGeometry(settings_->window_geometry())) resize(1500, 950);
  restoreState(settings_->window_state());
}

MainWindow::~MainWindow() = default;

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open preset…"), QKeySequence::Open, this, &MainWindow::open_dialog);
  file->addAction(tr("&Save preset"), QKeySequence::Save, this, &MainWindow::save);
  file->addAction(tr("Save preset &as…"), QKeySequence::SaveAs, this, &MainWindow::save_as);
  recent_ = file->addMenu(tr("&Recent presets"));
  connect(recent_, &QMenu::aboutToShow, this, &MainWindow::fill_recent_menu);
  fill_recent_menu();
  QMenu* bundled = file->addMenu(tr("&Bundled presets"));
  const QDir dir(QString::fromStdString(data_dir()) + QStringLiteral("/presets"));
  for (const QFileInfo& fi : dir.entryInfoList({QStringLiteral("*.yaml")}, QDir::Files, QDir::Name)) {
    QAction* a = bundled->addAction(fi.completeBaseName());
    a->setStatusTip(fi.absoluteFilePath());
    connect(a, &QAction::triggered, this, [this, p = fi.absoluteFilePath()] { open_preset(p); });
  }
  if (bundled->isEmpty()) bundled->addAction(tr("(none found in %1)").arg(dir.path()))->setEnabled(false);
  file->addSeparator();
  file->addAction(tr("&Import swift command…"), QKeySequence(Qt::CTRL | Qt::Key_I), this, &MainWindow::import_swift_dialog);
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
}

void MainWindow::fill_recent_menu() {
  recent_->clear();
  for (const QString& p : settings_->recent_presets())
    connect(recent_->addAction(p), &QAction::triggered, this, [this, p] { open_preset(p); });
  if (recent_->isEmpty()) recent_->addAction(tr("(none yet)"))->setEnabled(false);
}

void MainWindow::show_banner(const QString& html, bool error) {
  const QColor c = error ? error_color(palette()) : warning_color(palette());
  banner_->setStyleSheet(QStringLiteral("QLabel#presetBanner{border:2px solid %1;border-radius:4px;padding:6px;}").arg(c.name()));
  banner_->setText(html + QStringLiteral(" &nbsp; <a href='dismiss'>") + tr("Dismiss") + QStringLiteral("</a>"));
  banner_->show();
}

bool MainWindow::open_preset(const QString& path) {
  const Diagnostics d = form_->load_file(path);
  if (has_errors(d)) {
    show_banner(tr("<b>%1 was not loaded</b> — the form is unchanged:<br>").arg(QFileInfo(path).fileName().toHtmlEscaped()) +
                    diagnostics_html(d),
                true);
    return false;
  }
  settings_->add_recent_preset(QFileInfo(path).absoluteFilePath());
  settings_->set_last_dir(QStringLiteral("preset"), QFileInfo(path).absolutePath());
  if (!d.empty()) show_banner(tr("<b>Loaded with warnings:</b><br>") + diagnostics_html(d), false);
  else banner_->hide();
  return true;
}

void MainWindow::open_dialog() {
  const QString p = QFileDialog::getOpenFileName(this, tr("Open preset"), settings_->last_dir(QStringLiteral("preset")),
                                                 tr("Odyssey presets (*.yaml *.yml)"));
  if (!p.isEmpty()) open_preset(p);
}

bool MainWindow::save_preset_to(const QString& path) {
  const Diagnostics d = form_->save_file(path);
  if (has_errors(d)) {
    show_banner(tr("<b>Not saved:</b><br>") + diagnostics_html(d), true);
    return false;
  }
  settings_->add_recent_preset(path);
  banner_->hide();
  return true;
}

bool MainWindow::save() { return form_->file().isEmpty() ? save_as() : save_preset_to(form_->file()); }

bool MainWindow::save_as() {
  QString p = QFileDialog::getSaveFileName(this, tr("Save preset"), settings_->last_dir(QStringLiteral("preset")),
                                           tr("Odyssey presets (*.yaml)"));
  if (p.isEmpty()) return false;
  if (QFileInfo(p).suffix().isEmpty()) p += QStringLiteral(".yaml");
  settings_->set_last_dir(QStringLiteral("preset"), QFileInfo(p).absolutePath());
  return save_preset_to(p);
}

void MainWindow::import_swift_dialog() {
  auto* dlg = new QDialog(this);
  dlg->setAttribute(Qt::WA_DeleteOnClose);
  dlg->setWindowTitle(tr("Import a swift sft command"));
  auto* v = new QVBoxLayout(dlg);
  v->addWidget(new QLabel(tr("Paste a <tt>swift sft</tt> command (with its environment prefix and \\ continuations). "
                             "Nothing is run."), dlg));
  auto* text = new QPlainTextEdit(dlg);
  text->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  v->addWidget(text);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, dlg);
  v->addWidget(buttons);
  connect(buttons, &QDialogButtonBox::rejected, dlg, &QDialog::reject);
  connect(buttons, &QDialogButtonBox::accepted, dlg, [this, dlg, text] {
    const Diagnostics d = form_->import_swift(text->toPlainText());
    if (has_errors(d)) {
      show_banner(tr("<b>The swift command was not imported</b> — the form is unchanged:<br>") + diagnostics_html(d), true);
    } else {
      if (d.empty()) banner_->hide();
      else show_banner(tr("<b>Imported with warnings:</b><br>") + diagnostics_html(d), false);
    }
    dlg->accept();
  });
  dlg->resize(720, 360);
  dlg->open();
}

bool MainWindow::acceptable_drop(const QMimeData* mime, QString* path) {
  if (!mime || !mime->hasUrls() || mime->urls().size() != 1) return false;
  const QUrl u = mime->urls().first();
  const QString p = u.toLocalFile();
  const QString suffix = QFileInfo(p).suffix().toLower();
  if (!u.isLocalFile() || (suffix != QStringLiteral("yaml") && suffix != QStringLiteral("yml"))) return false;
  if (path) *path = p;
  return true;
}

bool MainWindow::handle_drop(const QMimeData* mime) {
  QString p;
  return acceptable_drop(mime, &p) && open_preset(p);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  if (acceptable_drop(e->mimeData(), nullptr)) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
  if (handle_drop(e->mimeData())) e->acceptProposedAction();
}

void MainWindow::closeEvent(QCloseEvent* e) {
  settings_->set_window(saveGeometry(), saveState());
  e->accept();
}

void MainWindow::update_status() {
  int errors = 0, warnings = 0;
  QString first;
  for (const auto& d : form_->diagnostics()) {
    if (d.severity == Severity::Error && errors++ == 0) first = QString::fromStdString(d.key + ": " + d.message);
    if (d.severity == Severity::Warning) ++warnings;
  }
  const QPalette& p = palette();
  if (errors > 0) {
    status_->setText(tr("<span style='color:%1'><b>%2 error(s)</b></span>, %3 warning(s) — marked at their fields. First: %4")
                         .arg(error_color(p).name())
                         .arg(errors)
                         .arg(warnings)
                         .arg(first.toHtmlEscaped()));
    start_->setToolTip(tr("Fix the fields marked in red first."));
  } else {
    status_->setText(warnings > 0 ? tr("<span style='color:%1'>Valid</span>, %2 warning(s) — shown at their fields.")
                                        .arg(ok_color(p).name())
                                        .arg(warnings)
                                  : tr("<span style='color:%1'>Valid configuration.</span>").arg(ok_color(p).name()));
    start_->setToolTip(tr("Training arrives with the engine: odyssey-train does not train yet, so the window starts nothing."));
  }
}

void MainWindow::update_title() {
  const QString name = form_->file().isEmpty() ? tr("untitled") : QFileInfo(form_->file()).fileName();
  setWindowTitle(name + QStringLiteral("[*] — Odyssey"));
  setWindowModified(form_->modified());
}

}  // namespace odyssey::ui
