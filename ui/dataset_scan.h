// A training file as the engine reads it (data::read_dataset_file): its sample format, how
// many records it holds and how many are malformed, without the tokenizer (the chat-template
// preview and the token histogram come with it).
// Plain C++ so it runs on a worker thread; the GUI shows the result per dataset row.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace odyssey::ui {

struct DatasetScan {
  bool ok = false;
  std::string format;        // messages, sharegpt, alpaca, unknown
  std::int64_t lines = 0;    // records: non-blank lines, or elements of the JSON array
  std::int64_t samples = 0;  // records training can use
  std::int64_t broken = 0;   // malformed records (not JSON, or no conversation in them)
  std::int64_t first_broken_line = 0;
  std::string error;  // why the file cannot be used (the engine's words)
};

// Scan `path` (.jsonl one object a line, .json an array of objects). `cancel` is polled.
DatasetScan scan_dataset(const std::string& path, const std::atomic<bool>* cancel = nullptr);

// "messages, 2,000 samples" / the engine's error — one line for the list.
std::string describe_scan(const DatasetScan& s);

}  // namespace odyssey::ui
