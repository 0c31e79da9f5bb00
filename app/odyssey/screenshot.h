// Screenshot mode: drive the real window through presets and pages and save PNGs, without
// blocking the event loop (each step is a timer callback), then quit. With `live`, the first
// preset is started with the real engine (Start, as a user would) and its pages are grabbed
// once the Monitor has charted a few dozen steps; the run is left to finish before the next
// preset.
#pragma once

#include <QString>
#include <QStringList>

namespace odyssey::ui {
class MainWindow;
}

namespace odyssey::app {

void take_screenshots(ui::MainWindow* window, const QString& dir, const QStringList& presets, bool live);

}  // namespace odyssey::app
