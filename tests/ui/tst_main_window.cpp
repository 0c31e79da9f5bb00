// The window: presets (open, invalid, drop), the command preview against the real CLI,
// and the memory planner gauge.
#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QMessageBox>
#include <QStandardPaths>
#include <QTimer>
#include <QLabel>
#include <QMimeData>
#include <QProcessEnvironment>
#include <QGuiApplication>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QProcess>
#include <QPushButton>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QUrl>
#include <fstream>

#include "command_preview.h"
#include "config/swift_bridge.h"
#include "config/validate.h"
#include "advanced_page.h"
#include "config_form.h"
#include "../support/message_box.h"
#include "main_window.h"
#include "message_area.h"
#include "planner_gauge.h"
#include "settings.h"

using namespace odyssey;
using namespace odyssey::ui;

namespace {

QString preset_path(const char* name) { return QStringLiteral(ODYSSEY_SOURCE_DIR "/presets/") + QLatin1String(name); }

#ifdef ODYSSEY_TRAIN_BIN
// Run odyssey-train to completion without waitFor*: the event loop runs while it works.
QByteArray run_cli(const QStringList& args, int* exit_code) {
  QProcess p;
  p.setProgram(QStringLiteral(ODYSSEY_TRAIN_BIN));
  p.setArguments(args);
  QSignalSpy done(&p, &QProcess::finished);
  p.start();
  if (!done.wait(30000)) return {};
  *exit_code = p.exitCode();
  return p.readAllStandardOutput();
}
#endif

using testing::answer_next_box;

}  // namespace

class TstMainWindow : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  std::unique_ptr<MainWindow> w_;

 private slots:
  void initTestCase() { QStandardPaths::setTestModeEnabled(true); }
  void init() { w_ = std::make_unique<MainWindow>(std::make_unique<Settings>(tmp_.filePath(QStringLiteral("s.ini")))); }
  void cleanup() { w_.reset(); }

  // The model picker lists what the Hugging Face cache holds (HF_HUB_CACHE, refs/main ->
  // snapshots/<rev>) with family and size, a multimodal checkpoint as its text model, and an
  // architecture Odyssey does not train as such, with the reason, in the warning colour.
  void cached_models_listed_with_family_size_and_support() {
    QTemporaryDir hub, ms;
    auto add = [&](const QString& id, const QByteArray& config) {
      const QString repo = hub.filePath("models--" + QString(id).replace('/', "--"));
      QVERIFY(QDir().mkpath(repo + "/refs") && QDir().mkpath(repo + "/snapshots/abc123"));
      QFile ref(repo + "/refs/main"), cfg(repo + "/snapshots/abc123/config.json");
      QVERIFY(ref.open(QIODevice::WriteOnly) && ref.write("abc123") == 6);
      QVERIFY(cfg.open(QIODevice::WriteOnly) && cfg.write(config) == config.size());
    };
    QFile qwen(QStringLiteral(ODYSSEY_SOURCE_DIR "/resources/model-shapes/Qwen--Qwen2.5-0.5B.json"));
    QVERIFY(qwen.open(QIODevice::ReadOnly));
    add("Qwen/Qwen2.5-0.5B", qwen.readAll());
    add("mistralai/Mistral-Small-3.1-24B-Instruct-2503", R"({"architectures": ["Mistral3ForConditionalGeneration"],
      "model_type": "mistral3", "text_config": {"head_dim": 128, "hidden_size": 5120, "intermediate_size": 32768,
      "max_position_embeddings": 131072, "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 40,
      "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000000.0, "sliding_window": null,
      "vocab_size": 131072}, "torch_dtype": "bfloat16", "vision_config": {"model_type": "pixtral"}})");
    add("state-spaces/mamba-130m-hf", R"({"architectures": ["MambaForCausalLM"], "model_type": "mamba"})");
    qputenv("HF_HUB_CACHE", hub.path().toUtf8());
    qputenv("MODELSCOPE_CACHE", ms.path().toUtf8());
    w_ = std::make_unique<MainWindow>(std::make_unique<Settings>(tmp_.filePath(QStringLiteral("s.ini"))));
    auto* cached = w_->findChild<QComboBox*>(QStringLiteral("cachedModels"));
    QVERIFY(cached);
    QTRY_VERIFY(cached->isEnabled());
    qunsetenv("HF_HUB_CACHE");
    qunsetenv("MODELSCOPE_CACHE");
    QStringList items;
    for (int i = 0; i < cached->count(); ++i) items << cached->itemText(i);
    QCOMPARE(items.size(), 4);
    QCOMPARE(items[0], QStringLiteral("Cached models (3, 2 supported)…"));
    QVERIFY2(items.contains(QStringLiteral("Qwen/Qwen2.5-0.5B — qwen2 · 494.0 M")), qPrintable(items.join(" | ")));
    QVERIFY2(items.contains(QStringLiteral("mistralai/Mistral-Small-3.1-24B-Instruct-2503 — mistral (text model) · "
                                           "23.57 B")),
             qPrintable(items.join(" | ")));
    int mamba = -1, mistral = -1;
    for (int i = 0; i < items.size(); ++i) {
      if (items[i].startsWith(QStringLiteral("state-spaces/mamba-130m-hf — not supported: found 'MambaForCausalLM'")))
        mamba = i;
      if (items[i].startsWith(QStringLiteral("mistralai/"))) mistral = i;
    }
    QVERIFY2(mamba > 0, qPrintable(items.join(" | ")));
    QVERIFY(cached->itemData(mamba, Qt::ForegroundRole).isValid());
    // Choosing one puts its hub id in the model field.
    cached->setCurrentIndex(mistral);
    emit cached->activated(mistral);
    QVERIFY2(w_->form()->value_text("model").find("mistralai/Mistral-Small-3.1-24B-Instruct-2503") != std::string::npos,
             w_->form()->value_text("model").c_str());
  }

  void has_the_pages_and_start_follows_validity() {
    QVERIFY(w_->tabs()->count() >= 2);
    QCOMPARE(w_->tabs()->tabText(0).remove(QLatin1Char('&')), QStringLiteral("Train"));
    QCOMPARE(w_->tabs()->tabText(1).remove(QLatin1Char('&')), QStringLiteral("Advanced"));
    QVERIFY(w_->open_preset(preset_path("quickstart.yaml")));
    QTRY_VERIFY(!w_->form()->model_pending());
    QVERIFY(!w_->form()->has_errors());
    // Start waits for the engine's own check of the files (off the GUI thread), then opens.
    QVERIFY(w_->form()->files_pending());
    QVERIFY(!w_->start_button()->isEnabled());
    QVERIFY2(w_->start_button()->toolTip().contains(QStringLiteral("Checking")),
             qPrintable(w_->start_button()->toolTip()));
    QTRY_VERIFY(w_->start_button()->isEnabled());
    QVERIFY2(w_->start_button()->toolTip().contains(QStringLiteral(".odyssey-launch")),
             qPrintable(w_->start_button()->toolTip()));
    QVERIFY(!w_->stop_button()->isEnabled());  // nothing runs
    // An error at a field disables Start.
    w_->form()->set_text("learning_rate", "-1");
    QVERIFY(w_->form()->has_errors());
    QVERIFY(!w_->start_button()->isEnabled());
    QVERIFY(w_->start_button()->toolTip().contains(QStringLiteral("red")));
    w_->form()->set_text("learning_rate", "0.002");
    QTRY_VERIFY(w_->start_button()->isEnabled());
    // A dataset that is not there: once the engine's check ends, an error at the dataset field
    // (it was a warning that left Start open, and odyssey-train then refused the run).
    QVERIFY(!has_errors(w_->form()->set_text("dataset", "[\"/nonexistent/train.jsonl\"]")));
    QTRY_VERIFY(!w_->form()->files_pending());
    QVERIFY(!w_->start_button()->isEnabled());
    const Diagnostics at = w_->form()->diagnostics_for("dataset");
    QVERIFY(!at.empty() && at.front().severity == Severity::Error);
    QVERIFY2(at.front().message.find("no such file") != std::string::npos, at.front().message.c_str());
    // A file the engine's reader refuses (every record malformed) names the file at the field.
    const QString junk = tmp_.filePath(QStringLiteral("junk.jsonl"));
    {
      QFile f(junk);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("{broken\nnot json\n");
    }
    QVERIFY(!has_errors(w_->form()->set_text("dataset", ("[\"" + junk + "\"]").toStdString())));
    QTRY_VERIFY(!w_->form()->files_pending());
    QVERIFY(!w_->start_button()->isEnabled());
    const Diagnostics in_file = w_->form()->diagnostics_for("dataset");
    QVERIFY(!in_file.empty());
    QCOMPARE(QString::fromStdString(in_file.front().file), junk);
    // Fixed on disk behind the window's back, then the window is activated again: checked again.
    {
      QFile f(junk);
      QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
      f.write(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})"
              "\n");
    }
    w_->form()->recheck_files();
    QTRY_VERIFY(w_->start_button()->isEnabled());
  }

  // Issue 23, findings 1 and 2: an engine error of one long unbreakable line (a path, a log
  // line in <pre>) and a banner of many lines once made the window 2,548 px wide and 1,256 px
  // tall. Now they wrap and scroll inside a bounded area; the window keeps its size.
  void long_errors_never_grow_the_window() {
    w_->resize(1100, 700);
    w_->show();
    QVERIFY(QTest::qWaitForWindowExposed(w_.get()));
    const QSize before = w_->size();
    const QString path =
        QStringLiteral("/nonexistent/") + QString(600, QLatin1Char('x')) + QStringLiteral("/Qwen2.5-7B");
    QString lines;
    for (int i = 0; i < 60; ++i) lines += QStringLiteral("error line %1: %2\n").arg(i).arg(path);
    w_->set_job_message(QStringLiteral("<b>odyssey-train exited with status 2.</b><pre>") + lines.toHtmlEscaped() +
                            QStringLiteral("</pre>"),
                        true);
    // The form's first error names the long path too (the status line beside Start).
    w_->form()->set_text("model", ("\"" + path + "\"").toStdString());
    QTest::qWait(50);
    QCOMPARE(w_->size(), before);
    QVERIFY(w_->job_status()->isVisible());
    const int cap = w_->job_status()->fontMetrics().lineSpacing() * MessageArea::max_lines() + 40;
    QVERIFY2(w_->job_status()->height() <= cap, qPrintable(QString::number(w_->job_status()->height())));
    QVERIFY(w_->job_status()->verticalScrollBar()->maximum() > 0);  // the rest scrolls
    QVERIFY(w_->start_button()->isVisible());
    QVERIFY(w_->start_button()->geometry().right() <= w_->centralWidget()->width());
    // The banner (a preset that failed to load) the same.
    QVERIFY(!w_->open_preset(tmp_.filePath(QString(200, QLatin1Char('y')) + QStringLiteral(".yaml"))));
    QTest::qWait(50);
    QCOMPARE(w_->size(), before);
  }

  // Issue 23, finding 4: the window fits a 1366×768 laptop and 1280×800 at scale 2 (640×400
  // device-independent pixels): pages and docks scroll; a geometry saved on a larger screen is
  // clamped to this one on restore; the first-run size comes from the screen.
  void fits_small_screens_and_clamps_saved_geometry() {
    const QSize min = w_->minimumSizeHint().expandedTo(w_->minimumSize());
    QVERIFY2(min.width() <= 640 && min.height() <= 400,
             qPrintable(QStringLiteral("minimum %1x%2").arg(min.width()).arg(min.height())));
    const QRect avail = QGuiApplication::primaryScreen()->availableGeometry();
    QVERIFY2(w_->width() <= avail.width() && w_->height() <= avail.height(),
             qPrintable(QStringLiteral("first run %1x%2 on %3x%4")
                            .arg(w_->width())
                            .arg(w_->height())
                            .arg(avail.width())
                            .arg(avail.height())));
    // The Advanced page's columns reflow instead of clipping the third behind a scroll bar:
    // three where they fit, then two, then one (the page alone, at the widths it gets beside
    // the docks; the offscreen screen is smaller than a laptop's).
    {
      AdvancedPage page(w_->form(), nullptr);
      std::vector<int> counts;
      for (const int width : {1500, 1000, 520}) {
        page.resize(width, 700);
        page.show();
        QTest::qWait(30);
        auto* area = page.findChild<QScrollArea*>();
        QVERIFY(area);
        counts.push_back(page.column_count());
        QVERIFY2(area->horizontalScrollBar()->maximum() == 0,
                 qPrintable(QStringLiteral("width %1: %2 columns, horizontal scroll to %3 (content minimum %4)")
                                .arg(width)
                                .arg(page.column_count())
                                .arg(area->horizontalScrollBar()->maximum())
                                .arg(area->widget()->minimumSizeHint().width())));
      }
      QCOMPARE(counts, (std::vector<int>{3, 2, 1}));
    }
    // A window saved at 2,548 × 1,256 on another screen.
    w_->resize(2548, 1256);
    w_->settings()->set_window(w_->saveGeometry(), w_->saveState());
    w_.reset();
    w_ = std::make_unique<MainWindow>(std::make_unique<Settings>(tmp_.filePath(QStringLiteral("s.ini"))));
    w_->show();
    QVERIFY(QTest::qWaitForWindowExposed(w_.get()));
    QVERIFY2(w_->frameGeometry().width() <= avail.width() && w_->frameGeometry().height() <= avail.height(),
             qPrintable(QStringLiteral("restored %1x%2 on %3x%4")
                            .arg(w_->frameGeometry().width())
                            .arg(w_->frameGeometry().height())
                            .arg(avail.width())
                            .arg(avail.height())));
    QVERIFY(avail.contains(w_->frameGeometry()));
  }

#ifdef ODYSSEY_GUI_BIN
  // Issue 23, finding 10: --help and --version answer without a display; without one the
  // window says how to get one instead of Qt's abort.
  void help_and_version_need_no_display() {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    for (const char* v : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"}) env.remove(QString::fromLatin1(v));
    // The answers follow the locale (docs/gui.md, "Languages"): these are the English ones.
    for (const char* v : {"LC_ALL", "LC_MESSAGES", "LANGUAGE"}) env.remove(QString::fromLatin1(v));
    env.insert(QStringLiteral("LANG"), QStringLiteral("C"));
    auto run = [&](const QStringList& args, int* code) {
      QProcess p;
      p.setProcessEnvironment(env);
      p.start(QStringLiteral(ODYSSEY_GUI_BIN), args);
      if (!p.waitForFinished(30000)) return QByteArray("timeout");
      *code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
      return p.readAllStandardOutput() + p.readAllStandardError();
    };
    int code = -9;
    QByteArray out = run({QStringLiteral("--help")}, &code);
    QCOMPARE(code, 0);
    QVERIFY2(out.contains("Usage:") && out.contains("--screenshot"), out.constData());
    out = run({QStringLiteral("--version")}, &code);
    QCOMPARE(code, 0);
    QVERIFY2(out.contains(ODYSSEY_VERSION), out.constData());
    out = run({}, &code);
    QCOMPARE(code, 2);
    QVERIFY2(out.contains("no display") && out.contains("odyssey-train run"), out.constData());
  }
#endif

  // Issue 23, finding 9: unsaved changes are asked about before another preset replaces them
  // or the window closes; the last preset reopens; Save as… starts outside the bundled presets.
  void unsaved_changes_last_preset_and_save_folder() {
    QVERIFY(w_->open_preset(preset_path("quickstart.yaml")));
    QTRY_VERIFY(!w_->form()->model_pending());
    w_->form()->set_text("learning_rate", "3e-4");
    QVERIFY(w_->form()->modified());
    bool answered = false;
    answer_next_box(QMessageBox::Cancel, &answered);
    QVERIFY(!w_->open_preset_interactive(preset_path("qwen2.5-7b-lora-32k-ulysses.yaml")));
    QVERIFY(answered);
    QCOMPARE(QFileInfo(w_->form()->file()).fileName(), QStringLiteral("quickstart.yaml"));
    w_->show();
    answer_next_box(QMessageBox::Cancel, &answered);
    QVERIFY(!w_->close());  // closing is cancelled too
    QVERIFY(answered);
    QVERIFY(w_->isVisible());
    answer_next_box(QMessageBox::Discard, &answered);
    const bool opened = w_->open_preset_interactive(preset_path("qwen2.5-7b-lora-32k-ulysses.yaml"));
    QVERIFY2(opened, qPrintable(QStringLiteral("answered %1, banner %2").arg(answered).arg(w_->banner()->text())));
    QVERIFY(answered);
    QCOMPARE(QFileInfo(w_->form()->file()).fileName(), QStringLiteral("qwen2.5-7b-lora-32k-ulysses.yaml"));
    // Save as… does not start in the bundled presets' folder.
    const QString bundled = QFileInfo(preset_path("quickstart.yaml")).absolutePath();
    QVERIFY2(w_->preset_save_dir() != bundled, qPrintable(w_->preset_save_dir()));
    QVERIFY2(w_->preset_save_dir().endsWith(QStringLiteral("/presets")), qPrintable(w_->preset_save_dir()));
    QVERIFY(w_->close());  // nothing modified: no question
    // A new window (same settings) reopens the preset open last.
    w_ = std::make_unique<MainWindow>(std::make_unique<Settings>(tmp_.filePath(QStringLiteral("s.ini"))));
    QVERIFY(w_->reopen_last_preset());
    QCOMPARE(QFileInfo(w_->form()->file()).fileName(), QStringLiteral("qwen2.5-7b-lora-32k-ulysses.yaml"));
  }

  void about_names_the_versions() {
    const QString t = w_->about_text();
    QVERIFY2(t.contains(QString::fromLatin1(qVersion())), qPrintable(t));
#ifdef ODYSSEY_TRAIN_BIN
    qputenv("ODYSSEY_TRAIN_BIN", ODYSSEY_TRAIN_BIN);
    const QString with_engine = w_->about_text();
    QVERIFY2(with_engine.contains(QStringLiteral("LibTorch")), qPrintable(with_engine));
#endif
  }

  void invalid_preset_leaves_the_form_and_shows_file_line() {
    QVERIFY(w_->open_preset(preset_path("qwen2.5-7b-lora-32k-ulysses.yaml")));
    QVERIFY(w_->settings()->recent_presets().first().endsWith(QStringLiteral("qwen2.5-7b-lora-32k-ulysses.yaml")));
    const TrainConfig before = w_->form()->config();
    const QString file_before = w_->form()->file();
    const QString bad = tmp_.filePath(QStringLiteral("bad.yaml"));
    std::ofstream(bad.toStdString()) << "model: m\ndataset: [a.jsonl]\n\nlora_rank: many\n";
    QVERIFY(!w_->open_preset(bad));
    QCOMPARE(w_->form()->config(), before);
    QCOMPARE(w_->form()->file(), file_before);
    QVERIFY(w_->banner()->isVisibleTo(w_.get()));
    QVERIFY2(w_->banner()->text().contains(QStringLiteral("bad.yaml:4")), w_->banner()->text().toUtf8().constData());
    QVERIFY(w_->banner()->text().contains(QStringLiteral("lora_rank")));
    // An unknown key is refused the same way.
    std::ofstream(bad.toStdString()) << "model: m\nlora_rnak: 8\n";
    QVERIFY(!w_->open_preset(bad));
    QVERIFY(w_->banner()->text().contains(QStringLiteral("bad.yaml:2")));
    QCOMPARE(w_->form()->config(), before);
  }

  void dropping_a_preset_opens_it() {
    QMimeData mime;
    mime.setUrls({QUrl::fromLocalFile(preset_path("qwen2.5-0.5b-full-16k.yaml"))});
    QVERIFY(MainWindow::acceptable_drop(&mime, nullptr));
    QVERIFY(w_->handle_drop(&mime));
    QVERIFY(w_->form()->file().endsWith(QStringLiteral("qwen2.5-0.5b-full-16k.yaml")));
    QCOMPARE(w_->form()->config().tuner_type, std::string("full"));
    QMimeData text;
    text.setUrls({QUrl::fromLocalFile(tmp_.filePath(QStringLiteral("notes.txt")))});
    QVERIFY(!MainWindow::acceptable_drop(&text, nullptr));
    QMimeData two;
    two.setUrls(
        {QUrl::fromLocalFile(preset_path("quickstart.yaml")), QUrl::fromLocalFile(preset_path("quickstart.yaml"))});
    QVERIFY(!w_->handle_drop(&two));
  }

  void swift_preview_equals_export_swift() {
    QVERIFY(w_->open_preset(preset_path("qwen2.5-7b-lora-32k-ulysses.yaml")));
    QTRY_VERIFY(!w_->form()->model_pending());
    w_->form()->set_text("max_length", "65536");
    const auto& lc = w_->form()->loaded();
    const std::string expect =
        export_swift_command(resolve_paths(lc, locate_model(lc.config.model, lc.origin.base_dir)));
    QCOMPARE(w_->commands()->swift_text(), QString::fromStdString(expect));
    QVERIFY(w_->commands()->odyssey_text().contains(QStringLiteral("--set max_length=65536")));
  }

#ifdef ODYSSEY_TRAIN_BIN
  void previews_match_the_real_cli() {
    QVERIFY(w_->open_preset(preset_path("qwen2.5-7b-lora-32k-ulysses.yaml")));
    w_->form()->set_text("lora_rank", "64");
    w_->form()->set_text("output_dir", "\"my runs/x\"");
    const QString saved =
        QFileInfo(preset_path("quickstart.yaml")).absolutePath() + QStringLiteral("/.tst-cli-preview.yaml");
    QVERIFY(w_->save_preset_to(saved));
    QTRY_VERIFY(!w_->form()->model_pending());
    int rc = -1;
    const QByteArray out = run_cli({QStringLiteral("export-swift"), saved}, &rc);
    QFile::remove(saved);
    QCOMPARE(rc, 0);
    QCOMPARE(w_->commands()->swift_text(), QString::fromUtf8(out));

    // The odyssey-train arguments, run as `show`, resolve to the form's config.
    QVERIFY(w_->open_preset(preset_path("qwen2.5-7b-lora-32k-ulysses.yaml")));
    QTRY_VERIFY(!w_->form()->model_pending());
    w_->form()->set_text("max_length", "65536");
    w_->form()->set_text("gpu_ids", "[0, 1, 2, 3]");
    w_->form()->set_text("sequence_parallel_size", "4");
    QStringList args = odyssey_train_arguments(*w_->form(), QStringLiteral("show"));
    QVERIFY(args.contains(QStringLiteral("max_length=65536")));
    const QByteArray shown = run_cli(args, &rc);
    QCOMPARE(rc, 0);
    auto back = load_preset_text(shown.toStdString(), "show", "");
    QVERIFY2(back.ok(), format_all(back.diagnostics).c_str());
    const auto& lc = w_->form()->loaded();
    QCOMPARE(back.value.config, resolve_paths(lc, locate_model(lc.config.model, lc.origin.base_dir)));
  }
#endif

  void gauge_follows_the_form() {
    QVERIFY(w_->open_preset(preset_path("qwen2.5-7b-lora-32k-ulysses.yaml")));
    QTRY_VERIFY(w_->gauge()->plan().has_value());
    PlannerGauge* g = w_->gauge();
    QVERIFY(g->plan()->fits);
    const HfModelConfig* m = w_->form()->model();
    QVERIFY(m);
    QCOMPARE(g->largest_length(), largest_max_length(w_->form()->config(), *m, g->options()));
    QVERIFY(g->headline()->text().contains(QStringLiteral("fits")));
    // (1M tokens fits an H200 with checkpoint segments: 8M does not.)
    w_->form()->set_text("max_length", "8388608");
    QVERIFY(!g->plan()->fits);
    QVERIFY(g->headline()->text().contains(QStringLiteral("does not fit")));
    QCOMPARE(g->plan()->peak_bytes, plan_memory(w_->form()->config(), *m, g->options()).peak_bytes);
    // A smaller GPU: the capacity follows and is remembered.
    g->capacity()->setValue(40.0);
    QCOMPARE(g->plan()->capacity_bytes, plan_memory(w_->form()->config(), *m, g->options()).capacity_bytes);
    QCOMPARE(w_->settings()->gpu_memory_gib(), 40.0);
  }

  // The Train page's "Base weights" choice sets quant_bits and bnb_4bit_quant_type as the
  // Advanced page's keys would, the gauge re-plans at once, going back to 16-bit leaves no 4-bit
  // key behind to refuse, and the choice follows a config changed elsewhere.
  void base_weights_choice_sets_the_4bit_keys() {
    QVERIFY(w_->open_preset(preset_path("qwen2.5-7b-lora-32k-ulysses.yaml")));
    QTRY_VERIFY(w_->gauge()->plan().has_value());
    auto* box = w_->findChild<QComboBox*>(QStringLiteral("baseWeights"));
    QVERIFY(box);
    QVERIFY(box->isEnabled());
    QCOMPARE(box->currentIndex(), 0);
    // The plan's weights (its peak may not move: under a capacity that an earlier test left
    // smaller, auto checkpointing spends the room 4-bit weights free).
    auto weights = [this] {
      for (const MemoryItem& it : w_->gauge()->plan()->items)
        if (it.name == "weights") return it.bytes;
      return std::int64_t{-1};
    };
    const std::int64_t bf16_weights = weights(), bf16_peak = w_->gauge()->plan()->peak_bytes;
    QVERIFY(bf16_weights > (std::int64_t{12} << 30));  // 7.6 B parameters x 2 B
    auto choose = [box](int i) {
      box->setCurrentIndex(i);
      emit box->activated(i);
    };
    choose(1);
    QCOMPARE(w_->form()->config().quant_bits, std::int64_t{4});
    QCOMPARE(w_->form()->config().bnb_4bit_quant_type, std::string("nf4"));
    QVERIFY(weights() < bf16_weights - (std::int64_t{8} << 30));  // 14.2 GiB of bf16 -> 5.3 at 4 bits
    QCOMPARE(w_->gauge()->plan()->peak_bytes,
             plan_memory(w_->form()->config(), *w_->form()->model(), w_->gauge()->options()).peak_bytes);
    choose(2);
    QCOMPARE(w_->form()->config().bnb_4bit_quant_type, std::string("fp4"));
    choose(0);
    QCOMPARE(w_->form()->config().quant_bits, std::int64_t{0});
    QCOMPARE(weights(), bf16_weights);
    QCOMPARE(w_->gauge()->plan()->peak_bytes, bf16_peak);
    for (const char* k : {"quant_bits", "bnb_4bit_quant_type"})
      QVERIFY2(!has_errors(w_->form()->diagnostics_for(k)), format_all(w_->form()->diagnostics_for(k)).c_str());
    // Set elsewhere (the Advanced page, a preset): the choice shows it.
    w_->form()->set_text("quant_bits", "4");
    w_->form()->set_text("bnb_4bit_quant_type", "fp4");
    QCOMPARE(box->currentIndex(), 2);
    // Full fine-tuning trains 16-bit weights: the choice stays open only to come back to 16-bit.
    w_->form()->set_text("quant_bits", "0");
    w_->form()->set_text("tuner_type", "full");
    QVERIFY(!box->isEnabled());
  }

  void import_swift_command_fills_the_form() {
    const Diagnostics d = w_->form()->import_swift(
        QStringLiteral("NPROC_PER_NODE=2 swift sft --model Qwen/Qwen2.5-7B-Instruct --dataset a.jsonl "
                       "--sequence_parallel_size 2 --max_length 32768 --tuner_type lora --lora_rank 16"));
    QVERIFY2(!has_errors(d), format_all(d).c_str());
    QCOMPARE(w_->form()->config().sequence_parallel_size, std::int64_t{2});
    QCOMPARE(w_->form()->config().lora_rank, std::int64_t{16});
    QVERIFY(w_->form()->file().isEmpty());
    const TrainConfig before = w_->form()->config();
    QVERIFY(has_errors(w_->form()->import_swift(QStringLiteral("swift infer --model x"))));
    QCOMPARE(w_->form()->config(), before);
  }
};

QTEST_MAIN(TstMainWindow)
#include "tst_main_window.moc"
