#include "run_scanner.h"

#include <QCoreApplication>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include "run/event_schema.h"
#include "run/run_dir.h"
#include "run/status_file.h"

namespace odyssey::ui {

namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kTailBytes = 256 * 1024;

struct Tail {
  std::optional<run::StepEvent> last_step;
  std::optional<run::RunEndEvent> run_end;
  double last_elapsed = -1;
};

Tail read_tail(const fs::path& events) {
  Tail t;
  std::ifstream in(events, std::ios::binary);
  if (!in) return t;
  in.seekg(0, std::ios::end);
  const std::int64_t size = in.tellg();
  const std::int64_t from = std::max<std::int64_t>(0, size - kTailBytes);
  in.seekg(from);
  std::string buf(static_cast<std::size_t>(size - from), '\0');
  in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
  buf.resize(static_cast<std::size_t>(in.gcount()));
  std::size_t start = 0;
  if (from > 0) {  // began mid-line
    const auto nl = buf.find('\n');
    start = nl == std::string::npos ? buf.size() : nl + 1;
  }
  const std::string file = events.string();
  while (start < buf.size()) {
    const auto nl = buf.find('\n', start);
    if (nl == std::string::npos) break;  // an unfinished line
    auto d = run::decode_event_line(std::string_view(buf).substr(start, nl - start), file, 0);
    start = nl + 1;
    if (!d.event) continue;
    t.last_elapsed = run::event_elapsed(*d.event);
    if (auto* s = std::get_if<run::StepEvent>(&*d.event)) t.last_step = std::move(*s);
    if (auto* e = std::get_if<run::RunEndEvent>(&*d.event)) t.run_end = std::move(*e);
  }
  return t;
}

}  // namespace

RunSummary summarize_run(const QString& dir, double now) {
  RunSummary s;
  const run::RunDir rd{fs::path(dir.toStdString())};
  s.path = dir;
  s.run_id = QString::fromStdString(rd.run_id());
  const Tail t = read_tail(rd.events());
  std::optional<run::RunStatus> status;
  run::Liveness live = run::Liveness::Alive;
  std::error_code ec;
  if (fs::exists(rd.status(), ec)) {
    auto r = run::StatusFile(rd.status()).read();
    if (r.ok()) {
      status = r.value;
      live = run::liveness(r.value, now);
    } else {
      s.reason = QString::fromStdString(format_all(r.diagnostics));
    }
  }
  s.state = display_state(status, live, t.run_end);
  if (t.last_step) {
    s.step = t.last_step->step;
    s.total_steps = t.last_step->total_steps;
    s.last_loss = t.last_step->loss;
    s.has_loss = true;
    s.eta_s = t.last_step->eta_s;
  }
  if (status) {
    s.step = std::max(s.step, status->step);
    if (status->total_steps > 0) s.total_steps = status->total_steps;
    if (!status->reason.empty()) s.reason = QString::fromStdString(status->reason);
  }
  if (t.run_end && !t.run_end->reason.empty() && s.reason.isEmpty())
    s.reason = QString::fromStdString(t.run_end->reason);
  const bool active =
      s.state == DisplayState::Running || s.state == DisplayState::Starting || s.state == DisplayState::Stopping;
  if (active && status && status->started_at > 0) s.elapsed_s = now - status->started_at;
  else s.elapsed_s = t.last_elapsed;
  if (!active) s.eta_s = -1;
  if (s.state == DisplayState::Stale && s.reason.isEmpty())
    s.reason =
        QCoreApplication::translate("RunScanner", "no heartbeat and no live process: the job stopped responding");
  return s;
}

void RunScanner::start() {
  timer_ = new QTimer(this);
  timer_->setInterval(interval_ms_);
  connect(timer_, &QTimer::timeout, this, &RunScanner::scan);
  timer_->start();
}

void RunScanner::set_root(const QString& root, quint64 generation) {
  root_ = root;
  generation_ = generation;
  scan();
}

void RunScanner::scan() {
  if (root_.isEmpty()) return;
  std::vector<RunSummary> runs;
  QString error;
  std::error_code ec;
  const double now = run::unix_now();
  fs::directory_iterator it(fs::path(root_.toStdString()), ec);
  if (ec == std::errc::no_such_file_or_directory) {
    // No runs yet: the first Start creates the folder (not an error; issue 23, finding 7).
  } else if (ec) {
    error = QCoreApplication::translate("RunScanner", "Cannot list %1: %2")
                .arg(root_, QString::fromStdString(ec.message()));
  } else {
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      if (ec) break;
      std::error_code ec2;
      if (!it->is_directory(ec2) || !run::RunDir::looks_like_run(it->path())) continue;
      runs.push_back(summarize_run(QString::fromStdString(it->path().string()), now));
    }
  }
  // Newest first: run ids start with a UTC timestamp.
  std::sort(runs.begin(), runs.end(), [](const RunSummary& a, const RunSummary& b) { return a.run_id > b.run_id; });
  emit scanned(generation_, runs, error);
}

}  // namespace odyssey::ui
