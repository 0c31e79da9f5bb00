// Chat templates in C++: the text that a model's own Jinja `chat_template` produces through
// transformers' apply_chat_template for system/user/assistant conversations, the token ids,
// and which tokens are the assistant's (trained) for loss masks. The variants and the span
// rule are documented in docs/tokenizer.md; tests/core/tst_chat_template.cpp checks text, ids
// and spans against transformers with the models' real templates.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/diagnostic.h"
#include "tokenizer/tokenizer.h"

namespace odyssey {

struct ChatMessage {
  std::string role;     // system, user or assistant
  std::string content;
  std::optional<std::string> reasoning_content;  // Qwen3: rendered in <think> (else split off content)
};

enum class ChatTemplateKind {
  Qwen2_5,   // ChatML; default system "You are Qwen, created by Alibaba Cloud. ..."
  Qwen3,     // ChatML without a default system; <think> handling of Qwen3's template
  Llama3,    // Llama-3 Instruct: BOS, header ids, content trimmed, <|eot_id|>
  Llama3_1,  // Llama-3.1/3.3 Instruct: plus the "Cutting Knowledge Date" system block
  ChatML,    // plain ChatML: a system turn only when given, no <think> handling (config "chatml")
};

struct ChatOptions {
  bool add_generation_prompt = false;
  std::optional<bool> enable_thinking;    // Qwen3: false adds the empty think block to the prompt
  std::string date_string = "26 Jul 2024";  // Llama-3.1: the template's default
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

  ChatTemplateKind kind() const { return kind_; }
  std::string_view name() const;  // qwen2_5, qwen3, llama3, llama3_1, chatml

  Result<RenderedChat> render(const std::vector<ChatMessage>& messages, const ChatOptions& options = {}) const;
  // Render, then encode the whole text with add_special_tokens=false (as apply_chat_template
  // does) and map the assistant ranges to token spans.
  Result<ChatEncoding> encode(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                              const ChatOptions& options = {}) const;

 private:
  ChatTemplateKind kind_;
  std::string bos_;  // Llama's bos_token ("<|begin_of_text|>" when empty)
};

// The template of a model family (HfModelConfig::family): qwen2 -> Qwen2.5's, qwen3 -> Qwen3's,
// llama3 -> Llama-3.1's. Unknown families are an error naming the known ones.
Result<ChatTemplate> chat_template_for_family(std::string_view family);

// Which native template a Jinja chat_template is (by its distinguishing text), or nullopt.
std::optional<ChatTemplateKind> recognize_chat_template(std::string_view jinja);

// The template for a loaded model: recognized from the tokenizer's own chat_template when it
// has one (an unrecognized template is an error: rendering it differently would train on the
// wrong text), else the family's, with a note.
Result<ChatTemplate> chat_template_for_model(const Tokenizer& tokenizer, std::string_view family);

}  // namespace odyssey
