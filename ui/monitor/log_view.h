// LogView: the tail of a rank's log, bounded (a week-long run's log must not grow the
// window), with a filter box. Lines are held once in a ring; the filter re-renders them.
#pragma once

#include <QStringList>
#include <QWidget>

#include <deque>

class QLineEdit;
class QPlainTextEdit;
class QLabel;

namespace odyssey::ui {

class LogView : public QWidget {
  Q_OBJECT
 public:
  explicit LogView(QWidget* parent = nullptr, int max_lines = 5000);

  void append_lines(const QStringList& lines);
  void clear();
  void set_source(const QString& text);  // e.g. "logs/rank-0.log"
  void set_filter(const QString& text);
  QString visible_text() const;
  int line_count() const { return static_cast<int>(lines_.size()); }
  // The horizontal scroll position of the text (0: lines shown from their start).
  int horizontal_offset() const;

 private:
  bool matches(const QString& line) const;
  void rerender();
  void park_cursor();

  int max_lines_;
  std::deque<QString> lines_;
  QString filter_;
  QLineEdit* filter_edit_ = nullptr;
  QPlainTextEdit* text_ = nullptr;
  QLabel* source_ = nullptr;
};

}  // namespace odyssey::ui
