// Pre-tokenization as HF tokenizers does it for byte-level BPE: Split (a regex with a split
// behavior) and ByteLevel (optional prefix space, optional GPT-2 regex), chained by
// Sequence. Regexes are written for Oniguruma (what HF tokenizers compiles them with); they
// run on PCRE2 in UTF + UCP mode with JIT, after translate_oniguruma() gives the escapes that
// differ between the two engines Oniguruma's meaning.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace odyssey::tok {

// Oniguruma's \s, \S, \w, \W, \h (hex digit), \H and \uHHHH in PCRE2 syntax. \s becomes
// Unicode White_Space (PCRE2's \s also takes U+180E).
std::string translate_oniguruma(std::string_view pattern);

class Regex {
 public:
  // nullptr with *error set (message and offset) when the pattern does not compile.
  static std::unique_ptr<Regex> compile(std::string_view pattern, bool literal, std::string* error);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(begin, end) for the matches in valid UTF-8 `s` as Oniguruma's find_iter
  // yields them: leftmost, non-overlapping, an empty match never directly after the previous
  // match. False with *error when PCRE2 gives up (a resource limit), or false when on_match
  // returns false (which stops the search).
  bool for_each_match(std::string_view s, const std::function<bool(std::size_t, std::size_t)>& on_match,
                      std::string* error) const;

 private:
  Regex() = default;
  struct Code;
  Code* code_ = nullptr;
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// A piece of one normalized segment. `text` points into the segment or, after a prefix space
// was added, into an arena string whose first byte is that space (`prefixed`); `begin` is
// the offset in the segment of the piece's first real byte.
struct Piece {
  std::string_view text;
  std::size_t begin = 0;
  bool prefixed = false;

  // Segment offset of byte `i` of text (the prefix space maps to where the piece starts).
  std::size_t segment_offset(std::size_t i) const { return begin + (prefixed && i > 0 ? i - 1 : i); }
  Piece sub(std::size_t a, std::size_t b) const {
    return {text.substr(a, b - a), segment_offset(a), prefixed && a == 0};
  }
};

struct PreTokenizerStep {
  enum Kind { Split, ByteLevel } kind = Split;
  std::shared_ptr<const Regex> regex;  // Split's pattern, or GPT-2's for ByteLevel with use_regex
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
};

class PreTokenizer {
 public:
  std::vector<PreTokenizerStep> steps;

  bool has_byte_level() const;
  // Run the steps over one segment (text between added tokens) and call `emit` for every
  // pre-token in order. `arena` keeps the strings that prefix spaces create alive.
  bool run(std::string_view segment, std::deque<std::string>* arena, const std::function<void(const Piece&)>& emit,
           std::string* error) const;

  // GPT-2's pattern (ByteLevel's use_regex), compiled once.
  static std::shared_ptr<const Regex> gpt2_regex();

 private:
  bool run_from(std::size_t step, const Piece& p, std::deque<std::string>* arena,
                const std::function<void(const Piece&)>& emit, std::string* error) const;
};

}  // namespace odyssey::tok
