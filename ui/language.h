// Language: which translation the window shows and loading it. The choice is the user's
// (View → Language, kept by Settings) or, by default, the system locale's: Chinese in any form
// (zh, zh_CN, zh_Hans, zh_SG…) shows Simplified Chinese, anything else English. The catalogue
// (resources/translations/odyssey_zh_CN.ts, compiled by lrelease) is a Qt resource of
// odyssey_ui, so nothing needs installing; Qt's own qtbase_zh_CN.qm (standard buttons and
// dialogs) is loaded from Qt's translations folder when it is there.
#pragma once

#include <QString>
#include <QStringList>

class QCoreApplication;
class QLocale;

namespace odyssey::ui {

// The setting's words: "" (follow the system), "en", "zh_CN".
inline constexpr const char* kSystemLanguage = "";
// Languages the window can show, as codes ("en", "zh_CN").
QStringList available_languages();
// A language's own name ("English", "简体中文"): menus show it untranslated, so anyone can find
// their own.
QString native_language_name(const QString& code);
// The language a locale asks for: "zh_CN" for Chinese, else "en".
QString language_for_locale(const QLocale& locale);
// `choice` ("", "system", "en", "zh_CN", "zh"…) resolved against the system locale; unknown
// codes resolve to English.
QString resolve_language(const QString& choice);
// Installs the translators for `code` on `app` (parented to it) and returns what was loaded:
// the resource's path of Odyssey's catalogue, and Qt's own when found. English installs none.
// An error (a catalogue missing from the build) comes back in *error and returns false.
bool install_translators(QCoreApplication* app, const QString& code, QString* error = nullptr,
                         bool* qt_catalogue_loaded = nullptr);
// The resource path of Odyssey's catalogue for `code` (":/i18n/odyssey_zh_CN.qm").
QString catalogue_path(const QString& code);

}  // namespace odyssey::ui
