// `tokenize`: a model's tokenizer (core/tokenizer) on the command line. Prints the token ids
// of --text or --file as a JSON array, exactly as Hugging Face tokenizers would encode them.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "common/json_dump.h"
#include "common/text.h"
#include "config/model_config.h"
#include "tokenizer/tokenizer.h"

namespace odyssey::cli {

CommandSpec tokenize_spec() {
  return {"tokenize",
          "tokenize --model DIR (--text TEXT | --file FILE) [--add-special-tokens]",
          "Print the token ids of a text as JSON.",
          "Loads the model's tokenizer.json (byte-level BPE: Qwen2/2.5/3, Llama-3; see docs/tokenizer.md)\n"
          "and prints the ids of the text as a JSON array on one line, as Hugging Face tokenizers'\n"
          "encode(text, add_special_tokens=...) gives them. --model is a model directory, a tokenizer.json,\n"
          "or a hub id found in the Hugging Face or ModelScope cache.\n\n"
          "Special-token text such as <|im_end|> in the input is encoded as that special token. Without\n"
          "--add-special-tokens nothing is added; with it the post-processor's tokens are (Llama-3: BOS).\n\n"
          "Exit codes: 0 printed, 1 the tokenizer or the text could not be read (invalid UTF-8 is\n"
          "reported with its line, column and byte offset), 2 usage.",
          {{"model", true, false, "DIR", "model directory, tokenizer.json, or cached hub id"},
           {"text", true, false, "TEXT", "the text to encode"},
           {"file", true, false, "FILE", "encode the contents of FILE (UTF-8)"},
           {"add-special-tokens", false, false, "", "let the post-processor add its tokens (e.g. BOS)"}},
          0,
          0};
}

namespace {

// A path as given, else a model found by locate_model (hub id in a cache).
std::string tokenizer_path(const std::string& model) {
  std::error_code ec;
  if (std::filesystem::exists(model, ec)) return model;
  const ModelLocation loc = locate_model(model, std::filesystem::current_path(ec).string());
  if (loc.source == ModelLocation::Directory || loc.source == ModelLocation::HuggingFaceCache ||
      loc.source == ModelLocation::ModelScopeCache)
    return loc.path;
  return model;
}

}  // namespace

int cmd_tokenize(const Args& a) {
  if (!a.has("model")) {
    std::cerr << "odyssey-train tokenize: --model is required\n" << command_help(tokenize_spec());
    return kUsage;
  }
  if (a.has("text") == a.has("file")) {
    std::cerr << "odyssey-train tokenize: give exactly one of --text and --file\n";
    return kUsage;
  }
  std::string text, source = "--text";
  if (a.has("text")) {
    text = a.value("text");
  } else {
    source = a.value("file");
    std::ifstream in(source, std::ios::binary);
    if (!in) {
      std::cerr << source << ": error: cannot open the file\n";
      return kFailure;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  auto tok = Tokenizer::load(tokenizer_path(a.value("model")));
  print_diagnostics(tok.diagnostics);
  if (!tok.ok()) return kFailure;
  auto ids = tok.value.encode(text, a.has("add-special-tokens"));
  if (!ids.ok()) {
    for (Diagnostic& d : ids.diagnostics) d.file = source;
    print_diagnostics(ids.diagnostics);
    return kFailure;
  }
  std::cout << dump_json(nlohmann::json(ids.value)) << '\n';
  return kOk;
}

}  // namespace odyssey::cli
