// On-disk cache of tokenized datasets, so that a second run with the same data, tokenizer
// and settings starts at once. The key is a SHA-256 over everything the result depends on:
// the cache format version, the bytes of every dataset file (streamed), the dataset
// arguments (#N) and the seed, the malformed-record threshold, tokenizer.json's bytes, the
// template, the system prompt, max_length, the truncation strategy and train_on_all. The
// file (binary: magic, version, key, counts, payload, SHA-256 of all of it) is written to a
// temporary name and renamed; a corrupt, truncated, foreign or other-version file is
// reported as a warning and rebuilt, never trusted. The load and tokenize reports (and the
// warnings of the original load) are stored too, so a cached run prints the same summary.
// docs/datasets.md describes it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/diagnostic.h"
#include "common/sha256.h"
#include "data/dataset.h"
#include "data/tokenize.h"

namespace odyssey::data {

using odyssey::Sha256;  // common/sha256.h
std::string sha256_hex(std::string_view data);
// The SHA-256 of a file's bytes, read in blocks; nullopt with `error` set when unreadable.
std::optional<std::array<std::uint8_t, 32>> sha256_file(const std::string& path, std::string* error);

inline constexpr std::uint32_t kTokenCacheVersion = 1;

struct TokenCacheKeyInputs {
  std::vector<std::string> specs;  // dataset arguments as given ("path" or "path#N")
  std::string base_dir;            // relative paths are resolved against it
  std::uint64_t seed = 42;
  double max_bad_sample_ratio = 0.01;
  std::string tokenizer_file;  // tokenizer.json (hashed by content)
  std::string bos_token;       // Llama templates write it
  std::string template_name;   // the resolved template (qwen2_5, qwen3, llama3, llama3_1)
  TokenizeOptions tokenize;    // system, max_length, truncation, train_on_all, chat.date_string
};
// 64 hex digits. Errors: a spec that does not parse, a dataset or tokenizer file that cannot
// be read (the caller then loads without the cache; the loader reports the file properly).
Result<std::string> token_cache_key(const TokenCacheKeyInputs& in);

// $XDG_CACHE_HOME/odyssey/tokenized, else $HOME/.cache/odyssey/tokenized, else a directory
// in the system's temporary directory.
std::string default_token_cache_dir();
std::string token_cache_file(const std::string& dir, const std::string& key);  // dir/<key>.odtok

struct TokenCacheContents {
  std::vector<TokenizedSample> samples;
  std::vector<FileReport> files;
  TokenizeReport report;
  Diagnostics notes;  // warnings and notes of the original load and tokenization
};

// The cached contents, or nullopt: silently when the file does not exist, with a warning
// (naming the file and what is wrong) when it is not a valid cache file for `key`.
Result<std::optional<TokenCacheContents>> read_token_cache(const std::string& file, const std::string& key);
// Temporary file + rename. Failure is a warning (training goes on without the cache).
Diagnostics write_token_cache(const std::string& file, const std::string& key, const TokenCacheContents& contents);

struct TokenCacheOptions {
  bool enabled = true;
  std::string dir;  // "" = default_token_cache_dir()
};

struct PreparedDataset {
  std::vector<TokenizedSample> samples;
  std::vector<FileReport> files;
  TokenizeReport report;
  bool from_cache = false;
  std::string cache_file;  // "" when the cache was not used
  std::string cache_key;
};

// load_datasets + tokenize_samples through the cache: a hit returns the stored result (with
// the original warnings and a note naming the cache file); a miss computes and stores it.
Result<PreparedDataset> load_tokenized(const std::vector<std::string>& specs, const LoadOptions& load,
                                       const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                       const TokenizeOptions& tokenize, const TokenCacheOptions& cache = {});

}  // namespace odyssey::data
