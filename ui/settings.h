// Settings: the one place that reads and writes QSettings (recent presets and models,
// last folders, window geometry and dock layout, the planner's GPU capacity, the language). Every other
// class asks this one, so keys and defaults live in a single file.
#pragma once

#include <QByteArray>
#include <QString>
#include <QStringList>

class QSettings;

namespace odyssey::ui {

class Settings {
 public:
  // `path` empty: the user's settings (organisation/application from QCoreApplication);
  // otherwise an INI file (tests use a temporary one).
  explicit Settings(const QString& path = {});
  ~Settings();
  Settings(const Settings&) = delete;
  Settings& operator=(const Settings&) = delete;

  static constexpr int kMaxRecent = 10;

  QStringList recent_presets() const;
  void add_recent_preset(const QString& path);  // most recent first, deduplicated
  void remove_recent_preset(const QString& path);

  QStringList recent_models() const;
  void add_recent_model(const QString& model);

  QString last_dir(const QString& purpose) const;  // "preset", "dataset", "model", "output"
  void set_last_dir(const QString& purpose, const QString& dir);

  QByteArray window_geometry() const;
  QByteArray window_state() const;
  void set_window(const QByteArray& geometry, const QByteArray& state);

  // The window's language: "" follows the system locale, else "en" or "zh_CN" (View → Language;
  // read at start-up).
  QString language() const;
  void set_language(const QString& code);

  // The planner's GPU memory per device in GiB (H200 until GPU detection lands).
  double gpu_memory_gib() const;
  void set_gpu_memory_gib(double gib);

 private:
  QStringList recent(const QString& key) const;
  void push_recent(const QString& key, const QString& value);
  QSettings* s_;
};

}  // namespace odyssey::ui
