#include "run/event_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>

namespace odyssey::run {

namespace {

constexpr std::size_t kHeadBytes = 256;
constexpr std::size_t kChunkBytes = 64 * 1024;

// Closes the descriptor on every return path.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

EventReader::EventReader(std::filesystem::path file, EventReaderOptions options)
    : path_(file.string()), options_(options) {
  if (options_.max_line_bytes == 0) options_.max_line_bytes = 1;
}

void EventReader::reset() {
  offset_ = 0;
  line_no_ = 0;
  partial_.clear();
  partial_.shrink_to_fit();
  skipping_ = false;
  refused_ = false;
  noted_newer_minor_ = false;
  problems_ = 0;
  have_identity_ = false;
  head_.clear();
}

PollResult EventReader::poll() {
  PollResult out;
  try {
    Fd f{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
    if (f.fd < 0) {
      const int err = errno;
      if (err != ENOENT && err != last_open_errno_)  // say it once, not every poll
        out.diagnostics.push_back(diagnostic_at(Severity::Error, path_, {},
                                                std::string("cannot open events file: ") + std::strerror(err), 0));
      last_open_errno_ = err;
      return out;
    }
    last_open_errno_ = 0;
    out.file_exists = true;
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) {
      out.diagnostics.push_back(diagnostic_at(Severity::Error, path_, {},
                                              std::string("cannot stat events file: ") + std::strerror(errno), 0));
      return out;
    }
    const auto dev = static_cast<std::uint64_t>(st.st_dev);
    const auto ino = static_cast<std::uint64_t>(st.st_ino);
    const std::int64_t size = st.st_size;
    if (have_identity_ && (dev != dev_ || ino != ino_ || size < offset_ || !same_head(f.fd))) {
      reset();
      out.restarted = true;
      out.diagnostics.push_back(diagnostic_at(Severity::Warning, path_, {},
                                              "the events file was truncated or replaced; reading it again "
                                              "from the start",
                                              0));
    }
    have_identity_ = true;
    dev_ = dev;
    ino_ = ino;
    if (!refused_) read_file(f.fd, size, out);
  } catch (const std::exception& e) {
    // Only allocation failure can get here; the monitor must survive it.
    out.diagnostics.push_back(
        diagnostic_at(Severity::Error, path_, {}, std::string("reading events failed: ") + e.what(), line_no_));
  }
  return out;
}

bool EventReader::same_head(int fd) const {
  if (head_.empty()) return true;
  std::string now(head_.size(), '\0');
  const ssize_t n = ::pread(fd, now.data(), now.size(), 0);
  return n == static_cast<ssize_t>(now.size()) && now == head_;
}

void EventReader::read_file(int fd, std::int64_t size, PollResult& out) {
  if (buf_.size() < kChunkBytes) buf_.resize(kChunkBytes);  // kept: a GUI polls every second
  std::size_t budget = options_.max_bytes_per_poll;
  while (offset_ < size && !refused_) {
    std::size_t want = std::min(kChunkBytes, static_cast<std::size_t>(size - offset_));
    if (options_.max_bytes_per_poll != 0) {
      if (budget == 0) {
        out.more = true;
        return;
      }
      want = std::min(want, budget);
    }
    const ssize_t n = ::pread(fd, buf_.data(), want, static_cast<off_t>(offset_));
    if (n < 0) {
      if (errno == EINTR) continue;
      out.diagnostics.push_back(diagnostic_at(Severity::Error, path_, {},
                                              std::string("cannot read events file: ") + std::strerror(errno), 0));
      return;
    }
    if (n == 0) return;  // truncated under us; the next poll notices
    const auto got = static_cast<std::size_t>(n);
    if (head_.size() < kHeadBytes && static_cast<std::int64_t>(head_.size()) == offset_)
      head_.append(buf_.data(), std::min(got, kHeadBytes - head_.size()));
    offset_ += n;
    if (options_.max_bytes_per_poll != 0) budget -= got;
    process(buf_.data(), got, out);
  }
}

void EventReader::process(const char* data, std::size_t size, PollResult& out) {
  const std::string_view chunk(data, size);
  std::size_t pos = 0;
  while (pos < chunk.size() && !refused_) {
    const std::size_t nl = chunk.find('\n', pos);
    if (nl == std::string_view::npos) {
      const std::string_view rest = chunk.substr(pos);
      if (skipping_) return;
      if (partial_.size() + rest.size() > options_.max_line_bytes) {
        // Report it now (the writer may never finish it) and stop holding it.
        report_too_long(line_no_ + 1, out);
        partial_.clear();
        partial_.shrink_to_fit();
        skipping_ = true;
      } else {
        partial_.append(rest);
      }
      return;
    }
    const std::string_view seg = chunk.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no_;
    if (skipping_) {
      skipping_ = false;  // already reported when it outgrew the limit
    } else if (partial_.size() + seg.size() > options_.max_line_bytes) {
      report_too_long(line_no_, out);
      partial_.clear();
      partial_.shrink_to_fit();
    } else if (partial_.empty()) {
      consume_line(seg, out);
    } else {
      partial_.append(seg);
      consume_line(partial_, out);
      partial_.clear();
    }
  }
}

void EventReader::consume_line(std::string_view line, PollResult& out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  DecodedLine d = decode_event_line(line, path_, line_no_);
  if (d.refused) {
    refused_ = true;
    for (auto& x : d.diagnostics) out.diagnostics.push_back(std::move(x));
    out.diagnostics.push_back(diagnostic_at(Severity::Note, path_, {}, "the rest of the file is not read", line_no_));
    return;
  }
  if (d.event) {
    if (d.minor > kSchemaMinor && !noted_newer_minor_) {
      noted_newer_minor_ = true;
      out.diagnostics.push_back(diagnostic_at(Severity::Note, path_, {},
                                              "written by a newer Odyssey (schema " + std::to_string(d.major) + "." +
                                                  std::to_string(d.minor) + "); what it added since " +
                                                  std::string(kSchemaVersion) + " is ignored",
                                              line_no_));
    }
    out.events.push_back(EventRecord{line_no_, std::move(*d.event)});
    return;
  }
  if (!d.diagnostics.empty()) report_problem(std::move(d.diagnostics), out);
}

void EventReader::report_problem(Diagnostics&& diags, PollResult& out) {
  ++problems_;
  if (problems_ <= options_.max_reported_problems) {
    for (auto& x : diags) out.diagnostics.push_back(std::move(x));
  } else if (problems_ == options_.max_reported_problems + 1) {
    out.diagnostics.push_back(diagnostic_at(
        Severity::Note, path_, {}, "more malformed lines follow; they are skipped without a report", line_no_));
  }
}

void EventReader::report_too_long(int line_no, PollResult& out) {
  Diagnostics d;
  d.push_back(diagnostic_at(Severity::Error, path_, {},
                            "line is longer than " + std::to_string(options_.max_line_bytes) + " bytes; line skipped",
                            line_no));
  report_problem(std::move(d), out);
}

}  // namespace odyssey::run
