#include "run/run_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <system_error>

#include "common/text.h"

namespace odyssey::run {

namespace fs = std::filesystem;

fs::path RunDir::rank_log(int rank) const {
  return logs_dir() / ("rank-" + std::to_string(rank) + ".log");
}

fs::path RunDir::checkpoint(std::int64_t step) const {
  return checkpoints_dir() / ("checkpoint-" + std::to_string(step));
}

std::vector<std::int64_t> RunDir::checkpoint_steps() const {
  std::vector<std::int64_t> steps;
  std::error_code ec;
  for (fs::directory_iterator it(checkpoints_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!text::starts_with(name, "checkpoint-") || !it->is_directory(ec)) continue;
    if (auto s = text::parse_int(std::string_view(name).substr(11)); s && *s >= 0)
      steps.push_back(*s);
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
      if (::mkdir(sub.c_str(), 0755) != 0)
        return fail(sub, std::string("cannot create: ") + std::strerror(errno));
    }
    r.value = run;
    return r;
  }
  return fail(output_dir / base, "1000 run directories of this name exist already");
}

}  // namespace odyssey::run
