// Training data files: local JSON Lines (.jsonl, one object per line) and JSON (.json, an
// array of objects) in the alpaca, sharegpt or messages format, turned into chat
// conversations (ChatMessage lists) with the file and line each came from. One format per
// file, detected from its first valid record; every record is validated against it and a
// bad one is reported with file:line and skipped, up to max_bad_sample_ratio of the file.
// `path#N` draws N samples with a seeded shuffle (ms-swift's rule when N exceeds the file),
// several datasets are concatenated in the order given, and split_validation holds out a
// seeded share. Formats and rules: docs/datasets.md. No LibTorch, no Qt (the GUI's preview
// uses this too); nothing here throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/diagnostic.h"
#include "tokenizer/chat_template.h"

namespace odyssey::data {

enum class DatasetFormat { Alpaca, ShareGpt, Messages };
std::string_view format_name(DatasetFormat f);  // alpaca, sharegpt, messages

// One conversation: [system], user, assistant, user, assistant, ... (always ends with an
// assistant turn); an assistant turn that calls tools is followed by the tools' results (role
// tool), then the assistant again. An answer without tool calls is not blank.
struct Sample {
  std::vector<ChatMessage> messages;
  std::string origin;      // "path:line" (JSON Lines) or "path:[index]" (JSON array, 0-based)
  std::string tools = {};  // the JSON array of tool schemas offered ("" = none)
};
bool same_sample(const Sample& a, const Sample& b);  // every message field, tools and origin

// What one dataset argument gave.
struct FileReport {
  std::string spec;             // as given: "data/train.jsonl#500"
  std::string path;             // the file read (relative paths resolved against base_dir)
  std::string format;           // alpaca | sharegpt | messages; "" when none was detected
  std::int64_t lines = 0;       // records read: non-blank lines, or elements of the array
  std::int64_t samples = 0;     // valid records
  std::int64_t malformed = 0;   // records skipped (reported with file:line)
  std::int64_t requested = -1;  // the N of path#N; -1 = every sample
  std::int64_t selected = 0;    // samples this argument contributes
};
// "path: messages, 1000 lines, 998 samples, 2 malformed, 500 selected (#500)"
std::string summary(const FileReport& r);

struct LoadOptions {
  std::string base_dir;                // relative paths are resolved against it ("" = working directory)
  double max_bad_sample_ratio = 0.01;  // a file with a larger share of malformed records fails
  std::uint64_t seed = 42;             // #N sampling
  std::size_t max_listed = 10;         // malformed records listed (as diagnostics) per file
};

struct FileData {
  std::vector<Sample> samples;
  FileReport report;
};

// Every valid sample of one file, in file order (no #N sampling; report.selected = samples).
// Errors name the file: missing, a directory, unreadable, not .json/.jsonl, empty, broken
// JSON array, unknown format, no valid sample, too many malformed records. Malformed records
// of an accepted file are warnings (the first max_listed, then a count). `report` is filled
// also on failure.
Result<FileData> read_dataset_file(const std::string& path, const LoadOptions& options = {});

// How many records a dataset file holds, without converting them (validate --check-files
// checks path#N against it): non-blank lines of a .jsonl, elements of a .json array. Errors
// name the file: missing, not a regular file (a FIFO, a device), unreadable, broken array.
Result<std::int64_t> count_dataset_records(const std::string& path);

// One conversation on its own (odyssey-train template): a JSON array of messages, or an object
// {"messages": [...], "tools": [...]}, in the message forms of the messages format (tool calls and
// results included). Unlike a dataset record it may end with any turn (a prompt to generate
// from). Errors name `file`, the key, and for broken JSON the line and column.
Result<Sample> parse_conversation(std::string_view json_text, const std::string& file);

struct LoadedDatasets {
  std::vector<Sample> samples;    // concatenated in the order of the arguments
  std::vector<FileReport> files;  // one per argument
};

// Each spec is "path" or "path#N". Every file is read (so every problem is reported at once);
// any error fails the whole load. Spec k is sampled with seed mix(options.seed, k).
Result<LoadedDatasets> load_datasets(const std::vector<std::string>& specs, const LoadOptions& options = {});

// The file a spec's path names: "~/" expanded, a relative path joined to base_dir, normalised.
std::string resolve_dataset_path(const std::string& path, const std::string& base_dir);

// The indices #N selects from `available` samples: N <= available: the first N of a seeded
// permutation; N > available: every index N / available times in file order, then the first
// N % available of a seeded permutation (ms-swift's sample_dataset). n < 0: 0..available-1.
std::vector<std::size_t> sample_indices(std::size_t available, std::int64_t n, std::uint64_t seed);

// A permutation of 0..n-1 from a fixed generator (splitmix64 + Lemire's bounded draw): the
// same on every platform and compiler for the same seed.
std::vector<std::size_t> seeded_permutation(std::size_t n, std::uint64_t seed);
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream);

// Which items go to validation: n_val = ceil(ratio * n) clamped to [1, n - 1], chosen by a
// seeded permutation. ratio <= 0: none. Errors: ratio >= 1, or ratio > 0 with fewer than 2 items.
Result<std::vector<bool>> validation_mask(std::size_t n, double ratio, std::uint64_t seed);

template <typename T>
struct Split {
  std::vector<T> train;
  std::vector<T> val;
};

// Deterministic train/validation split; both parts keep the input order.
template <typename T>
Result<Split<T>> split_validation(std::vector<T> items, double ratio, std::uint64_t seed) {
  Result<Split<T>> r;
  auto mask = validation_mask(items.size(), ratio, seed);
  r.diagnostics = std::move(mask.diagnostics);
  if (!r.ok()) return r;
  for (std::size_t i = 0; i < items.size(); ++i)
    (mask.value[i] ? r.value.val : r.value.train).push_back(std::move(items[i]));
  return r;
}

}  // namespace odyssey::data
