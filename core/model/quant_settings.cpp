// config.json's quantization_config and which modules a 4-bit base quantizes
// (model/decoder_config.h). No LibTorch: `validate` reads it too.
#include <nlohmann/json.hpp>

#include "model/decoder_config.h"

namespace odyssey {

namespace {

using json = nlohmann::json;

Diagnostic derr(const std::string& file, const std::string& key, std::string msg) {
  Diagnostic d;
  d.file = file;
  d.key = key;
  d.message = std::move(msg);
  return d;
}

}  // namespace

bool QuantSettings::quantizes(const std::string& name) const {
  if (bits != 4) return false;
  // An entry names the module or a module containing it, in whole name components:
  // "down_proj", "mlp.down_proj", "layers.3", "model.layers.3.mlp.down_proj".
  const std::string dotted = "." + name + ".";
  for (const std::string& e : skip_modules)
    if (!e.empty() && dotted.find("." + e + ".") != std::string::npos) return false;
  return true;
}

Result<QuantSettings> parse_quantization_config(const std::string& json_text, const std::string& file) {
  Result<QuantSettings> r;
  json j;
  try {
    j = json::parse(json_text);
  } catch (const std::exception&) {
    return r;  // parse_model_config reports it
  }
  const auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return r;
  const std::string base = "quantization_config";
  if (!it->is_object()) {
    r.diagnostics.push_back(derr(file, base, "must be an object (transformers' BitsAndBytesConfig.to_dict())"));
    return r;
  }
  const json& q = *it;
  const std::string method = q.value("quant_method", std::string("bitsandbytes"));
  if (method != "bitsandbytes") {
    r.diagnostics.push_back(derr(file, base + ".quant_method",
                                 "'" + method + "': Odyssey reads bitsandbytes 4-bit checkpoints (NF4/FP4); load the "
                                 "16-bit model and set quant_bits: 4 to quantize it on load"));
    return r;
  }
  auto flag = [&](const char* key) {
    const auto f = q.find(key);
    return f != q.end() && f->is_boolean() && f->get<bool>();
  };
  if (flag("load_in_8bit")) {
    r.diagnostics.push_back(derr(file, base + ".load_in_8bit",
                                 "8-bit bitsandbytes checkpoints are not supported; Odyssey trains 4-bit bases "
                                 "(load_in_4bit) or 16-bit ones"));
    return r;
  }
  if (!flag("load_in_4bit")) {
    r.diagnostics.push_back(derr(file, base + ".load_in_4bit",
                                 "neither load_in_4bit nor load_in_8bit is true; a bitsandbytes checkpoint sets one"));
    return r;
  }
  QuantSettings& s = r.value;
  s.bits = 4;
  s.prequantized = true;
  if (const auto t = q.find("bnb_4bit_quant_type"); t != q.end()) {
    if (!t->is_string() || (t->get<std::string>() != "nf4" && t->get<std::string>() != "fp4"))
      r.diagnostics.push_back(derr(file, base + ".bnb_4bit_quant_type", "'" + t->dump() + "': expected \"nf4\" or \"fp4\""));
    else
      s.type = t->get<std::string>();
  } else {
    s.type = "fp4";  // BitsAndBytesConfig's default
  }
  s.double_quant = flag("bnb_4bit_use_double_quant");
  if (const auto d = q.find("bnb_4bit_compute_dtype"); d != q.end() && d->is_string()) s.compute_dtype = d->get<std::string>();
  if (const auto m = q.find("llm_int8_skip_modules"); m != q.end() && !m->is_null()) {
    if (!m->is_array()) {
      r.diagnostics.push_back(derr(file, base + ".llm_int8_skip_modules", "must be a list of module names"));
    } else {
      for (const auto& e : *m) {
        if (!e.is_string()) {
          r.diagnostics.push_back(derr(file, base + ".llm_int8_skip_modules", "entry " + e.dump() + " is not a module name"));
          continue;
        }
        s.skip_modules.push_back(e.get<std::string>());
      }
    }
  }
  if (has_errors(r.diagnostics)) r.value = QuantSettings();
  return r;
}

}  // namespace odyssey
