#include "settings.h"

#include <QDir>
#include <QSettings>

#include "planner/memory_planner.h"

namespace odyssey::ui {

Settings::Settings(const QString& path)
    : s_(path.isEmpty() ? new QSettings() : new QSettings(path, QSettings::IniFormat)) {}

Settings::~Settings() { delete s_; }

QStringList Settings::recent(const QString& key) const { return s_->value(key).toStringList(); }

void Settings::push_recent(const QString& key, const QString& value) {
  QStringList l = recent(key);
  l.removeAll(value);
  l.prepend(value);
  while (l.size() > kMaxRecent) l.removeLast();
  s_->setValue(key, l);
}

QStringList Settings::recent_presets() const { return recent(QStringLiteral("recent/presets")); }

void Settings::add_recent_preset(const QString& path) {
  push_recent(QStringLiteral("recent/presets"), QDir::cleanPath(path));
}

void Settings::remove_recent_preset(const QString& path) {
  QStringList l = recent_presets();
  l.removeAll(QDir::cleanPath(path));
  s_->setValue(QStringLiteral("recent/presets"), l);
}

QStringList Settings::recent_models() const { return recent(QStringLiteral("recent/models")); }

void Settings::add_recent_model(const QString& model) {
  if (!model.trimmed().isEmpty()) push_recent(QStringLiteral("recent/models"), model.trimmed());
}

QString Settings::last_dir(const QString& purpose) const {
  return s_->value(QStringLiteral("dirs/") + purpose, QDir::homePath()).toString();
}

void Settings::set_last_dir(const QString& purpose, const QString& dir) {
  s_->setValue(QStringLiteral("dirs/") + purpose, dir);
}

QByteArray Settings::window_geometry() const { return s_->value(QStringLiteral("window/geometry")).toByteArray(); }

QByteArray Settings::window_state() const { return s_->value(QStringLiteral("window/state")).toByteArray(); }

void Settings::set_window(const QByteArray& geometry, const QByteArray& state) {
  s_->setValue(QStringLiteral("window/geometry"), geometry);
  s_->setValue(QStringLiteral("window/state"), state);
}

QString Settings::language() const { return s_->value(QStringLiteral("ui/language")).toString(); }

void Settings::set_language(const QString& code) { s_->setValue(QStringLiteral("ui/language"), code); }

double Settings::gpu_memory_gib() const {
  const double h200 = static_cast<double>(planner::kH200MemoryBytes) / static_cast<double>(planner::kGiB);
  const double v = s_->value(QStringLiteral("planner/gpu_memory_gib"), h200).toDouble();
  return v > 0 ? v : h200;
}

void Settings::set_gpu_memory_gib(double gib) { s_->setValue(QStringLiteral("planner/gpu_memory_gib"), gib); }

}  // namespace odyssey::ui
