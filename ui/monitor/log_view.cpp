#include "log_view.h"

#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QScrollBar>
#include <QTextCursor>
#include <QVBoxLayout>

namespace odyssey::ui {

LogView::LogView(QWidget* parent, int max_lines) : QWidget(parent), max_lines_(max_lines) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  source_ = new QLabel(this);
  // The log's path takes the room the filter leaves; it never widens the page (tooltip: whole).
  source_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  source_->setMinimumWidth(80);
  filter_edit_ = new QLineEdit(this);
  filter_edit_->setPlaceholderText(tr("Filter (text, case-insensitive)"));
  filter_edit_->setClearButtonEnabled(true);
  bar->addWidget(source_, 1);
  bar->addWidget(filter_edit_, 1);
  layout->addLayout(bar);
  text_ = new QPlainTextEdit(this);
  text_->setReadOnly(true);
  text_->setLineWrapMode(QPlainTextEdit::NoWrap);
  text_->setMaximumBlockCount(max_lines_);  // the widget itself stays bounded too
  text_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  layout->addWidget(text_);
  connect(filter_edit_, &QLineEdit::textChanged, this, &LogView::set_filter);
}

void LogView::set_source(const QString& text) {
  source_->setText(text);
  source_->setToolTip(text);
}

bool LogView::matches(const QString& line) const {
  return filter_.isEmpty() || line.contains(filter_, Qt::CaseInsensitive);
}

void LogView::append_lines(const QStringList& lines) {
  if (lines.isEmpty()) return;
  for (const QString& l : lines) lines_.push_back(l);
  while (static_cast<int>(lines_.size()) > max_lines_) lines_.pop_front();
  QStringList shown;
  for (const QString& l : lines)
    if (matches(l)) shown << l;
  if (shown.isEmpty()) return;
  // Follow the end only when the user is already there (reading older lines is not
  // interrupted by new ones).
  QScrollBar* sb = text_->verticalScrollBar();
  const bool at_end = sb->value() >= sb->maximum() - 2;
  // Appending moves the cursor to the end of the last line, and the view follows it to the
  // right: every line would be cut at the left (issue 23, finding 5). The horizontal position
  // stays where the reader had it (the start of the lines unless they scrolled).
  const int h = text_->horizontalScrollBar()->value();
  text_->appendPlainText(shown.join(QLatin1Char('\n')));
  park_cursor();
  text_->horizontalScrollBar()->setValue(h);
  if (at_end) sb->setValue(sb->maximum());
}

void LogView::park_cursor() {
  // The text cursor at the start of the last line: the view, which keeps the cursor visible
  // (also when a hidden tab is first shown), then shows lines from their start.
  QTextCursor c = text_->textCursor();
  c.movePosition(QTextCursor::End);
  c.movePosition(QTextCursor::StartOfBlock);
  text_->setTextCursor(c);
}

int LogView::horizontal_offset() const { return text_->horizontalScrollBar()->value(); }

void LogView::clear() {
  lines_.clear();
  text_->clear();
}

void LogView::set_filter(const QString& text) {
  if (text == filter_) return;
  filter_ = text;
  if (filter_edit_->text() != text) filter_edit_->setText(text);
  rerender();
}

void LogView::rerender() {
  QStringList shown;
  for (const QString& l : lines_)
    if (matches(l)) shown << l;
  text_->setPlainText(shown.join(QLatin1Char('\n')));
  park_cursor();
  text_->verticalScrollBar()->setValue(text_->verticalScrollBar()->maximum());
  text_->horizontalScrollBar()->setValue(0);
}

QString LogView::visible_text() const { return text_->toPlainText(); }

}  // namespace odyssey::ui
