// A light scan of a training file: its sample format and how many samples it holds,
// without the tokenizer (the chat-template preview and the token histogram come with it).
// Plain C++ so it runs on a worker thread; the GUI shows the result per dataset row.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace odyssey::ui {

struct DatasetScan {
  bool ok = false;
  std::string format;          // messages, sharegpt, alpaca, query-response, mixed, unknown
  std::int64_t samples = 0;    // valid JSON objects
  std::int64_t broken = 0;     // lines (JSONL) that are not a JSON object
  std::int64_t first_broken_line = 0;
  std::string error;           // why the file could not be scanned
};

// Files larger than this are counted line by line but only the first lines are parsed.
inline constexpr std::int64_t kFullParseBytes = 256ll << 20;

// Scan `path` (.jsonl one object a line, .json an array of objects). `cancel` is polled.
DatasetScan scan_dataset(const std::string& path, const std::atomic<bool>* cancel = nullptr);

// "messages, 2,000 samples" / "no such file" — one line for the list.
std::string describe_scan(const DatasetScan& s);

}  // namespace odyssey::ui
