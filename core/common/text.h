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

// Quote a value for messages: 'abc' (shortened to 60 characters, control bytes escaped).
std::string quoted(std::string_view value);

}  // namespace odyssey::text
