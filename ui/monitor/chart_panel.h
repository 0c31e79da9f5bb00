// ChartPanel: one live chart (QCustomPlot) drawn from SeriesStore buffers. Graphs are
// declared by exact series name or by name prefix (one graph per rank or per collective,
// created as the series appear). Non-finite points are drawn as markers on the axis edge
// (NaN and +inf at the top, -inf at the bottom) so they are seen, never dropped.
// Zoom/pan with the mouse; any interaction stops following the run, double-click resumes.
#pragma once

#include <QColor>
#include <QPointer>
#include <QString>
#include <QWidget>

#include <cstdint>
#include <vector>

#include "series_store.h"

class QCustomPlot;
class QCPGraph;
class QCPItemText;
class QCPTextElement;
class QCPItemStraightLine;
class QMouseEvent;

namespace odyssey::ui {

// A QCustomPlot's background, axes, grid and legend in the palette's colours.
void style_plot(QCustomPlot* plot, const QPalette& palette);

class ChartPanel : public QWidget {
  Q_OBJECT
 public:
  // Emphasis: a smooth curve drawn wide even when dense (cheap: it covers few pixels).
  enum class Style { Line, Dashed, Thin, Dots, Emphasis };

  ChartPanel(const QString& title, const QString& y_label, QWidget* parent = nullptr);

  // A graph of the series `name` (legend: `label`).
  void add_series(const QString& name, const QString& label, QColor color, Style style = Style::Line);
  // A graph for every series whose name starts with `prefix`; its legend is
  // `label_prefix` + the rest of the name. Series sharing that rest share a colour.
  void add_family(const QString& prefix, const QString& label_prefix, Style style = Style::Line);

  void set_log_scale(bool on);
  bool log_scale() const { return log_; }
  // A horizontal reference line (e.g. the link's measured bandwidth); <= 0 hides it.
  void set_reference_line(double y, const QString& label);
  void set_empty_text(const QString& text);

  // Brings the graphs up to date with `store` (only changed series are copied) and
  // replots when anything changed.
  void refresh(const SeriesStore& store);
  void reset_view();

  bool export_png(const QString& path, int width = 1200, int height = 700);
  bool export_csv(const QString& path) const;

  QCustomPlot* plot() const { return plot_; }
  // Test hooks: points drawn for `series` and non-finite markers shown for it.
  int point_count(const QString& series) const;
  int marker_count(const QString& series) const;
  QString hover_text() const;
  QColor series_color(const QString& series) const;  // its pen's colour; invalid when not drawn
  // The readout's background (opaque) and whether its box sits inside the axes.
  QColor hover_background() const;
  void hover_at(double key);  // what a mouse move over `key` shows
  // The colour a family member gets: fixed by its name (rank N: the Nth colour; a collective:
  // its own), so a series keeps its colour whatever order the series appear in.
  static QColor family_color(const QString& suffix);

 protected:
  void changeEvent(QEvent* e) override;

 private:
  struct Bound {
    QString series;
    QPointer<QCPGraph> graph;
    QPointer<QCPGraph> marks;  // created when the series has non-finite points
    std::vector<NonFiniteMark> mark_points;
    std::uint64_t version = 0;
    QColor color;  // as declared; drawn lighter on a dark palette
    Style style = Style::Line;
  };
  struct Family {
    QString prefix, label_prefix;
    Style style;
  };

  Bound& bind(const QString& name, const QString& label, QColor color, Style style);
  // Background, axes, grid, title, legend, readout and series pens from the palette.
  void apply_palette();
  void show_legend(bool on);
  QPen series_pen(const Bound& b) const;
  void update_ranges(const SeriesStore& store);
  void place_marks();
  void on_mouse_move(QMouseEvent* e);
  void show_context_menu(const QPoint& pos);

  QCustomPlot* plot_ = nullptr;
  QCPItemText* empty_label_ = nullptr;
  QCPItemText* hover_label_ = nullptr;
  QCPItemStraightLine* hover_line_ = nullptr;
  QCPItemStraightLine* ref_line_ = nullptr;
  QCPItemText* ref_label_ = nullptr;
  double ref_y_ = 0;
  std::vector<Bound> bound_;
  std::vector<Family> families_;
  std::uint64_t epoch_ = 0;
  bool log_ = false;
  bool follow_ = true;
  QString title_;
  QCPTextElement* title_element_ = nullptr;
};

}  // namespace odyssey::ui
