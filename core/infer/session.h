// An inference session (docs/inference.md): one model loaded once — its tokenizer, chat
// template, end-of-sequence ids and position limit — with an optional PEFT adapter that can be
// switched without reloading the base. `generate` and `chat` (app/odyssey_train) are built on
// it; the window reaches it only through `odyssey-train chat --json` (a child process).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/diagnostic.h"
#include "model/generate.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace odyssey::infer {

struct SessionOptions {
  std::string model;                   // a model directory or a cached hub id
  std::string adapter;                 // a PEFT adapter directory ("" = none)
  std::string device = "auto";         // auto | cpu | cuda
  std::string dtype = "auto";          // auto | float32 | bfloat16
  std::string template_name = "auto";  // as the preset key `template`
  std::string template_file;           // a Jinja chat template in place of the model's
  std::string quant;                   // "" (the checkpoint's weights), nf4 or fp4: quantize the base on load
                                       // (QLoRA's 4-bit base, docs/qlora.md; a pre-quantized checkpoint keeps its own)
};

// What one prompt is: token ids as given, raw text (tokenized with the tokenizer's special tokens, as
// tokenizer(text) adds them) or a conversation (rendered through the chat template with the
// assistant's generation prompt).
struct Prompt {
  std::vector<std::int32_t> ids;  // token ids given as they are ("prompt_ids"), when not empty
  std::optional<std::string> text;
  std::vector<ChatMessage> messages;
  std::string tools;  // conversations: the JSON array of tool schemas ("" = none)
};

class Session {
 public:
  // Loads the model (the base, then the adapter). Errors name the model, file and key.
  static Result<std::unique_ptr<Session>> open(const SessionOptions& options);

  // The token ids of a prompt. A conversation needs a chat template (an error says the model
  // has none and how to give one). `enable_thinking`: passed to templates that read it.
  Result<std::vector<std::int32_t>> encode(const Prompt& prompt,
                                           std::optional<bool> enable_thinking = std::nullopt) const;

  // Switches to another adapter ("" = the base alone) without reloading the base. On errors the
  // session has no adapter.
  Diagnostics set_adapter(const std::string& dir);
  const std::string& adapter() const { return adapter_; }

  // Generation options with this model's end-of-sequence ids and position limit filled in.
  model::GenerationOptions defaults() const;

  model::CausalLM& lm() { return lm_; }
  const Tokenizer& tokenizer() const { return tok_; }
  bool has_template() const { return template_.has_value(); }
  std::string template_name() const { return template_ ? std::string(template_->name()) : std::string(); }
  const std::string& model_path() const { return model_path_; }
  std::string device() const;
  std::string dtype() const;

 private:
  Session() = default;
  model::CausalLM lm_{nullptr};
  Tokenizer tok_;
  std::optional<ChatTemplate> template_;
  std::string template_error_;  // why there is no template (shown when a conversation needs one)
  std::vector<std::int32_t> eos_ids_;
  std::int64_t max_positions_ = 0;
  std::string adapter_, model_path_;
};

}  // namespace odyssey::infer
