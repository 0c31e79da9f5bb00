#include "chart_panel.h"

#include <QFile>
#include <QFileDialog>
#include <QEvent>
#include <QMenu>
#include <QTextStream>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "../palette.h"

namespace odyssey::ui {

namespace {
const QColor kMarkColor(0xd3, 0x2f, 0x2f);
const QColor kPalette[] = {QColor(0x1f, 0x77, 0xb4), QColor(0xff, 0x7f, 0x0e), QColor(0x2c, 0xa0, 0x2c),
                           QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b), QColor(0xe3, 0x77, 0xc2),
                           QColor(0x7f, 0x7f, 0x7f), QColor(0x17, 0xbe, 0xcf)};

QPen penFor(QColor c, ChartPanel::Style s) {
  QPen p(c, s == ChartPanel::Style::Emphasis ? 2.5 : 2.0);
  if (s == ChartPanel::Style::Dashed) p.setStyle(Qt::DashLine);
  if (s == ChartPanel::Style::Thin) {
    c.setAlpha(110);
    p = QPen(c, 1.0);
  }
  return p;
}
}  // namespace

ChartPanel::ChartPanel(const QString& title, const QString& y_label, QWidget* parent) : QWidget(parent), title_(title) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  plot_ = new QCustomPlot(this);
  layout->addWidget(plot_);
  setMinimumSize(320, 200);
  plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  // Wide antialiased polylines of thousands of points cost seconds per replot in Qt's
  // raster engine; drawn as one fast polyline they cost milliseconds.
  plot_->setPlottingHint(QCP::phFastPolylines, true);
  plot_->setNoAntialiasingOnDrag(true);
  plot_->plotLayout()->insertRow(0);
  title_element_ = new QCPTextElement(plot_, title, QFont(font().family(), font().pointSize() + 1, QFont::Bold));
  plot_->plotLayout()->addElement(0, 0, title_element_);
  plot_->xAxis->setLabel(tr("step"));
  plot_->yAxis->setLabel(y_label);
  // The legend sits in a row of its own under the axes, its entries side by side: it never
  // covers a curve (inside the axes it hid the latest points of the top right).
  plot_->legend->setFont(QFont(font().family(), std::max(7, font().pointSize() - 1)));
  plot_->axisRect()->insetLayout()->take(plot_->legend);
  plot_->axisRect()->insetLayout()->simplify();
  show_legend(false);
  plot_->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
  plot_->legend->setWrap(4);
  plot_->legend->setMargins(QMargins(4, 0, 4, 2));
  plot_->plotLayout()->setRowSpacing(0);

  empty_label_ = new QCPItemText(plot_);
  empty_label_->position->setType(QCPItemPosition::ptAxisRectRatio);
  empty_label_->position->setCoords(0.5, 0.5);
  empty_label_->setText(tr("waiting for the first step…"));

  hover_line_ = new QCPItemStraightLine(plot_);
  hover_line_->setVisible(false);
  hover_label_ = new QCPItemText(plot_);
  hover_label_->position->setType(QCPItemPosition::ptAxisRectRatio);
  hover_label_->position->setCoords(0.01, 0.02);
  hover_label_->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
  hover_label_->setTextAlignment(Qt::AlignLeft);
  hover_label_->setPadding(QMargins(5, 3, 5, 3));
  hover_label_->setVisible(false);

  apply_palette();
  connect(plot_, &QCustomPlot::mouseMove, this, &ChartPanel::on_mouse_move);
  connect(plot_, &QCustomPlot::mousePress, this, [this] { follow_ = false; });
  connect(plot_, &QCustomPlot::mouseWheel, this, [this] { follow_ = false; });
  connect(plot_, &QCustomPlot::mouseDoubleClick, this, [this] { reset_view(); });
  connect(plot_->yAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] { place_marks(); });
  plot_->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(plot_, &QWidget::customContextMenuRequested, this, &ChartPanel::show_context_menu);
}

ChartPanel::Bound& ChartPanel::bind(const QString& name, const QString& label, QColor color, Style style) {
  QCPGraph* g = plot_->addGraph();
  g->setName(label);
  bound_.push_back(Bound{name, g, nullptr, {}, 0, color, style});
  g->setPen(series_pen(bound_.back()));
  if (style == Style::Dots) {
    g->setLineStyle(QCPGraph::lsLine);
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, g->pen().color(), 6));
  }
  return bound_.back();
}

void ChartPanel::add_series(const QString& name, const QString& label, QColor color, Style style) {
  bind(name, label, color, style);
}

void ChartPanel::add_family(const QString& prefix, const QString& label_prefix, Style style) {
  families_.push_back(Family{prefix, label_prefix, style});
}

QColor ChartPanel::family_color(const QString& suffix) {
  bool numeric = false;
  const int n = suffix.toInt(&numeric);
  if (numeric && n >= 0) return kPalette[n % std::size(kPalette)];
  // Names hash to a colour (FNV-1a: the same in every process, unlike qHash's seeded one).
  std::uint32_t h = 2166136261u;
  for (const QChar c : suffix) h = (h ^ c.unicode()) * 16777619u;
  return kPalette[h % std::size(kPalette)];
}

QPen ChartPanel::series_pen(const Bound& b) const {
  // On a dark background the light palette's colours are too deep: lift them.
  const QColor c = is_dark(palette()) ? b.color.lighter(135) : b.color;
  return penFor(c, b.style);
}

void style_plot(QCustomPlot* plot, const QPalette& p) {
  const QColor base = p.color(QPalette::Base), text = p.color(QPalette::Text);
  QColor grid = p.color(QPalette::Mid);
  grid.setAlpha(is_dark(p) ? 110 : 140);
  QColor sub = grid;
  sub.setAlpha(grid.alpha() / 2);
  plot->setBackground(base);
  plot->axisRect()->setBackground(base);
  for (QCPAxis* a : {plot->xAxis, plot->yAxis, plot->xAxis2, plot->yAxis2}) {
    a->setBasePen(QPen(text, 1));
    a->setTickPen(QPen(text, 1));
    a->setSubTickPen(QPen(text, 1));
    a->setTickLabelColor(text);
    a->setLabelColor(text);
    a->grid()->setPen(QPen(grid, 1, Qt::DotLine));
    a->grid()->setSubGridPen(QPen(sub, 1, Qt::DotLine));
    a->grid()->setZeroLinePen(Qt::NoPen);
  }
  QColor legend_bg = base;
  legend_bg.setAlpha(230);
  plot->legend->setBrush(legend_bg);
  plot->legend->setBorderPen(QPen(grid, 1));
  plot->legend->setTextColor(text);
}

void ChartPanel::apply_palette() {
  const QPalette& p = palette();
  style_plot(plot_, p);
  plot_->legend->setBorderPen(Qt::NoPen);  // a row of its own: no box
  title_element_->setTextColor(p.color(QPalette::Text));
  empty_label_->setColor(p.color(QPalette::PlaceholderText));
  QColor line = p.color(QPalette::Text);
  line.setAlpha(110);
  hover_line_->setPen(QPen(line, 1, Qt::DotLine));
  // The readout is a tooltip: the palette's tooltip colours, a border, opaque.
  hover_label_->setBrush(p.color(QPalette::ToolTipBase));
  hover_label_->setColor(p.color(QPalette::ToolTipText));
  hover_label_->setPen(QPen(p.color(QPalette::Mid), 1));
  if (ref_line_) {
    ref_line_->setPen(QPen(p.color(QPalette::PlaceholderText), 1.5, Qt::DashDotLine));
    ref_label_->setColor(p.color(QPalette::PlaceholderText));
  }
  for (Bound& b : bound_) {
    if (!b.graph) continue;
    QPen pen = series_pen(b);
    pen.setWidthF(b.graph->pen().widthF());  // a dense series keeps its thin pen
    b.graph->setPen(pen);
    if (b.style == Style::Dots) b.graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, pen.color(), 6));
  }
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void ChartPanel::show_legend(bool on) {
  // Out of the layout when hidden: a hidden element would still keep its row.
  QCPLayoutGrid* grid = plot_->plotLayout();
  const bool placed = grid->hasElement(2, 0) && grid->element(2, 0) == plot_->legend;
  plot_->legend->setVisible(on);
  if (on && !placed) {
    grid->addElement(2, 0, plot_->legend);
    grid->setRowStretchFactor(2, 0.001);
  } else if (!on && placed) {
    grid->take(plot_->legend);
    grid->simplify();
  }
}

void ChartPanel::changeEvent(QEvent* e) {
  QWidget::changeEvent(e);
  if (e->type() == QEvent::PaletteChange || e->type() == QEvent::StyleChange) apply_palette();
}

void ChartPanel::set_log_scale(bool on) {
  log_ = on;
  plot_->yAxis->setScaleType(on ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  if (on) plot_->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  else plot_->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
  follow_ = true;
  plot_->replot();
}

void ChartPanel::set_reference_line(double y, const QString& label) {
  ref_y_ = y;
  if (!ref_line_) {
    ref_line_ = new QCPItemStraightLine(plot_);
    ref_label_ = new QCPItemText(plot_);
    ref_label_->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    apply_palette();
  }
  ref_line_->setVisible(y > 0);
  ref_label_->setVisible(y > 0);
  ref_line_->point1->setCoords(0, y);
  ref_line_->point2->setCoords(1, y);
  ref_label_->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
  ref_label_->position->setTypeY(QCPItemPosition::ptPlotCoords);
  ref_label_->position->setCoords(0.01, y);
  ref_label_->setText(label);
  plot_->replot();
}

void ChartPanel::set_empty_text(const QString& text) {
  if (empty_label_->text() == text) return;
  empty_label_->setText(text);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void ChartPanel::refresh(const SeriesStore& store) {
  bool changed = false;
  if (store.epoch() != epoch_) {  // the run restarted or another run was attached
    epoch_ = store.epoch();
    for (auto it = bound_.begin(); it != bound_.end();) {
      if (it->marks) plot_->removeGraph(it->marks);
      it->marks = nullptr;
      it->mark_points.clear();
      it->version = 0;
      if (it->graph) it->graph->data()->clear();
      const bool from_family = std::any_of(families_.begin(), families_.end(),
                                           [&](const Family& f) { return it->series.startsWith(f.prefix); });
      if (from_family) {
        plot_->removeGraph(it->graph);
        it = bound_.erase(it);
      } else {
        ++it;
      }
    }
    follow_ = true;
    changed = true;
  }
  for (const Family& f : families_) {
    for (auto it = store.all().lower_bound(f.prefix); it != store.all().end() && it->first.startsWith(f.prefix); ++it) {
      const bool known =
          std::any_of(bound_.begin(), bound_.end(), [&](const Bound& b) { return b.series == it->first; });
      if (known) continue;
      const QString suffix = it->first.mid(f.prefix.size());
      bind(it->first, f.label_prefix + suffix, family_color(suffix), f.style);
    }
  }
  for (Bound& b : bound_) {
    const SeriesStore::Entry* e = store.find(b.series);
    if (!e || e->version == b.version || !b.graph) continue;
    b.version = e->version;
    const SeriesBuffer& buf = e->buffer;
    b.graph->setData(QVector<double>(buf.xs().begin(), buf.xs().end()),
                     QVector<double>(buf.ys().begin(), buf.ys().end()), true);
    // Denser than the pixels: a 1 px pen looks the same and rasterises several times
    // faster (the cost of a replot is the pixels a wide pen covers).
    QPen pen = b.graph->pen();
    const bool dense = buf.size() > static_cast<std::size_t>(std::max(200, plot_->axisRect()->width()));
    if (dense && pen.widthF() > 1.0 && pen.widthF() < 2.5) {
      pen.setWidthF(1.0);
      b.graph->setPen(pen);
    }
    if (!buf.marks().empty() && !b.marks) {
      b.marks = plot_->addGraph();
      b.marks->setLineStyle(QCPGraph::lsNone);
      b.marks->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssTriangleInverted, kMarkColor, kMarkColor, 9));
      b.marks->setName(b.graph->name() + tr(" NaN/Inf"));
    }
    b.mark_points = buf.marks();
    changed = true;
  }
  if (!changed) return;
  bool any = false;
  for (const Bound& b : bound_)
    if (const auto* e = store.find(b.series); e && !e->buffer.empty()) any = true;
  empty_label_->setVisible(!any);
  // A legend of one line says nothing the title does not; marks always get explained.
  int legend_items = 0;
  for (const Bound& b : bound_) legend_items += (b.graph ? 1 : 0) + (b.marks ? 1 : 0);
  show_legend(legend_items > 1);
  if (follow_) update_ranges(store);
  place_marks();
  plot_->replot();
}

void ChartPanel::update_ranges(const SeriesStore& store) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Bound& b : bound_) {
    const SeriesStore::Entry* e = store.find(b.series);
    if (!e) continue;
    const SeriesBuffer& buf = e->buffer;
    for (const auto& m : buf.marks()) x0 = std::min(x0, m.x), x1 = std::max(x1, m.x);
    if (buf.size() == 0) continue;
    x0 = std::min(x0, buf.min_x());
    x1 = std::max(x1, buf.max_x());
    const double lo = log_ ? buf.min_positive_y() : buf.min_y();
    if (!log_ || lo > 0) y0 = std::min(y0, lo);
    y1 = std::max(y1, buf.max_y());
  }
  // Room above the reference line for its label.
  if (ref_y_ > 0) y1 = std::max(y1, ref_y_ * 1.08), y0 = std::min(y0, ref_y_);
  if (!std::isfinite(x0)) return;
  if (x1 <= x0) x1 = x0 + 1;
  plot_->xAxis->setRange(x0, x1);
  if (!std::isfinite(y0) || !std::isfinite(y1)) return;
  if (log_) {
    plot_->yAxis->setRange(y0 / 1.3, std::max(y1, y0 * 1.01) * 1.3);
  } else {
    const double pad = y1 > y0 ? (y1 - y0) * 0.06 : std::max(std::abs(y0) * 0.1, 1e-12);
    // Quantities that cannot be negative start at 0 when that wastes little space.
    const double bottom = (y0 >= 0 && y0 < (y1 - y0) * 0.5) ? 0 : y0 - pad;
    plot_->yAxis->setRange(bottom, y1 + pad);
  }
}

void ChartPanel::place_marks() {
  // Marks sit just inside the visible edge whatever the zoom, so they stay in view:
  // NaN and +inf at the top, -inf at the bottom.
  const QCPRange r = plot_->yAxis->range();
  const bool log_ok = log_ && r.lower > 0;
  const double top = log_ok ? r.upper / std::pow(r.upper / r.lower, 0.03) : r.upper - r.size() * 0.03;
  const double bottom = log_ok ? r.lower * std::pow(r.upper / r.lower, 0.03) : r.lower + r.size() * 0.03;
  for (const Bound& b : bound_) {
    if (!b.marks) continue;
    QVector<double> keys, values;
    keys.reserve(static_cast<qsizetype>(b.mark_points.size()));
    values.reserve(keys.capacity());
    for (const auto& m : b.mark_points) {
      keys.push_back(m.x);
      values.push_back(m.kind == NonFinite::NegInf ? bottom : top);
    }
    b.marks->setData(keys, values, true);
  }
}

void ChartPanel::reset_view() {
  follow_ = true;
  for (Bound& b : bound_) b.version = 0;  // force a full refresh at the next tick
  plot_->rescaleAxes();
  place_marks();
  plot_->replot();
}

namespace {
QString markName(NonFinite k) {
  switch (k) {
    case NonFinite::NaN: return QStringLiteral("NaN");
    case NonFinite::PosInf: return QStringLiteral("+inf");
    case NonFinite::NegInf: return QStringLiteral("-inf");
  }
  return {};
}
}  // namespace

void ChartPanel::hover_at(double key) {
  // The step shown is the data point nearest the pointer over every series; another series
  // is listed only with a point within a few pixels of it, and with that point's own step
  // when it differs (an eval every 20 steps is never read off at step 9).
  const double tolerance = std::max(std::abs(plot_->xAxis->pixelToCoord(6) - plot_->xAxis->pixelToCoord(0)), 0.5);
  auto nearest = [](const QCPGraph* g, double at) {
    auto it = g->data()->findBegin(at, true);
    if (it == g->data()->constEnd()) return it;
    auto next = it + 1;
    if (next != g->data()->constEnd() && std::abs(next->key - at) < std::abs(it->key - at)) it = next;
    return it;
  };
  double shown_key = key, best = std::numeric_limits<double>::infinity();
  for (const Bound& b : bound_) {
    if (!b.graph || b.graph->data()->isEmpty()) continue;
    const auto it = nearest(b.graph, key);
    if (it != b.graph->data()->constEnd() && std::abs(it->key - key) < best)
      best = std::abs(it->key - key), shown_key = it->key;
  }
  for (const Bound& b : bound_)
    for (const auto& m : b.mark_points)
      if (std::abs(m.x - key) < best) best = std::abs(m.x - key), shown_key = m.x;
  QStringList lines;
  for (const Bound& b : bound_) {
    if (!b.graph) continue;
    if (!b.graph->data()->isEmpty()) {
      auto it = nearest(b.graph, shown_key);
      if (it != b.graph->data()->constEnd() && std::abs(it->key - shown_key) <= tolerance) {
        const QString value = QString::number(it->value, 'g', 5);
        lines << (it->key == shown_key ? QStringLiteral("%1: %2").arg(b.graph->name(), value)
                                       : tr("%1: %2 (step %3)").arg(b.graph->name(), value).arg(it->key));
      }
    }
    for (const auto& m : b.mark_points)
      if (std::abs(m.x - shown_key) <= tolerance)
        lines << tr("%1: %2 at step %3").arg(b.graph->name(), markName(m.kind)).arg(m.x);
  }
  if (lines.isEmpty()) {
    hover_label_->setVisible(false);
    hover_line_->setVisible(false);
  } else {
    lines.prepend(tr("step %1").arg(shown_key));
    hover_label_->setText(lines.join(QLatin1Char('\n')));
    hover_label_->setVisible(true);
    hover_line_->point1->setCoords(shown_key, 0);
    hover_line_->point2->setCoords(shown_key, 1);
    hover_line_->setVisible(true);
  }
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

QString ChartPanel::hover_text() const { return hover_label_->visible() ? hover_label_->text() : QString(); }

void ChartPanel::on_mouse_move(QMouseEvent* e) {
  if (!plot_->axisRect()->rect().contains(e->pos())) {
    hover_label_->setVisible(false);
    hover_line_->setVisible(false);
    plot_->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  hover_at(plot_->xAxis->pixelToCoord(e->pos().x()));
}

void ChartPanel::show_context_menu(const QPoint& pos) {
  auto* menu = new QMenu(this);
  menu->setAttribute(Qt::WA_DeleteOnClose);
  menu->addAction(tr("Reset view"), this, [this] { reset_view(); });
  QAction* log = menu->addAction(tr("Logarithmic scale"), this, [this](bool on) { set_log_scale(on); });
  log->setCheckable(true);
  log->setChecked(log_);
  menu->addSeparator();
  auto ask = [this](const QString& filter, const QString& suffix, auto save) {
    auto* dlg = new QFileDialog(this, tr("Export %1").arg(title_), QString(), filter);
    dlg->setAcceptMode(QFileDialog::AcceptSave);
    dlg->setDefaultSuffix(suffix);
    dlg->setAttribute(Qt::WA_DeleteOnClose);
    connect(dlg, &QFileDialog::fileSelected, this, save);
    dlg->open();  // asynchronous: no nested event loop
  };
  menu->addAction(tr("Export PNG…"), this,
                  [this, ask] { ask(tr("PNG image (*.png)"), "png", [this](const QString& f) { export_png(f); }); });
  menu->addAction(tr("Export CSV…"), this,
                  [this, ask] { ask(tr("CSV (*.csv)"), "csv", [this](const QString& f) { export_csv(f); }); });
  menu->popup(plot_->mapToGlobal(pos));
}

bool ChartPanel::export_png(const QString& path, int width, int height) { return plot_->savePng(path, width, height); }

bool ChartPanel::export_csv(const QString& path) const {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) return false;
  QTextStream out(&f);
  out << "series,step,value\n";
  for (const Bound& b : bound_) {
    if (!b.graph) continue;
    const QString name = b.series;
    // Held points in step order, non-finite ones merged in where they occurred.
    auto marks = b.mark_points;
    std::size_t mi = 0;
    for (auto it = b.graph->data()->constBegin(); it != b.graph->data()->constEnd(); ++it) {
      for (; mi < marks.size() && marks[mi].x < it->key; ++mi)
        out << name << ',' << marks[mi].x << ',' << markName(marks[mi].kind) << '\n';
      out << name << ',' << it->key << ',' << QString::number(it->value, 'g', 9) << '\n';
    }
    for (; mi < marks.size(); ++mi) out << name << ',' << marks[mi].x << ',' << markName(marks[mi].kind) << '\n';
  }
  return out.status() == QTextStream::Ok;
}

int ChartPanel::point_count(const QString& series) const {
  for (const Bound& b : bound_)
    if (b.series == series && b.graph) return b.graph->data()->size();
  return -1;
}

QColor ChartPanel::series_color(const QString& series) const {
  for (const Bound& b : bound_)
    if (b.series == series && b.graph) return b.graph->pen().color();
  return {};
}

QColor ChartPanel::hover_background() const { return hover_label_->brush().color(); }

int ChartPanel::marker_count(const QString& series) const {
  for (const Bound& b : bound_)
    if (b.series == series) return b.marks ? b.marks->data()->size() : 0;
  return -1;
}

}  // namespace odyssey::ui
