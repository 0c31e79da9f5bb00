#include "run/run_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <system_error>
#include <variant>

#include "common/text.h"

namespace odyssey::run {

namespace fs = std::filesystem;

fs::path RunDir::rank_log(int rank) const { return logs_dir() / ("rank-" + std::to_string(rank) + ".log"); }

fs::path RunDir::checkpoint(std::int64_t step) const {
  return checkpoints_dir() / ("checkpoint-" + std::to_string(step));
}

std::vector<std::int64_t> RunDir::checkpoint_steps() const {
  std::vector<std::int64_t> steps;
  std::error_code ec;
  for (fs::directory_iterator it(checkpoints_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!text::starts_with(name, "checkpoint-") || !it->is_directory(ec)) continue;
    if (auto s = text::parse_int(std::string_view(name).substr(11)); s && *s >= 0) steps.push_back(*s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

bool RunDir::looks_like_run(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "events.jsonl", ec) || fs::is_regular_file(dir / "status.json", ec);
}

std::string run_name_slug(std::string_view name) {
  std::string out;
  bool dash = false;
  for (unsigned char c : name) {
    const bool keep = std::isalnum(c) != 0 || c == '.' || c == '_' || c == '-';
    if (keep && c < 0x80) {
      out += static_cast<char>(c);
      dash = false;
    } else if (!dash && !out.empty()) {
      out += '-';
      dash = true;
    }
  }
  if (out.size() > 48) out.resize(48);
  // No leading dots ("..", hidden directories) and no dangling separators.
  while (!out.empty() && (out.front() == '.' || out.front() == '-')) out.erase(out.begin());
  while (!out.empty() && (out.back() == '-' || out.back() == '.')) out.pop_back();
  return out;
}

Result<RunDir> create_run_dir(const fs::path& output_dir, std::string_view name,
                              std::chrono::system_clock::time_point now) {
  Result<RunDir> r;
  auto fail = [&](const fs::path& p, std::string message) {
    Diagnostic d;
    d.file = p.string();
    d.message = std::move(message);
    r.diagnostics.push_back(std::move(d));
    return r;
  };
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec) return fail(output_dir, "cannot create output directory: " + ec.message());

  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &utc);
  std::string base = stamp;
  if (const std::string slug = run_name_slug(name); !slug.empty()) base += "-" + slug;

  for (int attempt = 1; attempt <= 1000; ++attempt) {
    const std::string leaf = attempt == 1 ? base : base + "-" + std::to_string(attempt);
    const fs::path dir = output_dir / leaf;
    if (::mkdir(dir.c_str(), 0755) != 0) {
      if (errno == EEXIST) continue;
      return fail(dir, std::string("cannot create run directory: ") + std::strerror(errno));
    }
    RunDir run(dir);
    for (const fs::path& sub : {run.logs_dir(), run.checkpoints_dir()}) {
      if (::mkdir(sub.c_str(), 0755) != 0) return fail(sub, std::string("cannot create: ") + std::strerror(errno));
    }
    r.value = run;
    return r;
  }
  return fail(output_dir / base, "1000 run directories of this name exist already");
}

namespace {

// The last `max_bytes` of `file` starting at a line: a first line cut by the window is
// dropped. `size` gets the file's size (0 when it cannot be read).
std::string read_tail_window(const fs::path& file, std::size_t max_bytes, std::uintmax_t* size) {
  *size = 0;
  // O_NONBLOCK: a FIFO planted under a log's name must not hang the reader.
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return {};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return {};
  }
  *size = static_cast<std::uintmax_t>(st.st_size);
  const std::uintmax_t from = *size > max_bytes ? *size - max_bytes : 0;
  std::string text(static_cast<std::size_t>(*size - from), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + got, text.size() - got, static_cast<off_t>(from + got));
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  if (from > 0) {
    const std::size_t nl = text.find('\n');
    text.erase(0, nl == std::string::npos ? text.size() : nl + 1);
  }
  return text;
}

}  // namespace

std::string cut_line(std::string_view line, std::size_t max_bytes) {
  if (line.size() <= max_bytes) return std::string(line);
  std::size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(line[end]) & 0xC0) == 0x80) --end;  // not inside a UTF-8 sequence
  return std::string(line.substr(0, end)) + "\xE2\x80\xA6 (" + std::to_string(line.size()) + " bytes)";
}

namespace {

bool contains_ci(std::string_view s, std::string_view word) {
  return std::search(s.begin(), s.end(), word.begin(), word.end(),
                     [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; }) != s.end();
}

// c10d's glog-style warnings ("[W1201 12:00:00.123 socket.cpp:…] [c10d] …"): a rank whose
// peer died prints a screenful of them, and they bury the line that says why it stopped.
bool is_noise(std::string_view line) {
  const bool glog = line.size() > 3 && line[0] == '[' && (line[1] == 'W' || line[1] == 'I') &&
                    std::isdigit(static_cast<unsigned char>(line[2])) != 0;
  return glog && (contains_ci(line, "socket") || contains_ci(line, "c10d") || contains_ci(line, "tcpstore"));
}

bool says_why(std::string_view line) {
  for (std::string_view w : {"error", "fail", "fatal", "terminate", "exception", "abort", "got nothing"})
    if (contains_ci(line, w)) return true;
  return false;
}

}  // namespace

std::vector<std::string> failure_lines(const std::vector<std::string>& log_tail,
                                       const std::vector<std::string>& output_tail, std::size_t max_lines) {
  // The log first (the rank's own account, in order), then what only reached the pipe.
  std::vector<std::string> all = log_tail;
  for (const auto& l : output_tail)
    if (std::find(log_tail.begin(), log_tail.end(), l) == log_tail.end()) all.push_back(l);
  std::vector<std::string> kept;
  for (const auto& l : all)
    if (!is_noise(l) && l.find_first_not_of(" \t") != std::string::npos) kept.push_back(l);
  if (kept.empty()) kept = all;  // the noise is all there is: it is the reason
  if (max_lines == 0) return {};
  std::vector<std::string> out(kept.end() - static_cast<std::ptrdiff_t>(std::min(max_lines, kept.size())), kept.end());
  const auto why = std::find_if(kept.rbegin(), kept.rend(), [](const std::string& l) { return says_why(l); });
  if (why != kept.rend() && std::none_of(out.begin(), out.end(), [](const std::string& l) { return says_why(l); }))
    out.front() = *why;  // the reason was said earlier than the window: it leads the window
  return out;
}

EventsTail read_events_tail(const fs::path& events, std::size_t max_bytes) {
  EventsTail t;
  const std::string text = read_tail_window(events, max_bytes, &t.bytes);
  std::size_t pos = 0;
  // Only lines with their '\n': a last line without one is still being written (or its
  // writer died mid-line) and is not an event.
  for (std::size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    const std::string_view line(text.data() + pos, nl - pos);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    DecodedLine d = decode_event_line(line, events.string(), 0);
    if (!d.event) continue;
    const Event& e = *d.event;
    ++t.events;
    t.last_time = event_time(e);
    t.last_elapsed_s = event_elapsed(e);
    t.ends_with_run_end = std::holds_alternative<RunEndEvent>(e);
    if (const auto* s = std::get_if<StepEvent>(&e)) t.last_step = *s;
    if (const auto* r = std::get_if<RunEndEvent>(&e)) t.last_run_end = *r;
  }
  return t;
}

std::vector<std::string> read_last_lines(const fs::path& file, std::size_t max_lines, std::size_t max_bytes,
                                         std::size_t max_line_bytes) {
  std::uintmax_t size = 0;
  const std::string text = read_tail_window(file, max_bytes, &size);
  std::vector<std::string_view> lines;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string_view line(text.data() + pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    pos = nl + 1;
  }
  const std::size_t first = lines.size() > max_lines ? lines.size() - max_lines : 0;
  std::vector<std::string> out;
  for (std::size_t i = first; i < lines.size(); ++i) out.push_back(cut_line(lines[i], max_line_bytes));
  return out;
}

}  // namespace odyssey::run
