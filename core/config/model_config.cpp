#include "config/model_config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <utility>

#include "common/json_dump.h"
#include "common/regular_file.h"
#include "common/text.h"

namespace odyssey {

// Defined in the generated embedded_data.cpp (resources/model-shapes/*.json).
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_model_shapes();

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct ArchInfo {
  std::string_view architecture, family;
};
constexpr ArchInfo kArchs[] = {
    {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},
    {"LlamaForCausalLM", "llama3"},
};

Diagnostic derr(const std::string& file, const std::string& key, std::string msg) {
  Diagnostic d;
  d.file = file;
  d.key = key;
  d.message = std::move(msg);
  return d;
}

// config.json, refs/main: small files, read only when regular (a FIFO would block).
constexpr std::uint64_t kMaxSmallFileBytes = 64 << 20;

std::string read_text(const fs::path& p, bool* ok, std::string* why = nullptr) {
  std::string out, w;
  *ok = read_regular_file(p.string(), kMaxSmallFileBytes, &out, &w);
  if (why) *why = w;
  return out;
}

}  // namespace

std::int64_t HfModelConfig::block_linear_parameters() const {
  const std::int64_t hd = head_dim;
  const std::int64_t q = hidden_size * num_attention_heads * hd;
  const std::int64_t kv = 2 * hidden_size * num_key_value_heads * hd;
  const std::int64_t o = num_attention_heads * hd * hidden_size;
  const std::int64_t mlp = 3 * hidden_size * intermediate_size;
  return q + kv + o + mlp;
}

std::int64_t HfModelConfig::parameter_count() const {
  const std::int64_t hd = head_dim;
  std::int64_t block = block_linear_parameters() + 2 * hidden_size;  // two RMSNorms
  if (attention_bias) block += (num_attention_heads + 2 * num_key_value_heads) * hd;
  if (qk_norm) block += 2 * hd;
  std::int64_t total = num_hidden_layers * block + vocab_size * hidden_size + hidden_size;
  if (!tie_word_embeddings) total += vocab_size * hidden_size;
  return total;
}

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> out;
    for (const auto& a : kArchs) out.emplace_back(a.architecture);
    return out;
  }();
  return v;
}

Result<HfModelConfig> parse_model_config(const std::string& json_text, const std::string& file) {
  Result<HfModelConfig> r;
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    r.diagnostics.push_back(derr(file, "", "invalid JSON: " + text::excerpt(e.what())));
    return r;
  }
  if (!j.is_object()) {
    r.diagnostics.push_back(derr(file, "", "expected a JSON object at the top level"));
    return r;
  }
  HfModelConfig& m = r.value;
  auto found = [](const json& v) { return "found " + text::excerpt(dump_json(v)); };
  auto get_int = [&](const char* key, std::int64_t* out, bool required, std::int64_t max) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (required) r.diagnostics.push_back(derr(file, key, "missing; expected a positive integer"));
      return;
    }
    if (!it->is_number_integer() || (it->is_number_unsigned() ? it->get<std::uint64_t>() == 0 : it->get<std::int64_t>() <= 0)) {
      r.diagnostics.push_back(derr(file, key, found(*it) + ", expected a positive integer"));
      return;
    }
    if (it->is_number_unsigned() ? it->get<std::uint64_t>() > static_cast<std::uint64_t>(max) : it->get<std::int64_t>() > max) {
      r.diagnostics.push_back(derr(file, key, found(*it) + ", more than the " + std::to_string(max) +
                                                  " Odyssey accepts (far beyond any released model; a config.json this "
                                                  "size describes no weights that a machine holds)"));
      return;
    }
    *out = it->get<std::int64_t>();
  };
  auto get_num = [&](const char* key, double* out) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_number()) {
      r.diagnostics.push_back(derr(file, key, found(*it) + ", expected a number"));
      return;
    }
    *out = it->get<double>();
  };
  auto get_bool = [&](const char* key, bool* out) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_boolean()) {
      r.diagnostics.push_back(derr(file, key, found(*it) + ", expected true or false"));
      return;
    }
    *out = it->get<bool>();
  };

  auto arch = j.find("architectures");
  if (arch != j.end() && arch->is_array() && !arch->empty() && (*arch)[0].is_string())
    m.architecture = (*arch)[0].get<std::string>();
  if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string()) m.model_type = mt->get<std::string>();
  for (const auto& a : kArchs)
    if (m.architecture == a.architecture) m.family = std::string(a.family);
  if (m.family.empty()) {
    r.diagnostics.push_back(derr(
        file, "architectures",
        "found " + (m.architecture.empty() ? std::string("none") : text::quoted(m.architecture)) +
            "; Odyssey trains " + text::join(supported_architectures(), ", ")));
    return r;
  }

  get_int("hidden_size", &m.hidden_size, true, kMaxHiddenSize);
  get_int("intermediate_size", &m.intermediate_size, true, kMaxIntermediateSize);
  get_int("num_hidden_layers", &m.num_hidden_layers, true, kMaxHiddenLayers);
  get_int("num_attention_heads", &m.num_attention_heads, true, kMaxAttentionHeads);
  get_int("vocab_size", &m.vocab_size, true, kMaxVocabSize);
  m.num_key_value_heads = 0;
  get_int("num_key_value_heads", &m.num_key_value_heads, false, kMaxAttentionHeads);
  get_int("head_dim", &m.head_dim, false, kMaxHeadDim);
  get_int("max_position_embeddings", &m.max_position_embeddings, false, kMaxPositionEmbeddings);
  get_num("rope_theta", &m.rope_theta);
  // transformers 5 writes rope settings into "rope_parameters" instead of the top level.
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object() && !j.contains("rope_theta")) {
    if (auto t = rp->find("rope_theta"); t != rp->end() && t->is_number()) m.rope_theta = t->get<double>();
  }
  get_num("rms_norm_eps", &m.rms_norm_eps);
  get_bool("tie_word_embeddings", &m.tie_word_embeddings);
  if (auto dt = j.find("torch_dtype"); dt != j.end() && dt->is_string()) m.torch_dtype = dt->get<std::string>();
  else if (auto dt2 = j.find("dtype"); dt2 != j.end() && dt2->is_string()) m.torch_dtype = dt2->get<std::string>();
  if (has_errors(r.diagnostics)) return r;

  if (m.num_key_value_heads == 0) m.num_key_value_heads = m.num_attention_heads;
  if (m.head_dim == 0) {
    if (m.hidden_size % m.num_attention_heads != 0) {
      r.diagnostics.push_back(derr(file, "hidden_size",
                                   std::to_string(m.hidden_size) + " is not divisible by num_attention_heads " +
                                       std::to_string(m.num_attention_heads) + " and head_dim is not given"));
      return r;
    }
    m.head_dim = m.hidden_size / m.num_attention_heads;
  }
  if (m.head_dim > kMaxHeadDim) {
    r.diagnostics.push_back(derr(file, "head_dim", std::to_string(m.head_dim) + " (hidden_size / num_attention_heads) is more than the " +
                                                       std::to_string(kMaxHeadDim) + " Odyssey accepts"));
    return r;
  }
  if (m.num_attention_heads % m.num_key_value_heads != 0) {
    r.diagnostics.push_back(derr(file, "num_key_value_heads",
                                 "num_attention_heads " + std::to_string(m.num_attention_heads) +
                                     " is not a multiple of num_key_value_heads " +
                                     std::to_string(m.num_key_value_heads)));
    return r;
  }
  m.attention_bias = m.family == "qwen2";
  get_bool("attention_bias", &m.attention_bias);
  m.qk_norm = m.family == "qwen3";
  return r;
}

Result<HfModelConfig> load_model_config(const std::string& model_dir) {
  const fs::path p = fs::path(model_dir) / "config.json";
  bool ok = false;
  std::string why;
  std::string t = read_text(p, &ok, &why);
  if (!ok) {
    Result<HfModelConfig> r;
    r.diagnostics.push_back(derr(p.string(), "", "cannot be read (" + why + "); a Hugging Face model directory holds config.json"));
    return r;
  }
  return parse_model_config(t, p.string());
}

}  // namespace odyssey
