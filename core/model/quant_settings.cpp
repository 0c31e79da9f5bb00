// config.json's quantization_config and which modules a 4-bit base quantizes
// (model/decoder_config.h). No LibTorch: `validate` reads it too.
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/decoder_config.h"
#include "model/quant_state.h"

namespace odyssey {

namespace {

using json = nlohmann::json;

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
    r.diagnostics.push_back(error_at(file, base, "must be an object (transformers' BitsAndBytesConfig.to_dict())"));
    return r;
  }
  const json& q = *it;
  const std::string method = q.value("quant_method", std::string("bitsandbytes"));
  if (method != "bitsandbytes") {
    r.diagnostics.push_back(error_at(file, base + ".quant_method",
                                     "'" + method +
                                         "': Odyssey reads bitsandbytes 4-bit checkpoints (NF4/FP4); load the "
                                         "16-bit model and set quant_bits: 4 to quantize it on load"));
    return r;
  }
  auto flag = [&](const char* key) {
    const auto f = q.find(key);
    return f != q.end() && f->is_boolean() && f->get<bool>();
  };
  if (flag("load_in_8bit")) {
    r.diagnostics.push_back(error_at(file, base + ".load_in_8bit",
                                     "8-bit bitsandbytes checkpoints are not supported; Odyssey trains 4-bit bases "
                                     "(load_in_4bit) or 16-bit ones"));
    return r;
  }
  if (!flag("load_in_4bit")) {
    r.diagnostics.push_back(
        error_at(file, base + ".load_in_4bit",
                 "neither load_in_4bit nor load_in_8bit is true; a bitsandbytes checkpoint sets one"));
    return r;
  }
  QuantSettings& s = r.value;
  s.bits = 4;
  s.prequantized = true;
  if (const auto t = q.find("bnb_4bit_quant_type"); t != q.end()) {
    if (!t->is_string() || (t->get<std::string>() != "nf4" && t->get<std::string>() != "fp4"))
      r.diagnostics.push_back(
          error_at(file, base + ".bnb_4bit_quant_type", "'" + t->dump() + "': expected \"nf4\" or \"fp4\""));
    else s.type = t->get<std::string>();
  } else {
    s.type = "fp4";  // BitsAndBytesConfig's default
  }
  s.double_quant = flag("bnb_4bit_use_double_quant");
  if (const auto d = q.find("bnb_4bit_compute_dtype"); d != q.end() && d->is_string())
    s.compute_dtype = d->get<std::string>();
  if (const auto m = q.find("llm_int8_skip_modules"); m != q.end() && !m->is_null()) {
    if (!m->is_array()) {
      r.diagnostics.push_back(error_at(file, base + ".llm_int8_skip_modules", "must be a list of module names"));
    } else {
      for (const auto& e : *m) {
        if (!e.is_string()) {
          r.diagnostics.push_back(
              error_at(file, base + ".llm_int8_skip_modules", "entry " + e.dump() + " is not a module name"));
          continue;
        }
        s.skip_modules.push_back(e.get<std::string>());
      }
    }
  }
  if (has_errors(r.diagnostics)) r.value = QuantSettings();
  return r;
}

std::int64_t QuantStateInfo::numel() const {
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  return n;
}

Result<QuantStateInfo> parse_quant_state(std::string_view bytes, const std::string& file, const std::string& tensor) {
  Result<QuantStateInfo> r;
  auto fail = [&](std::string msg) { r.diagnostics.push_back(error_at(file, tensor, std::move(msg))); };
  json j;
  try {
    j = json::parse(bytes);
  } catch (const std::exception& e) {
    fail(std::string("not JSON (bitsandbytes stores the quant state's JSON bytes here): ") + e.what());
    return r;
  }
  if (!j.is_object()) {
    fail("must hold a JSON object (quant_type, blocksize, dtype, shape, ...)");
    return r;
  }
  QuantStateInfo& q = r.value;
  const auto type = j.find("quant_type");
  if (type == j.end() || !type->is_string() || (*type != "nf4" && *type != "fp4")) {
    fail("quant_type " + (type == j.end() ? std::string("missing") : type->dump()) + ": expected \"nf4\" or \"fp4\"");
  } else {
    q.quant_type = type->get<std::string>();
    const std::string suffix = "bitsandbytes__" + q.quant_type;
    if (tensor.size() < suffix.size() || tensor.compare(tensor.size() - suffix.size(), suffix.size(), suffix) != 0)
      fail("says quant_type " + q.quant_type + " in a tensor whose name says otherwise");
  }
  const auto bs = j.find("blocksize");
  if (bs == j.end() || !bs->is_number_integer() || bs->get<std::int64_t>() < 32 || bs->get<std::int64_t>() > 4096 ||
      (bs->get<std::int64_t>() & (bs->get<std::int64_t>() - 1)) != 0)
    fail("blocksize " + (bs == j.end() ? std::string("missing") : bs->dump()) +
         ": bitsandbytes uses 32, 64, ..., 4096");
  else q.blocksize = bs->get<std::int64_t>();
  const auto shape = j.find("shape");
  bool shape_ok = shape != j.end() && shape->is_array() && !shape->empty() && shape->size() <= 4;
  double values = 1.0;
  if (shape_ok)
    for (const auto& v : *shape) {
      if (!v.is_number_integer() || v.get<std::int64_t>() <= 0) {
        shape_ok = false;
        break;
      }
      q.shape.push_back(v.get<std::int64_t>());
      values *= static_cast<double>(q.shape.back());
    }
  if (!shape_ok || values > 1099511627776.0) {
    q.shape.clear();
    fail("shape " + (shape == j.end() ? std::string("missing") : shape->dump()) +
         ": expected 1 to 4 positive sizes (at most 2^40 values)");
  }
  const auto dt = j.find("dtype");
  if (dt == j.end() || !dt->is_string() || (*dt != "float32" && *dt != "float16" && *dt != "bfloat16"))
    fail("dtype " + (dt == j.end() ? std::string("missing") : dt->dump()) + ": expected float32, float16 or bfloat16");
  else q.dtype = dt->get<std::string>();
  const bool has_nb = j.contains("nested_blocksize"), has_off = j.contains("nested_offset");
  if (has_nb || has_off) {
    q.nested = true;
    const auto nb = j.find("nested_blocksize");
    if (!has_nb || !nb->is_number_integer() || nb->get<std::int64_t>() <= 0 || nb->get<std::int64_t>() > (1 << 20))
      fail("nested_blocksize " + (has_nb ? nb->dump() : std::string("missing")) +
           ": a double-quantized weight needs a positive blocksize for its absmax values (bitsandbytes: 256)");
    else q.nested_blocksize = nb->get<std::int64_t>();
    const auto off = j.find("nested_offset");
    if (!has_off || !off->is_number() || !std::isfinite(off->get<double>()))
      fail("nested_offset " + (has_off ? off->dump() : std::string("missing")) +
           ": a double-quantized weight needs the finite mean its absmax values were centred on");
    else q.nested_offset = off->get<double>();
  }
  if (has_errors(r.diagnostics)) r.value = QuantStateInfo();
  return r;
}

}  // namespace odyssey
