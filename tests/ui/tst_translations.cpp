// The zh_CN catalogue: every message translated with the same placeholders, markup and
// accelerators as its source; the catalogue embedded in odyssey_ui answers with exactly those
// translations; and lupdate run over today's sources finds no string the committed catalogue
// lacks (an English tr() string added without its translation fails here, by name).
#include <QCoreApplication>
#include <QProcess>
#include <QProcessEnvironment>
#include <QRegularExpression>
#include <QSet>
#include <QTemporaryDir>
#include <QTest>
#include <QTranslator>
#include <map>

#include "language.h"
#include "ts_catalogue.h"

using namespace odyssey;
using odyssey::test::read_ts;
using odyssey::test::TsMessage;

namespace {

const QString kTs = QStringLiteral(ODYSSEY_SOURCE_DIR "/resources/translations/odyssey_zh_CN.ts");

// %1…%99 and %n (with an optional L: %L1), sorted: a translation may reorder them, never drop
// or invent one.
QStringList placeholders(const QString& s) {
  static const QRegularExpression re(QStringLiteral("%L?([1-9][0-9]?|n)"));
  QStringList out;
  for (auto it = re.globalMatch(s); it.hasNext();) out << it.next().captured(0).remove(QLatin1Char('L'));
  out.sort();
  return out;
}

// HTML tag names in order of first appearance, sorted (<b>, </b>, <br>, <span …>…).
QStringList tags(const QString& s) {
  static const QRegularExpression re(QStringLiteral("</?([a-zA-Z][a-zA-Z0-9]*)[^>]*>"));
  QStringList out;
  for (auto it = re.globalMatch(s); it.hasNext();) {
    const auto m = it.next();
    out << (m.captured(0).startsWith(QStringLiteral("</")) ? QStringLiteral("/") : QString()) + m.captured(1);
  }
  out.sort();
  return out;
}

// Keyboard accelerators: an & that is not an HTML entity (&nbsp;) nor a literal && .
int accelerators(const QString& s) {
  static const QRegularExpression re(QStringLiteral("&(?![a-zA-Z]+;|&)[^\\s&]"));
  int n = 0;
  for (auto it = re.globalMatch(s); it.hasNext(); it.next()) ++n;
  return n;
}

}  // namespace

class TstTranslations : public QObject {
  Q_OBJECT

 private slots:
  void committed_catalogue_is_complete() {
    QString error;
    const auto messages = read_ts(kTs, &error);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QVERIFY2(messages.size() > 300, qPrintable(QStringLiteral("only %1 messages in %2").arg(messages.size()).arg(kTs)));
    QStringList problems;
    for (const TsMessage& m : messages) {
      if (!m.type.isEmpty()) {
        problems << QStringLiteral("%1: translation type=\"%2\"").arg(m.where(), m.type);
        continue;
      }
      // Chinese has one plural form: a numerus message holds exactly one.
      if (m.numerus && m.translations.size() != 1) {
        problems << QStringLiteral("%1: %2 numerus forms, expected 1").arg(m.where()).arg(m.translations.size());
        continue;
      }
      for (const QString& t : m.translations) {
        if (t.trimmed().isEmpty() && !m.source.trimmed().isEmpty()) {
          problems << m.where() + QStringLiteral(": empty translation");
          continue;
        }
        if (placeholders(t) != placeholders(m.source))
          problems << QStringLiteral("%1: placeholders %2 in the translation \"%3\", %4 in the source")
                          .arg(m.where(), placeholders(t).join(QLatin1Char(',')), t,
                               placeholders(m.source).join(QLatin1Char(',')));
        if (tags(t) != tags(m.source)) problems << QStringLiteral("%1: HTML tags differ in \"%2\"").arg(m.where(), t);
        if (accelerators(t) != accelerators(m.source))
          problems << QStringLiteral("%1: %2 accelerator(s) (&) in \"%3\", %4 in the source")
                          .arg(m.where())
                          .arg(accelerators(t))
                          .arg(t)
                          .arg(accelerators(m.source));
        if (m.numerus && !t.contains(QStringLiteral("%n")))
          problems << QStringLiteral("%1: numerus form \"%2\" lacks %n").arg(m.where(), t);
      }
    }
    QVERIFY2(problems.isEmpty(), qPrintable(QStringLiteral("\n") + problems.join(QLatin1Char('\n'))));
  }

  // The .qm that lrelease built from the .ts and CMake embedded: every message comes back as
  // the .ts has it (a build that dropped or mangled the catalogue fails here).
  void embedded_catalogue_answers_every_message() {
    QString error;
    const auto messages = read_ts(kTs, &error);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QTranslator t;
    QVERIFY2(t.load(ui::catalogue_path(QStringLiteral("zh_CN"))),
             qPrintable(ui::catalogue_path(QStringLiteral("zh_CN"))));
    QStringList problems;
    for (const TsMessage& m : messages) {
      if (m.translations.isEmpty()) continue;
      const QByteArray ctx = m.context.toUtf8(), src = m.source.toUtf8(), cmt = m.comment.toUtf8();
      const QString got = t.translate(ctx.constData(), src.constData(), m.comment.isEmpty() ? nullptr : cmt.constData(),
                                      m.numerus ? 2 : -1);
      if (got != m.translations.first()) problems << QStringLiteral("%1: got \"%2\"").arg(m.where(), got);
    }
    QVERIFY2(problems.isEmpty(), qPrintable(QStringLiteral("\n") + problems.join(QLatin1Char('\n'))));
  }

  // lupdate over the sources, as docs/gui.md's update command runs it, into a scratch file:
  // every message it finds must have a finished translation in the committed catalogue, and
  // the catalogue must hold nothing the sources no longer say.
  void catalogue_matches_the_sources() {
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    const QString fresh = tmp.filePath(QStringLiteral("fresh_zh_CN.ts"));
    QProcess p;
    p.setWorkingDirectory(QStringLiteral(ODYSSEY_SOURCE_DIR));
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(QStringLiteral(ODYSSEY_LUPDATE),
            {QStringLiteral("ui"), QStringLiteral("app/odyssey"), QStringLiteral("-extensions"),
             QStringLiteral("cpp,h"), QStringLiteral("-no-obsolete"), QStringLiteral("-locations"),
             QStringLiteral("none"), QStringLiteral("-source-language"), QStringLiteral("en"),
             QStringLiteral("-target-language"), QStringLiteral("zh_CN"), QStringLiteral("-ts"), fresh});
    QVERIFY2(p.waitForFinished(120000), "lupdate did not finish in 120 s");
    const QString log = QString::fromLocal8Bit(p.readAll());
    QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0,
             qPrintable(QStringLiteral(ODYSSEY_LUPDATE " failed: ") + log));

    QString error;
    const auto found = read_ts(fresh, &error);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QVERIFY2(found.size() > 300,
             qPrintable(QStringLiteral("lupdate found only %1 messages:\n%2").arg(found.size()).arg(log)));
    const auto committed = read_ts(kTs, &error);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    std::map<QString, const TsMessage*> by_key;
    for (const TsMessage& m : committed) by_key[m.key()] = &m;

    QStringList untranslated, stale;
    QSet<QString> in_sources;
    for (const TsMessage& m : found) {
      in_sources.insert(m.key());
      const auto it = by_key.find(m.key());
      const bool done = it != by_key.end() && it->second->type.isEmpty() && !it->second->translations.isEmpty() &&
                        !it->second->translations.first().isEmpty();
      if (!done) untranslated << m.where();
    }
    for (const TsMessage& m : committed)
      if (!in_sources.contains(m.key())) stale << m.where();
    QVERIFY2(
        untranslated.isEmpty(),
        qPrintable(QStringLiteral("%1 source string(s) without a finished zh_CN translation in %2 (run the lupdate "
                                  "command of docs/gui.md, then translate them):\n")
                       .arg(untranslated.size())
                       .arg(kTs) +
                   untranslated.join(QLatin1Char('\n'))));
    QVERIFY2(stale.isEmpty(), qPrintable(QStringLiteral("%1 message(s) in %2 that no source has any more (run lupdate "
                                                        "with -no-obsolete):\n")
                                             .arg(stale.size())
                                             .arg(kTs) +
                                         stale.join(QLatin1Char('\n'))));
  }

  void language_follows_the_locale() {
    QCOMPARE(ui::language_for_locale(QLocale(QStringLiteral("zh_CN"))), QStringLiteral("zh_CN"));
    QCOMPARE(ui::language_for_locale(QLocale(QStringLiteral("zh"))), QStringLiteral("zh_CN"));
    QCOMPARE(ui::language_for_locale(QLocale(QStringLiteral("zh_Hans_SG"))), QStringLiteral("zh_CN"));
    QCOMPARE(ui::language_for_locale(QLocale(QStringLiteral("en_US"))), QStringLiteral("en"));
    QCOMPARE(ui::language_for_locale(QLocale(QStringLiteral("de_DE"))), QStringLiteral("en"));
    QCOMPARE(ui::resolve_language(QStringLiteral("en")), QStringLiteral("en"));
    QCOMPARE(ui::resolve_language(QStringLiteral("zh_CN")), QStringLiteral("zh_CN"));
    QCOMPARE(ui::resolve_language(QStringLiteral("fr")), QStringLiteral("en"));
    QCOMPARE(ui::resolve_language(QString()), ui::language_for_locale(QLocale::system()));
  }

#ifdef ODYSSEY_GUI_BIN
  // The real program: the locale's variables as a desktop session sets them pick the language
  // of `odyssey --help` (answered without a display), and --language overrides them.
  void program_follows_the_system_locale_data() {
    QTest::addColumn<QString>("lang");
    QTest::addColumn<QString>("language_var");
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<bool>("chinese");
    QTest::newRow("LANG=zh_CN") << "zh_CN.UTF-8"
                                << "" << QStringList{} << true;
    QTest::newRow("LANG=zh_SG") << "zh_SG.UTF-8"
                                << "" << QStringList{} << true;
    QTest::newRow("LANG=en_US") << "en_US.UTF-8"
                                << "" << QStringList{} << false;
    QTest::newRow("LANG=C") << "C"
                            << "" << QStringList{} << false;
    QTest::newRow("LANGUAGE=zh_CN") << "en_US.UTF-8"
                                    << "zh_CN:en" << QStringList{} << true;
    QTest::newRow("--language en") << "zh_CN.UTF-8"
                                   << "" << QStringList{QStringLiteral("--language"), QStringLiteral("en")} << false;
    QTest::newRow("--language=zh_CN") << "en_US.UTF-8"
                                      << "" << QStringList{QStringLiteral("--language=zh_CN")} << true;
  }

  void program_follows_the_system_locale() {
    QFETCH(QString, lang);
    QFETCH(QString, language_var);
    QFETCH(QStringList, args);
    QFETCH(bool, chinese);
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    for (const char* v : {"LC_ALL", "LC_MESSAGES", "LANGUAGE", "LANG"}) env.remove(QString::fromLatin1(v));
    env.insert(QStringLiteral("LANG"), lang);
    if (!language_var.isEmpty()) env.insert(QStringLiteral("LANGUAGE"), language_var);
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(ODYSSEY_GUI_BIN), args + QStringList{QStringLiteral("--help")});
    QVERIFY(p.waitForFinished(30000));
    const QString out = QString::fromUtf8(p.readAllStandardOutput());
    QCOMPARE(p.exitCode(), 0);
    QVERIFY2(out.contains(QStringLiteral("要打开的预设（.yaml）。")) == chinese, qPrintable(out));
    QVERIFY2(out.contains(QStringLiteral("A preset (.yaml) to open.")) == !chinese, qPrintable(out));
  }
#endif
};

QTEST_MAIN(TstTranslations)
#include "tst_translations.moc"
