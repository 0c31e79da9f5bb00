#include "main_window.h"

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QDialog>
#include <QDateTime>
#include <QDesktopServices>
#include <QDialogButtonBox>
#include <QDir>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QScreen>
#include <QShowEvent>
#include <QStandardPaths>
#include <QScrollArea>
#include <QTabWidget>
#include <QTimer>
#include <QUrl>
#include <QVBoxLayout>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>

#include "advanced_page.h"
#include "chat/chat_page.h"
#include "chat/evaluate_page.h"
#include "chat/export_page.h"
#include "config/preset_io.h"
#include "command_preview.h"
#include "config_form.h"
#include "gpu_panel.h"
#include "language.h"
#include "job_controller.h"
#include "launch.h"
#include "palette.h"
#include "planner_gauge.h"
#include "settings.h"
#include "message_area.h"
#include "run/status_file.h"
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

namespace {

QScrollArea* scrolled(QWidget* w) {
  auto* area = new QScrollArea;
  area->setWidget(w);
  area->setWidgetResizable(true);
  area->setFrameShape(QFrame::NoFrame);
  return area;
}

}  // namespace

MainWindow::MainWindow(std::unique_ptr<Settings> settings, QWidget* parent)
    : QMainWindow(parent), settings_(std::move(settings)), form_(new ConfigForm(this)) {
  setObjectName(QStringLiteral("mainWindow"));
  setAcceptDrops(true);
  auto* central = new QWidget(this);
  auto* v = new QVBoxLayout(central);
  v->setContentsMargins(6, 6, 6, 6);
  banner_ = new MessageArea(central);
  banner_->setObjectName(QStringLiteral("presetBanner"));
  banner_->hide();
  v->addWidget(banner_);
  tabs_ = new QTabWidget(central);
  train_ = new TrainPage(form_, settings_.get(), tabs_);
  advanced_ = new AdvancedPage(form_, tabs_);
  // Pages and docks scroll where the screen is smaller than their layouts (1366×768, 1280×800
  // at scale 2): the window's minimum size stays below the screen's.
  tabs_->addTab(scrolled(train_), tr("&Train"));
  tabs_->addTab(advanced_, tr("&Advanced"));  // scrolls and reflows its columns itself
#ifdef ODYSSEY_HAVE_MONITOR
  monitor_ = new MonitorPage(tabs_);
  tabs_->addTab(scrolled(monitor_), tr("&Monitor"));
#endif
  // The pages that use a run's results (docs/inference.md): Chat, Evaluate, Export.
  chat_ = new ChatPage(tabs_);
  evaluate_ = new EvaluatePage(tabs_);
  export_ = new ExportPage(tabs_);
  QScrollArea* chat_area = scrolled(chat_);
  QScrollArea* evaluate_area = scrolled(evaluate_);
  QScrollArea* export_area = scrolled(export_);
  tabs_->addTab(chat_area, tr("C&hat"));
  tabs_->addTab(evaluate_area, tr("&Evaluate"));
  tabs_->addTab(export_area, tr("E&xport"));
  connect(tabs_, &QTabWidget::currentChanged, this, [this, chat_area, evaluate_area, export_area] {
    const QWidget* w = tabs_->currentWidget();
    if (w != chat_area && w != evaluate_area && w != export_area) return;
    // The Train page's model and output directory, unless a page was given others.
    const QString root = resolved_output_dir(*form_);
    const ModelLocation& loc = form_->location();
    const bool found = loc.source != ModelLocation::NotFound && loc.source != ModelLocation::BundledShape;
    const QString model = found ? QString::fromStdString(loc.path) : QString::fromStdString(form_->config().model);
    chat_->set_runs_root(root);
    evaluate_->set_runs_root(root);
    export_->set_runs_root(root);
    if (chat_->model().isEmpty()) chat_->set_model(model);
    if (evaluate_->model().isEmpty()) evaluate_->set_model(model);
  });
  connect(export_, &ExportPage::open_in_chat, this, [this, chat_area](const QString& dir) {
    chat_->set_model(dir);
    tabs_->setCurrentWidget(chat_area);
  });
  v->addWidget(tabs_, 1);
  auto* bottom = new QHBoxLayout;
  status_ = new QLabel(central);
  status_->setObjectName(QStringLiteral("statusSummary"));
  status_->setWordWrap(true);
  // A first error naming a long path must not widen the window: the line takes the width it is
  // given (the full text is its tooltip, every error is also at its field).
  status_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  status_->setMinimumWidth(0);
  start_ = new QPushButton(tr("Start training"), central);
  start_->setObjectName(QStringLiteral("startButton"));
  start_->setEnabled(false);
  stop_ = new QPushButton(tr("Stop"), central);
  stop_->setObjectName(QStringLiteral("stopButton"));
  stop_->setEnabled(false);
  stop_->setToolTip(tr("No running job is attached to the Monitor."));
  stop_->setVisible(monitor_ != nullptr);
  bottom->addWidget(status_, 1);
  bottom->addWidget(start_);
  bottom->addWidget(stop_);
  job_status_ = new MessageArea(central);
  job_status_->setObjectName(QStringLiteral("jobStatus"));
  job_status_->hide();
  v->addWidget(job_status_);
  for (MessageArea* a : {banner_, job_status_})
    connect(a, &MessageArea::link_activated, this, [](const QUrl& url) { QDesktopServices::openUrl(url); });
  v->addLayout(bottom);
  connect(start_, &QPushButton::clicked, this, &MainWindow::start_job);
  connect(stop_, &QPushButton::clicked, this, &MainWindow::stop_job);
  jobs_ = new JobController(this);
  connect(jobs_, &JobController::message, this, &MainWindow::set_job_message);
  connect(jobs_, &JobController::changed, this, &MainWindow::update_job_controls);
#ifdef ODYSSEY_HAVE_MONITOR
  connect(jobs_, &JobController::run_started, this, [this](const QString& dir) {
    monitor_->attach_run_directory(dir);
    tabs_->setCurrentWidget(monitor_->parentWidget()->parentWidget());  // its scroll area
  });
#endif
  setCentralWidget(central);

  gauge_ = new PlannerGauge(form_, settings_.get(), this);
  auto* plan_dock = new QDockWidget(tr("Memory plan"), this);
  plan_dock->setObjectName(QStringLiteral("planDock"));
  plan_dock->setWidget(scrolled(gauge_));
  addDockWidget(Qt::RightDockWidgetArea, plan_dock);
  commands_ = new CommandPreview(form_, this);
  auto* cmd_dock = new QDockWidget(tr("Commands"), this);
  cmd_dock->setObjectName(QStringLiteral("commandDock"));
  cmd_dock->setWidget(scrolled(commands_));
  addDockWidget(Qt::RightDockWidgetArea, cmd_dock);

  // Detected GPUs set the planner's capacity (the smallest of those used).
  connect(advanced_->gpu_panel(), &GpuPanel::capacity_detected, gauge_->capacity(), &QDoubleSpinBox::setValue);
  resizeDocks({plan_dock, cmd_dock}, {480, 480}, Qt::Horizontal);
  resizeDocks({plan_dock, cmd_dock}, {520, 380}, Qt::Vertical);
  build_menus();
  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addActions({plan_dock->toggleViewAction(), cmd_dock->toggleViewAction()});
  view->addSeparator();
  build_language_menu(view->addMenu(tr("&Language")));
  build_help_menu();
  connect(form_, &ConfigForm::diagnostics_changed, this, &MainWindow::update_status);
  connect(form_, &ConfigForm::files_check_changed, this, &MainWindow::update_status);
  // Back from an editor or a file manager: the files the configuration names may have changed.
  connect(qApp, &QGuiApplication::applicationStateChanged, this, [this](Qt::ApplicationState st) {
    if (st == Qt::ApplicationActive) form_->recheck_files();
  });
  connect(form_, &ConfigForm::file_changed, this, &MainWindow::update_title);
  connect(form_, &ConfigForm::changed, this, [this] { update_output_root(true); });
#ifdef ODYSSEY_HAVE_MONITOR
  connect(monitor_, &MonitorPage::run_attached, jobs_, &JobController::follow);
  connect(monitor_, &MonitorPage::load_run_requested, this,
          [this](const QString& dir, const QString& checkpoint) { load_run(dir, checkpoint); });
#endif
  // After the caller has opened its preset: the Monitor follows the form's output folder and
  // picks up a job that is already running there.
  QTimer::singleShot(0, this, [this] { update_output_root(true); });
  update_status();
  update_title();
  restoreState(settings_->window_state());
  if (!restoreGeometry(settings_->window_geometry())) resize(first_run_size());
  fit_to_screen();
}

QWidget* MainWindow::current_page() const {
  auto* area = qobject_cast<QScrollArea*>(tabs_->currentWidget());
  return area ? area->widget() : tabs_->currentWidget();  // the Advanced page scrolls itself
}

QSize MainWindow::first_run_size() const {
  // 1500×950 where the screen has room, else most of what it has (a 1366×768 laptop, a
  // 1600×1000 screen at scale 1.5, whose available size Qt gives in device-independent pixels).
  const QScreen* s = screen() ? screen() : QGuiApplication::primaryScreen();
  if (!s) return {1500, 950};
  const QRect a = s->availableGeometry();
  return {std::min(1500, a.width() * 92 / 100), std::min(950, a.height() * 92 / 100)};
}

void MainWindow::fit_to_screen() {
  // A geometry saved on a larger screen (or before the window could grow past it) is clamped
  // to this one's available area, and the window moved inside it.
  const QScreen* s = screen() ? screen() : QGuiApplication::primaryScreen();
  if (!s) return;
  const QRect a = s->availableGeometry();
  const QMargins frame(geometry().left() - frameGeometry().left(), geometry().top() - frameGeometry().top(),
                       frameGeometry().right() - geometry().right(), frameGeometry().bottom() - geometry().bottom());
  const QSize room(a.width() - frame.left() - frame.right(), a.height() - frame.top() - frame.bottom());
  if (width() > room.width() || height() > room.height())
    resize(std::min(width(), room.width()), std::min(height(), room.height()));
  QRect f = frameGeometry();
  if (!a.contains(f)) {
    f.moveLeft(std::clamp(f.left(), a.left(), std::max(a.left(), a.right() - f.width() + 1)));
    f.moveTop(std::clamp(f.top(), a.top(), std::max(a.top(), a.bottom() - f.height() + 1)));
    move(f.topLeft());
  }
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
    connect(a, &QAction::triggered, this, [this, p = fi.absoluteFilePath()] { open_preset_interactive(p); });
  }
  if (bundled->isEmpty()) bundled->addAction(tr("(none found in %1)").arg(dir.path()))->setEnabled(false);
  file->addSeparator();
  file->addAction(tr("&Import swift command…"), QKeySequence(Qt::CTRL | Qt::Key_I), this,
                  &MainWindow::import_swift_dialog);
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
}

void MainWindow::build_help_menu() {
  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&Documentation"), this, [] {
    // The docs beside the bundled presets (a source checkout or an installed share/odyssey).
    const QString dir = QString::fromStdString(data_dir()) + QStringLiteral("/docs");
    QDesktopServices::openUrl(QUrl::fromLocalFile(QDir(dir).exists() ? dir : QString::fromStdString(data_dir())));
  });
  help->addAction(tr("&About Odyssey"), this, &MainWindow::show_about);
}

QString MainWindow::about_text() const {
  // The engine's own account of what it links (LibTorch, CUDA), asked of odyssey-train: the
  // window links neither.
  QString engine = tr("odyssey-train was not found (ODYSSEY_TRAIN_BIN names it).");
  const QString bin = find_train_binary();
  if (!bin.isEmpty()) {
    QProcess p;
    p.start(bin, {QStringLiteral("env")});
    if (p.waitForFinished(5000) && p.exitCode() == 0)
      engine = QString::fromUtf8(p.readAllStandardOutput())
                   .trimmed()
                   .toHtmlEscaped()
                   .replace(QLatin1Char('\n'), QStringLiteral("<br>"));
    else engine = tr("%1 env did not answer.").arg(bin.toHtmlEscaped());
  }
  return tr("<h3>Odyssey %1</h3><p>A workbench for long-context LLM fine-tuning: configure, plan, launch and "
            "monitor odyssey-train.</p><p>Qt %2 (built with %3)</p><p><b>Engine</b> (%4):<br>%5</p>")
      .arg(QCoreApplication::applicationVersion().toHtmlEscaped(), QString::fromLatin1(qVersion()),
           QStringLiteral(QT_VERSION_STR), bin.toHtmlEscaped(), engine);
}

void MainWindow::build_language_menu(QMenu* menu) {
  menu->setObjectName(QStringLiteral("languageMenu"));
  auto* group = new QActionGroup(menu);
  const QString saved = settings_->language();
  auto add = [&](const QString& code, const QString& text) {
    QAction* a = menu->addAction(text);
    a->setCheckable(true);
    a->setChecked(saved == code);
    a->setData(code);
    group->addAction(a);
    connect(a, &QAction::triggered, this, [this, code] { choose_language(code); });
  };
  add(QString(), tr("System default (%1)").arg(native_language_name(resolve_language(QString()))));
  // Each language in its own words, so that anyone finds theirs whatever the window shows.
  for (const QString& code : available_languages()) add(code, native_language_name(code));
}

void MainWindow::choose_language(const QString& code) {
  if (code == settings_->language()) return;
  settings_->set_language(code);
  const QString next = resolve_language(code);
  if (next == shown_language_) return;
  // The pages build their texts once; the choice applies from the next start, which the user
  // may ask for now (main() restarts the program once this window has closed).
  QMessageBox box(QMessageBox::Information, tr("Language"),
                  tr("Odyssey will be shown in %1 the next time it starts.").arg(native_language_name(next)),
                  QMessageBox::Ok | QMessageBox::Cancel, this);
  box.button(QMessageBox::Ok)->setText(tr("Restart now"));
  box.button(QMessageBox::Cancel)->setText(tr("Later"));
  box.setDefaultButton(QMessageBox::Cancel);
  if (box.exec() == QMessageBox::Ok) emit restart_requested();
}

void MainWindow::show_about() { QMessageBox::about(this, tr("About Odyssey"), about_text()); }

bool MainWindow::maybe_save() {
  if (!form_->modified()) return true;
  const QString name = form_->file().isEmpty() ? tr("The untitled configuration") : QFileInfo(form_->file()).fileName();
  const auto answer = QMessageBox::question(
      this, tr("Unsaved changes"), tr("%1 has changes that are not saved. Save them first?").arg(name),
      QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, QMessageBox::Save);
  if (answer == QMessageBox::Cancel) return false;
  if (answer == QMessageBox::Save) return save();
  return true;
}

bool MainWindow::open_preset_interactive(const QString& path) { return maybe_save() && open_preset(path); }

bool MainWindow::reopen_last_preset() {
  for (const QString& p : settings_->recent_presets())
    if (QFileInfo(p).isFile()) return open_preset(p);
  return false;
}

QString MainWindow::preset_save_dir() const {
  // Not the bundled presets' folder (a checkout's presets/ or a read-only install): the user's
  // own data folder, unless they saved elsewhere before.
  const QString bundled = QDir(QString::fromStdString(data_dir()) + QStringLiteral("/presets")).absolutePath();
  const QString last = settings_->last_dir(QStringLiteral("preset-save"));  // home when never saved
  if (!last.isEmpty() && last != QDir::homePath() && QDir(last).exists()) return last;
  const QString own = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/presets");
  QDir().mkpath(own);
  const QString form_dir = form_->file().isEmpty() ? QString() : QFileInfo(form_->file()).absolutePath();
  return !form_dir.isEmpty() && form_dir != bundled ? form_dir : own;
}

void MainWindow::fill_recent_menu() {
  recent_->clear();
  for (const QString& p : settings_->recent_presets())
    connect(recent_->addAction(p), &QAction::triggered, this, [this, p] { open_preset_interactive(p); });
  if (recent_->isEmpty()) recent_->addAction(tr("(none yet)"))->setEnabled(false);
}

void MainWindow::show_banner(const QString& html, bool error) {
  const QColor c = error ? error_color(palette()) : warning_color(palette());
  banner_->set_message(html + QStringLiteral(" &nbsp; <a href='dismiss'>") + tr("Dismiss") + QStringLiteral("</a>"), {},
                       c);
}

bool MainWindow::open_preset(const QString& path) {
  const Diagnostics d = form_->load_file(path);
  if (has_errors(d)) {
    show_banner(
        tr("<b>%1 was not loaded</b> — the form is unchanged:<br>").arg(QFileInfo(path).fileName().toHtmlEscaped()) +
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

void MainWindow::start_when_ready() {
  auto attempt = [this] {
    if (form_->files_pending()) return false;
    if (start_->isEnabled()) start_job();
    else show_banner(tr("<b>Not started:</b> %1").arg(start_->toolTip().toHtmlEscaped()), true);
    return true;
  };
  if (attempt()) return;
  auto connection = std::make_shared<QMetaObject::Connection>();
  *connection = connect(form_, &ConfigForm::files_check_changed, this, [this, attempt, connection] {
    if (attempt()) disconnect(*connection);
  });
}

bool MainWindow::load_run(const QString& run_dir, const QString& checkpoint) {
  if (!maybe_save()) return false;
  const QString config = QDir(run_dir).filePath(QStringLiteral("config.yaml"));
  auto r = load_preset_file(config.toStdString());
  if (!r.ok()) {
    show_banner(tr("<b>%1 was not loaded</b> — the form is unchanged:<br>").arg(config.toHtmlEscaped()) +
                    diagnostics_html(r.diagnostics),
                true);
    return false;
  }
  // Untitled: Save asks where, so the run's own config.yaml is never overwritten.
  form_->load(std::move(r.value), QString());
  QString note = tr("<b>Loaded the configuration of %1</b> (its config.yaml) as an untitled preset.")
                     .arg(QFileInfo(run_dir).fileName().toHtmlEscaped());
  if (!checkpoint.isEmpty()) {
    const QString quoted = QLatin1Char('"') +
                           QString(checkpoint)
                               .replace(QLatin1Char('\\'), QStringLiteral("\\\\"))
                               .replace(QLatin1Char('"'), QStringLiteral("\\\"")) +
                           QLatin1Char('"');
    const Diagnostics d = form_->set_text("resume_from_checkpoint", quoted.toStdString());
    if (has_errors(d)) {
      show_banner(note + QStringLiteral("<br>") + diagnostics_html(d), true);
      return false;
    }
    note += tr(" Start training resumes it from %1 (weights, optimizer state, data order and step).")
                .arg(QFileInfo(checkpoint).fileName().toHtmlEscaped());
  } else {
    note += tr(" Start training runs it again; Save as… keeps it as a preset.");
  }
  show_banner(note, false);
  tabs_->setCurrentIndex(0);
  return true;
}

void MainWindow::open_dialog() {
  const QString p = QFileDialog::getOpenFileName(this, tr("Open preset"), settings_->last_dir(QStringLiteral("preset")),
                                                 tr("Odyssey presets (*.yaml *.yml)"));
  if (!p.isEmpty()) open_preset_interactive(p);
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
  QString p = QFileDialog::getSaveFileName(this, tr("Save preset"), preset_save_dir(), tr("Odyssey presets (*.yaml)"));
  if (p.isEmpty()) return false;
  if (QFileInfo(p).suffix().isEmpty()) p += QStringLiteral(".yaml");
  settings_->set_last_dir(QStringLiteral("preset-save"), QFileInfo(p).absolutePath());
  return save_preset_to(p);
}

void MainWindow::import_swift_dialog() {
  auto* dlg = new QDialog(this);
  dlg->setAttribute(Qt::WA_DeleteOnClose);
  dlg->setWindowTitle(tr("Import a swift sft command"));
  auto* v = new QVBoxLayout(dlg);
  v->addWidget(new QLabel(tr("Paste a <tt>swift sft</tt> command (with its environment prefix and \\ continuations). "
                             "Nothing is run."),
                          dlg));
  auto* text = new QPlainTextEdit(dlg);
  text->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  v->addWidget(text);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, dlg);
  v->addWidget(buttons);
  connect(buttons, &QDialogButtonBox::rejected, dlg, &QDialog::reject);
  connect(buttons, &QDialogButtonBox::accepted, dlg, [this, dlg, text] {
    const Diagnostics d = form_->import_swift(text->toPlainText());
    if (has_errors(d)) {
      show_banner(tr("<b>The swift command was not imported</b> — the form is unchanged:<br>") + diagnostics_html(d),
                  true);
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
  return acceptable_drop(mime, &p) && open_preset_interactive(p);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  if (acceptable_drop(e->mimeData(), nullptr)) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
  if (handle_drop(e->mimeData())) e->acceptProposedAction();
}

void MainWindow::showEvent(QShowEvent* e) {
  QMainWindow::showEvent(e);
  // The frame's size is known once the window exists on the screen: fit again, frame included.
  if (!e->spontaneous()) fit_to_screen();
}

void MainWindow::closeEvent(QCloseEvent* e) {
  if (!maybe_save()) {
    e->ignore();
    return;
  }
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
    status_->setText(
        tr("<span style='color:%1'><b>%2 error(s)</b></span>, %3 warning(s) — marked at their fields. First: %4")
            .arg(error_color(p).name())
            .arg(errors)
            .arg(warnings)
            .arg(first.toHtmlEscaped()));
    status_->setToolTip(first);
  } else if (form_->files_pending()) {
    status_->setToolTip(QString());
    status_->setText(tr("Checking the model and dataset files as odyssey-train will…"));
  } else {
    status_->setToolTip(QString());
    status_->setText(warnings > 0 ? tr("<span style='color:%1'>Valid</span>, %2 warning(s) — shown at their fields.")
                                        .arg(ok_color(p).name())
                                        .arg(warnings)
                                  : tr("<span style='color:%1'>Valid configuration.</span>").arg(ok_color(p).name()));
  }
  update_buttons();
}

void MainWindow::update_buttons() {
  const bool busy = jobs_->launching() || !jobs_->launched_run().isEmpty();
  // A job re-attached from this output folder (started from the command line, or before the
  // window was reopened) still runs: a second one would train beside it in the same folder.
  QString running_here;
#ifdef ODYSSEY_HAVE_MONITOR
  const QString attached = monitor_->attached_run();
  if (jobs_->followed_alive() && !attached.isEmpty() &&
      QFileInfo(attached).absoluteDir().absolutePath() == QDir(resolved_output_dir(*form_)).absolutePath())
    running_here = attached;
#endif
  start_->setEnabled(form_->ready_to_start() && !busy && running_here.isEmpty());
  if (form_->has_errors()) start_->setToolTip(tr("Fix the fields marked in red first."));
  else if (busy)
    start_->setToolTip(
        tr("The job started from this window is still starting or running: stop it, or wait for it to end."));
  else if (!running_here.isEmpty())
    start_->setToolTip(tr("A job is running in this output folder (%1): stop it, wait for it to end, or choose "
                          "another output_dir.")
                           .arg(running_here));
  else if (form_->files_pending())
    start_->setToolTip(tr("Checking the model and dataset files as odyssey-train will before it starts…"));
  else
    start_->setToolTip(tr("Save this configuration under %1/.odyssey-launch/ and run odyssey-train with it in the "
                          "background (closing the window does not stop it); the Monitor follows the run.")
                           .arg(resolved_output_dir(*form_)));
}

void MainWindow::set_job_message(const QString& html, bool error) {
  const QColor c = error ? error_color(palette()) : palette().color(QPalette::WindowText);
  job_status_->set_message(html, c);
}

void MainWindow::start_job() {
  if (!form_->ready_to_start() || jobs_->launching() || !jobs_->launched_run().isEmpty()) return;
  const QString bin = find_train_binary();
  if (bin.isEmpty()) {
    set_job_message(tr("<b>Not started:</b> odyssey-train was not found beside this program, in ../app or on PATH "
                       "(ODYSSEY_TRAIN_BIN names it explicitly)."),
                    true);
    return;
  }
  QString error;
  const auto staged = stage_launch(*form_, &error);
  if (!staged) {
    set_job_message(tr("<b>Not started:</b> %1").arg(error.toHtmlEscaped()), true);
    return;
  }
  jobs_->start(bin, *staged);
}

void MainWindow::update_job_controls() {
  const bool alive = jobs_->followed_alive();
  const bool kill_next = jobs_->kill_next();
  stop_->setEnabled(alive);
  stop_->setText(kill_next ? tr("Kill…") : tr("Stop"));
  if (!alive) stop_->setToolTip(tr("No running job is attached to the Monitor."));
  else if (kill_next)
    stop_->setToolTip(
        tr("The job is stopping (it finishes the step and saves a checkpoint). Kill ends it at once "
           "with SIGKILL, without a final checkpoint."));
  else
    stop_->setToolTip(tr("Ask the job (pid %1 on %2) to stop: it finishes the step, saves a checkpoint and exits.")
                          .arg(jobs_->followed_pid())
                          .arg(jobs_->followed_host()));
  update_buttons();
}

void MainWindow::stop_job() {
  jobs_->poll();  // decide Stop or Kill on the status as it is now
  const bool kill = jobs_->kill_next();
  if (kill) {
    const auto answer = QMessageBox::question(
        this, tr("Kill the job?"),
        tr("Kill odyssey-train (pid %1) now with SIGKILL? The step in progress is lost and no final checkpoint is "
           "written; the last saved checkpoint stays.")
            .arg(jobs_->followed_pid()));
    if (answer != QMessageBox::Yes) return;
  }
  jobs_->stop(kill);
}

void MainWindow::update_output_root(bool reattach) {
#ifdef ODYSSEY_HAVE_MONITOR
  const QString root = resolved_output_dir(*form_);
  if (root == monitor_->output_root()) return;
  monitor_->set_output_root(root);
  if (reattach && monitor_->attached_run().isEmpty() && !jobs_->launching()) reattach_running();
#else
  (void)reattach;
#endif
  update_buttons();
}

bool MainWindow::reattach_running() {
#ifdef ODYSSEY_HAVE_MONITOR
  const QString dir = newest_alive_run(resolved_output_dir(*form_));
  if (dir.isEmpty()) return false;
  monitor_->attach_run_directory(dir);
  set_job_message(tr("The Monitor follows %1, which is still running.").arg(dir.toHtmlEscaped()), false);
  return true;
#else
  return false;
#endif
}

void MainWindow::update_title() {
  const QString name = form_->file().isEmpty() ? tr("untitled") : QFileInfo(form_->file()).fileName();
  setWindowTitle(name + QStringLiteral("[*] — Odyssey"));
  setWindowModified(form_->modified());
}

}  // namespace odyssey::ui
