// MainWindow: the shell around the pages — tabs (Train, Advanced, Monitor when built), the
// memory plan and command docks, the File menu (presets: open, save, recent, bundled,
// import a swift command), drag-and-drop of a .yaml, a banner for load failures and a
// status line that says whether the job can start. Pages own their logic.
#pragma once

#include <QMainWindow>
#include <memory>

class QLabel;
class QMenu;
class QMimeData;
class QPushButton;
class QTabWidget;

namespace odyssey::ui {

class AdvancedPage;
class CommandPreview;
class ConfigForm;
class PlannerGauge;
class Settings;
class TrainPage;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  // `settings` is owned by the window.
  explicit MainWindow(std::unique_ptr<Settings> settings, QWidget* parent = nullptr);
  ~MainWindow() override;

  ConfigForm* form() const { return form_; }
  QTabWidget* tabs() const { return tabs_; }
  TrainPage* train_page() const { return train_; }
  AdvancedPage* advanced_page() const { return advanced_; }
  PlannerGauge* gauge() const { return gauge_; }
  CommandPreview* commands() const { return commands_; }
  QLabel* banner() const { return banner_; }
  QPushButton* start_button() const { return start_; }
  Settings* settings() const { return settings_.get(); }

  // Load a preset; on failure the form is unchanged and the banner shows file:line.
  bool open_preset(const QString& path);
  bool save_preset_to(const QString& path);
  // The drop handler: accepts one local .yaml/.yml file.
  static bool acceptable_drop(const QMimeData* mime, QString* path);
  bool handle_drop(const QMimeData* mime);

 protected:
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dropEvent(QDropEvent* e) override;
  void closeEvent(QCloseEvent* e) override;

 private:
  void build_menus();
  void fill_recent_menu();
  void open_dialog();
  bool save();
  bool save_as();
  void import_swift_dialog();
  void show_banner(const QString& html, bool error);
  void update_status();
  void update_title();

  std::unique_ptr<Settings> settings_;
  ConfigForm* form_;
  QTabWidget* tabs_;
  TrainPage* train_;
  AdvancedPage* advanced_;
  PlannerGauge* gauge_;
  CommandPreview* commands_;
  QLabel* banner_;
  QLabel* status_;
  QPushButton* start_;
  QMenu* recent_ = nullptr;
};

}  // namespace odyssey::ui
