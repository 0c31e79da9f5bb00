// EventWriter: appends events to a run's events.jsonl (docs/run-contract.md). Rank 0 owns
// it for the whole run; the launcher opens one only to append a run_end for a rank 0 that
// died without writing its own. Each event it appends also goes to the run's TensorBoard
// files (core/run/tensorboard.h), a view whose failure never fails the run.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/diagnostic.h"
#include "run/event_schema.h"

namespace odyssey::run {

// Appends `bytes` to the existing regular file `path` with one write(2): the path is opened
// again (O_APPEND, not created) and closed, each result checked; a failed or short write is
// truncated back to where the bytes began. Callers serialise their appends to one file (the
// cut-back relies on it). LineAppender's lines and TensorBoard's records are both appended
// this way. Returns no diagnostics on success.
Diagnostics append_whole(const std::string& path, std::string_view bytes, bool sync);

// Appends whole lines to a file named by its path, for the run directory's append-only files
// (events.jsonl, logs/rank-N.log). Every append opens the path again (O_APPEND, never
// creating it after the first open) and closes it, checking each result, so that a file
// removed, replaced (by a directory, a device, a file of another owner) or made immutable
// while the run writes it fails the next append instead of the lines going on into an inode
// nobody reads. A failed or short append (ENOSPC, EFBIG past RLIMIT_FSIZE, EIO) is truncated
// back to where its line began, so the file never ends in half a line; when even that fails
// the diagnostic says so. Safe to call from several threads (appends are serialised).
class LineAppender {
 public:
  LineAppender() = default;
  // Opens (creating, 0644) `file` and checks that it is a regular file; when it is not empty
  // and its last byte is not '\n' (a writer died mid-line), a '\n' is appended first so the
  // next line starts a line of its own instead of gluing onto the broken one.
  static Result<LineAppender> open(const std::filesystem::path& file);

  bool is_open() const { return mu_ != nullptr; }
  const std::string& path() const { return path_; }

  // Appends `text` (one or more whole lines) with one write(2); fsyncs when `sync`.
  // Returns no diagnostics on success.
  Diagnostics append(std::string_view text, bool sync);

  void close() { mu_.reset(); }

 private:
  std::string path_;
  std::unique_ptr<std::mutex> mu_;  // non-null while open
};

struct EventWriterOptions {
  // fsync after checkpoint and run_end lines: those are the ones a person relies on after
  // a crash or power loss ("which checkpoint is complete", "why did it stop"). Step lines
  // are not synced: the page cache already shows them to readers, and a sync per step
  // would cost a disk flush per step.
  bool sync_durable_events = true;
  // Also feed every event to TensorBoard, in the run directory's tensorboard/ (the events
  // file's directory is taken to be the run directory; core/run/tensorboard.h).
  bool tensorboard = true;
};

class TensorBoardSink;

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
  static Result<EventWriter> open(const std::filesystem::path& file, EventWriterOptions options = EventWriterOptions{});

  bool is_open() const { return out_.is_open(); }
  const std::string& path() const { return out_.path(); }

  // The monotonic origin of elapsed_s; by default the moment open() was called. The engine
  // sets it to its own start so that time spent before the writer opened counts.
  void set_start(std::chrono::steady_clock::time_point start) { start_ = start; }

  // Appends `e` as one line with one write(2) on an O_APPEND descriptor (LineAppender: the
  // path is opened again for every line), so a reader never sees two events interleaved and
  // sees at worst a line without its '\n' yet. No user space buffering: the line is visible
  // to readers when write returns. A failed append is truncated back (no half line is left)
  // and reported. When the event's `time` is 0 the writer stamps `time` (unix seconds) and
  // `elapsed_s` (monotonic). Safe to call from several threads.
  // With options.tensorboard the event then goes to TensorBoard too. A TensorBoard failure
  // never fails the write: it is reported once, as a warning event (code
  // "tensorboard_write_failed") in this file, and TensorBoard output stops.
  // Returns no diagnostics on success.
  Diagnostics write(Event e);

  void close();

 private:
  Diagnostics warn_tensorboard_failed(const Diagnostics& why, std::int64_t step);

  LineAppender out_;
  EventWriterOptions options_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::unique_ptr<TensorBoardSink> tensorboard_;  // null without options.tensorboard
};

}  // namespace odyssey::run
