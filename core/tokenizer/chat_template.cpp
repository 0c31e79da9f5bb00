// Each render_* function follows its Jinja template statement by statement for messages with
// roles system/user/assistant (tools are not supported); Python's string methods are
// reproduced where the templates call them (trim -> str.strip, split, lstrip('\n')). Any other
// template goes through the native Jinja engine (jinja.h): render_jinja.
#include "tokenizer/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "common/sha256.h"
#include "common/text.h"
#include "config/model_family.h"
#include "tokenizer/jinja.h"
#include "tokenizer/utf8.h"

namespace odyssey {

namespace {

constexpr std::string_view kQwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
constexpr std::string_view kLlamaBos = "<|begin_of_text|>";

// Python's str.strip() with no argument (Jinja's `trim`).
std::string py_trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e) {
    std::size_t i = b;
    if (!utf8::is_python_space(utf8::decode(s, i))) break;
    b = i;
  }
  while (e > b) {
    std::size_t k = e - 1;
    while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
    std::size_t i = k;
    if (!utf8::is_python_space(utf8::decode(s, i))) break;
    e = k;
  }
  return std::string(s.substr(b, e - b));
}

std::string_view lstrip_nl(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view rstrip_nl(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}
// s.split(sep)[-1] and s.split(sep)[0].
std::string_view after_last(std::string_view s, std::string_view sep) {
  const auto p = s.rfind(sep);
  return p == std::string_view::npos ? s : s.substr(p + sep.size());
}
std::string_view before_first(std::string_view s, std::string_view sep) {
  const auto p = s.find(sep);
  return p == std::string_view::npos ? s : s.substr(0, p);
}
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

struct Out {
  RenderedChat r;
  std::size_t open = 0;
  void add(std::string_view s) { r.text.append(s); }
  void begin() { open = r.text.size(); }
  void end() { r.assistant_ranges.emplace_back(open, r.text.size()); }
};

// Qwen2.5's template; plain ChatML (default_system false) writes a system turn only when the
// conversation has one.
void render_qwen2_5(const std::vector<ChatMessage>& m, const ChatOptions& o, Out& out, bool default_system = true) {
  if (default_system || m[0].role == "system") {
    out.add("<|im_start|>system\n");
    out.add(m[0].role == "system" ? std::string_view(m[0].content) : kQwenDefaultSystem);
    out.add("<|im_end|>\n");
  }
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (m[i].role == "assistant") {
      out.add("<|im_start|>assistant\n");
      out.begin();
      out.add(m[i].content);
      out.add("<|im_end|>");
      out.end();
      out.add("\n");
    } else if (m[i].role == "user" || i > 0) {
      out.add("<|im_start|>" + m[i].role + "\n" + m[i].content + "<|im_end|>\n");
    }
  }
  if (o.add_generation_prompt) out.add("<|im_start|>assistant\n");
}

void render_qwen3(const std::vector<ChatMessage>& m, const ChatOptions& o, Out& out) {
  if (m[0].role == "system") out.add("<|im_start|>system\n" + m[0].content + "<|im_end|>\n");
  std::size_t last_query = m.size() - 1;
  for (std::size_t k = m.size(); k-- > 0;) {
    const std::string& c = m[k].content;
    if (m[k].role == "user" && !(text::starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
      last_query = k;
      break;
    }
  }
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (m[i].role != "assistant") {
      if (m[i].role == "user" || i > 0) out.add("<|im_start|>" + m[i].role + "\n" + m[i].content + "<|im_end|>\n");
      continue;
    }
    std::string_view content = m[i].content;
    std::string_view reasoning;
    if (m[i].reasoning_content) {
      reasoning = *m[i].reasoning_content;
    } else if (content.find("</think>") != std::string_view::npos) {
      reasoning = lstrip_nl(after_last(rstrip_nl(before_first(content, "</think>")), "<think>"));
      content = lstrip_nl(after_last(content, "</think>"));
    }
    out.add("<|im_start|>assistant\n");
    out.begin();
    if (i > last_query && (i + 1 == m.size() || !reasoning.empty())) {
      out.add("<think>\n");
      out.add(lstrip_nl(rstrip_nl(reasoning)));
      out.add("\n</think>\n\n");
      out.add(lstrip_nl(content));
    } else {
      out.add(content);
    }
    out.add("<|im_end|>");
    out.end();
    out.add("\n");
  }
  if (o.add_generation_prompt) {
    out.add("<|im_start|>assistant\n");
    if (o.enable_thinking == false) out.add("<think>\n\n</think>\n\n");
  }
}

void llama_turn(const ChatMessage& msg, Out& out) {
  out.add("<|start_header_id|>" + msg.role + "<|end_header_id|>\n\n");
  const bool assistant = msg.role == "assistant";
  if (assistant) out.begin();
  out.add(py_trim(msg.content));
  out.add("<|eot_id|>");
  if (assistant) out.end();
}

void render_llama3(const std::vector<ChatMessage>& m, const ChatOptions& o, std::string_view bos, Out& out) {
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (i == 0) out.add(bos);
    llama_turn(m[i], out);
  }
  if (o.add_generation_prompt) out.add("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

void render_llama3_1(const std::vector<ChatMessage>& m, const ChatOptions& o, std::string_view bos, Out& out) {
  out.add(bos);
  const bool has_system = m[0].role == "system";
  out.add("<|start_header_id|>system<|end_header_id|>\n\n");
  out.add("Cutting Knowledge Date: December 2023\n");
  out.add("Today Date: " + o.date_string + "\n\n");
  if (has_system) out.add(py_trim(m[0].content));
  out.add("<|eot_id|>");
  for (std::size_t i = has_system ? 1 : 0; i < m.size(); ++i) llama_turn(m[i], out);
  if (o.add_generation_prompt) out.add("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

}  // namespace

std::vector<std::uint8_t> ChatEncoding::assistant_mask() const {
  std::vector<std::uint8_t> mask(ids.size(), 0);
  for (const auto& [b, e] : assistant_spans)
    for (std::size_t i = b; i < e && i < mask.size(); ++i) mask[i] = 1;
  return mask;
}

std::string_view ChatTemplate::name() const {
  switch (kind_) {
    case ChatTemplateKind::Qwen2_5: return "qwen2_5";
    case ChatTemplateKind::Qwen3: return "qwen3";
    case ChatTemplateKind::Llama3: return "llama3";
    case ChatTemplateKind::Llama3_1: return "llama3_1";
    case ChatTemplateKind::ChatML: return "chatml";
    case ChatTemplateKind::Jinja: return "jinja";
  }
  return "";
}

std::string ChatTemplate::identity() const {
  if (kind_ == ChatTemplateKind::Jinja) return "jinja:" + jinja_digest_;
  // A fast path keeps the model's template for tool conversations: its text is part of the rendering.
  if (jinja_) return std::string(name()) + "+jinja:" + jinja_digest_;
  return std::string(name());
}

bool ChatTemplate::has_generation_blocks() const {
  return kind_ == ChatTemplateKind::Jinja && jinja_ && jinja_->has_generation_blocks();
}

Result<ChatTemplate> ChatTemplate::from_jinja(std::string_view source, std::string name,
                                              std::vector<std::pair<std::string, std::string>> special_tokens) {
  Result<ChatTemplate> r;
  try {
    r.value.jinja_ = std::make_shared<const jinja::Template>(source, std::move(name));
  } catch (const jinja::Error& e) {
    Diagnostic d = e.diagnostic();
    d.key = "chat_template";
    r.diagnostics.push_back(std::move(d));
    return r;
  }
  r.value.kind_ = ChatTemplateKind::Jinja;
  r.value.special_tokens_ = std::move(special_tokens);
  Sha256 h;
  h.update(source);
  for (const auto& [k, v] : r.value.special_tokens_) {
    h.update(std::string_view("\0", 1));
    h.update(k);
    h.update(std::string_view("\0", 1));
    h.update(v);
  }
  r.value.jinja_digest_ = Sha256::hex(h.digest());
  for (const auto& [k, v] : r.value.special_tokens_)
    if (k == "bos_token") r.value.bos_ = v;
  return r;
}

// The model's template through the engine. Assistant ranges: the {% generation %} spans where
// the template has them (transformers' return_assistant_tokens_mask); otherwise each assistant
// message's text is found by rendering prefixes, as ms-swift and TRL do: the conversation up
// to the message with the generation prompt, then up to and including the message; the
// message's range is what the second render adds (its content and what the template writes
// after it up to the next message). Both renders must be prefixes of the whole conversation's
// text, else the mask cannot be derived and it is an error naming the message.
Result<RenderedChat> ChatTemplate::render_jinja(const std::vector<ChatMessage>& messages,
                                                const ChatOptions& options) const {
  Result<RenderedChat> r;
  jinja::RenderOptions ro;
  ro.now = options.now;
  // apply_chat_template's choice among named templates: "tool_use" when tools are given.
  const jinja::Template& tmpl = !options.tools.empty() && tool_use_ ? *tool_use_ : *jinja_;
  // The messages as apply_chat_template receives them; tool calls and tools are parsed once.
  auto parse_json_array = [&](const std::string& text,
                              const std::string& key) -> std::optional<nlohmann::ordered_json> {
    auto j = nlohmann::ordered_json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_array()) {
      r.diagnostics.push_back(error_at({}, key,
                                       j.is_discarded()
                                           ? "is not valid JSON; expected a JSON array"
                                           : std::string("expected a JSON array, found ") + j.type_name()));
      return std::nullopt;
    }
    return j;
  };
  std::vector<nlohmann::ordered_json> msgs;
  msgs.reserve(messages.size());
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& msg = messages[i];
    nlohmann::ordered_json m = {{"role", msg.role}};
    if (msg.content_form == ChatMessage::Form::Text || !msg.content.empty()) m["content"] = msg.content;
    else if (msg.content_form == ChatMessage::Form::Null) m["content"] = nullptr;
    if (msg.reasoning_content) m["reasoning_content"] = *msg.reasoning_content;
    if (!msg.tool_calls.empty()) {
      auto calls = parse_json_array(msg.tool_calls, "messages[" + std::to_string(i) + "].tool_calls");
      if (!calls) return r;
      m["tool_calls"] = std::move(*calls);
    }
    if (!msg.name.empty()) m["name"] = msg.name;
    if (!msg.tool_call_id.empty()) m["tool_call_id"] = msg.tool_call_id;
    msgs.push_back(std::move(m));
  }
  nlohmann::ordered_json tools = nullptr;
  if (!options.tools.empty()) {
    auto t = parse_json_array(options.tools, "tools");
    if (!t) return r;
    tools = std::move(*t);
  }
  auto context = [&](std::size_t n, bool generation_prompt) {
    nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < n; ++i) list.push_back(msgs[i]);
    ctx["messages"] = std::move(list);
    ctx["tools"] = tools;
    ctx["documents"] = nullptr;
    ctx["add_generation_prompt"] = generation_prompt;
    for (const auto& [k, v] : special_tokens_) ctx[k] = v;
    if (options.enable_thinking) ctx["enable_thinking"] = *options.enable_thinking;
    return ctx;
  };
  try {
    jinja::RenderResult full = tmpl.render(context(messages.size(), options.add_generation_prompt), ro);
    r.value.text = std::move(full.text);
    if (tmpl.has_generation_blocks()) {
      r.value.assistant_ranges = std::move(full.generation_ranges);
      return r;
    }
    for (std::size_t i = 0; i < messages.size(); ++i) {
      if (messages[i].role != "assistant") continue;
      const std::string before = tmpl.render(context(i, true), ro).text;
      const std::string upto = tmpl.render(context(i + 1, false), ro).text;
      const std::string where = "messages[" + std::to_string(i) + "]";
      if (upto.compare(0, before.size(), before) != 0 || r.value.text.compare(0, upto.size(), upto) != 0) {
        r.diagnostics.push_back(
            error_at({}, where,
                     "the template " + tmpl.name() +
                         " renders this assistant message differently once the conversation continues (or its "
                         "generation prompt is not where the message starts), so the trained tokens cannot be found "
                         "by rendering prefixes; a template with {% generation %} blocks marks them explicitly"));
        return r;
      }
      if (upto.size() > before.size()) r.value.assistant_ranges.emplace_back(before.size(), upto.size());
    }
  } catch (const jinja::Error& e) {
    Diagnostic d = e.diagnostic();
    d.key = "chat_template";
    r.diagnostics.push_back(std::move(d));
  }
  return r;
}

Result<RenderedChat> ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatOptions& options) const {
  Result<RenderedChat> r;
  if (messages.empty()) {
    r.diagnostics.push_back(error_at({}, "messages", "a conversation needs at least one message"));
    return r;
  }
  const bool uses_tools = !options.tools.empty() || std::any_of(messages.begin(), messages.end(),
                                                                [](const ChatMessage& m) { return m.uses_tools(); });
  // A built-in variant renders system, user and assistant text; conversations with tools go
  // through the model's own template, which the fast path keeps for them.
  if (uses_tools && kind_ != ChatTemplateKind::Jinja && !jinja_) {
    r.diagnostics.push_back(
        error_at({}, options.tools.empty() ? "messages" : "tools",
                 "the conversation uses tools (tool calls, tool results or a tools list), which Odyssey's built-in " +
                     std::string(name()) +
                     " template does not render; use template: auto with a model whose own chat "
                     "template renders tools, or template_file: with such a template"));
    return r;
  }
  const bool engine = kind_ == ChatTemplateKind::Jinja || uses_tools;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (!engine && role != "system" && role != "user" && role != "assistant")
      r.diagnostics.push_back(error_at({}, "messages[" + std::to_string(i) + "].role",
                                       "role " + text::quoted(role) + " is not supported; Odyssey's " +
                                           std::string(name()) + " template renders system, user and assistant"));
    if (utf8::find_invalid(messages[i].content) != utf8::npos)
      r.diagnostics.push_back(
          error_at({}, "messages[" + std::to_string(i) + "].content",
                   "invalid UTF-8 at byte offset " + std::to_string(utf8::find_invalid(messages[i].content))));
  }
  if (has_errors(r.diagnostics)) return r;
  if (engine) return render_jinja(messages, options);
  Out out;
  const std::string_view bos = bos_.empty() ? kLlamaBos : std::string_view(bos_);
  switch (kind_) {
    case ChatTemplateKind::Qwen2_5: render_qwen2_5(messages, options, out); break;
    case ChatTemplateKind::Qwen3: render_qwen3(messages, options, out); break;
    case ChatTemplateKind::Llama3: render_llama3(messages, options, bos, out); break;
    case ChatTemplateKind::Llama3_1: render_llama3_1(messages, options, bos, out); break;
    case ChatTemplateKind::ChatML: render_qwen2_5(messages, options, out, false); break;
    case ChatTemplateKind::Jinja: break;
  }
  r.value = std::move(out.r);
  return r;
}

Result<ChatEncoding> ChatTemplate::encode(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                          const ChatOptions& options) const {
  Result<ChatEncoding> r;
  auto rendered = render(messages, options);
  r.diagnostics = rendered.diagnostics;
  if (!rendered.ok()) return r;
  auto enc = tokenizer.encode_with_offsets(rendered.value.text, false);
  r.diagnostics.insert(r.diagnostics.end(), enc.diagnostics.begin(), enc.diagnostics.end());
  if (!enc.ok()) return r;
  const auto& offs = enc.value.offsets;
  const std::string& text = rendered.value.text;
  // HF's rule (apply_chat_template with return_assistant_tokens_mask): from the token holding
  // the range's first character to the token holding its last character.
  std::size_t tok = 0;
  auto token_at = [&](std::size_t byte) -> std::optional<std::size_t> {
    while (tok < offs.size() && offs[tok].second <= byte) ++tok;
    for (std::size_t k = tok; k < offs.size() && offs[k].first <= byte; ++k)
      if (byte < offs[k].second) return k;
    return std::nullopt;
  };
  for (const auto& [b, e] : rendered.value.assistant_ranges) {
    if (b >= e) continue;
    std::size_t last = e - 1;
    while (last > b && (static_cast<unsigned char>(text[last]) & 0xC0) == 0x80) --last;
    const auto first_tok = token_at(b), last_tok = token_at(last);
    if (!first_tok || !last_tok) {
      r.diagnostics.push_back(error_at({}, "messages", "an assistant turn maps to no tokens"));
      return r;
    }
    r.value.assistant_spans.emplace_back(*first_tok, *last_tok + 1);
  }
  r.value.ids = std::move(enc.value.ids);
  return r;
}

std::optional<ChatTemplateKind> chat_template_kind_named(std::string_view name) {
  for (ChatTemplateKind k : {ChatTemplateKind::Qwen2_5, ChatTemplateKind::Qwen3, ChatTemplateKind::Llama3,
                             ChatTemplateKind::Llama3_1, ChatTemplateKind::ChatML})
    if (ChatTemplate(k).name() == name) return k;
  return std::nullopt;
}

Result<ChatTemplate> chat_template_for_family(std::string_view family) {
  Result<ChatTemplate> r;
  const ModelFamily* f = family_by_id(family);
  if (f && !f->builtin_template.empty()) {
    if (auto k = chat_template_kind_named(f->builtin_template)) {
      r.value = ChatTemplate(*k);
      return r;
    }
  }
  std::vector<std::string> known;
  for (const ModelFamily& g : model_families())
    if (!g.builtin_template.empty()) known.emplace_back(g.id);
  r.diagnostics.push_back(error_at({}, "family",
                                   "no built-in chat template for model family " + text::quoted(family) +
                                       "; built in for: " + text::join(known, ", ")));
  return r;
}

std::optional<ChatTemplateKind> recognize_chat_template(std::string_view j) {
  // The statements that decide how system, user and assistant turns render must be present
  // verbatim (Jinja source, so "\\n" is a backslash and an n): a template that merely looks
  // similar is not rendered as if it were the real one.
  static const std::vector<std::pair<ChatTemplateKind, std::vector<std::string_view>>> kSignatures = {
      {ChatTemplateKind::Qwen2_5,
       {"{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\\n' }}",
        "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}",
        "(message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == "
        "\"assistant\" and not message.tool_calls)",
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}",
        "{{- '<|im_start|>assistant\\n' }}"}},
      {ChatTemplateKind::Qwen3,
       {"{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}",
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}",
        "{%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}",
        "{%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1]."
        "lstrip('\\n') %}",
        "{%- if loop.index0 > ns.last_query_index %}", "{%- if loop.last or (not loop.last and reasoning_content) %}",
        "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + "
        "'\\n</think>\\n\\n' + content.lstrip('\\n') }}",
        "{{- '<|im_start|>' + message.role + '\\n' + content }}", "{{- '<think>\\n\\n</think>\\n\\n' }}"}},
      {ChatTemplateKind::Llama3_1,
       {"{%- set date_string = \"26 Jul 2024\" %}", "{%- set system_message = messages[0]['content']|trim %}",
        "{{- \"Cutting Knowledge Date: December 2023\\n\" }}", "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}",
        "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
        "'<|eot_id|>' }}"}},
      {ChatTemplateKind::Llama3,
       {"{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
        "trim + '<|eot_id|>' %}",
        "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}",
        // The first release appended the assistant header unconditionally; it is not matched.
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"}},
  };
  if (j.find("strftime_now") != std::string_view::npos) return std::nullopt;  // today's date: not reproducible
  for (const auto& [kind, needles] : kSignatures) {
    bool all = true;
    for (const std::string_view n : needles) all = all && j.find(n) != std::string_view::npos;
    if (all) return kind;
  }
  return std::nullopt;
}

namespace {
std::vector<std::pair<std::string, std::string>> chat_special_tokens(const Tokenizer& tokenizer) {
  std::vector<std::pair<std::string, std::string>> special;
  if (!tokenizer.bos_token().empty()) special.emplace_back("bos_token", tokenizer.bos_token());
  if (!tokenizer.eos_token().empty()) special.emplace_back("eos_token", tokenizer.eos_token());
  return special;
}
}  // namespace

Result<ChatTemplate> chat_template_for_model(const Tokenizer& tokenizer, std::string_view family) {
  Result<ChatTemplate> r;
  const std::string& jinja = tokenizer.chat_template_source();
  if (jinja.empty()) {
    r = chat_template_for_family(family);
    if (r.ok()) {
      Diagnostic d;
      d.severity = Severity::Note;
      d.file = tokenizer.file();
      d.message = "the model has no chat_template; using Odyssey's " + std::string(r.value.name()) +
                  " template for family " + text::quoted(family);
      r.diagnostics.push_back(std::move(d));
    }
    r.value = ChatTemplate(r.value.kind(), tokenizer.bos_token());
    return r;
  }
  // The template itself, through the Jinja engine. Errors inside it are located in the template
  // text (line and column), named after the file it came from.
  std::string name = tokenizer.chat_template_file();
  if (name.size() < 6 || name.compare(name.size() - 6, 6, ".jinja") != 0) name += "[chat_template]";
  Result<ChatTemplate> engine = ChatTemplate::from_jinja(jinja, name, chat_special_tokens(tokenizer));
  const auto kind = recognize_chat_template(jinja);
  // A "tool_use" template that does not parse is an error whichever way the default renders:
  // conversations with tools would otherwise take the default template without a word.
  std::vector<Diagnostic> tool_use_errors;
  if (engine.ok() && !tokenizer.tool_use_chat_template().empty()) {
    try {
      engine.value.tool_use_ = std::make_shared<const jinja::Template>(tokenizer.tool_use_chat_template(),
                                                                       tokenizer.chat_template_file() + "[tool_use]");
      Sha256 h;
      h.update(engine.value.jinja_digest_);
      h.update(tokenizer.tool_use_chat_template());
      engine.value.jinja_digest_ = Sha256::hex(h.digest());
    } catch (const jinja::Error& e) {
      Diagnostic d = e.diagnostic();
      d.key = "chat_template";
      tool_use_errors.push_back(std::move(d));
    }
  }
  if (!kind) {
    engine.diagnostics.insert(engine.diagnostics.end(), tool_use_errors.begin(), tool_use_errors.end());
    return engine;
  }
  // A built-in variant renders it byte-identically and faster; conversations with tools still
  // go through the engine, which the fast path keeps when the template parses.
  r.value = engine.ok() ? std::move(engine.value) : ChatTemplate(*kind, tokenizer.bos_token());
  r.value.kind_ = *kind;
  r.diagnostics = std::move(tool_use_errors);
  return r;
}

Result<ChatTemplate> chat_template_from_file(const std::string& path, const Tokenizer& tokenizer) {
  Result<ChatTemplate> r;
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  if (!in || std::filesystem::is_directory(path, ec)) {
    r.diagnostics.push_back(
        error_at({}, "template_file", path + ": cannot be read; expected a Jinja chat template file"));
    return r;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (utf8::find_invalid(text.str()) != utf8::npos) {
    r.diagnostics.push_back(
        error_at({}, "template_file",
                 path + ": invalid UTF-8 at byte offset " + std::to_string(utf8::find_invalid(text.str()))));
    return r;
  }
  Result<ChatTemplate> r2 = ChatTemplate::from_jinja(text.str(), path, chat_special_tokens(tokenizer));
  // A file holding a template a built-in variant renders byte-identically takes that fast path
  // too (tool conversations still go through the engine), as a model's own template does.
  if (const auto kind = recognize_chat_template(text.str()); kind && r2.ok()) r2.value.kind_ = *kind;
  return r2;
}

}  // namespace odyssey
