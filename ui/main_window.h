// MainWindow: the shell around the pages — tabs (Train, Advanced, Monitor when built), the
// memory plan and command docks, the File menu (presets: open, save, recent, bundled,
// import a swift command), drag-and-drop of a .yaml, a banner for load failures and a
// status line that says whether the job can start, and the job's buttons: Start (stage the
// form as a preset and hand it to the JobController, which runs odyssey-train detached; the
// Monitor then attaches its run directory), Stop/Kill (the controller signals status.json's
// pid; a kill is confirmed here) and re-attaching to a job that already runs. Pages own their
// logic; the job's processes, polls and signals live in JobController.
#pragma once

#include <QMainWindow>
#include <memory>

#include "job_controller.h"

class QLabel;
class QMenu;
class QMimeData;
class QPushButton;
class QTabWidget;

namespace odyssey::ui {

class AdvancedPage;
class MonitorPage;
class ChatPage;
class EvaluatePage;
class ExportPage;
class CommandPreview;
class ConfigForm;
class PlannerGauge;
class Settings;
class TrainPage;
class MessageArea;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  // `settings` is owned by the window.
  explicit MainWindow(std::unique_ptr<Settings> settings, QWidget* parent = nullptr);
  ~MainWindow() override;

  ConfigForm* form() const { return form_; }
  QTabWidget* tabs() const { return tabs_; }
  // The page shown (Train, Advanced or Monitor; the tabs hold them in scroll areas).
  QWidget* current_page() const;
  TrainPage* train_page() const { return train_; }
  AdvancedPage* advanced_page() const { return advanced_; }
  PlannerGauge* gauge() const { return gauge_; }
  CommandPreview* commands() const { return commands_; }
  MessageArea* banner() const { return banner_; }
  QPushButton* start_button() const { return start_; }
  QPushButton* stop_button() const { return stop_; }
  // The Monitor page (nullptr when the window was built without it).
  MonitorPage* monitor() const { return monitor_; }
  // The Chat page (docs/inference.md): the form's model and its runs' checkpoints.
  ChatPage* chat_page() const { return chat_; }
  EvaluatePage* evaluate_page() const { return evaluate_; }
  ExportPage* export_page() const { return export_; }
  // The area under the pages that reports launches, stops and their failures (bounded and
  // scrollable: a long error never grows the window).
  MessageArea* job_status() const { return job_status_; }
  QLabel* status_line() const { return status_; }
  // The job started and followed from this window: launch, liveness, Stop/Kill.
  JobController* jobs() const { return jobs_; }
  // While a Start waits for the engine's `run directory:` line.
  bool launching() const { return jobs_->launching(); }
  // The log of the last launch from this window ("" before the first).
  const QString& launch_log() const { return jobs_->launch_log(); }
  // Attach the Monitor to the newest alive run under the form's output directory, if any.
  bool reattach_running();
  // A past run as the start of a new one: its config.yaml fills the form as an untitled
  // preset (after the unsaved-changes question), with resume_from_checkpoint set when a
  // checkpoint is given. False when declined or the file does not load.
  bool load_run(const QString& run_dir, const QString& checkpoint);
  // Press Start as soon as the engine's check of the current configuration has passed (the
  // README's quickstart: `odyssey --start`); when it fails, say why instead.
  void start_when_ready();
  Settings* settings() const { return settings_.get(); }
  // The language the window's texts were translated to when it was built ("en", "zh_CN"); a
  // choice made in View → Language applies from the next start.
  void set_shown_language(const QString& code) { shown_language_ = code; }

  // Load a preset; on failure the form is unchanged and the banner shows file:line.
  bool open_preset(const QString& path);
  // As the File menu, the recent list and a drop do: asks to save unsaved changes first
  // (Save / Discard / Cancel); false when cancelled or not loaded.
  bool open_preset_interactive(const QString& path);
  // The most recent preset that still exists (the one open when the window last closed).
  bool reopen_last_preset();
  // Where Save as… starts: the folder last saved to, else the form's preset's folder unless
  // it is the bundled presets', else <AppDataLocation>/presets.
  QString preset_save_dir() const;
  // The About box's text: versions of Odyssey and Qt, and what odyssey-train env reports.
  QString about_text() const;
  bool save_preset_to(const QString& path);
  // The drop handler: accepts one local .yaml/.yml file.
  static bool acceptable_drop(const QMimeData* mime, QString* path);
  bool handle_drop(const QMimeData* mime);

 signals:
  // View → Language, answered "Restart now": the program should restart in the chosen language.
  void restart_requested();

 protected:
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dropEvent(QDropEvent* e) override;
  void closeEvent(QCloseEvent* e) override;
  void showEvent(QShowEvent* e) override;

 private:
  void build_menus();
  void build_help_menu();
  void build_language_menu(QMenu* menu);
  void choose_language(const QString& code);
  void show_about();
  bool maybe_save();
  QSize first_run_size() const;
  void fit_to_screen();
  void fill_recent_menu();
  void open_dialog();
  bool save();
  bool save_as();
  void import_swift_dialog();
  void show_banner(const QString& html, bool error);
  void update_status();
  void update_title();
  void start_job();
  void stop_job();
  // Stop/Kill and Start as the job controller last saw the followed run.
  void update_job_controls();
  void update_output_root(bool reattach);
  void update_buttons();

 public:
  // Shows `html` in the job area (an error in the palette's error colour).
  void set_job_message(const QString& html, bool error);

 private:
  std::unique_ptr<Settings> settings_;
  ConfigForm* form_;
  QTabWidget* tabs_;
  TrainPage* train_;
  AdvancedPage* advanced_;
  PlannerGauge* gauge_;
  CommandPreview* commands_;
  MessageArea* banner_;
  QLabel* status_;
  QPushButton* start_;
  QPushButton* stop_;
  MessageArea* job_status_;
  MonitorPage* monitor_ = nullptr;
  ChatPage* chat_ = nullptr;
  EvaluatePage* evaluate_ = nullptr;
  ExportPage* export_ = nullptr;
  QMenu* recent_ = nullptr;
  QString shown_language_ = QStringLiteral("en");

  JobController* jobs_;
};

}  // namespace odyssey::ui
