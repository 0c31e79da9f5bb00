#include "run/event_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "run/run_dir.h"
#include "run/tensorboard.h"

namespace odyssey::run {

namespace {

Diagnostic io_error(const std::string& file, const std::string& what, int err) {
  Diagnostic d;
  d.file = file;
  d.message = what + ": " + std::strerror(err);
  return d;
}

// Writes all of `data`, retrying after signals. A regular file takes less than asked when the
// disk fills or RLIMIT_FSIZE is reached; the next attempt then reports ENOSPC or EFBIG.
bool write_all(int fd, const char* data, std::size_t size, int& err) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      return false;
    }
    if (n == 0) {  // never for a regular file with room; do not spin
      err = EIO;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// What a file that is not a regular file is, for the message.
std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Opens `name` for appending. O_NONBLOCK: a FIFO put in the file's place fails the open
// (ENXIO without a reader) instead of blocking the run; it changes nothing for a regular file.
int open_for_append(const std::string& name, bool create, Diagnostics& diags) {
  const int fd = ::open(name.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NONBLOCK | (create ? O_CREAT : 0), 0644);
  if (fd < 0) {
    diags.push_back(io_error(name, "cannot open for appending", errno));
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    diags.push_back(io_error(name, "cannot stat", errno));
    ::close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    Diagnostic d;
    d.file = name;
    d.message = "is " + kind_of(st.st_mode) + ", not the regular file this run appends to (was it replaced?)";
    diags.push_back(std::move(d));
    ::close(fd);
    return -1;
  }
  return fd;
}

template <typename T>
void stamp(T& e, std::chrono::steady_clock::time_point start) {
  if (e.time != 0) return;
  using namespace std::chrono;
  e.time = duration<double>(system_clock::now().time_since_epoch()).count();
  e.elapsed_s = duration<double>(steady_clock::now() - start).count();
}

}  // namespace

Result<LineAppender> LineAppender::open(const std::filesystem::path& file) {
  Result<LineAppender> r;
  const std::string name = file.string();
  const int fd = open_for_append(name, true, r.diagnostics);
  if (fd < 0) return r;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    // O_WRONLY cannot read the last byte; a second read-only descriptor can.
    const int rfd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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
  if (::close(fd) != 0) {
    r.diagnostics.push_back(io_error(name, "cannot close", errno));
    return r;
  }
  r.value.path_ = name;
  r.value.mu_ = std::make_unique<std::mutex>();
  return r;
}

Diagnostics append_whole(const std::string& path, std::string_view bytes, bool sync) {
  Diagnostics diags;
  const int fd = open_for_append(path, false, diags);
  if (fd < 0) return diags;
  // Where the record begins: the caller serialises appends, and nobody else appends while the
  // run owns the file, so a failed append can be cut back to exactly this size.
  struct stat st {};
  const bool sized = ::fstat(fd, &st) == 0;
  int err = 0;
  if (!write_all(fd, bytes.data(), bytes.size(), err)) {
    diags.push_back(io_error(path, "cannot append " + std::to_string(bytes.size()) + " bytes", err));
    struct stat now {};
    if (::fstat(fd, &now) == 0 && sized && now.st_size > st.st_size) {
      // A short write left part of the record: cut it off, or say that it stays.
      if (::ftruncate(fd, st.st_size) != 0)
        diags.push_back(io_error(path,
                                 "cannot cut the half-written record back to " + std::to_string(st.st_size) +
                                     " bytes; the file ends in half a record",
                                 errno));
    }
    ::close(fd);
    return diags;
  }
  if (sync && ::fsync(fd) != 0) diags.push_back(io_error(path, "cannot sync", errno));
  if (::close(fd) != 0 && diags.empty()) diags.push_back(io_error(path, "cannot close", errno));
  return diags;
}

Diagnostics LineAppender::append(std::string_view text, bool sync) {
  if (!mu_) {
    Diagnostic d;
    d.file = path_;
    d.message = "is not open";
    return {d};
  }
  std::lock_guard<std::mutex> lock(*mu_);
  return append_whole(path_, text, sync);
}

EventWriter::~EventWriter() { close(); }

EventWriter::EventWriter(EventWriter&& other) noexcept
    : out_(std::move(other.out_)),
      options_(other.options_),
      start_(other.start_),
      tensorboard_(std::move(other.tensorboard_)) {}

EventWriter& EventWriter::operator=(EventWriter&& other) noexcept {
  if (this != &other) {
    out_ = std::move(other.out_);
    options_ = other.options_;
    start_ = other.start_;
    tensorboard_ = std::move(other.tensorboard_);
  }
  return *this;
}

Result<EventWriter> EventWriter::open(const std::filesystem::path& file, EventWriterOptions options) {
  Result<EventWriter> r;
  auto opened = LineAppender::open(file);
  if (!opened.ok()) {
    for (auto& d : opened.diagnostics) d.message = "events file: " + d.message;
    r.diagnostics = std::move(opened.diagnostics);
    return r;
  }
  r.value.out_ = std::move(opened.value);
  r.value.options_ = options;
  r.value.start_ = std::chrono::steady_clock::now();
  if (options.tensorboard) {
    const RunDir dir(file.parent_path());
    r.value.tensorboard_ = std::make_unique<TensorBoardSink>(dir.root(), dir.tensorboard_dir());
  }
  return r;
}

Diagnostics EventWriter::write(Event e) {
  if (!out_.is_open()) {
    Diagnostic d;
    d.file = out_.path();
    d.message = "events file is not open";
    return {d};
  }
  std::visit([this](auto& x) { stamp(x, start_); }, e);
  std::string line = encode_event(e);
  line += '\n';
  const bool durable = std::holds_alternative<CheckpointEvent>(e) || std::holds_alternative<RunEndEvent>(e);
  Diagnostics d = out_.append(line, durable && options_.sync_durable_events);
  if (!d.empty() || !tensorboard_) return d;
  // TensorBoard is a view of this file: its failure is a warning here, never the run's end.
  if (Diagnostics tb = tensorboard_->add(e); !tb.empty()) {
    const std::int64_t step = std::visit(
        [](const auto& x) -> std::int64_t {
          if constexpr (requires { x.step; }) return x.step;
          return -1;
        },
        e);
    return warn_tensorboard_failed(tb, step);
  }
  return d;
}

Diagnostics EventWriter::warn_tensorboard_failed(const Diagnostics& why, std::int64_t step) {
  std::string reason = format_all(why);
  while (!reason.empty() && reason.back() == '\n') reason.pop_back();
  WarningEvent w;
  w.code = "tensorboard_write_failed";
  w.message = "TensorBoard output stopped (events.jsonl goes on): " + reason;
  w.step = step;
  stamp(w, start_);
  return out_.append(encode_event(w) + "\n", false);
}

void EventWriter::close() {
  out_.close();
  tensorboard_.reset();
}

}  // namespace odyssey::run
