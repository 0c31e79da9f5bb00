#include "language.h"

#include <QCoreApplication>
#include <QLibraryInfo>
#include <QLocale>
#include <QTranslator>

namespace odyssey::ui {

QStringList available_languages() { return {QStringLiteral("en"), QStringLiteral("zh_CN")}; }

QString native_language_name(const QString& code) {
  if (code == QStringLiteral("zh_CN")) return QStringLiteral("简体中文");
  return QStringLiteral("English");
}

QString language_for_locale(const QLocale& locale) {
  // uiLanguages() carries LANGUAGE's list (e.g. "zh_CN:en") where the platform sets it;
  // language() is LC_ALL / LC_MESSAGES / LANG's.
  if (locale.language() == QLocale::Chinese) return QStringLiteral("zh_CN");
  const QStringList ui = locale.uiLanguages();
  if (!ui.isEmpty() && (ui.first() == QStringLiteral("zh") || ui.first().startsWith(QStringLiteral("zh-")) ||
                        ui.first().startsWith(QStringLiteral("zh_"))))
    return QStringLiteral("zh_CN");
  return QStringLiteral("en");
}

QString resolve_language(const QString& choice) {
  const QString c = choice.trimmed();
  if (c.isEmpty() || c.compare(QStringLiteral("system"), Qt::CaseInsensitive) == 0)
    return language_for_locale(QLocale::system());
  if (c.compare(QStringLiteral("en"), Qt::CaseInsensitive) == 0 || c.startsWith(QStringLiteral("en_")) ||
      c.compare(QStringLiteral("C"), Qt::CaseSensitive) == 0)
    return QStringLiteral("en");
  return language_for_locale(QLocale(c));
}

QString catalogue_path(const QString& code) { return QStringLiteral(":/i18n/odyssey_%1.qm").arg(code); }

bool install_translators(QCoreApplication* app, const QString& code, QString* error, bool* qt_catalogue_loaded) {
  if (qt_catalogue_loaded) *qt_catalogue_loaded = false;
  if (code == QStringLiteral("en")) return true;
  auto* own = new QTranslator(app);
  if (!own->load(catalogue_path(code))) {
    delete own;
    if (error)
      *error = QStringLiteral("the %1 translation is missing from this build (%2)").arg(code, catalogue_path(code));
    return false;
  }
  QCoreApplication::installTranslator(own);
  // Qt's own strings (Save/Discard/Cancel, file dialogs); Debian ships them in
  // qt6-translations-l10n. Without it those stay English, the window is still translated.
  auto* qt = new QTranslator(app);
  if (qt->load(QLocale(code), QStringLiteral("qtbase"), QStringLiteral("_"),
               QLibraryInfo::path(QLibraryInfo::TranslationsPath))) {
    QCoreApplication::installTranslator(qt);
    if (qt_catalogue_loaded) *qt_catalogue_loaded = true;
  } else {
    delete qt;
  }
  return true;
}

}  // namespace odyssey::ui
