// odyssey: the workbench window. `odyssey [PRESET]` opens a preset; `--screenshot DIR`
// shows the real window with the quickstart and the 7B Ulysses preset, saves a PNG of
// every page there and exits (docs/screenshots/ is made this way under Xvfb).
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QIcon>
#include <QPainter>
#include <QPainterPath>
#include <memory>

#include "config/preset_io.h"
#include "main_window.h"
#include "screenshot.h"
#include "settings.h"

namespace {

// The icon of resources/icons/odyssey.svg, painted, for Qt installs without the SVG plugin.
QIcon painted_icon() {
  QPixmap pm(256, 256);
  pm.fill(Qt::transparent);
  QPainter p(&pm);
  p.setRenderHint(QPainter::Antialiasing);
  QLinearGradient sky(0, 0, 0, 256);
  sky.setColorAt(0, QColor(0x1e, 0x3a, 0x8a));
  sky.setColorAt(1, QColor(0x25, 0x63, 0xeb));
  p.setPen(Qt::NoPen);
  p.setBrush(sky);
  p.drawRoundedRect(QRectF(8, 8, 240, 240), 48, 48);
  p.setBrush(QColor(0xf8, 0xfa, 0xfc));
  p.drawPolygon(QPolygonF({QPointF(128, 44), QPointF(128, 170), QPointF(62, 170)}));
  p.setBrush(QColor(0xfb, 0xbf, 0x24));
  p.drawPolygon(QPolygonF({QPointF(136, 64), QPointF(136, 170), QPointF(190, 170)}));
  p.setBrush(QColor(0xe2, 0xe8, 0xf0));
  p.drawRoundedRect(QRectF(124, 40, 8, 136), 3, 3);
  p.setBrush(QColor(0x0f, 0x17, 0x2a));
  p.drawPolygon(QPolygonF({QPointF(52, 178), QPointF(204, 178), QPointF(184, 204), QPointF(72, 204)}));
  for (int i = 0; i < 7; ++i) {
    p.setBrush(i == 3 ? QColor(0xfb, 0xbf, 0x24) : QColor(0x38, 0xbd, 0xf8));
    p.drawRoundedRect(QRectF(36 + 28 * i, 214, i == 6 ? 16 : 22, 10), 3, 3);
  }
  return QIcon(pm);
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("Odyssey"));
  QApplication::setApplicationName(QStringLiteral("odyssey"));
  QApplication::setApplicationVersion(QStringLiteral(ODYSSEY_VERSION));
  QApplication::setDesktopFileName(QStringLiteral("odyssey"));
  QIcon icon(QStringLiteral(":/icons/odyssey.svg"));
  QApplication::setWindowIcon(icon.pixmap(64).isNull() ? painted_icon() : icon);

  QCommandLineParser cli;
  cli.setApplicationDescription(QStringLiteral("Odyssey: configure, plan and launch long-context LLM fine-tuning."));
  cli.addHelpOption();
  cli.addVersionOption();
  cli.addPositionalArgument(QStringLiteral("preset"), QStringLiteral("A preset (.yaml) to open."), QStringLiteral("[preset]"));
  QCommandLineOption shots(QStringLiteral("screenshot"), QStringLiteral("Save a PNG of every page to DIR and exit."),
                           QStringLiteral("DIR"));
  QCommandLineOption ini(QStringLiteral("settings"), QStringLiteral("Keep settings in this INI file instead of the user's."),
                         QStringLiteral("FILE"));
  cli.addOptions({shots, ini});
  cli.process(app);

  // Screenshots never touch the user's settings.
  QString settings_file = cli.value(ini);
  if (cli.isSet(shots) && settings_file.isEmpty()) settings_file = QDir::temp().filePath(QStringLiteral("odyssey-screenshot.ini"));
  if (cli.isSet(shots)) QFile::remove(settings_file);
  auto* w = new odyssey::ui::MainWindow(std::make_unique<odyssey::ui::Settings>(settings_file));
  w->setAttribute(Qt::WA_DeleteOnClose);
  if (!cli.positionalArguments().isEmpty()) w->open_preset(cli.positionalArguments().first());
  w->show();
  if (cli.isSet(shots)) {
    const QString presets = QString::fromStdString(odyssey::data_dir()) + QStringLiteral("/presets/");
    odyssey::app::take_screenshots(w, cli.value(shots),
                                   {presets + QStringLiteral("quickstart.yaml"),
                                    presets + QStringLiteral("qwen2.5-7b-lora-32k-ulysses.yaml")});
  }
  return QApplication::exec();
}
