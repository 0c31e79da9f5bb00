#include "run/event_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace odyssey::run {

namespace {

Diagnostic io_error(const std::string& file, const std::string& what, int err) {
  Diagnostic d;
  d.file = file;
  d.message = what + ": " + std::strerror(err);
  return d;
}

// Writes all of `data`, retrying after signals. A regular file only takes less than asked
// when the disk is full, and then the next attempt reports ENOSPC.
bool write_all(int fd, const char* data, std::size_t size, int& err) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

template <typename T>
void stamp(T& e, std::chrono::steady_clock::time_point start) {
  if (e.time != 0) return;
  using namespace std::chrono;
  e.time = duration<double>(system_clock::now().time_since_epoch()).count();
  e.elapsed_s = duration<double>(steady_clock::now() - start).count();
}

}  // namespace

EventWriter::~EventWriter() { close(); }

EventWriter::EventWriter(EventWriter&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      options_(other.options_),
      start_(other.start_) {}

EventWriter& EventWriter::operator=(EventWriter&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    options_ = other.options_;
    start_ = other.start_;
  }
  return *this;
}

Result<EventWriter> EventWriter::open(const std::filesystem::path& file, EventWriterOptions options) {
  Result<EventWriter> r;
  const std::string name = file.string();
  const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    r.diagnostics.push_back(io_error(name, "cannot open events file for appending", errno));
    return r;
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    // O_WRONLY cannot read the last byte; a second read-only descriptor can.
    const int rfd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
    char last = '\n';
    if (rfd >= 0) {
      if (::pread(rfd, &last, 1, st.st_size - 1) != 1) last = '\n';
      ::close(rfd);
    }
    int err = 0;
    if (last != '\n' && !write_all(fd, "\n", 1, err)) {
      r.diagnostics.push_back(io_error(name, "cannot end the half-written last line", err));
      ::close(fd);
      return r;
    }
  }
  r.value.fd_ = fd;
  r.value.path_ = name;
  r.value.options_ = options;
  r.value.start_ = std::chrono::steady_clock::now();
  return r;
}

Diagnostics EventWriter::write(Event e) {
  Diagnostics diags;
  if (fd_ < 0) {
    Diagnostic d;
    d.file = path_;
    d.message = "events file is not open";
    diags.push_back(std::move(d));
    return diags;
  }
  std::visit([this](auto& x) { stamp(x, start_); }, e);
  std::string line = encode_event(e);
  line += '\n';
  int err = 0;
  if (!write_all(fd_, line.data(), line.size(), err)) {
    diags.push_back(io_error(path_, "cannot append event", err));
    return diags;
  }
  const bool durable =
      std::holds_alternative<CheckpointEvent>(e) || std::holds_alternative<RunEndEvent>(e);
  if (durable && options_.sync_durable_events && ::fsync(fd_) != 0)
    diags.push_back(io_error(path_, "cannot sync events file", errno));
  return diags;
}

void EventWriter::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

}  // namespace odyssey::run
