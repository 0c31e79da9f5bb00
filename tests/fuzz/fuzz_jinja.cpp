// libFuzzer target for the native Jinja engine (core/tokenizer/jinja.h). The input is a
// template, optionally followed by a NUL byte and a JSON object used as the render context
// (else a fixed chat context). Whatever the bytes, parsing and rendering must not crash, hang
// or exhaust memory: they either render or throw jinja::Error (syntax, runtime or the
// template's raise_exception) with a message; nothing else may escape. A render must also be
// deterministic and its {% generation %} ranges must lie inside the text, in order.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja.h"

using nlohmann::ordered_json;
namespace jj = odyssey::jinja;

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_jinja: %s: %s\n", what, detail.c_str());
  std::abort();
}

const ordered_json& default_context() {
  static const ordered_json ctx = ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi \u00e9 <b>"},
      {"role": "assistant", "content": "Hello!", "reasoning_content": "think",
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": [true, null, 1.5]}}}]},
      {"role": "tool", "content": "{\"r\": 2}"},
      {"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}],
    "documents": null, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": false
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::string_view source = bytes;
  ordered_json ctx = default_context();
  if (const std::size_t nul = bytes.find('\0'); nul != std::string_view::npos) {
    source = bytes.substr(0, nul);
    ordered_json parsed = ordered_json::parse(bytes.substr(nul + 1), nullptr, false);
    if (parsed.is_object()) ctx = std::move(parsed);  // a move: copying a deep document recurses
  }
  jj::RenderOptions o;
  o.now = "2026-01-15T12:00:00";
  o.max_output_bytes = 1 << 20;
  o.max_steps = 200'000;
  o.max_call_depth = 50;
  try {
    jj::Template t(source, "fuzz.jinja");
    std::string first;
    std::string first_error;
    for (int round = 0; round < 2; ++round) {
      std::string text, error;
      try {
        const auto r = t.render(ctx, o);
        std::size_t prev = 0;
        for (const auto& [b, e] : r.generation_ranges) {
          if (b > e || e > r.text.size() || b < prev) fail("generation range outside the text or out of order", "");
          prev = b;
        }
        if (r.text.size() > o.max_output_bytes) fail("output above the limit", std::to_string(r.text.size()));
        text = r.text;
      } catch (const jj::Error& e) {
        if (e.message().empty() && e.kind() != jj::ErrorKind::Raised) fail("error without a message", e.what());
        error = e.what();
      }
      if (round == 0) {
        first = text;
        first_error = error;
      } else if (text != first || error != first_error) {
        fail("two renders differ", first_error + " | " + error);
      }
    }
  } catch (const jj::Error& e) {
    if (e.message().empty()) fail("syntax error without a message", e.what());
  } catch (const nlohmann::json::exception&) {
    // a context value that is not representable (e.g. an unsigned integer above 2^63)
  } catch (const std::exception& e) {
    fail("an exception other than jinja::Error escaped", e.what());
  }
  return 0;
}
