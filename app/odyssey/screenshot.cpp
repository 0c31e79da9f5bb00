#include "screenshot.h"

#include <QApplication>
#include <QDir>
#include <QFileInfo>
#include <QLabel>
#include <QPushButton>
#include <QTabWidget>
#include <QTimer>
#include <cstdio>
#include <functional>
#include <memory>

#include "config_form.h"
#include "dataset_model.h"
#include "dataset_preview.h"
#include "main_window.h"
#include "message_area.h"
#include "train_page.h"
#ifdef ODYSSEY_HAVE_MONITOR
#include "monitor/monitor_page.h"
#endif

namespace odyssey::app {
namespace {

struct Shots {
  ui::MainWindow* w;
  QDir dir;
  QStringList presets;
  int preset = 0;
  int waited_ms = 0;
  int failures = 0;
  bool live = false;  // the first preset is trained for real while its pages are grabbed
};

// Steps the live run has made before its pages are grabbed (the quickstart makes 100).
constexpr std::int64_t kLiveSteps = 40;

bool idle(const ui::MainWindow* w) {
  return !w->form()->model_pending() && !w->form()->files_pending() &&
         w->train_page()->datasets()->pending_scans() == 0 && !w->train_page()->preview()->busy();
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
void wait_run_end(std::shared_ptr<Shots> s);

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
    if (s->live) {
      wait_run_end(s);
      return;
    }
    ++s->preset;
    step(s);
    return;
  }
  tabs->setCurrentIndex(tab);
  QTimer::singleShot(200, s->w, [s, tab, stem] {
    // The page's English name whatever language the tabs show (train, advanced, monitor, chat, evaluate, export).
    static const char* const names[] = {"train", "advanced", "monitor", "chat", "evaluate", "export"};
    const QString name = tab < 6 ? QString::fromLatin1(names[tab]) : QString::number(tab);
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

#ifdef ODYSSEY_HAVE_MONITOR
// After the live run's pages: let the run finish (no engine is left behind), then go on.
void wait_run_end(std::shared_ptr<Shots> s) {
  const bool running = s->w->launching() || s->w->stop_button()->isEnabled();
  if (running && s->waited_ms < 600000) {
    s->waited_ms += 250;
    QTimer::singleShot(250, s->w, [s] { wait_run_end(s); });
    return;
  }
  std::printf("live run: %s at step %lld\n", qPrintable(s->w->monitor()->state_text()),
              static_cast<long long>(s->w->monitor()->latest_step()));
  s->live = false;
  ++s->preset;
  step(s);
}

// Start the first preset with the real engine and wait until the Monitor has charted
// kLiveSteps steps; if the engine cannot train here, fall back to still pages.
void wait_live(std::shared_ptr<Shots> s) {
  ui::MonitorPage* m = s->w->monitor();
  if (!m->attached_run().isEmpty() && m->latest_step() >= kLiveSteps) {
    std::printf("live run: %s at step %lld\n", qPrintable(m->attached_run()), static_cast<long long>(m->latest_step()));
    s->waited_ms = 0;
    grab_pages(s, 0);
    return;
  }
  if ((!s->w->launching() && m->attached_run().isEmpty()) || s->waited_ms > 180000) {
    std::fprintf(stderr, "odyssey: no live run for the screenshots: %s\n", qPrintable(s->w->job_status()->text()));
    s->live = false;
    s->waited_ms = 0;
    grab_pages(s, 0);
    return;
  }
  s->waited_ms += 100;
  QTimer::singleShot(100, s->w, [s] { wait_live(s); });
}

void start_live(std::shared_ptr<Shots> s) {
  if (!idle(s->w) && s->waited_ms < 10000) {
    s->waited_ms += 50;
    QTimer::singleShot(50, s->w, [s] { start_live(s); });
    return;
  }
  s->waited_ms = 0;
  if (!s->w->start_button()->isEnabled()) {
    std::fprintf(stderr, "odyssey: Start is disabled: %s\n", qPrintable(s->w->start_button()->toolTip()));
    s->live = false;
    grab_pages(s, 0);
    return;
  }
  s->w->start_button()->click();
  wait_live(s);
}
#else
void wait_run_end(std::shared_ptr<Shots> s) {
  s->live = false;
  ++s->preset;
  step(s);
}
#endif

void step(std::shared_ptr<Shots> s) {
  if (!s->w->open_preset(s->presets[s->preset])) ++s->failures;
  s->waited_ms = 0;
#ifdef ODYSSEY_HAVE_MONITOR
  if (s->live) {
    // The run's output goes to a scratch folder (emptied first), not next to the preset.
    QDir out(QDir::temp().filePath(QStringLiteral("odyssey-screenshot-runs")));
    out.removeRecursively();
    QDir().mkpath(out.path());
    s->w->form()->set_text("output_dir", "\"" + out.path().toStdString() + "\"");
    QTimer::singleShot(100, s->w, [s] { start_live(s); });
    return;
  }
#endif
  QTimer::singleShot(100, s->w, [s] { wait_idle(s); });
}

}  // namespace

void take_screenshots(ui::MainWindow* window, const QString& dir, const QStringList& presets, bool live) {
  QDir().mkpath(dir);
  auto s = std::make_shared<Shots>(Shots{window, QDir(dir), presets});
  s->live = live;
  // ODYSSEY_SCREENSHOT_SIZE=WxH (e.g. 1366x768, a laptop) instead of 1600×1000.
  QSize size(1600, 1000);
  const QStringList wh = qEnvironmentVariable("ODYSSEY_SCREENSHOT_SIZE").split(QLatin1Char('x'));
  if (wh.size() == 2 && wh[0].toInt() > 0 && wh[1].toInt() > 0) size = QSize(wh[0].toInt(), wh[1].toInt());
  window->resize(size);
  QTimer::singleShot(300, window, [s] { step(s); });
}

}  // namespace odyssey::app
