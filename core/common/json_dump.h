// The one way Odyssey turns JSON into text. nlohmann's plain dump() throws type_error 316
// on a string that is not valid UTF-8 (a model path with byte 0xFF, a dataset's bad line):
// a checkpoint's trainer_state.json, `plan --json` and events.jsonl then failed with a raw
// exception. Here invalid bytes become U+FFFD instead, and nothing throws.
#pragma once

#include <nlohmann/json.hpp>
#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace odyssey {

// `indent` -1: one line; n >= 0: pretty-printed with n spaces. Works for json and ordered_json.
template <typename Json>
std::string dump_json(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

// The deepest nesting of arrays and objects in JSON text (brackets inside strings not counted;
// the text need not be valid). nlohmann's parser and destructor recurse per level, so a line
// of 200,000 '[' overflows the stack: input from outside is checked against a limit first.
inline std::size_t json_nesting_depth(std::string_view text) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// Nesting deeper than this is refused where outside JSON is parsed (requests, records).
inline constexpr std::size_t kMaxJsonDepth = 256;

}  // namespace odyssey
