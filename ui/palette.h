// Colours that read on the system palette, light or dark (the window never hard-codes a
// background; only these accents, picked by the palette's lightness).
#pragma once

#include <QColor>
#include <QPalette>

namespace odyssey::ui {

inline bool is_dark(const QPalette& p) { return p.color(QPalette::Window).lightness() < 128; }
inline QColor error_color(const QPalette& p) { return is_dark(p) ? QColor(0xff, 0x6b, 0x6b) : QColor(0xc6, 0x28, 0x28); }
inline QColor warning_color(const QPalette& p) { return is_dark(p) ? QColor(0xff, 0xb7, 0x4d) : QColor(0xa8, 0x62, 0x00); }
// Background of trained (label) tokens in the dataset preview.
inline QColor trained_color(const QPalette& p) { return is_dark(p) ? QColor(0x1b, 0x5e, 0x20) : QColor(0xc8, 0xe6, 0xc9); }
inline QColor ok_color(const QPalette& p) { return is_dark(p) ? QColor(0x81, 0xc7, 0x84) : QColor(0x2e, 0x7d, 0x32); }

}  // namespace odyssey::ui
