// A message the window shows above its buttons (a preset that failed to load, an engine that
// refused to start, a run that ended): rich text in a bounded, scrollable area that wraps
// everything, also paths and <pre> log lines with no space in them. It never asks for more
// width than a word-wrapped label of a few words, and never for more height than
// max_lines() lines: a long error scrolls inside it instead of growing the window (issue 23).
#pragma once

#include <QTextBrowser>

namespace odyssey::ui {

class MessageArea : public QTextBrowser {
  Q_OBJECT
 public:
  explicit MessageArea(QWidget* parent = nullptr);

  // The HTML last set (what tests and the window read back).
  QString text() const { return html_; }
  // Shows `html` framed in `frame` (an accent colour; invalid: no frame) and in `color` (text;
  // invalid: the palette's). Links whose href is "dismiss" hide the area.
  void set_message(const QString& html, const QColor& color = {}, const QColor& frame = {});

  static constexpr int max_lines() { return 8; }
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 signals:
  // A link other than "dismiss" (a log file's file:// URL, for one).
  void link_activated(const QUrl& url);

 private:
  int content_height() const;
  QString html_;
};

}  // namespace odyssey::ui
