// Reading tokenizer.json and tokenizer_config.json into a TokenizerImpl. Every refusal names
// the file, the key and what is allowed; components HF supports but Odyssey does not are
// refused by type name rather than approximated.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/json_dump.h"
#include "common/regular_file.h"
#include "common/text.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode_nfc.h"
#include "tokenizer/utf8.h"

namespace odyssey {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// line:column of byte `offset` in `text`, for JSON syntax errors.
void locate(std::string_view text, std::size_t offset, Diagnostic* d) {
  offset = std::min(offset, text.size());
  d->line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < offset; ++i)
    if (text[i] == '\n') {
      ++d->line;
      line_start = i + 1;
    }
  d->column = static_cast<int>(offset - line_start) + 1;
}

// Parse JSON text or explain where it is broken.
bool parse_json(std::string_view text, const std::string& file, json* out, Diagnostics* diags) {
  try {
    *out = json::parse(text.begin(), text.end());
    return true;
  } catch (const json::parse_error& e) {
    Diagnostic d = error_at(file, "", "not valid JSON: " + text::excerpt(e.what()));
    locate(text, e.byte > 0 ? e.byte - 1 : 0, &d);
    diags->push_back(std::move(d));
    return false;
  }
}

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
}

bool get_bool(const json& j, const char* key, bool fallback) {
  return j.is_object() && j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

struct Loader {
  const std::string& file;
  TokenizerImpl& t;
  Diagnostics& diags;

  static constexpr int kMaxErrors = 20;  // a file broken throughout reports the first ones and a count
  int errors = 0;

  void error(const std::string& key, std::string msg) {
    if (++errors <= kMaxErrors) diags.push_back(error_at(file, key, std::move(msg)));
  }
  void count_suppressed() {
    if (errors > kMaxErrors)
      diags.push_back(error_at(file, "", "... and " + std::to_string(errors - kMaxErrors) + " more errors"));
  }
  void unsupported(const std::string& key, const std::string& what, const std::string& allowed) {
    error(key, what + " is not supported (Odyssey reads " + allowed + ")");
  }

  // Raw bytes a byte-level token stands for, or false when it uses other characters.
  static bool token_bytes(std::string_view token, std::string* out) {
    out->clear();
    for (std::size_t i = 0; i < token.size();) {
      const int b = tok::char_byte(utf8::decode(token, i));
      if (b < 0) return false;
      out->push_back(static_cast<char>(b));
    }
    return true;
  }

  void load(const json& j) {
    if (j.contains("version") && j["version"] != "1.0")
      error("version",
            "unknown tokenizer.json version " + text::excerpt(dump_json(j["version"])) + "; expected \"1.0\"");
    if (!j.contains("model")) {
      error("model", "missing: a tokenizer.json has a \"model\" (here: the BPE vocabulary and merges)");
      return;
    }
    model(j["model"]);
    normalizer(j.value("normalizer", json()), "normalizer");
    if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].is_null())
      error("pre_tokenizer", "missing: byte-level BPE needs a ByteLevel pre-tokenizer");
    else pre_tokenizer(j["pre_tokenizer"], "pre_tokenizer");
    if (!has_errors(diags) && !t.pre.has_byte_level())
      error("pre_tokenizer", "has no ByteLevel step: Odyssey reads byte-level BPE tokenizers only");
    const json dec = j.value("decoder", json());
    if (dec.is_null()) t.byte_level_decoder = false;
    else if (type_of(dec) != "ByteLevel")
      unsupported("decoder.type", "decoder " + text::quoted(type_of(dec)), "ByteLevel or null");
    post_processor(j.value("post_processor", json()), "post_processor");
    if (j.contains("added_tokens") && j["added_tokens"].is_array()) added_tokens(j["added_tokens"]);
    count_suppressed();
  }

  void model(const json& m) {
    if (!m.is_object()) return error("model", "expected an object with the BPE model");
    const std::string type = type_of(m);
    if (!type.empty() && type != "BPE")
      return unsupported("model.type", "model type " + text::quoted(type), "byte-level BPE models: type BPE");
    if (!m.contains("vocab") || !m["vocab"].is_object()) return error("model.vocab", "expected an object token -> id");
    if (!m.contains("merges") || !m["merges"].is_array()) return error("model.merges", "expected a list of merges");
    if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].is_number() &&
        m["dropout"].get<double>() != 0.0)
      unsupported("model.dropout", "BPE dropout (random encodings)", "deterministic BPE: dropout null");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(k) && m[k].is_string() && !m[k].get<std::string>().empty())
        unsupported(std::string("model.") + k, text::quoted(m[k].get<std::string>()), "byte-level BPE: null");
    if (get_bool(m, "byte_fallback", false))
      unsupported("model.byte_fallback", "byte_fallback true (SentencePiece-style BPE)", "byte-level BPE");
    t.bpe.fuse_unk = get_bool(m, "fuse_unk", false);
    t.bpe.ignore_merges = get_bool(m, "ignore_merges", false);
    tok::StringIdMap vocab;
    std::string bytes;
    for (const auto& [token, idj] : m["vocab"].items()) {
      if (!idj.is_number_integer() || idj.get<std::int64_t>() < 0 || idj.get<std::int64_t>() >= kMaxTokenIds) {
        error("model.vocab." + text::excerpt(token), "expected a token id (an integer from 0 to " +
                                                         std::to_string(kMaxTokenIds - 1) + "), found " +
                                                         text::excerpt(dump_json(idj)));
        continue;
      }
      const auto id = static_cast<std::int32_t>(idj.get<std::int64_t>());
      if (static_cast<std::size_t>(id) >= t.bpe.tokens.size()) {
        t.bpe.tokens.resize(static_cast<std::size_t>(id) + 1);
        t.bpe.byte_length.resize(static_cast<std::size_t>(id) + 1);
      }
      if (!t.bpe.tokens[static_cast<std::size_t>(id)].empty())
        error("model.vocab." + token, "id " + std::to_string(id) + " is also the id of " +
                                          text::quoted(t.bpe.tokens[static_cast<std::size_t>(id)]));
      t.bpe.tokens[static_cast<std::size_t>(id)] = token;
      vocab.emplace(token, id);
      if (token_bytes(token, &bytes)) {
        t.bpe.by_bytes.emplace(bytes, id);
        t.bpe.byte_length[static_cast<std::size_t>(id)] = static_cast<std::uint32_t>(bytes.size());
        if (bytes.size() == 1) t.bpe.byte_id[static_cast<unsigned char>(bytes[0])] = id;
      } else {
        t.bpe.byte_length[static_cast<std::size_t>(id)] = static_cast<std::uint32_t>(token.size());
      }
    }
    const json& merges = m["merges"];
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
      const json& mj = merges[rank];
      const std::string key = "model.merges[" + std::to_string(rank) + "]";
      std::string a, b;
      if (mj.is_string()) {
        const std::string s = mj.get<std::string>();
        const auto sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          error(key, "expected two tokens separated by one space, found " + text::quoted(s));
          continue;
        }
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {
        a = mj[0].get<std::string>();
        b = mj[1].get<std::string>();
      } else {
        error(key, "expected \"a b\" or [\"a\", \"b\"], found " + text::excerpt(dump_json(mj)));
        continue;
      }
      const auto ia = vocab.find(a), ib = vocab.find(b), iab = vocab.find(a + b);
      for (const auto& [name, it] : {std::pair{&a, ia}, std::pair{&b, ib}})
        if (it == vocab.end()) error(key, "token " + text::quoted(*name) + " is not in the vocabulary");
      if (ia == vocab.end() || ib == vocab.end()) continue;
      if (iab == vocab.end()) {
        error(key, "the merged token " + text::quoted(a + b) + " is not in the vocabulary");
        continue;
      }
      t.bpe.merges[tok::BpeModel::pair_key(ia->second, ib->second)] = {static_cast<std::int32_t>(rank), iab->second};
    }
    if (m.contains("unk_token") && m["unk_token"].is_string()) {
      const auto it = vocab.find(m["unk_token"].get<std::string>());
      if (it != vocab.end()) t.bpe.unk_id = it->second;
    }
    int missing = 0;
    for (std::size_t b = 0; b < 256; ++b) missing += t.bpe.byte_id[b] < 0 ? 1 : 0;
    if (missing > 0 && t.bpe.unk_id < 0)
      diags.push_back(diagnostic_at(Severity::Warning, file, "model.vocab",
                                    std::to_string(missing) +
                                        " of the 256 bytes have no token and there is no unk_token: "
                                        "text containing them loses those bytes (as in HF tokenizers)"));
    t.model_vocab = std::move(vocab);
  }

  void normalizer(const json& n, const std::string& key) {
    if (n.is_null()) return;
    const std::string type = type_of(n);
    if (type == "NFC") {
      t.nfc = true;
    } else if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
      for (std::size_t i = 0; i < n["normalizers"].size(); ++i)
        normalizer(n["normalizers"][i], key + ".normalizers[" + std::to_string(i) + "]");
    } else {
      unsupported(key + ".type", "normalizer " + text::quoted(type), "NFC, a Sequence of NFC, or null");
    }
  }

  void pre_tokenizer(const json& p, const std::string& key) {
    const std::string type = type_of(p);
    if (type == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
      for (std::size_t i = 0; i < p["pretokenizers"].size(); ++i)
        pre_tokenizer(p["pretokenizers"][i], key + ".pretokenizers[" + std::to_string(i) + "]");
    } else if (type == "ByteLevel") {
      tok::PreTokenizerStep s;
      s.kind = tok::PreTokenizerStep::ByteLevel;
      s.add_prefix_space = get_bool(p, "add_prefix_space", true);
      if (get_bool(p, "use_regex", true)) s.regex = tok::PreTokenizer::gpt2_regex();
      t.pre.steps.push_back(std::move(s));
    } else if (type == "Split") {
      split(p, key);
    } else {
      unsupported(key + ".type", "pre_tokenizer " + text::quoted(type), "Split, ByteLevel and Sequence of them");
    }
  }

  void split(const json& p, const std::string& key) {
    tok::PreTokenizerStep s;
    const json pat = p.value("pattern", json());
    bool literal = false;
    std::string pattern;
    if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()) {
      pattern = pat["Regex"].get<std::string>();
    } else if (pat.is_object() && pat.contains("String") && pat["String"].is_string()) {
      pattern = pat["String"].get<std::string>();
      literal = true;
    } else {
      return error(key + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    if (pattern.empty()) return error(key + ".pattern", "an empty pattern splits nothing sensibly; refused");
    std::string err;
    auto re = tok::Regex::compile(pattern, literal, &err);
    if (!re) return error(key + ".pattern", "the regex does not compile: " + err);
    s.regex = std::move(re);
    const std::string behavior = p.value("behavior", std::string("Isolated"));
    static const std::pair<const char*, tok::SplitBehavior> kBehaviors[] = {
        {"Removed", tok::SplitBehavior::Removed},
        {"Isolated", tok::SplitBehavior::Isolated},
        {"MergedWithPrevious", tok::SplitBehavior::MergedWithPrevious},
        {"MergedWithNext", tok::SplitBehavior::MergedWithNext},
        {"Contiguous", tok::SplitBehavior::Contiguous}};
    bool found = false;
    for (const auto& [name, b] : kBehaviors)
      if (behavior == name) {
        s.behavior = b;
        found = true;
      }
    if (!found)
      return unsupported(key + ".behavior", "split behavior " + text::quoted(behavior),
                         "Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
    s.invert = get_bool(p, "invert", false);
    t.pre.steps.push_back(std::move(s));
  }

  void post_processor(const json& p, const std::string& key) {
    if (p.is_null()) return;
    const std::string type = type_of(p);
    if (type == "ByteLevel") return;  // offsets only
    if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
      for (std::size_t i = 0; i < p["processors"].size(); ++i)
        post_processor(p["processors"][i], key + ".processors[" + std::to_string(i) + "]");
      return;
    }
    if (type != "TemplateProcessing")
      return unsupported(key + ".type", "post_processor " + text::quoted(type),
                         "ByteLevel, TemplateProcessing, Sequence of them, or null");
    PostTemplate tpl;
    const json single = p.value("single", json::array());
    const json specials = p.value("special_tokens", json::object());
    for (std::size_t i = 0; i < single.size(); ++i) {
      const json& piece = single[i];
      const std::string pk = key + ".single[" + std::to_string(i) + "]";
      if (piece.contains("Sequence")) {
        tpl.items.push_back(PostTemplate::kSequence);
      } else if (piece.contains("SpecialToken") && piece["SpecialToken"].contains("id")) {
        const std::string name = piece["SpecialToken"]["id"].get<std::string>();
        if (!specials.contains(name) || !specials[name].contains("ids") || !specials[name]["ids"].is_array()) {
          error(pk, "special token " + text::quoted(name) + " is not in special_tokens");
          continue;
        }
        for (const auto& id : specials[name]["ids"]) {
          if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= kMaxTokenIds) {
            error(pk, "special token " + text::quoted(name) + " has id " + text::excerpt(dump_json(id)) +
                          "; token ids go from 0 to " + std::to_string(kMaxTokenIds - 1));
            continue;
          }
          tpl.items.push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
        }
      } else {
        error(pk, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    t.post.push_back(std::move(tpl));
  }

  void added_tokens(const json& a) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      const json& j = a[i];
      const std::string key = "added_tokens[" + std::to_string(i) + "]";
      if (!j.is_object() || !j.contains("content") || !j["content"].is_string() || !j.contains("id") ||
          !j["id"].is_number_integer()) {
        error(key, "expected an object with \"id\" and \"content\"");
        continue;
      }
      AddedToken tk;
      tk.content = j["content"].get<std::string>();
      const std::int64_t id =
          j["id"].is_number_unsigned() && j["id"].get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxTokenIds)
              ? kMaxTokenIds
              : j["id"].get<std::int64_t>();
      if (id >= kMaxTokenIds) {
        error(key + ".id", text::quoted(tk.content) + " has id " + text::excerpt(dump_json(j["id"])) +
                               "; token ids go from 0 to " + std::to_string(kMaxTokenIds - 1));
        continue;
      }
      tk.id = static_cast<std::int32_t>(id);
      if (tk.content.empty() || tk.id < 0) continue;  // HF ignores empty tokens
      if (utf8::find_invalid(tk.content) != utf8::npos) {
        error(key + ".content", "is not valid UTF-8");
        continue;
      }
      tk.single_word = get_bool(j, "single_word", false);
      tk.lstrip = get_bool(j, "lstrip", false);
      tk.rstrip = get_bool(j, "rstrip", false);
      tk.special = get_bool(j, "special", false);
      tk.normalized = get_bool(j, "normalized", !tk.special);
      t.added.push_back(std::move(tk));
    }
  }
};

// tokenizer_config.json, special_tokens_map.json, chat_template.jinja: read only when they
// are regular files (a FIFO would block the load).
std::string read_file(const fs::path& p, bool* ok) {
  std::string out, why;
  *ok = read_regular_file(p.string(), std::uint64_t{64} << 20, &out, &why);
  return out;
}

std::string token_content(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return {};
}

}  // namespace

Result<TokenizerImpl> TokenizerImpl::parse(std::string_view json_text, const std::string& file) {
  Result<TokenizerImpl> r;
  TokenizerImpl& t = r.value;
  t.file = file;
  t.bpe.byte_id.fill(-1);
  json j;
  if (!parse_json(json_text, file, &j, &r.diagnostics)) return r;
  if (!j.is_object()) {
    r.diagnostics.push_back(error_at(file, "", "expected a JSON object (a tokenizer.json)"));
    return r;
  }
  Loader l{file, t, r.diagnostics};
  try {
    l.load(j);
  } catch (const json::exception& e) {  // a value of the wrong JSON type somewhere unchecked
    r.diagnostics.push_back(error_at(file, "", "unexpected value: " + text::excerpt(e.what())));
  }
  if (has_errors(r.diagnostics)) return r;
  for (AddedToken& a : t.added) {
    // HF keeps the model's id for an added token that is already in the vocabulary.
    if (const auto it = t.model_vocab.find(a.content); it != t.model_vocab.end() && it->second != a.id) {
      r.diagnostics.push_back(diagnostic_at(Severity::Warning, file, "added_tokens",
                                            text::quoted(a.content) + " has id " + std::to_string(a.id) +
                                                " but the vocabulary gives it " + std::to_string(it->second) +
                                                "; using the latter"));
      a.id = it->second;
    }
    a.pattern = a.normalized && t.nfc ? unicode::nfc(a.content) : a.content;
  }
  return r;
}

void TokenizerImpl::read_config(const std::string& dir, Diagnostics* diags) {
  const fs::path d(dir);
  bool ok = false;
  for (const char* name : {"special_tokens_map.json", "tokenizer_config.json"}) {  // the config wins
    const fs::path p = d / name;
    if (!fs::exists(p)) continue;
    const std::string text = read_file(p, &ok);
    json j;
    if (!ok || !parse_json(text, p.string(), &j, diags)) continue;
    if (!j.is_object()) continue;
    try {
      read_special_tokens(j, p.string());
    } catch (const json::exception& e) {
      diags->push_back(error_at(p.string(), "", "unexpected value: " + text::excerpt(e.what())));
    }
  }
  const fs::path jinja = d / "chat_template.jinja";  // transformers >= 4.43 saves it here
  if (fs::exists(jinja)) {
    chat_template = read_file(jinja, &ok);
    chat_template_file = jinja.string();
    tool_use_chat_template.clear();  // the file replaces tokenizer_config.json's templates
  }
  // A multimodal model's processor template: AutoProcessor reads chat_template.json
  // ({"chat_template": "..."}, the file Gemma-3 and Mistral-Small-3.1 ship beside their
  // tokenizer). Used only when the tokenizer has no template of its own, so a text run of such a
  // model renders its own turns (without it: refused for want of a template, or a Qwen or Llama
  // family's built-in turns).
  const fs::path processor = d / "chat_template.json";
  if (chat_template.empty() && fs::exists(processor)) {
    const std::string text = read_file(processor, &ok);
    json j;
    if (!ok) {
      diags->push_back(error_at(processor.string(), "", "cannot be read as a regular file"));
    } else if (parse_json(text, processor.string(), &j, diags)) {
      const auto ct = j.is_object() ? j.find("chat_template") : j.end();
      if (!j.is_object() || ct == j.end() || !ct->is_string())
        diags->push_back(error_at(processor.string(), "chat_template",
                                  "missing or not a string; a processor's chat_template.json holds "
                                  "{\"chat_template\": \"<the Jinja template>\"}"));
      else {
        chat_template = ct->get<std::string>();
        chat_template_file = processor.string();
      }
    }
  }
}

void TokenizerImpl::read_special_tokens(const nlohmann::json& j, const std::string& config_file) {
  for (const auto& [key, target] :
       {std::pair{"bos_token", &bos_token}, std::pair{"eos_token", &eos_token}, std::pair{"pad_token", &pad_token}})
    if (j.contains(key)) *target = token_content(j[key]);
  if (!j.contains("chat_template")) return;
  const json& ct = j["chat_template"];
  if (ct.is_string()) {
    chat_template = ct.get<std::string>();
  } else if (ct.is_array()) {   // named templates: "default", and "tool_use" for conversations with tools
    for (const json& e : ct) {  // each {"name": string, "template": string}; else "unexpected value"
      const std::string name = e.at("name").get<std::string>();
      if (name == "default") chat_template = e.at("template").get<std::string>();
      else if (name == "tool_use") tool_use_chat_template = e.at("template").get<std::string>();
    }
  }
  if (!chat_template.empty()) chat_template_file = config_file;
}

}  // namespace odyssey
