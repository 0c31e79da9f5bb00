#include "screenshot.h"

#include <QApplication>
#include <QDir>
#include <QFileInfo>
#include <QTabWidget>
#include <QTimer>
#include <cstdio>
#include <functional>
#include <memory>

#include "config_form.h"
#include "dataset_model.h"
#include "main_window.h"
#include "train_page.h"

namespace odyssey::app {
namespace {

struct Shots {
  ui::MainWindow* w;
  QDir dir;
  QStringList presets;
  int preset = 0;
  int waited_ms = 0;
  int failures = 0;
};

bool idle(const ui::MainWindow* w) {
  return !w->form()->model_pending() && w->train_page()->datasets()->pending_scans() == 0;
}

void save(Shots& s, const QString& name) {
  const QString path = s.dir.filePath(name + QStringLiteral(".png"));
  if (!s.w->grab().save(path)) {
    std::fprintf(stderr, "odyssey: cannot write %s\n", qPrintable(path));
    ++s.failures;
  } else {
    std::printf("%s\n", qPrintable(path));
  }
}

void step(std::shared_ptr<Shots> s);

// Grab every tab of the current preset, then go on with the next preset.
void grab_pages(std::shared_ptr<Shots> s, int tab) {
  QTabWidget* tabs = s->w->tabs();
  const QString stem = QFileInfo(s->presets[s->preset]).completeBaseName();
  if (tab >= tabs->count()) {
    if (s->preset == s->presets.size() - 1) {
      // The last preset once more with an invalid combination, to show marking at the field.
      s->w->form()->set_text("sequence_parallel_size", "3");
      tabs->setCurrentIndex(1);
      QTimer::singleShot(200, s->w, [s, stem] {
        save(*s, stem + QStringLiteral("-advanced-invalid"));
        std::fflush(stdout);
        QApplication::exit(s->failures == 0 ? 0 : 1);
      });
      return;
    }
    ++s->preset;
    step(s);
    return;
  }
  tabs->setCurrentIndex(tab);
  QTimer::singleShot(200, s->w, [s, tab, stem] {
    QString name = s->w->tabs()->tabText(tab).remove(QLatin1Char('&')).toLower();
    save(*s, stem + QLatin1Char('-') + name);
    grab_pages(s, tab + 1);
  });
}

void wait_idle(std::shared_ptr<Shots> s) {
  if (idle(s->w) || s->waited_ms > 10000) {
    grab_pages(s, 0);
    return;
  }
  s->waited_ms += 50;
  QTimer::singleShot(50, s->w, [s] { wait_idle(s); });
}

void step(std::shared_ptr<Shots> s) {
  if (!s->w->open_preset(s->presets[s->preset])) ++s->failures;
  s->waited_ms = 0;
  QTimer::singleShot(100, s->w, [s] { wait_idle(s); });
}

}  // namespace

void take_screenshots(ui::MainWindow* window, const QString& dir, const QStringList& presets) {
  QDir().mkpath(dir);
  auto s = std::make_shared<Shots>(Shots{window, QDir(dir), presets});
  window->resize(1600, 1000);
  QTimer::singleShot(300, window, [s] { step(s); });
}

}  // namespace odyssey::app
