// The one way Odyssey turns JSON into text. nlohmann's plain dump() throws type_error 316
// on a string that is not valid UTF-8 (a model path with byte 0xFF, a dataset's bad line):
// a checkpoint's trainer_state.json, `plan --json` and events.jsonl then failed with a raw
// exception. Here invalid bytes become U+FFFD instead, and nothing throws.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace odyssey {

// `indent` -1: one line; n >= 0: pretty-printed with n spaces. Works for json and ordered_json.
template <typename Json>
std::string dump_json(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace odyssey
