// A native Jinja engine for Hugging Face chat templates (no Python, no LibTorch).
//
// It renders the dialect chat templates use the way transformers' apply_chat_template renders
// them: jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
// loopcontrols extension (break/continue), transformers' AssistantTracker ({% generation %}),
// the globals raise_exception and strftime_now and transformers' own `tojson` filter. Values
// follow Python: str() of True/None/1.0/lists/dicts, jinja2's (non-strict) Undefined, Python's
// operators, string and dict methods. What is supported and what is refused is documented in
// docs/tokenizer.md ("The Jinja engine"); anything outside it is an error naming the template,
// line and column, never a silently different text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/diagnostic.h"

namespace odyssey::jinja {

// What went wrong: a syntax error (parse time), a runtime error (a value of the wrong type, an
// undefined value used, an unsupported filter reached...), or the template's own
// raise_exception(message).
enum class ErrorKind { Syntax, Runtime, Raised };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string template_name, int line, int column, std::string message);
  ErrorKind kind() const { return kind_; }
  const std::string& template_name() const { return name_; }
  int line() const { return line_; }      // 1-based; 0 when unknown
  int column() const { return column_; }  // 1-based, in code points; 0 when unknown
  // The message alone (for Raised: exactly the template's message).
  const std::string& message() const { return message_; }
  Diagnostic diagnostic() const;

 private:
  ErrorKind kind_;
  std::string name_;
  int line_;
  int column_;
  std::string message_;
};

struct RenderOptions {
  // What strftime_now() sees as the current local time, "YYYY-MM-DDTHH:MM:SS"; empty = the
  // machine's local time now.
  std::string now;
  // Guards: the rendered text's size, the macro call depth and the work done (loop iterations
  // plus expression evaluations). Exceeding one is an error, never a truncated text.
  std::size_t max_output_bytes = std::size_t{64} << 20;
  int max_call_depth = 200;
  std::uint64_t max_steps = 50'000'000;
  // The machine stack the recursive evaluation may use (measured, so that sanitizer builds with
  // large frames stop with an error too rather than overflowing a thread's stack).
  std::size_t max_stack_bytes = std::size_t{2} << 20;
};

struct RenderResult {
  std::string text;
  // [begin, end) UTF-8 byte offsets in `text` of every {% generation %} block, in order (what
  // transformers' AssistantTracker records, in bytes instead of code points).
  std::vector<std::pair<std::size_t, std::size_t>> generation_ranges;
};

namespace detail {
struct Program;
}

class Template {
 public:
  // Parses `source` (UTF-8). `name` is what errors call the template (a file path, a model's
  // "tokenizer_config.json", ...). Throws Error (Syntax) on bad input.
  Template(std::string_view source, std::string name);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;
  Template(const Template&) = delete;
  Template& operator=(const Template&) = delete;

  const std::string& name() const;
  bool has_generation_blocks() const;

  // Renders with `context` (a JSON object: messages, tools, add_generation_prompt, bos_token,
  // ...; keys keep their order as Python dicts do). Throws Error.
  RenderResult render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

 private:
  std::unique_ptr<detail::Program> program_;
};

// The same, as the house's Result: a diagnostic instead of an exception.
Result<RenderResult> render_template(std::string_view source, const std::string& name,
                                     const nlohmann::ordered_json& context, const RenderOptions& options = {});

}  // namespace odyssey::jinja
