// EventReader: tails a run's events.jsonl for monitors (the GUI, odyssey-train status).
// Each poll() reads only what was appended since the last one, so polling a long run is
// cheap; it never throws and never trusts the file (see docs/run-contract.md, "Readers").
// Not thread-safe: one reader per thread, off the GUI thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/diagnostic.h"
#include "run/event_schema.h"

namespace odyssey::run {

struct EventReaderOptions {
  // A line longer than this is reported and skipped without being held in memory: no
  // event is near it (a step line of a 1,024-rank run is about 200 KiB), so it is junk.
  std::size_t max_line_bytes = std::size_t{1} << 20;
  // Bytes read by one poll at most (0: to the end), so a monitor opening a long run can
  // show progress instead of freezing; PollResult::more says there is more to read.
  std::size_t max_bytes_per_poll = 0;
  // Malformed lines reported per file before the reader goes quiet (a file of garbage
  // would otherwise bury the one message that matters); they are still counted.
  std::size_t max_reported_problems = 100;
};

struct EventRecord {
  int line = 0;  // 1-based line of events.jsonl
  Event event;
};

struct PollResult {
  std::vector<EventRecord> events;
  Diagnostics diagnostics;
  bool file_exists = false;
  // The file shrank or was replaced since the last poll: everything read before is void
  // (the monitor clears its charts) and this result starts again from line 1.
  bool restarted = false;
  bool more = false;  // max_bytes_per_poll was reached before the end of the file
};

class EventReader {
 public:
  explicit EventReader(std::filesystem::path file, EventReaderOptions options = EventReaderOptions{});

  // The events and diagnostics of every line completed since the last poll. A line
  // without its '\n' yet is kept until the writer finishes it. A missing file is not an
  // error: the run has not started writing.
  PollResult poll();

  const std::string& path() const { return path_; }
  // A line of an unknown major version was met: nothing after it is read, until the file
  // is replaced.
  bool refused() const { return refused_; }
  int lines_read() const { return line_no_; }
  std::int64_t offset() const { return offset_; }
  // Bytes after the last '\n' that are waiting for the rest of their line.
  bool has_partial_line() const { return !partial_.empty() || skipping_; }
  std::size_t problem_count() const { return problems_; }

 private:
  void reset();
  void process(const char* data, std::size_t size, PollResult& out);
  void consume_line(std::string_view line, PollResult& out);
  void report_problem(Diagnostics&& diags, PollResult& out);
  void report_too_long(int line_no, PollResult& out);
  bool same_head(int fd) const;
  void read_file(int fd, std::int64_t size, PollResult& out);

  std::string path_;
  EventReaderOptions options_;
  std::int64_t offset_ = 0;
  int line_no_ = 0;
  std::string buf_;        // read buffer
  std::string partial_;    // the unfinished last line
  bool skipping_ = false;  // inside an overlong line, discarding to its '\n'
  bool refused_ = false;
  bool noted_newer_minor_ = false;
  std::size_t problems_ = 0;
  // Identity of the file read so far: device, inode and its first bytes. An in-place
  // truncate-and-rewrite keeps the inode and may outgrow the old size before we look, but
  // not keep the first line (it holds the run's start time).
  bool have_identity_ = false;
  std::uint64_t dev_ = 0;
  std::uint64_t ino_ = 0;
  std::string head_;
  int last_open_errno_ = 0;
};

}  // namespace odyssey::run
