// RunDir: where each file of a run lives (docs/run-contract.md, "Layout"). Every program
// that touches a run directory builds its paths here, so the layout is spelled once.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/diagnostic.h"

namespace odyssey::run {

class RunDir {
 public:
  RunDir() = default;
  explicit RunDir(std::filesystem::path root) : root_(std::move(root)) {}

  const std::filesystem::path& root() const { return root_; }
  // The directory's name, which is also the run id of run_start and status.json.
  std::string run_id() const { return root_.filename().string(); }

  std::filesystem::path config() const { return root_ / "config.yaml"; }
  std::filesystem::path events() const { return root_ / "events.jsonl"; }
  std::filesystem::path status() const { return root_ / "status.json"; }
  std::filesystem::path logs_dir() const { return root_ / "logs"; }
  std::filesystem::path rank_log(int rank) const;  // logs/rank-<N>.log
  std::filesystem::path launcher_log() const { return logs_dir() / "launcher.log"; }
  std::filesystem::path checkpoints_dir() const { return root_ / "checkpoints"; }
  std::filesystem::path checkpoint(std::int64_t step) const;  // checkpoints/checkpoint-<step>

  // Steps of the checkpoints present, ascending (names that do not parse are left out).
  std::vector<std::int64_t> checkpoint_steps() const;

  // A directory with an events.jsonl or status.json: what a runs list shows.
  static bool looks_like_run(const std::filesystem::path& dir);

 private:
  std::filesystem::path root_;
};

// The name part a user or preset gives a run, made safe for a directory name: letters,
// digits, '.', '_' and '-' kept, runs of anything else become one '-', at most 48 bytes.
std::string run_name_slug(std::string_view name);

// Creates <output_dir>/<UTC yyyymmdd-hhmmss>[-<slug of name>] with logs/ and checkpoints/
// inside, adding -2, -3, ... when the name is taken. mkdir(2) decides (it fails on an
// existing directory), so two launches in the same second never share a directory and an
// existing one is never reused. output_dir is created if missing.
Result<RunDir> create_run_dir(const std::filesystem::path& output_dir, std::string_view name,
                              std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

}  // namespace odyssey::run
