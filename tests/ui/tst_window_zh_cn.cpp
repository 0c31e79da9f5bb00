// The real window under the zh_CN catalogue: every text it shows on its pages, docks and
// menus — labels, buttons, check boxes, group boxes, tabs, dock titles, table headers, chart
// axes and series, menu titles and actions, tooltips — is Chinese, or is made only of words that stay as they are
// (product and method names, acronyms, preset keys, paths, numbers and units). A text of
// English words left untranslated fails, naming the widget and the text. Engine diagnostics
// (core, English by design) are recognised and left alone.
#include <QAbstractButton>
#include <QApplication>
#include <QDialogButtonBox>
#include <QDockWidget>
#include <QFile>
#include <QGroupBox>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QLibraryInfo>
#include <QPushButton>
#include <QRegularExpression>
#include <QSet>
#include <QSignalSpy>
#include <QTabBar>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QTextDocumentFragment>
#include <qcustomplot.h>

#include <filesystem>

#include "config/train_config.h"
#include "config_form.h"
#include "dataset_model.h"
#include "dataset_preview.h"
#include "language.h"
#include "main_window.h"
#include "monitor/monitor_page.h"
#include "run_fixture.h"
#include "../support/message_box.h"
#include "settings.h"
#include "train_page.h"

using namespace odyssey;
using namespace odyssey::ui;

namespace {

// Words that are the same in the Chinese window: names of products, methods and formats,
// acronyms, and the native name of the English language in View → Language.
const QSet<QString>& kept_words() {
  static const QSet<QString> words = [] {
    QSet<QString> s;
    for (const char* w : {"lora",
                          "rslora",
                          "galore",
                          "q-galore",
                          "zero",
                          "ulysses",
                          "nccl",
                          "gpu",
                          "gpus",
                          "cpu",
                          "json",
                          "jsonl",
                          "yaml",
                          "ms-swift",
                          "swift",
                          "sft",
                          "odyssey-train",
                          "odyssey",
                          "qt",
                          "nvidia",
                          "nvml",
                          "hugging",
                          "face",
                          "modelscope",
                          "hub",
                          "adam",
                          "alpha",
                          "dropout",
                          "epsilon",
                          "mlp",
                          "kv",
                          "ema",
                          "nan",
                          "inf",
                          "dp",
                          "sp",
                          "ring",
                          "rank",
                          "png",
                          "csv",
                          "sigkill",
                          "sigterm",
                          "pid",
                          "gcd",
                          "gib",
                          "mib",
                          "gb",
                          "english",
                          "token",
                          "tokens",
                          "busbw",
                          "nccl-tests",
                          "deepspeed-ulysses",
                          "all-to-all",
                          "id",
                          "ids",
                          "chatml",
                          "full",
                          "bf16",
                          "fp32",
                          "auto",
                          "none"})
      s.insert(QString::fromLatin1(w));
    return s;
  }();
  return words;
}

// Preset keys, matched as spelled: "system" is a key, "System" a word to translate.
const QSet<QString>& preset_keys() {
  static const QSet<QString> keys = [] {
    QSet<QString> s;
    for (const FieldSpec& f : train_config_fields())
      s.insert(QString::fromUtf8(f.key.data(), static_cast<qsizetype>(f.key.size())));
    return s;
  }();
  return keys;
}

bool has_cjk(const QString& s) {
  for (const QChar c : s)
    if (c.unicode() >= 0x3400 && c.unicode() <= 0x9fff) return true;
  return false;
}

// The English words of `text` that are neither kept words nor parts of paths, file names,
// keys or numbers; empty when the text is acceptable as shown.
QStringList untranslated_words(const QString& text) {
  if (has_cjk(text)) return {};
  QStringList bad;
  static const QRegularExpression split(QStringLiteral("[\\s,;:()\\[\\]{}<>\"'“”=×÷·—–…!?|+*]+"));
  static const QRegularExpression word(QStringLiteral("^[A-Za-z][A-Za-z-]*[A-Za-z]$"));
  for (QString token : text.split(split, Qt::SkipEmptyParts)) {
    while (token.endsWith(QLatin1Char('.'))) token.chop(1);
    // Paths, file names, preset keys, numbers and units with digits (8, 0.05, 23.5, v2, --set).
    if (!word.match(token).hasMatch()) continue;
    if (!kept_words().contains(token.toLower()) && !preset_keys().contains(token)) bad << token;
  }
  return bad;
}

QString plain(const QString& maybe_html) {
  return Qt::mightBeRichText(maybe_html) ? QTextDocumentFragment::fromHtml(maybe_html).toPlainText() : maybe_html;
}

QString describe(const QObject* o) {
  QStringList chain;
  for (; o; o = o->parent()) {
    QString n = QString::fromLatin1(o->metaObject()->className());
    if (!o->objectName().isEmpty()) n += QLatin1Char('#') + o->objectName();
    chain.prepend(n);
    if (chain.size() == 4) break;
  }
  return chain.join(QStringLiteral(" > "));
}

}  // namespace

class TstWindowZhCn : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QStringList findings_;
  QSet<QString> reported_;
  QSet<QString> core_messages_;

  void check(const QObject* where, const QString& what, const QString& raw) {
    const QString text = plain(raw).trimmed();
    if (text.isEmpty()) return;
    for (const QString& m : core_messages_)
      if (!m.isEmpty() && text.contains(m)) return;  // an engine diagnostic, English by design
    const QStringList bad = untranslated_words(text);
    if (bad.isEmpty()) return;
    const QString line =
        QStringLiteral("%1 [%2]: \"%3\" (English: %4)").arg(describe(where), what, text, bad.join(QLatin1Char(' ')));
    if (!reported_.contains(line)) {
      reported_.insert(line);
      findings_ << line;
    }
  }

  void check_menu(const QMenu* menu, const QSet<QString>& file_menus) {
    check(menu, QStringLiteral("menu"), menu->title());
    // Recent and bundled presets list file names.
    if (file_menus.contains(menu->title())) return;
    for (const QAction* a : menu->actions()) {
      if (a->isSeparator()) continue;
      if (a->menu()) check_menu(a->menu(), file_menus);
      else check(menu, QStringLiteral("action"), a->text());
    }
  }

  void check_visible(QWidget* root) {
    for (QWidget* w : root->findChildren<QWidget*>()) {
      if (!w->isVisible()) continue;
      check(w, QStringLiteral("tooltip"), w->toolTip());
      if (auto* l = qobject_cast<QLabel*>(w)) check(w, QStringLiteral("label"), l->text());
      else if (auto* b = qobject_cast<QAbstractButton*>(w)) check(w, QStringLiteral("button"), b->text());
      else if (auto* g = qobject_cast<QGroupBox*>(w)) check(w, QStringLiteral("group box"), g->title());
      else if (auto* d = qobject_cast<QDockWidget*>(w)) check(w, QStringLiteral("dock"), d->windowTitle());
      else if (auto* e = qobject_cast<QLineEdit*>(w)) check(w, QStringLiteral("placeholder"), e->placeholderText());
      else if (auto* t = qobject_cast<QTabBar*>(w)) {
        for (int i = 0; i < t->count(); ++i) check(w, QStringLiteral("tab"), t->tabText(i));
      } else if (auto* h = qobject_cast<QHeaderView*>(w)) {
        if (!h->model() || h->orientation() != Qt::Horizontal) continue;
        for (int c = 0; c < h->model()->columnCount(); ++c)
          if (!h->isSectionHidden(c))
            check(w, QStringLiteral("header"), h->model()->headerData(c, Qt::Horizontal).toString());
      } else if (auto* p = qobject_cast<QCustomPlot*>(w)) {
        for (QCPAxis* a : p->axisRect() ? p->axisRect()->axes() : QList<QCPAxis*>{})
          check(w, QStringLiteral("axis"), a->label());
        for (int i = 0; i < p->plottableCount(); ++i) check(w, QStringLiteral("series"), p->plottable(i)->name());
      }
    }
  }

  // Each page, and each tab of the pages' own tab widgets (the Monitor's charts, log, compare).
  void check_pages(MainWindow& w) {
    for (int tab = 0; tab < w.tabs()->count(); ++tab) {
      w.tabs()->setCurrentIndex(tab);
      QTest::qWait(100);
      check_visible(&w);
      for (QTabWidget* inner : w.tabs()->currentWidget()->findChildren<QTabWidget*>()) {
        if (!inner->isVisible()) continue;
        for (int i = 0; i < inner->count(); ++i) {
          inner->setCurrentIndex(i);
          QTest::qWait(100);
          check_visible(&w);
        }
        inner->setCurrentIndex(0);
      }
    }
  }

 private slots:
  void initTestCase() {
    QString error;
    QVERIFY2(install_translators(qApp, QStringLiteral("zh_CN"), &error), qPrintable(error));
  }

  // The checker itself: English words are caught, kept words, keys and paths are not.
  void checker_sees_english() {
    QCOMPARE(untranslated_words(QStringLiteral("Start training")),
             (QStringList{QStringLiteral("Start"), QStringLiteral("training")}));
    QVERIFY(untranslated_words(QStringLiteral("开始训练")).isEmpty());
    QVERIFY(untranslated_words(QStringLiteral("LoRA alpha")).isEmpty());
    QVERIFY(untranslated_words(QStringLiteral("max_length 256")).isEmpty());
    QVERIFY(untranslated_words(QStringLiteral("../resources/quickstart/model")).isEmpty());
    QCOMPARE(untranslated_words(QStringLiteral("GPU memory")), QStringList{QStringLiteral("memory")});
    QVERIFY(untranslated_words(QStringLiteral("system")).isEmpty());
    QCOMPARE(untranslated_words(QStringLiteral("System prompt")),
             (QStringList{QStringLiteral("System"), QStringLiteral("prompt")}));
  }

  // View → Language: the three choices in their own words, the saved one checked; a change is
  // saved and announced for the next start, in the language shown now.
  void language_menu_saves_the_choice() {
    MainWindow w(std::make_unique<Settings>(tmp_.filePath(QStringLiteral("language.ini"))));
    w.set_shown_language(QStringLiteral("zh_CN"));
    auto* menu = w.findChild<QMenu*>(QStringLiteral("languageMenu"));
    QVERIFY(menu);
    const QList<QAction*> actions = menu->actions();
    QCOMPARE(actions.size(), 3);
    QVERIFY2(actions[0]->text().startsWith(QStringLiteral("跟随系统（")), qPrintable(actions[0]->text()));
    QCOMPARE(actions[1]->text(), QStringLiteral("English"));
    QCOMPARE(actions[2]->text(), QStringLiteral("简体中文"));
    QVERIFY(actions[0]->isChecked());  // nothing saved yet: the system's

    QSignalSpy restart(&w, &MainWindow::restart_requested);
    QString said;
    bool answered = false;
    testing::answer_next_box(QMessageBox::Cancel, &answered, &said);  // "Later"
    actions[1]->trigger();
    QVERIFY(answered);
    QCOMPARE(said, QStringLiteral("Odyssey 下次启动时将以 English 显示。"));
    QCOMPARE(w.settings()->language(), QStringLiteral("en"));
    QVERIFY(actions[1]->isChecked() && !actions[0]->isChecked());
    QCOMPARE(restart.count(), 0);

    // Back to the language shown: saved, nothing to announce (no box is left open).
    actions[2]->trigger();
    QCOMPARE(w.settings()->language(), QStringLiteral("zh_CN"));
    for (QWidget* top : QApplication::topLevelWidgets()) QVERIFY(!qobject_cast<QMessageBox*>(top) || !top->isVisible());

    // "Restart now" asks main() to start the program again (app/odyssey/main.cpp).
    testing::answer_next_box(QMessageBox::Ok, &answered, &said);
    actions[1]->trigger();
    QVERIFY(answered);
    QCOMPARE(restart.count(), 1);
    QCOMPARE(w.settings()->language(), QStringLiteral("en"));
    // A new window reads the saved choice.
    MainWindow again(std::make_unique<Settings>(tmp_.filePath(QStringLiteral("language.ini"))));
    QVERIFY(again.findChild<QMenu*>(QStringLiteral("languageMenu"))->actions()[1]->isChecked());
  }

  // Qt's own strings (standard buttons) come from Debian's qt6-translations-l10n.
  void qt_buttons_are_chinese() {
    if (!QFile::exists(QLibraryInfo::path(QLibraryInfo::TranslationsPath) + QStringLiteral("/qtbase_zh_CN.qm")))
      QSKIP("qtbase_zh_CN.qm is not installed (Debian: qt6-translations-l10n); Qt's buttons stay English");
    QDialogButtonBox box(QDialogButtonBox::Save | QDialogButtonBox::Cancel);
    QCOMPARE(box.button(QDialogButtonBox::Cancel)->text(), QStringLiteral("取消"));
  }

  void every_shown_text_is_chinese() {
    QVERIFY(tmp_.isValid());
    MainWindow w(std::make_unique<Settings>(tmp_.filePath(QStringLiteral("s.ini"))));
    QVERIFY(w.open_preset(QStringLiteral(ODYSSEY_SOURCE_DIR "/presets/quickstart.yaml")));
    w.resize(1600, 1000);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QTRY_VERIFY_WITH_TIMEOUT(!w.form()->model_pending() && !w.form()->files_pending() &&
                                 w.train_page()->datasets()->pending_scans() == 0 && !w.train_page()->preview()->busy(),
                             20000);
    for (const auto& d : w.form()->diagnostics()) core_messages_.insert(QString::fromStdString(d.message));
    QCOMPARE(w.start_button()->text(), QStringLiteral("开始训练"));  // the catalogue is in effect

    const QSet<QString> file_menus{QCoreApplication::translate("odyssey::ui::MainWindow", "&Recent presets"),
                                   QCoreApplication::translate("odyssey::ui::MainWindow", "&Bundled presets")};
    for (QAction* a : w.menuBar()->actions())
      if (a->menu()) check_menu(a->menu(), file_menus);
    check_pages(w);

    // The Monitor with runs in the output folder (written by the real run-contract writers):
    // a finished two-rank run attached (charts, legends, readout) beside a failed one.
    const std::filesystem::path root = tmp_.filePath(QStringLiteral("runs")).toStdString();
    testing::FakeRun done;
    done.steps = done.total_steps = 60;
    done.eval_every = 20;
    done.checkpoint_every = 30;
    done.optimizer.name = "adamw";
    testing::FakeRun failed = done;
    failed.final_state = run::RunState::Failed;
    failed.reason = "CUDA out of memory";
    const auto finished_run = testing::write_run(root, "20261202-100000-quickstart", done);
    testing::write_run(root, "20261202-110000-quickstart", failed);
    core_messages_.insert(QStringLiteral("CUDA out of memory"));
    w.form()->set_text("output_dir", "\"" + root.string() + "\"");
    w.monitor()->attach_run_directory(QString::fromStdString(finished_run.string()));
    QTRY_VERIFY_WITH_TIMEOUT(w.monitor()->latest_step() == 60, 20000);
    check_pages(w);
    QVERIFY2(findings_.isEmpty(),
             qPrintable(QStringLiteral("%1 English text(s) shown untranslated:\n").arg(findings_.size()) +
                        findings_.join(QLatin1Char('\n'))));
  }
};

QTEST_MAIN(TstWindowZhCn)
#include "tst_window_zh_cn.moc"
