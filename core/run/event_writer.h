// EventWriter: appends events to a run's events.jsonl (docs/run-contract.md). Rank 0 owns
// it for the whole run; the launcher opens one only to append a run_end for a rank 0 that
// died without writing its own.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

#include "common/diagnostic.h"
#include "run/event_schema.h"

namespace odyssey::run {

struct EventWriterOptions {
  // fsync after checkpoint and run_end lines: those are the ones a person relies on after
  // a crash or power loss ("which checkpoint is complete", "why did it stop"). Step lines
  // are not synced: the page cache already shows them to readers, and a sync per step
  // would cost a disk flush per step.
  bool sync_durable_events = true;
};

class EventWriter {
 public:
  EventWriter() = default;
  ~EventWriter();
  EventWriter(EventWriter&& other) noexcept;
  EventWriter& operator=(EventWriter&& other) noexcept;
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // Opens `file` for appending, creating it (0644) if needed. If the file is not empty and
  // its last byte is not '\n' (a writer died mid-line), a '\n' is written first so that
  // the next event starts a line of its own instead of gluing onto the broken one.
  static Result<EventWriter> open(const std::filesystem::path& file,
                                  EventWriterOptions options = EventWriterOptions{});

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

  // The monotonic origin of elapsed_s; by default the moment open() was called. The engine
  // sets it to its own start so that time spent before the writer opened counts.
  void set_start(std::chrono::steady_clock::time_point start) { start_ = start; }

  // Appends `e` as one line with one write(2) on an O_APPEND descriptor, so a reader never
  // sees two events interleaved and sees at worst a line without its '\n' yet. No user
  // space buffering: the line is visible to readers when write returns. When the event's
  // `time` is 0 the writer stamps `time` (unix seconds) and `elapsed_s` (monotonic).
  // Safe to call from several threads (each line is its own write).
  // Returns no diagnostics on success.
  Diagnostics write(Event e);

  void close();

 private:
  int fd_ = -1;
  std::string path_;
  EventWriterOptions options_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace odyssey::run
