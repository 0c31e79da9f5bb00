#include "monitor_types.h"

#include <QCoreApplication>

#include <cmath>

namespace odyssey::ui {

QString display_state_name(DisplayState s) {
  switch (s) {
    case DisplayState::Unknown: return QCoreApplication::translate("DisplayState", "unknown");
    case DisplayState::Starting: return QCoreApplication::translate("DisplayState", "starting");
    case DisplayState::Running: return QCoreApplication::translate("DisplayState", "running");
    case DisplayState::Stopping: return QCoreApplication::translate("DisplayState", "stopping");
    case DisplayState::Completed: return QCoreApplication::translate("DisplayState", "completed");
    case DisplayState::Stopped: return QCoreApplication::translate("DisplayState", "stopped");
    case DisplayState::Failed: return QCoreApplication::translate("DisplayState", "failed");
    case DisplayState::Stale: return QCoreApplication::translate("DisplayState", "failed (stopped responding)");
  }
  return QCoreApplication::translate("DisplayState", "unknown");
}

bool is_failure(DisplayState s) { return s == DisplayState::Failed || s == DisplayState::Stale; }

DisplayState display_state(const std::optional<run::RunStatus>& status, run::Liveness liveness,
                           const std::optional<run::RunEndEvent>& run_end) {
  using run::RunState;
  if (status) {
    switch (status->state) {
      case RunState::Completed: return DisplayState::Completed;
      case RunState::Stopped: return DisplayState::Stopped;
      case RunState::Failed: return DisplayState::Failed;
      default: break;
    }
    if (liveness == run::Liveness::Dead || liveness == run::Liveness::Silent) {
      // The engine's own last word, when it wrote one, says more than "silent".
      if (!run_end) return DisplayState::Stale;
    } else {
      if (status->state == RunState::Starting) return DisplayState::Starting;
      if (status->state == RunState::Stopping) return DisplayState::Stopping;
      return DisplayState::Running;
    }
  }
  if (run_end) {
    switch (run_end->status) {
      case run::RunOutcome::Completed: return DisplayState::Completed;
      case run::RunOutcome::Stopped: return DisplayState::Stopped;
      case run::RunOutcome::Failed:
      case run::RunOutcome::Killed: return DisplayState::Failed;
    }
  }
  return DisplayState::Unknown;
}

QString format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return QStringLiteral("–");
  const auto s = static_cast<long long>(std::llround(seconds));
  const long long h = s / 3600, m = (s % 3600) / 60, sec = s % 60;
  if (h > 0) return QStringLiteral("%1h %2m").arg(h).arg(m, 2, 10, QLatin1Char('0'));
  if (m > 0) return QStringLiteral("%1m %2s").arg(m).arg(sec, 2, 10, QLatin1Char('0'));
  return QStringLiteral("%1s").arg(sec);
}

}  // namespace odyssey::ui
