// Small text helpers shared by the config, bridge and CLI code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace odyssey::text {

// Levenshtein distance, for "did you mean".
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` if it is close enough to be a plausible typo.
std::optional<std::string> closest(std::string_view word, const std::vector<std::string>& candidates);

// Shortest decimal text that reads back as the same double (std::to_chars).
std::string format_double(double v);

// Whole-string parses; nullopt if anything is left over or out of range.
std::optional<std::int64_t> parse_int(std::string_view s);
std::optional<double> parse_double(std::string_view s);
std::optional<bool> parse_bool(std::string_view s);  // true/false/yes/no/on/off/1/0

// POSIX shell quoting: the word unchanged when it is safe, else single-quoted.
std::string shell_quote(std::string_view word);

// Split a shell command line into words (quotes, backslashes, line continuations);
// nullopt with `error` set on an unterminated quote. No expansion of any kind.
std::optional<std::vector<std::string>> shell_split(std::string_view line, std::string* error);

std::string join(const std::vector<std::string>& parts, std::string_view sep);
std::string trim(std::string_view s);
bool starts_with(std::string_view s, std::string_view prefix);

// How much of a piece of input a message quotes: enough to recognise it, never the whole
// of a 100 MB line (which would go to stdout, events.jsonl and the rank log).
inline constexpr std::size_t kExcerptBytes = 200;

// `s` when it is at most `max_bytes` long, else its first bytes (cut at a UTF-8 character
// boundary) followed by "... (N bytes in all)". The one way a message quotes input.
std::string excerpt(std::string_view s, std::size_t max_bytes = kExcerptBytes);

// Quote a value for messages: 'abc', control bytes escaped, cut as excerpt() cuts (the
// total length named after the closing quote).
std::string quoted(std::string_view value);

// Whether `s` is well-formed UTF-8 without NUL bytes; otherwise the offset of the first
// offending byte in `*bad_at` and what it is in `*why`.
bool clean_utf8(std::string_view s, std::size_t* bad_at = nullptr, std::string* why = nullptr);

}  // namespace odyssey::text
