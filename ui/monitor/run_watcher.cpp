#include "run_watcher.h"

#include <QCoreApplication>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "run/status_file.h"

namespace odyssey::ui {

namespace fs = std::filesystem;

namespace {
constexpr int kMaxInFlight = 2;

QString qs(const std::string& s) { return QString::fromStdString(s); }

// Reads [offset, offset + max) of `path`; empty on any error.
std::string read_range(const fs::path& path, std::int64_t offset, std::int64_t max) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  out.resize(static_cast<std::size_t>(max));
  const ssize_t n = ::pread(fd, out.data(), out.size(), offset);
  ::close(fd);
  out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return out;
}
}  // namespace

RunWatcher::RunWatcher(QString run_dir, std::uint64_t generation, WatcherOptions options)
    : dir_(fs::path(run_dir.toStdString())), generation_(generation), options_(options) {
  run::EventReaderOptions ro;
  ro.max_bytes_per_poll = options_.slice_bytes;
  reader_ = std::make_unique<run::EventReader>(dir_.events(), ro);
}

void RunWatcher::start() {
  timer_ = new QTimer(this);
  timer_->setInterval(options_.interval_ms);
  connect(timer_, &QTimer::timeout, this, &RunWatcher::poll);
  timer_->start();
  poll();
}

void RunWatcher::acknowledge() {
  if (in_flight_ > 0) --in_flight_;
  if (more_pending_ && in_flight_ < kMaxInFlight) poll();
}

void RunWatcher::poll() {
  if (cancelled_.load()) {
    if (timer_) timer_->stop();
    return;
  }
  if (in_flight_ >= kMaxInFlight) return;  // the GUI is behind: let it catch up first

  WatchBatch b;
  b.generation = generation_;
  std::error_code ec;
  const bool missing = !fs::is_directory(dir_.root(), ec);
  if (missing != dir_missing_) {
    dir_missing_ = missing;
    b.dir_missing = missing;
    b.messages << (missing ? QCoreApplication::translate("RunWatcher",
                                                         "The run directory %1 no longer exists (deleted, moved or "
                                                         "unmounted); showing what was read before.")
                                 .arg(qs(dir_.root().string()))
                           : QCoreApplication::translate("RunWatcher", "The run directory %1 is back.")
                                 .arg(qs(dir_.root().string())));
  }

  if (!missing) {
    if (!config_sent_) {
      std::ifstream in(dir_.config(), std::ios::binary);
      if (in) {
        std::ostringstream ss;
        ss << in.rdbuf();
        b.config_yaml = qs(ss.str());
        config_sent_ = true;
      }
    }
    run::PollResult r = reader_->poll();
    if (r.restarted) {
      builder_.reset();
      events_total_ = 0;
      b.restarted = true;
    }
    builder_.begin(&b);
    for (const auto& rec : r.events) {
      if (cancelled_.load()) return;
      builder_.add(rec.event);
    }
    events_total_ += static_cast<std::int64_t>(r.events.size());
    for (const auto& d : r.diagnostics) b.messages << qs(d.format());
    more_pending_ = r.more;
    b.caught_up = !r.more;
    poll_status(b);
    poll_log(b);
  } else {
    more_pending_ = false;
  }
  b.events_read = events_total_;
  b.bytes_read = reader_->offset();
  struct stat st {};
  b.bytes_total = ::stat(reader_->path().c_str(), &st) == 0 ? static_cast<std::int64_t>(st.st_size) : 0;

  const bool empty = b.series.empty() && !b.run_start && !b.run_end && b.stage.isEmpty() && !b.status_changed &&
                     b.messages.isEmpty() && b.log_lines.isEmpty() && !b.dir_missing && !b.config_yaml &&
                     !b.restarted && !b.progress;
  if (empty || cancelled_.load()) return;
  ++in_flight_;
  emit batch_ready(b);
  // Pipeline one more slice while the GUI digests this one.
  if (more_pending_ && in_flight_ < kMaxInFlight) QTimer::singleShot(0, this, &RunWatcher::poll);
}

void RunWatcher::poll_status(WatchBatch& b) {
  std::error_code ec;
  if (!fs::exists(dir_.status(), ec)) return;  // launched without a status writer yet
  run::StatusFile sf(dir_.status());
  auto r = sf.read();
  if (!r.ok()) {
    const std::string err = format_all(r.diagnostics);
    if (err != status_error_) {
      status_error_ = err;
      b.messages << QStringLiteral("status.json: ") + qs(err);
    }
    return;
  }
  status_error_.clear();
  const run::Liveness live = run::liveness(r.value, run::unix_now());
  std::string text = run::encode_status(r.value);
  if (text == last_status_text_ && static_cast<int>(live) == last_liveness_) return;
  last_status_text_ = std::move(text);
  last_liveness_ = static_cast<int>(live);
  b.status_changed = true;
  b.status = std::move(r.value);
  b.liveness = live;
}

void RunWatcher::poll_log(WatchBatch& b) {
  const fs::path log = dir_.rank_log(0);
  struct stat st {};
  if (::stat(log.c_str(), &st) != 0) return;
  const auto size = static_cast<std::int64_t>(st.st_size);
  bool drop_first = false;
  if (log_offset_ < 0 || size < log_offset_) {  // first look, or the log was truncated
    log_offset_ = size > options_.log_tail_bytes ? size - options_.log_tail_bytes : 0;
    drop_first = log_offset_ > 0;  // we start mid-line
    log_partial_.clear();
  }
  if (size == log_offset_) return;
  std::string chunk = read_range(log, log_offset_, std::min<std::int64_t>(size - log_offset_, 1 << 20));
  log_offset_ += static_cast<std::int64_t>(chunk.size());
  chunk.insert(0, log_partial_);
  log_partial_.clear();
  std::size_t start = 0;
  QStringList lines;
  for (std::size_t nl = chunk.find('\n'); nl != std::string::npos; nl = chunk.find('\n', start)) {
    if (!drop_first) lines << QString::fromUtf8(chunk.data() + start, static_cast<qsizetype>(nl - start));
    drop_first = false;
    start = nl + 1;
  }
  log_partial_ = chunk.substr(start);
  if (log_partial_.size() > 64 * 1024) log_partial_.clear();  // a runaway line: drop it
  if (lines.size() > options_.max_log_lines_per_batch)
    lines = lines.mid(lines.size() - options_.max_log_lines_per_batch);
  b.log_lines << lines;
}

}  // namespace odyssey::ui
