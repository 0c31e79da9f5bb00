// Screenshot mode: drive the real window through presets and pages and save PNGs, without
// blocking the event loop (each step is a timer callback), then quit.
#pragma once

#include <QString>
#include <QStringList>

namespace odyssey::ui {
class MainWindow;
}

namespace odyssey::app {

void take_screenshots(ui::MainWindow* window, const QString& dir, const QStringList& presets);

}  // namespace odyssey::app
