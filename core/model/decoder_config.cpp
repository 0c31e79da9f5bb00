#include "model/decoder_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "common/json_dump.h"
#include "common/regular_file.h"
#include "common/text.h"

namespace odyssey {

namespace {

using nlohmann::json;

Diagnostic derr(const std::string& file, const std::string& key, std::string msg) {
  Diagnostic d;
  d.file = file;
  d.key = key;
  d.message = std::move(msg);
  return d;
}

// A number under `key` of `obj`; a diagnostic when present but not a number.
bool read_number(const json& obj, const char* key, const std::string& where, const std::string& file,
                 double* out, Diagnostics* diags) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return false;
  if (!it->is_number()) {
    diags->push_back(derr(file, where + key, "found " + text::excerpt(dump_json(*it)) + ", expected a number"));
    return false;
  }
  *out = it->get<double>();
  return true;
}

void parse_rope(const json& j, DecoderConfig* c, Diagnostics* diags) {
  const std::string& file = c->file;
  RopeParams& r = c->rope;
  // transformers 5 writes rope_parameters; 4.x wrote rope_scaling beside a top-level rope_theta.
  const json* p = nullptr;
  std::string where;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = j.find(key);
    if (it != j.end() && it->is_object()) {
      p = &*it;
      where = std::string(key) + ".";
      break;
    }
    if (it != j.end() && !it->is_null()) {
      diags->push_back(derr(file, key, "found " + text::excerpt(dump_json(*it)) + ", expected an object"));
      return;
    }
  }
  read_number(j, "rope_theta", "", file, &r.theta, diags);
  if (!p) return;
  read_number(*p, "rope_theta", where, file, &r.theta, diags);
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    auto it = p->find(key);
    if (it != p->end() && it->is_string()) {
      type = it->get<std::string>();
      break;
    }
  }
  if (auto it = p->find("partial_rotary_factor"); it != p->end() && it->is_number() && it->get<double>() != 1.0)
    diags->push_back(derr(file, where + "partial_rotary_factor",
                          "found " + text::excerpt(dump_json(*it)) + "; Odyssey's decoder rotates the whole head (1.0)"));
  if (type == "default") return;
  if (type != "llama3") {
    diags->push_back(derr(file, where + "rope_type",
                          "found " + text::quoted(type) + "; Odyssey implements \"default\" and \"llama3\""));
    return;
  }
  r.type = "llama3";
  const bool has_factor = read_number(*p, "factor", where, file, &r.factor, diags);
  const bool has_low = read_number(*p, "low_freq_factor", where, file, &r.low_freq_factor, diags);
  const bool has_high = read_number(*p, "high_freq_factor", where, file, &r.high_freq_factor, diags);
  for (auto [ok, key] : {std::pair{has_factor, "factor"}, std::pair{has_low, "low_freq_factor"},
                         std::pair{has_high, "high_freq_factor"}})
    if (!ok) diags->push_back(derr(file, where + key, "missing; rope_type llama3 needs it"));
  // As standardize_rope_params: a top-level original_max_position_embeddings wins, else the
  // one in the RoPE object, else max_position_embeddings.
  double omax = static_cast<double>(c->hf.max_position_embeddings);
  read_number(*p, "original_max_position_embeddings", where, file, &omax, diags);
  read_number(j, "original_max_position_embeddings", "", file, &omax, diags);
  r.original_max_position_embeddings = static_cast<std::int64_t>(omax);
  if (r.original_max_position_embeddings <= 0)
    diags->push_back(derr(file, where + "original_max_position_embeddings",
                          "missing or not positive; rope_type llama3 needs it"));
  if (has_low && has_high && r.high_freq_factor <= r.low_freq_factor)
    diags->push_back(derr(file, where + "high_freq_factor",
                          "must be greater than low_freq_factor (" + text::format_double(r.low_freq_factor) + ")"));
}

}  // namespace

Result<DecoderConfig> parse_decoder_config(const std::string& json_text, const std::string& file) {
  Result<DecoderConfig> r;
  Result<HfModelConfig> hf = parse_model_config(json_text, file);
  r.diagnostics = hf.diagnostics;
  if (!hf.ok()) return r;
  DecoderConfig& c = r.value;
  c.hf = hf.value;
  c.file = file;
  const json j = json::parse(json_text);  // parse_model_config has checked it parses

  auto flag = [&](const char* key, bool fallback) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) {
      r.diagnostics.push_back(derr(file, key, "found " + text::excerpt(dump_json(*it)) + ", expected true or false"));
      return fallback;
    }
    return it->get<bool>();
  };
  const std::string& fam = c.hf.family;
  if (fam == "qwen2") {
    c.qkv_bias = true;  // Qwen2Attention hard-codes bias=True on q/k/v, none on o_proj
  } else {
    c.qkv_bias = c.o_bias = flag("attention_bias", false);
  }
  if (fam == "llama3") c.mlp_bias = flag("mlp_bias", false);

  if (auto it = j.find("hidden_act"); it != j.end() && !(it->is_string() && it->get<std::string>() == "silu"))
    r.diagnostics.push_back(derr(file, "hidden_act", "found " + text::excerpt(dump_json(*it)) + "; Odyssey's MLP is SwiGLU (\"silu\")"));
  if (flag("use_sliding_window", false))
    r.diagnostics.push_back(derr(file, "use_sliding_window", "true; Odyssey's decoder attends to the full context"));
  if (auto it = j.find("layer_types"); it != j.end() && it->is_array())
    for (const auto& t : *it)
      if (!(t.is_string() && t.get<std::string>() == "full_attention")) {
        r.diagnostics.push_back(derr(file, "layer_types", "found " + text::excerpt(dump_json(t)) +
                                                              "; Odyssey supports \"full_attention\" layers only"));
        break;
      }
  if (auto it = j.find("pad_token_id"); it != j.end() && it->is_number_integer()) {
    const auto v = it->get<std::int64_t>();
    if (v >= 0 && v < c.hf.vocab_size) c.pad_token_id = v;
  }
  double init = c.initializer_range;
  if (auto it = j.find("initializer_range"); it != j.end() && it->is_number()) init = it->get<double>();
  c.initializer_range = init;
  parse_rope(j, &c, &r.diagnostics);
  return r;
}

Result<DecoderConfig> load_decoder_config(const std::string& model_dir) {
  const std::filesystem::path p = std::filesystem::path(model_dir) / "config.json";
  std::string text, why;
  if (!read_regular_file(p.string(), std::uint64_t{64} << 20, &text, &why)) {  // never blocks on a FIFO
    Result<DecoderConfig> r;
    r.diagnostics.push_back(derr(p.string(), "", "cannot be read (" + why + "); a Hugging Face model directory holds config.json"));
    return r;
  }
  return parse_decoder_config(text, p.string());
}

}  // namespace odyssey
