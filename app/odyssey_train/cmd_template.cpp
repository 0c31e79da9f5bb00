// `template`: a conversation through a model's chat template on the command line: the rendered
// text, the token ids and which of them are trained, exactly as a run tokenizes a sample
// (core/data template_for + ChatTemplate::encode; docs/tokenizer.md).
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "common/json_dump.h"
#include "common/text.h"
#include "config/model_config.h"
#include "data/dataset.h"
#include "data/tokenize.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace odyssey::cli {

CommandSpec template_spec() {
  return {"template",
          "template --model M --messages FILE [--add-generation-prompt] [--json] [--template NAME | --template-file F]",
          "Render a conversation with a model's chat template: text, token ids, trained mask.",
          "Renders the conversation in FILE with the chat template a run would use for the model (template:\n"
          "auto: the model's own chat_template through Odyssey's Jinja engine, or a built-in renderer where it\n"
          "is byte-identical), encodes the text as apply_chat_template(tokenize=True) does, and marks the\n"
          "tokens a run trains (the assistant's; from {% generation %} blocks where the template has them,\n"
          "else by rendering the conversation turn by turn; docs/tokenizer.md).\n\n"
          "FILE holds a JSON array of messages, or an object {\"messages\": [...], \"tools\": [...]}: messages\n"
          "{role, content} with roles system, user, assistant and tool, assistant tool_calls and\n"
          "reasoning_content, as transformers takes them (docs/datasets.md). Unlike a training sample it\n"
          "may end with a user turn; --add-generation-prompt then appends the assistant's prompt.\n\n"
          "Without --json: the text between two rules, then one line per token (index, id, token text,\n"
          "'*' when trained). With --json: one object {template, text, ids, trained, tokens}.\n"
          "--model is a model directory or a hub id found in the Hugging Face or ModelScope cache.\n\n"
          "Exit codes: 0 printed, 1 the model, the file or the rendering failed (a template error names\n"
          "the template, its line and column, and its own message), 2 usage.",
          {{"model", true, false, "M", "model directory or cached hub id"},
           {"messages", true, false, "FILE", "the conversation (JSON)"},
           {"add-generation-prompt", false, false, "", "append the assistant's generation prompt"},
           {"json", false, false, "", "print one JSON object"},
           {"template", true, false, "NAME", "auto (default), chatml, qwen2_5, qwen3, llama3 or llama3_1"},
           {"template-file", true, false, "F", "a Jinja chat template to use in place of the model's"},
           {"enable-thinking", true, false, "BOOL", "Qwen3-style templates: true or false"},
           {"now", true, false, "TIME", "what strftime_now() sees, YYYY-MM-DDTHH:MM:SS (default: the local time)"}},
          0,
          0};
}

namespace {

bool read_file(const std::string& path, std::string* out) {
  std::error_code ec;
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path, ec)) {
    std::cerr << path << ": error: cannot be read\n";
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// A token's text for the listing: its vocabulary entry, with control characters escaped.
std::string shown(const Tokenizer& tok, std::int32_t id) {
  const std::string t = tok.decode(std::span<const std::int32_t>(&id, 1));
  std::string s;
  for (unsigned char c : t) {
    if (c == '\n') s += "\\n";
    else if (c == '\t') s += "\\t";
    else if (c == '\r') s += "\\r";
    else if (c < 0x20) {
      std::ostringstream h;
      h << "\\x" << std::hex << std::setw(2) << std::setfill('0') << static_cast<int>(c);
      s += h.str();
    } else s += static_cast<char>(c);
  }
  return s;
}

}  // namespace

int cmd_template(const Args& a) {
  if (!a.has("model") || !a.has("messages")) {
    std::cerr << "odyssey-train template: --model and --messages are required\n" << command_help(template_spec());
    return kUsage;
  }
  ChatOptions options;
  options.add_generation_prompt = a.has("add-generation-prompt");
  if (a.has("enable-thinking")) {
    const std::string v = a.value("enable-thinking");
    if (v != "true" && v != "false") {
      std::cerr << "odyssey-train template: --enable-thinking: found " << text::quoted(v)
                << ", expected true or false\n";
      return kUsage;
    }
    options.enable_thinking = v == "true";
  }
  if (a.has("now")) options.now = a.value("now");

  const ModelLocation loc = locate_model(a.value("model"), "");
  if (loc.source == ModelLocation::NotFound || loc.source == ModelLocation::BundledShape) {
    std::cerr << "odyssey-train template: model " << text::quoted(a.value("model")) << ": " << loc.describe()
              << "; give a directory with tokenizer.json (and its tokenizer_config.json)\n";
    return kFailure;
  }
  // The family decides the template only for a model without a chat_template of its own.
  std::string family;
  if (auto mc = load_located_model_config(loc); mc.ok()) family = mc.value.family;
  auto tok = Tokenizer::load(loc.path);
  print_diagnostics(tok.diagnostics);
  if (!tok.ok()) return kFailure;

  std::string template_file;
  if (a.has("template-file")) template_file = std::filesystem::absolute(a.value("template-file")).string();
  auto tmpl = data::template_for(a.has("template") ? a.value("template") : "auto", tok.value, family, template_file);
  print_diagnostics(tmpl.diagnostics);
  if (!tmpl.ok()) return kFailure;

  std::string text;
  if (!read_file(a.value("messages"), &text)) return kFailure;
  auto conv = data::parse_conversation(text, a.value("messages"));
  print_diagnostics(conv.diagnostics);
  if (!conv.ok()) return kFailure;
  options.tools = conv.value.tools;

  auto rendered = tmpl.value.render(conv.value.messages, options);
  auto enc = tmpl.value.encode(tok.value, conv.value.messages, options);
  for (auto& d : enc.diagnostics)
    if (d.file.empty()) d.file = a.value("messages");
  print_diagnostics(enc.diagnostics);
  if (!rendered.ok() || !enc.ok()) return kFailure;
  const std::vector<std::uint8_t> trained = enc.value.assistant_mask();

  if (a.has("json")) {
    nlohmann::ordered_json j;
    j["template"] = tmpl.value.name();
    j["text"] = rendered.value.text;
    j["ids"] = enc.value.ids;
    j["trained"] = trained;
    nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
    for (std::int32_t id : enc.value.ids) tokens.push_back(tok.value.id_to_token(id).value_or(""));
    j["tokens"] = std::move(tokens);
    std::cout << dump_json(j) << '\n';
    return kOk;
  }
  std::size_t n_trained = 0;
  for (std::uint8_t m : trained) n_trained += m;
  std::cout << "-- " << tmpl.value.name() << " template, " << rendered.value.text.size() << " bytes "
            << std::string(40, '-') << '\n'
            << rendered.value.text << (rendered.value.text.empty() || rendered.value.text.back() != '\n' ? "\n" : "")
            << "-- " << enc.value.ids.size() << " tokens, " << n_trained << " trained (*) " << std::string(40, '-')
            << '\n';
  for (std::size_t i = 0; i < enc.value.ids.size(); ++i)
    std::cout << std::setw(6) << i << ' ' << (trained[i] ? '*' : ' ') << std::setw(8) << enc.value.ids[i] << "  "
              << shown(tok.value, enc.value.ids[i]) << '\n';
  return kOk;
}

}  // namespace odyssey::cli
