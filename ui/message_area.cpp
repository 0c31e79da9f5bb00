#include "message_area.h"

#include <QAbstractTextDocumentLayout>
#include <QScrollBar>
#include <QTextDocument>

#include <algorithm>

namespace odyssey::ui {

MessageArea::MessageArea(QWidget* parent) : QTextBrowser(parent) {
  setOpenLinks(false);
  setOpenExternalLinks(false);
  setFrameShape(QFrame::NoFrame);
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  setVerticalScrollBarPolicy(Qt::ScrollBarAsNeeded);
  // Wrap at word boundaries, and inside a word (a path, a log line in <pre>) where it must.
  setWordWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere);
  setLineWrapMode(QTextEdit::WidgetWidth);
  setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Maximum);
  // The <pre> blocks of log tails wrap too (Qt's default keeps them on one line).
  document()->setDefaultStyleSheet(QStringLiteral("pre { white-space: pre-wrap; }"));
  viewport()->setAutoFillBackground(false);
  connect(this, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    if (url.toString() == QLatin1String("dismiss")) hide();
    else emit link_activated(url);
  });
  // The height follows the wrapped text as the width changes.
  connect(document()->documentLayout(), &QAbstractTextDocumentLayout::documentSizeChanged, this,
          [this] { updateGeometry(); });
}

void MessageArea::set_message(const QString& html, const QColor& color, const QColor& frame) {
  html_ = html;
  QString style = QStringLiteral("QTextBrowser{background:transparent;");
  if (frame.isValid()) style += QStringLiteral("border:2px solid %1;border-radius:4px;padding:4px;").arg(frame.name());
  if (color.isValid()) style += QStringLiteral("color:%1;").arg(color.name());
  setStyleSheet(style + QLatin1Char('}'));
  setHtml(html);
  show();
  updateGeometry();
}

int MessageArea::content_height() const {
  const QMargins m = contentsMargins();
  const int doc = static_cast<int>(document()->size().height() + 0.5);
  const int cap = fontMetrics().lineSpacing() * max_lines() + static_cast<int>(2 * document()->documentMargin());
  return std::min(doc, cap) + m.top() + m.bottom();
}

QSize MessageArea::sizeHint() const { return {fontMetrics().averageCharWidth() * 40, content_height()}; }

QSize MessageArea::minimumSizeHint() const { return {fontMetrics().averageCharWidth() * 10, content_height()}; }

}  // namespace odyssey::ui
