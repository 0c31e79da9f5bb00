// MonitorPage: applying the watcher's batches and keeping the header, banner and
// progress in step with them (the layout is in monitor_page.cpp).
#include <QElapsedTimer>
#include <QLabel>
#include <QProgressBar>

#include <cmath>
#include <map>

#include "../palette.h"
#include "chart_panel.h"
#include "log_view.h"
#include "monitor_page.h"
#include "run_watcher.h"

namespace odyssey::ui {

namespace {
constexpr int kMaxMessages = 50;  // kept; the label shows the last few and a count
constexpr int kShownMessages = 6;
constexpr qint64 kRedrawBudgetMs = 15;
}  // namespace

void MonitorPage::on_batch(const WatchBatch& b) {
  if (b.generation != watch_generation_) return;  // from a run attached before: stale
  QElapsedTimer t;
  t.start();
  ++batches_;
  if (b.restarted) {
    store_.clear();
    progress_.reset();
    run_end_.reset();
    add_messages({tr("events.jsonl was replaced or truncated: the charts restart from its first line.")});
  }
  for (const SeriesChunk& c : b.series) store_.append(c.name, c.x, c.y);
  if (b.run_start) run_start_ = b.run_start;
  if (b.run_end) run_end_ = b.run_end;
  if (b.progress) progress_ = b.progress;
  if (!b.stage.isEmpty()) stage_ = b.stage;
  if (b.status_changed) {
    status_ = b.status;
    liveness_ = b.liveness;
  }
  if (b.dir_missing) dir_missing_ = *b.dir_missing;
  add_messages(b.messages);
  log_->append_lines(b.log_lines);
  events_read_ = b.events_read;
  bytes_read_ = b.bytes_read;
  bytes_total_ = b.bytes_total;
  caught_up_ = b.caught_up;
  // Acknowledge so the watcher sends the next slice of a long file (flow control).
  if (watcher_) QMetaObject::invokeMethod(watcher_, &RunWatcher::acknowledge, Qt::QueuedConnection);
  if (!redraw_timer_.isActive()) redraw_timer_.start();
  if (qEnvironmentVariableIsSet("ODYSSEY_MONITOR_TRACE")) qInfo("batch %lld ms", static_cast<long long>(t.elapsed()));
}

void MonitorPage::redraw() {
  // Charts are refreshed round-robin within a time budget per tick: a replot of six
  // charts of thousands of points can take longer than a frame on a slow machine, and the
  // GUI thread must keep answering between them. Unchanged charts cost nothing.
  QElapsedTimer t;
  t.start();
  ChartPanel* charts[] = {loss_, lr_, tokens_, grad_, vram_, busbw_};
  constexpr int n = static_cast<int>(std::size(charts));
  bool finished = true;
  for (int i = 0; i < n; ++i) {
    const qint64 before = t.elapsed();
    charts[next_chart_]->refresh(store_);
    if (qEnvironmentVariableIsSet("ODYSSEY_MONITOR_TRACE") && t.elapsed() - before > 10)
      qInfo("chart %d: %lld ms", next_chart_, static_cast<long long>(t.elapsed() - before));
    next_chart_ = (next_chart_ + 1) % n;
    if (t.elapsed() >= kRedrawBudgetMs && i + 1 < n) {
      finished = false;
      break;
    }
  }
  // Once steps arrive, an empty chart is empty for good reason, not "waiting".
  vram_->set_empty_text(progress_ ? tr("no GPU memory recorded: this run trains on the CPU")
                                  : tr("waiting for the first step…"));
  busbw_->set_empty_text(progress_ ? tr("no collectives recorded: a single-process run")
                                   : tr("waiting for the first step…"));
  update_header();
  if (!finished) redraw_timer_.start();
  if (qEnvironmentVariableIsSet("ODYSSEY_MONITOR_TRACE")) qInfo("redraw %lld ms", static_cast<long long>(t.elapsed()));
}

void MonitorPage::add_messages(const QStringList& lines) {
  if (lines.isEmpty()) return;
  message_count_ += static_cast<int>(lines.size());
  messages_ << lines;
  if (messages_.size() > kMaxMessages) messages_ = messages_.mid(messages_.size() - kMaxMessages);
  QStringList shown = messages_.mid(std::max<qsizetype>(0, messages_.size() - kShownMessages));
  if (message_count_ > shown.size())
    shown.prepend(tr("%n earlier message(s) not shown", nullptr, message_count_ - static_cast<int>(shown.size())));
  messages_label_->setText(shown.join(QLatin1Char('\n')));
  messages_label_->setVisible(true);
}

DisplayState MonitorPage::state() const {
  if (attached_.isEmpty()) return DisplayState::Unknown;
  const DisplayState s = display_state(status_, liveness_, run_end_);
  // Without status.json (a run written by another tool, or not started by the launcher)
  // the events alone say "running" once steps arrive.
  if (s == DisplayState::Unknown && progress_ && !status_) return DisplayState::Running;
  return s;
}

QString MonitorPage::state_text() const { return display_state_name(state()); }

QString MonitorPage::progress_text() const {
  QStringList parts;
  if (!caught_up_ && bytes_total_ > 0)
    parts << tr("reading events.jsonl %1%")
                 .arg(100.0 * static_cast<double>(bytes_read_) / static_cast<double>(bytes_total_), 0, 'f', 0);
  if (progress_) {
    const auto total = progress_->total_steps > 0 ? progress_->total_steps : (status_ ? status_->total_steps : 0);
    parts << (total > 0 ? tr("step %1 / %2").arg(progress_->step).arg(total) : tr("step %1").arg(progress_->step));
    parts << tr("loss %1").arg(std::isfinite(progress_->loss) ? QString::number(progress_->loss, 'f', 4)
                                                              : QString::number(progress_->loss));
    parts << tr("elapsed %1").arg(format_duration(progress_->elapsed_s));
    const DisplayState s = state();
    if (s == DisplayState::Running || s == DisplayState::Starting)
      parts << tr("ETA %1").arg(format_duration(progress_->eta_s));
  } else if (!stage_.isEmpty()) {
    parts << stage_;
  } else if (!attached_.isEmpty()) {
    parts << tr("no step yet");
  }
  return parts.join(QStringLiteral("  ·  "));
}

QString MonitorPage::banner_text() const { return banner_->isHidden() ? QString() : banner_->text(); }
QString MonitorPage::title_text() const { return title_->text(); }

QString MonitorPage::messages_text() const { return messages_label_->isHidden() ? QString() : messages_label_->text(); }

void MonitorPage::update_header() {
  if (attached_.isEmpty()) return;
  QString title = run_start_ ? QString::fromStdString(run_start_->run_id) : attached_.section(QLatin1Char('/'), -1);
  if (run_start_) {
    const auto& m = run_start_->mesh;
    QString detail = QString::fromStdString(run_start_->model.name);
    // A parallel run on the CPU (Gloo) is processes, not GPUs.
    const auto& devs = run_start_->devices;
    const bool cpu = !devs.empty() && devs.front().name.rfind("CPU", 0) == 0;
    if (m.world > 1)
      detail += (cpu ? tr("  ·  %1 processes on the CPU (dp %2 × sp %3, ulysses %4 × ring %5)")
                     : tr("  ·  %1 GPUs (dp %2 × sp %3, ulysses %4 × ring %5)"))
                    .arg(m.world)
                    .arg(m.dp)
                    .arg(m.sp)
                    .arg(m.ulysses)
                    .arg(m.ring);
    // The optimizer and the state it holds per rank (run_start.optimizer, docs/optimizers.md).
    const auto& o = run_start_->optimizer;
    if (!o.name.empty()) {
      static const std::map<std::string, QString> names{{"adamw", QStringLiteral("AdamW")},
                                                        {"galore_adamw", QStringLiteral("GaLore")},
                                                        {"q_galore_adamw8bit", QStringLiteral("Q-GaLore")},
                                                        {"adamw_fp32_master", QStringLiteral("AdamW, fp32 master")},
                                                        {"zero1_adamw", QStringLiteral("ZeRO-1")},
                                                        {"zero2_adamw", QStringLiteral("ZeRO-2")}};
      const auto it = names.find(o.name);
      const double gib = 1024.0 * 1024.0 * 1024.0;
      detail +=
          tr("  ·  %1, %2 GiB optimizer state%3")
              .arg(it != names.end() ? it->second : QString::fromStdString(o.name))
              .arg(static_cast<double>(o.state_bytes) / gib, 0, 'f', 1)
              .arg(o.host_state_bytes > 0
                       ? tr(" + %1 GiB in host memory").arg(static_cast<double>(o.host_state_bytes) / gib, 0, 'f', 1)
                       : QString());
      if (o.sharded_over > 1) detail += tr(" per rank");
    }
    if (!detail.trimmed().isEmpty()) title += QStringLiteral("  —  ") + detail;
  }
  title_->setText(title);
  const DisplayState s = state();
  const QPalette& pal = palette();
  const QString color = (is_failure(s)                ? error_color(pal)
                         : s == DisplayState::Running ? ok_color(pal)
                                                      : pal.color(QPalette::WindowText))
                            .name();
  state_label_->setText(QStringLiteral("<b style='color:%1'>%2</b>").arg(color, state_text().toHtmlEscaped()));

  double frac = 0;
  if (progress_) {
    const auto total = progress_->total_steps > 0 ? progress_->total_steps : (status_ ? status_->total_steps : 0);
    if (total > 0) frac = static_cast<double>(progress_->step) / static_cast<double>(total);
  }
  progress_bar_->setValue(static_cast<int>(std::lround(std::clamp(frac, 0.0, 1.0) * 1000)));
  progress_label_->setText(progress_text());
  progress_label_->setToolTip(progress_text());

  if (is_failure(s) ||
      (run_end_ && run_end_->status != run::RunOutcome::Completed && run_end_->status != run::RunOutcome::Stopped)) {
    QString reason, where;
    QStringList tail;
    if (status_) {
      reason = QString::fromStdString(status_->reason);
      if (status_->failed_rank >= 0) where += tr("rank %1").arg(status_->failed_rank);
      if (status_->exit_code)
        where += (where.isEmpty() ? QString() : tr(", ")) + tr("exit code %1").arg(*status_->exit_code);
      for (const auto& l : status_->last_error_lines) tail << QString::fromStdString(l);
    }
    if (reason.isEmpty() && run_end_) reason = QString::fromStdString(run_end_->reason);
    if (reason.isEmpty() && s == DisplayState::Stale)
      reason = tr("the job stopped responding: no live process and no heartbeat for %1 s").arg(run::kStaleAfterS);
    if (reason.isEmpty()) reason = tr("no reason was recorded");
    QString html = tr("<b>Run failed:</b> %1").arg(reason.toHtmlEscaped());
    if (!where.isEmpty()) html += QStringLiteral(" (%1)").arg(where.toHtmlEscaped());
    if (!tail.isEmpty())
      html +=
          QStringLiteral("<pre style='margin:4px 0 0 0'>%1</pre>").arg(tail.join(QLatin1Char('\n')).toHtmlEscaped());
    banner_->setText(html);
    banner_->setVisible(true);
  } else {
    banner_->setVisible(false);
  }
}

}  // namespace odyssey::ui
