// One prompt line of `odyssey-train generate` and one request of `odyssey-train chat --json`'s
// line protocol (docs/inference.md), parsed and checked: every error names the line and the
// field and says what was expected.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "common/diagnostic.h"
#include "infer/session.h"
#include "model/generate.h"

namespace odyssey::infer {

struct Request {
  enum class Type { Generate, Cancel, Shutdown } type = Type::Generate;
  nlohmann::json id;  // echoed in every event of the request (null when not given)
  Prompt prompt;
  std::string reference;               // generate: a conversation's last assistant turn, taken off the prompt
  std::optional<std::string> adapter;  // chat: absent = unchanged, "" (or null) = the base alone
  std::optional<bool> enable_thinking;
  model::GenerationOptions options;  // the defaults given to the parser, with the request's fields
};

enum class RequestKind {
  PromptLine,  // generate's input: "prompt" or "messages" (+ "tools", "id"); other fields ignored
  Protocol,    // chat --json: the prompt fields plus "type", "adapter", "enable_thinking" and the
               // sampling fields; an unknown field is an error
};

// `where`: "FILE:LINE" or "request LINE" for messages.
Result<Request> parse_request(std::string_view line, RequestKind kind, const model::GenerationOptions& defaults,
                              const std::string& where);

}  // namespace odyssey::infer
