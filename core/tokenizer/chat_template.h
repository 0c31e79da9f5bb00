// Chat templates in C++: the text that a model's own Jinja `chat_template` produces through
// transformers' apply_chat_template for system/user/assistant conversations, the token ids,
// and which tokens are the assistant's (trained) for loss masks. The variants and the span
// rule are documented in docs/tokenizer.md; tests/core/tst_chat_template.cpp checks text, ids
// and spans against transformers with the models' real templates.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/diagnostic.h"
#include "tokenizer/tokenizer.h"

namespace odyssey {

namespace jinja {
class Template;
}

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c, std::optional<std::string> reasoning = std::nullopt)
      : role(std::move(r)), content(std::move(c)), reasoning_content(std::move(reasoning)) {}

  std::string role;  // system, user, assistant, or tool (a tool's result)
  std::string content;
  std::optional<std::string> reasoning_content;  // Qwen3: rendered in <think> (else split off content)
  // Function calling, in the form transformers' apply_chat_template takes (docs/datasets.md):
  std::string tool_calls;    // assistant: the JSON array of its calls, [{"type": "function",
                             // "function": {"name", "arguments"}}, ...]; "" = none
  std::string name;          // tool: the function whose result this is ("" = not given)
  std::string tool_call_id;  // tool: the id of the call it answers ("" = not given)
  // How `content` reaches the template when it is empty: as "", as null (None), or absent (an
  // assistant turn that only calls tools may have either).
  enum class Form : std::uint8_t { Text, Null, Absent } content_form = Form::Text;

  bool uses_tools() const { return role == "tool" || !tool_calls.empty(); }
};

enum class ChatTemplateKind {
  Qwen2_5,   // ChatML; default system "You are Qwen, created by Alibaba Cloud. ..."
  Qwen3,     // ChatML without a default system; <think> handling of Qwen3's template
  Llama3,    // Llama-3 Instruct: BOS, header ids, content trimmed, <|eot_id|>
  Llama3_1,  // Llama-3.1/3.3 Instruct: plus the "Cutting Knowledge Date" system block
  ChatML,    // plain ChatML: a system turn only when given, no <think> handling (config "chatml")
  Jinja,     // the model's own chat_template through the native Jinja engine (jinja.h)
};

struct ChatOptions {
  bool add_generation_prompt = false;
  std::optional<bool> enable_thinking;      // Qwen3: false adds the empty think block to the prompt
  std::string date_string = "26 Jul 2024";  // Llama-3.1: the template's default (built-in variant only)
  std::string now;    // Jinja: what strftime_now() sees, "YYYY-MM-DDTHH:MM:SS"; "" = the local time
  std::string tools;  // the JSON array of tool (function) schemas offered; "" = none (tools=None)
};

// Rendered text and the byte ranges of each assistant turn's trained part.
struct RenderedChat {
  std::string text;
  std::vector<std::pair<std::size_t, std::size_t>> assistant_ranges;
};

struct ChatEncoding {
  std::vector<std::int32_t> ids;
  // [begin, end) token index ranges whose loss is trained, in order.
  std::vector<std::pair<std::size_t, std::size_t>> assistant_spans;
  std::vector<std::uint8_t> assistant_mask() const;  // 1 inside a span, one entry per id
};

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatTemplateKind kind = ChatTemplateKind::Qwen2_5, std::string bos_token = {})
      : kind_(kind), bos_(std::move(bos_token)) {}

  // A model's own Jinja template, rendered by the engine. `name` is what errors call it
  // (e.g. ".../tokenizer_config.json[chat_template]"); `special_tokens` are passed to it as
  // apply_chat_template passes the tokenizer's (bos_token, eos_token, ...). A syntax error is a
  // diagnostic naming the template, line and column.
  static Result<ChatTemplate> from_jinja(std::string_view source, std::string name,
                                         std::vector<std::pair<std::string, std::string>> special_tokens);

  ChatTemplateKind kind() const { return kind_; }
  std::string_view name() const;  // qwen2_5, qwen3, llama3, llama3_1, chatml, jinja
  // Whether conversations with tools, tool calls and tool results can be rendered: the model's
  // own template through the engine (a built-in fast path keeps it for them), not a built-in
  // variant chosen by `template:` alone.
  bool renders_tools() const { return jinja_ != nullptr; }
  // Jinja: whether assistant ranges come from {% generation %} blocks (else: prefix rendering).
  bool has_generation_blocks() const;
  // What identifies the rendering for caches: the variant's name, or for Jinja "jinja:" and the
  // SHA-256 of the template text and its special tokens.
  std::string identity() const;

  Result<RenderedChat> render(const std::vector<ChatMessage>& messages, const ChatOptions& options = {}) const;
  // Render, then encode the whole text with add_special_tokens=false (as apply_chat_template
  // does) and map the assistant ranges to token spans.
  Result<ChatEncoding> encode(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                              const ChatOptions& options = {}) const;

 private:
  ChatTemplateKind kind_;
  std::string bos_;  // Llama's bos_token ("<|begin_of_text|>" when empty)
  std::shared_ptr<const jinja::Template> jinja_;
  std::shared_ptr<const jinja::Template> tool_use_;  // a named list's "tool_use" template
  std::vector<std::pair<std::string, std::string>> special_tokens_;
  std::string jinja_digest_;

  friend Result<ChatTemplate> chat_template_for_model(const Tokenizer& tokenizer, std::string_view family);
  friend Result<ChatTemplate> chat_template_from_file(const std::string& path, const Tokenizer& tokenizer);
  Result<RenderedChat> render_jinja(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;
};

// The built-in template of a model family (HfModelConfig::family), as the family table's
// builtin_template names it (qwen2 -> Qwen2.5's, qwen3 -> Qwen3's, llama3 -> Llama-3.1's). A
// family without one is an error naming those that have one.
Result<ChatTemplate> chat_template_for_family(std::string_view family);
// The built-in renderer called `name` (ChatTemplate::name(): qwen2_5, qwen3, llama3, llama3_1,
// chatml); nullopt for any other name.
std::optional<ChatTemplateKind> chat_template_kind_named(std::string_view name);

// Which native template a Jinja chat_template is (by its distinguishing text), or nullopt.
std::optional<ChatTemplateKind> recognize_chat_template(std::string_view jinja);

// The template for a loaded model: the built-in variant the tokenizer's own chat_template is
// recognized as (a fast path, byte-identical), else that template through the Jinja engine
// (a syntax error in it is an error naming its line and column); a model without a template
// gets the family's, with a note.
Result<ChatTemplate> chat_template_for_model(const Tokenizer& tokenizer, std::string_view family);

// The config key `template_file`: a Jinja chat template file used in place of the model's,
// given the tokenizer's special tokens (a built-in variant's fast path where it recognizes it). Unreadable files,
// invalid UTF-8 and syntax errors are errors naming the file (and line and column).
Result<ChatTemplate> chat_template_from_file(const std::string& path, const Tokenizer& tokenizer);

}  // namespace odyssey
