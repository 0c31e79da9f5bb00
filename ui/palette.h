// Colours that read on the system palette, light or dark (the window never hard-codes a
// background; only these accents, picked by the palette's lightness).
#pragma once

#include <QColor>
#include <QPalette>
#include <QString>

namespace odyssey::ui {

inline bool is_dark(const QPalette& p) { return p.color(QPalette::Window).lightness() < 128; }
inline QColor error_color(const QPalette& p) {
  return is_dark(p) ? QColor(0xff, 0x8a, 0x80) : QColor(0xc6, 0x28, 0x28);
}
inline QColor warning_color(const QPalette& p) {
  return is_dark(p) ? QColor(0xff, 0xb7, 0x4d) : QColor(0xa8, 0x62, 0x00);
}
// Background of trained (label) tokens in the dataset preview.
inline QColor trained_color(const QPalette& p) {
  return is_dark(p) ? QColor(0x1b, 0x5e, 0x20) : QColor(0xc8, 0xe6, 0xc9);
}
inline QColor ok_color(const QPalette& p) { return is_dark(p) ? QColor(0x81, 0xc7, 0x84) : QColor(0x1b, 0x6e, 0x20); }
// A boxed notice (a failed run's banner, a run's warnings) readable on either palette.
inline QString notice_style(const QPalette& p, bool error) {
  const char* light = error ? "background:#fdecea;color:#611a15;border:1px solid #e57373;"
                            : "background:#fff8e1;color:#5d4200;border:1px solid #ffd54f;";
  const char* dark = error ? "background:#3b1716;color:#ffcdd2;border:1px solid #e57373;"
                           : "background:#33290a;color:#ffe082;border:1px solid #c49000;";
  return QStringLiteral("QLabel{%1border-radius:4px;padding:%2px;}")
      .arg(QLatin1String(is_dark(p) ? dark : light))
      .arg(error ? 6 : 4);
}

}  // namespace odyssey::ui
