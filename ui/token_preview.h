// What the Train page's dataset preview shows, computed off the GUI thread with exactly the
// code training runs (core/data: read_dataset_file, template_for, tokenize_samples): the
// first samples of one dataset file rendered through the model's chat template, split into
// trained (label) and context runs, and the token length of up to kMaxPreviewSamples samples
// for the histogram. A large file is never read whole: only its first records are parsed.
// Plain C++ (QtCore only for a temporary file), so tests call it directly.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace odyssey::ui {

// Samples tokenized for the histogram (the first ones of the file); keeps a preview of a
// million-line file under a second or two.
inline constexpr std::size_t kMaxPreviewSamples = 2000;
// Samples rendered as text.
inline constexpr std::size_t kShownSamples = 5;
// A JSON array (read whole by core) larger than this is not previewed.
inline constexpr std::int64_t kMaxPreviewArrayBytes = 64ll << 20;

struct TokenPreviewRequest {
  std::string dataset_path;   // resolved file (no #N)
  std::string model_dir;      // directory with tokenizer.json ("" = no model located)
  std::string model_family;   // HfModelConfig::family (qwen2, qwen3, llama3)
  std::string template_name;  // the config's template key
  std::string template_file;  // the config's template_file, resolved ("" = the model's template)
  std::string system;         // the config's system key
  std::int64_t max_length = 2048;
  std::string truncation = "delete";
  std::size_t max_samples = kMaxPreviewSamples;
  std::size_t shown = kShownSamples;
  // A tokenizer already loaded from `model_dir` (reused; loading Qwen's takes ~1 s).
  Tokenizer tokenizer;
  std::string tokenizer_dir;
};

// A run of consecutive tokens that are all trained (labels = ids) or all context (-100).
struct PreviewSegment {
  std::string text;
  bool trained = false;
};

struct PreviewSample {
  std::string origin;  // file:line
  std::vector<PreviewSegment> segments;
  std::int64_t tokens = 0;
  std::int64_t trained_tokens = 0;
};

struct TokenPreview {
  std::string error;               // why there is no preview ("" = ok)
  std::vector<std::string> notes;  // warnings worth showing (template choice, malformed records)
  Tokenizer tokenizer;             // the tokenizer used, to reuse for the next request
  std::string tokenizer_dir;
  std::string template_name;
  std::vector<PreviewSample> samples;  // the first `shown` tokenized samples
  std::vector<std::int32_t> lengths;   // untruncated token count of every tokenized sample
  std::int64_t records_read = 0;       // valid samples read from the file's head
  bool file_has_more = false;          // the file holds more records than were read
  std::int64_t malformed = 0;          // malformed records among those read
  std::int64_t without_labels = 0;     // samples with nothing to train on (not in lengths)
};

TokenPreview build_token_preview(const TokenPreviewRequest& request, const std::atomic<bool>* cancel = nullptr);

// Split a tokenized sample into trained / context runs, each decoded to text.
std::vector<PreviewSegment> preview_segments(const Tokenizer& tokenizer, const std::vector<std::int32_t>& ids,
                                             const std::vector<std::int32_t>& labels);

struct LengthHistogram {
  double bin_width = 1;
  std::vector<std::int64_t> counts;  // bin i holds lengths in [i * bin_width, (i + 1) * bin_width)
  std::int64_t over_max = 0;         // lengths > max_length
  std::int32_t longest = 0;
  std::int32_t median = 0;
  std::int32_t p95 = 0;
};

// About `bins` bins of a round width covering 0..max(longest, max_length).
LengthHistogram length_histogram(std::vector<std::int32_t> lengths, std::int64_t max_length, int bins = 40);

}  // namespace odyssey::ui
