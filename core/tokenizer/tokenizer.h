// A model directory's tokenizer: tokenizer.json (byte-level BPE as Qwen2/2.5/3, Llama-3 and
// GPT-2 ship it) plus tokenizer_config.json (special tokens, chat template). Encodes and
// decodes exactly as Hugging Face tokenizers does (tests/core/tst_tokenizer.cpp checks ids
// against the pinned library); what is supported is in docs/tokenizer.md.
//
// A Tokenizer is a cheap handle to immutable shared state: copy it freely and call its const
// methods from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/diagnostic.h"

namespace odyssey {

struct TokenizerImpl;

// Ids with the [begin, end) byte range of the input each token covers (tokens added by the
// post-processor, such as Llama-3's BOS, cover an empty range at 0).
struct Encoding {
  std::vector<std::int32_t> ids;
  std::vector<std::pair<std::size_t, std::size_t>> offsets;
};

// The most token ids a tokenizer.json may use (ids 0 .. this - 1): the same bound as
// config.json's vocab_size (kMaxVocabSize), since every id needs an embedding row. An id of
// 2^30 in tokenizer.json made the tables of every id take gigabytes.
inline constexpr std::int64_t kMaxTokenIds = std::int64_t{1} << 24;

class Tokenizer {
 public:
  Tokenizer() = default;

  // `path` is a model directory (tokenizer.json, optional tokenizer_config.json,
  // special_tokens_map.json, chat_template.jinja) or a tokenizer.json file. Errors name the
  // file and the key (or line:column of broken JSON); unsupported components are refused
  // with their type.
  static Result<Tokenizer> load(const std::string& path);
  // tokenizer.json text; `file` is the name used in diagnostics.
  static Result<Tokenizer> from_json(std::string_view json_text, const std::string& file);

  bool valid() const { return impl_ != nullptr; }

  // Token ids of `text`, as HF's Tokenizer.encode(text, add_special_tokens=...).ids. Invalid
  // UTF-8 is refused with the byte offset of the first bad byte.
  Result<std::vector<std::int32_t>> encode(std::string_view text, bool add_special_tokens = false) const;
  Result<Encoding> encode_with_offsets(std::string_view text, bool add_special_tokens = false) const;

  // Text of `ids` as HF's decode: bytes joined, ill-formed UTF-8 replaced by U+FFFD; ids
  // that are not in the vocabulary are skipped (as HF does).
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const;

  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(std::int32_t id) const;
  // Highest id + 1 (model vocabulary and added tokens): the embedding rows a model needs.
  std::int32_t vocab_size() const;
  bool is_special(std::int32_t id) const;

  // Every id this tokenizer can produce (its vocabulary, added and special tokens, the
  // post-processor's template tokens; bos/eos/pad are among them) against the model's
  // vocab_size from `config_file`: an id at or beyond it has no embedding row, and the run
  // failed at step 1 with LibTorch's "index out of range in self". Errors name tokenizer.json,
  // the token and its id. validate --check-files calls it; so must the trainer, at load.
  Diagnostics check_vocab(std::int64_t model_vocab_size, const std::string& config_file) const;

  // From tokenizer_config.json / special_tokens_map.json when present.
  std::optional<std::int32_t> bos_id() const;
  std::optional<std::int32_t> eos_id() const;
  std::optional<std::int32_t> pad_id() const;
  std::string bos_token() const;
  std::string eos_token() const;
  // The model's Jinja chat_template text ("" when it has none) and where it was found.
  const std::string& chat_template_source() const;
  const std::string& chat_template_file() const;
  // A named-template list's "tool_use" template, which apply_chat_template renders conversations
  // given tools with ("" when there is none).
  const std::string& tool_use_chat_template() const;
  // The tokenizer.json path (or the name given to from_json).
  const std::string& file() const;

  // Drop cached pre-token encodings (they are bounded; this is for benchmarks).
  void clear_cache() const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}
  friend struct TokenizerImpl;
  std::shared_ptr<const TokenizerImpl> impl_;
};

}  // namespace odyssey
