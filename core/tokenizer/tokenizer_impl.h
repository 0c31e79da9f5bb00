// Internal state of a Tokenizer, shared by the loader (tokenizer_json.cpp) and the encoder
// (tokenizer.cpp). Not part of the API.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace odyssey {

struct AddedToken {
  std::string content;
  std::string pattern;  // what is matched: content, or its normalized form when `normalized`
  std::int32_t id = 0;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// Leftmost-longest matching of a set of strings (HF uses an Aho-Corasick automaton with the
// same semantics): the match starting first, and the longest of those starting there.
class TokenTrie {
 public:
  void add(std::string_view s, std::int32_t value);
  bool empty() const { return terminal_.size() <= 1; }
  bool find(std::string_view text, std::size_t from, std::size_t* begin, std::size_t* end, std::int32_t* value) const;

 private:
  std::unordered_map<std::uint64_t, std::int32_t> edges_;  // (node << 8 | byte) -> node
  std::vector<std::int32_t> terminal_{-1};                 // node -> value, -1 when none
  bool first_[256] = {};
};

// One TemplateProcessing "single" template: ids to emit, with kSequence where the encoded
// text goes.
struct PostTemplate {
  static constexpr std::int32_t kSequence = -1;
  std::vector<std::int32_t> items;
};

struct TokenizerImpl {
  std::string file;
  tok::BpeModel bpe;
  tok::StringIdMap model_vocab;  // the vocabulary as tokenizer.json writes it
  tok::PreTokenizer pre;
  bool nfc = false;
  bool byte_level_decoder = true;  // false: no decoder, tokens joined by spaces (HF's default)
  std::vector<AddedToken> added;
  std::unordered_map<std::int32_t, std::size_t> added_by_id;
  tok::StringIdMap added_by_content;
  TokenTrie raw_trie, normalized_trie;  // added tokens matched before / after normalization
  std::vector<PostTemplate> post;       // applied in order when add_special_tokens
  std::int32_t vocab_size = 0;
  std::vector<std::string> decode_bytes;   // id -> what the decoder turns it into
  std::vector<std::uint8_t> known;         // id -> has a token
  std::vector<std::uint8_t> special_text;  // id -> its text is a special token's (HF skips those)

  std::string bos_token, eos_token, pad_token;
  std::string chat_template, chat_template_file;
  std::string tool_use_chat_template;  // a named list's "tool_use" template ("" when none)

  static Result<TokenizerImpl> parse(std::string_view json_text, const std::string& file);
  // tokenizer_config.json / special_tokens_map.json / chat_template.jinja of a directory.
  void read_config(const std::string& dir, Diagnostics* diags);
  void read_special_tokens(const nlohmann::json& config, const std::string& config_file);
  void finish();  // the per-id tables, once everything is loaded

  Diagnostics encode(std::string_view text, bool add_special, Encoding* out, bool offsets) const;
  std::string token_text(std::int32_t id) const;  // as HF's id_to_token

  static Tokenizer wrap(TokenizerImpl&& impl);
};

}  // namespace odyssey
