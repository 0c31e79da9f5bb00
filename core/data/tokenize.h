// Samples to token ids and labels with the model's chat template: labels are the ids inside
// the template's assistant spans (the answers and their end-of-turn tokens) and -100
// elsewhere, not shifted (the loss shifts). Truncation to max_length (delete | left | right |
// raise), the default system prompt, and a report of what was kept, cut and dropped.
// docs/datasets.md describes the rules.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/diagnostic.h"
#include "data/dataset.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace odyssey::data {

inline constexpr std::int32_t kIgnoreIndex = -100;

struct TokenizedSample {
  std::vector<std::int32_t> ids;
  std::vector<std::int32_t> labels;  // ids[i] where trained, else kIgnoreIndex; same length as ids
  std::string origin;                // the Sample's origin (file:line)
  bool operator==(const TokenizedSample&) const = default;
};

enum class Truncation { Delete, Left, Right, Raise };
std::optional<Truncation> parse_truncation(std::string_view s);  // delete | left | right | raise
std::string_view truncation_name(Truncation t);

struct TokenizeOptions {
  std::int64_t max_length = 2048;
  Truncation truncation = Truncation::Delete;
  std::string system;         // used for samples without a system turn ("" = the template's default)
  bool train_on_all = false;  // labels = ids everywhere (not only the assistant spans)
  // ms-swift's default for thinking templates (its ignore_empty_think loss scale): an
  // assistant reply that opens with an empty think block (<think>, whitespace, </think>,
  // whitespace) is not trained on those tokens, so a model is not taught to skip thinking.
  // Applies where the tokenizer has both <think> and </think> tokens.
  bool ignore_empty_think = true;
  ChatOptions chat;  // the template's options (Llama-3.1's date_string)
  int threads = 0;   // 0 = up to 8, at most one per hardware thread
  // Asked between blocks of 32 samples: true stops tokenizing, and tokenize_samples returns
  // an error saying it was cancelled (the trainer passes its stop request, so SIGTERM during
  // tokenization ends a run within a block's time, not after the whole dataset).
  std::function<bool()> cancelled;
  // Called once with the sample count when tokenizing begins (after the files are read), so
  // a caller can say so (the trainer's "tokenize" stage).
  std::function<void(std::size_t samples)> on_start;
};

struct TokenizeReport {
  std::string template_name;
  std::int64_t max_length = 0;
  std::string truncation;
  std::int64_t samples_in = 0;
  std::int64_t kept = 0;
  std::int64_t truncated = 0;          // kept, but cut to max_length (left or right)
  std::int64_t dropped_too_long = 0;   // delete: longer than max_length
  std::int64_t dropped_no_labels = 0;  // nothing to train on (after truncation)
  std::int64_t total_tokens = 0;       // of the kept samples
  std::int64_t label_tokens = 0;       // labels != -100 of the kept samples
  std::vector<std::int32_t> lengths;   // token count of each kept sample, in output order
  bool operator==(const TokenizeReport&) const = default;
};
// "1000 samples: 990 kept (3 truncated), 8 dropped as longer than 2048, 2 without labels; ..."
std::string summary(const TokenizeReport& r);

struct TokenizedDataset {
  std::vector<TokenizedSample> samples;  // input order, dropped samples left out
  TokenizeReport report;
};

// Tokenize every sample (in parallel; the output order is the input order). Errors: a
// cancellation (options.cancelled), a bad
// option, a sample the template cannot render (its origin), and with Truncation::Raise the
// first sample longer than max_length (its origin and length). Drops are warnings naming the
// first dropped sample.
Result<TokenizedDataset> tokenize_samples(const std::vector<Sample>& samples, const Tokenizer& tokenizer,
                                          const ChatTemplate& chat_template, const TokenizeOptions& options);

// One sample, untruncated: ids and labels (assistant spans, or everything with train_on_all).
Result<TokenizedSample> tokenize_sample(const Sample& sample, const Tokenizer& tokenizer,
                                        const ChatTemplate& chat_template, const TokenizeOptions& options);

// The template for the config key `template`: auto (the model's own chat_template, else its
// family's), qwen2_5, qwen3, llama3, llama3_1, and chatml (ChatML with no default system
// prompt: Qwen3's variant, which writes an empty <think></think> block before the last
// answer; a warning says so). The tokenizer must have the template's special tokens.
// A non-empty template_file (config key, an absolute path) is a Jinja template used in place
// of the model's own, through the engine; template_name must then be auto.
Result<ChatTemplate> template_for(const std::string& template_name, const Tokenizer& tokenizer,
                                  std::string_view model_family, const std::string& template_file = {});

}  // namespace odyssey::data
