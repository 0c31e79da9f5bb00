// odyssey: the workbench window. `odyssey [PRESET]` opens a preset; `--screenshot DIR`
// shows the real window with the quickstart and the 7B Ulysses preset, saves a PNG of
// every page there and exits (docs/screenshots/ is made this way under Xvfb; `--live` trains
// the quickstart meanwhile); `--dark` uses a dark palette; `--start` trains the preset (else the
// embedded quickstart) once it is checked and follows it on the Monitor (setup.sh quickstart).
#include <QApplication>
#include <QCoreApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QIcon>
#include <QPalette>
#include <QStyle>
#include <QPainter>
#include <QPainterPath>
#include <QProcess>
#include <cstdio>
#include <memory>

#include "config/preset_io.h"
#include "language.h"
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

// For desktops whose dark theme Qt does not pick up (and for the dark screenshot): the
// window's accents follow the palette's lightness (ui/palette.h).
QPalette dark_palette() {
  QPalette p;
  const QColor window(0x2b, 0x2d, 0x31), base(0x1e, 0x1f, 0x22), text(0xe6, 0xe6, 0xe6), dim(0x80, 0x80, 0x80);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, window);
  p.setColor(QPalette::ToolTipBase, base);
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::PlaceholderText, dim);
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, window);
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::BrightText, QColor(0xff, 0x6b, 0x6b));
  p.setColor(QPalette::Light, QColor(0x3c, 0x3f, 0x44));
  p.setColor(QPalette::Midlight, QColor(0x34, 0x36, 0x3b));
  p.setColor(QPalette::Mid, QColor(0x45, 0x48, 0x4e));
  p.setColor(QPalette::Dark, QColor(0x18, 0x19, 0x1b));
  p.setColor(QPalette::Shadow, Qt::black);
  p.setColor(QPalette::Highlight, QColor(0x3d, 0x7e, 0xd8));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Link, QColor(0x6c, 0xb4, 0xff));
  for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
    p.setColor(QPalette::Disabled, role, dim);
  p.setColor(QPalette::Disabled, QPalette::Base, window);
  return p;
}

QString tr_cli(const char* text) { return QCoreApplication::translate("odyssey", text); }

// Built after the translators are installed: --help prints these in the chosen language.
struct Cli {
  QCommandLineParser parser;
  QCommandLineOption shots{QStringLiteral("screenshot"),
                           tr_cli(QT_TRANSLATE_NOOP("odyssey",
                                                    "Save a PNG of every page to DIR and exit (of the presets given, "
                                                    "else of the quickstart and the 7B Ulysses preset).")),
                           QStringLiteral("DIR")};
  QCommandLineOption ini{QStringLiteral("settings"),
                         tr_cli(QT_TRANSLATE_NOOP("odyssey", "Keep settings in this INI file instead of the user's.")),
                         QStringLiteral("FILE")};
  QCommandLineOption live{QStringLiteral("live"),
                          tr_cli(QT_TRANSLATE_NOOP("odyssey",
                                                   "With --screenshot: train the quickstart with odyssey-train "
                                                   "while its pages are taken."))};
  QCommandLineOption dark{
      QStringLiteral("dark"),
      tr_cli(QT_TRANSLATE_NOOP("odyssey", "Use a dark palette (Fusion style) whatever the desktop's."))};
  QCommandLineOption start{QStringLiteral("start"),
                           tr_cli(QT_TRANSLATE_NOOP("odyssey",
                                                    "Start training the preset given (else the embedded "
                                                    "quickstart, not the last preset) as soon as its files are "
                                                    "checked, and follow it on the Monitor."))};
  QCommandLineOption language{QStringLiteral("language"),
                              tr_cli(QT_TRANSLATE_NOOP("odyssey",
                                                       "Show the window in LANG (en, zh_CN or system) for this "
                                                       "run, whatever View → Language says.")),
                              QStringLiteral("LANG")};
  Cli() {
    parser.setApplicationDescription(
        tr_cli(QT_TRANSLATE_NOOP("odyssey",
                                 "Odyssey: configure, plan and launch long-context LLM fine-tuning.\n"
                                 "Without a display, train with odyssey-train run PRESET (docs/cli.md).")));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addPositionalArgument(QStringLiteral("preset"),
                                 tr_cli(QT_TRANSLATE_NOOP("odyssey", "A preset (.yaml) to open.")),
                                 QStringLiteral("[preset]"));
    parser.addOptions({shots, ini, live, dark, start, language});
  }
};

// --language LANG / --language=LANG, read before the parser exists (its help is translated).
QString language_argument(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const QString a = QString::fromLocal8Bit(argv[i]);
    if (a == QStringLiteral("--language") && i + 1 < argc) return QString::fromLocal8Bit(argv[i + 1]);
    if (a.startsWith(QStringLiteral("--language="))) return a.mid(11);
  }
  return {};
}

// The language shown: --language, else the saved choice, else the system locale's.
QString install_language(QCoreApplication* app, const QString& argument, const QString& saved) {
  const QString code = odyssey::ui::resolve_language(argument.isEmpty() ? saved : argument);
  QString error;
  if (!odyssey::ui::install_translators(app, code, &error)) {
    std::fprintf(stderr, "odyssey: %s; the window is shown in English.\n", qPrintable(error));
    return QStringLiteral("en");
  }
  return code;
}

void name_application() {
  QCoreApplication::setOrganizationName(QStringLiteral("Odyssey"));
  QCoreApplication::setApplicationName(QStringLiteral("odyssey"));
  QCoreApplication::setApplicationVersion(QStringLiteral(ODYSSEY_VERSION));
}

// Whether Qt can open a window here: a platform chosen explicitly, an X11 or a Wayland display.
bool has_display() {
  return !qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM") || !qEnvironmentVariableIsEmpty("DISPLAY") ||
         !qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY");
}

}  // namespace

int main(int argc, char** argv) {
  // --help, --version and bad options need no display: answered by a core application (Qt's
  // GUI one aborts when it cannot reach a display).
  bool answer_only = false;
  for (int i = 1; i < argc; ++i) {
    const QByteArray a(argv[i]);
    answer_only = answer_only || a == "-h" || a == "--help" || a == "--help-all" || a == "-v" || a == "--version";
  }
  if (answer_only || !has_display()) {
    QCoreApplication core(argc, argv);
    name_application();
    install_language(&core, language_argument(argc, argv), QString());
    Cli cli;
    cli.parser.process(core);  // prints help or version and exits; exits 1 on an unknown option
    std::fprintf(stderr, "%s\n",
                 qPrintable(tr_cli(QT_TRANSLATE_NOOP(
                     "odyssey",
                     "odyssey: no display (neither DISPLAY nor WAYLAND_DISPLAY is set). The window needs one: run it "
                     "in a desktop session, under Xvfb (xvfb-run odyssey), or with QT_QPA_PLATFORM=offscreen for "
                     "screenshots. To train without a window: odyssey-train run PRESET."))));
    return 2;
  }
  QApplication app(argc, argv);
  name_application();
  QApplication::setDesktopFileName(QStringLiteral("odyssey"));
  QIcon icon(QStringLiteral(":/icons/odyssey.svg"));
  QApplication::setWindowIcon(icon.pixmap(64).isNull() ? painted_icon() : icon);

  Cli c;
  QCommandLineParser& cli = c.parser;
  const QCommandLineOption &shots = c.shots, &ini = c.ini, &live = c.live, &dark = c.dark, &start = c.start,
                           &language = c.language;
  cli.process(app);
  if (cli.isSet(dark)) {
    QApplication::setStyle(QStringLiteral("Fusion"));
    QApplication::setPalette(dark_palette());
  }

  // Screenshots never touch the user's settings.
  QString settings_file = cli.value(ini);
  if (cli.isSet(shots) && settings_file.isEmpty())
    settings_file = QDir::temp().filePath(QStringLiteral("odyssey-screenshot.ini"));
  if (cli.isSet(shots)) QFile::remove(settings_file);
  auto settings = std::make_unique<odyssey::ui::Settings>(settings_file);
  const QString shown_language = install_language(&app, cli.value(language), settings->language());
  auto* w = new odyssey::ui::MainWindow(std::move(settings));
  w->set_shown_language(shown_language);
  w->setAttribute(Qt::WA_DeleteOnClose);
  if (!cli.positionalArguments().isEmpty()) w->open_preset(cli.positionalArguments().first());
  else if (!cli.isSet(shots) && !cli.isSet(start))
    w->reopen_last_preset();  // the preset open when the window last closed
  // View → Language's "Restart now": once the window has closed (unsaved changes asked about
  // first), the program starts again with the same settings file and palette, and reopens the
  // preset that was open; a job keeps running and is re-attached.
  QObject::connect(w, &odyssey::ui::MainWindow::restart_requested, &app, [w, &cli, &ini, &dark] {
    if (!w->close()) return;
    QStringList args;
    if (cli.isSet(ini)) args << QStringLiteral("--settings") << cli.value(ini);
    if (cli.isSet(dark)) args << QStringLiteral("--dark");
    if (!QProcess::startDetached(QCoreApplication::applicationFilePath(), args))
      std::fprintf(stderr, "odyssey: could not start %s again\n", qPrintable(QCoreApplication::applicationFilePath()));
  });
  w->show();
  if (cli.isSet(start) && !cli.isSet(shots)) w->start_when_ready();
  if (cli.isSet(shots)) {
    // The presets given on the command line, else the quickstart and the 7B Ulysses preset.
    const QString presets = QString::fromStdString(odyssey::data_dir()) + QStringLiteral("/presets/");
    QStringList shown = cli.positionalArguments();
    for (QString& p : shown) p = QFileInfo(p).absoluteFilePath();
    if (shown.isEmpty())
      shown = {presets + QStringLiteral("quickstart.yaml"),
               presets + QStringLiteral("qwen2.5-7b-lora-32k-ulysses.yaml")};
    odyssey::app::take_screenshots(w, cli.value(shots), shown, cli.isSet(live));
  }
  return QApplication::exec();
}
