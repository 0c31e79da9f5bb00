#include "model/weights_check.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "common/text.h"

namespace odyssey {

namespace {

struct Found {
  const SafetensorsTensorInfo* info = nullptr;
  std::string file;
  std::string name;  // as stored
};

class Checker {
 public:
  Checker(std::string config_file, const std::vector<std::pair<std::string, const SafetensorsHeader*>>& headers,
          const HfModelConfig& m)
      : config_(std::move(config_file)), headers_(headers), m_(m) {}

  // `name` as the text model names it; a multimodal wrapper stores it under its own name
  // (language_model.model.X, language_model.lm_head.weight), or under transformers 5's
  // (model.language_model.X, and the head at the top: lm_head.weight), as text_model_name reads them.
  Found find(std::string_view name) const {
    std::vector<std::string> names{std::string(name)};
    if (!m_.wrapper_architecture.empty()) {
      names = {wrapper_tensor_name(m_, std::string(name))};
      if (name.starts_with("model.")) names.push_back("model.language_model." + std::string(name.substr(6)));
      else names.emplace_back(name);
    }
    for (const std::string& n : names)
      for (const auto& [file, h] : headers_)
        if (const auto* t = h->find(n)) return {t, file, n};
    return {};
  }

  // The number of blocks: one more than the highest N of a "model.layers.N." tensor.
  std::optional<std::pair<std::int64_t, std::string>> layers_in_weights() const {
    std::int64_t top = -1;
    std::string where;
    static constexpr std::string_view kPrefix = "model.layers.";
    for (const auto& [file, h] : headers_)
      for (const auto& t : h->tensors) {
        const std::string name = text_model_name(m_, t.name);
        if (name.compare(0, kPrefix.size(), kPrefix) != 0) continue;
        const std::string_view rest = std::string_view(name).substr(kPrefix.size());
        const auto dot = rest.find('.');
        const auto n = text::parse_int(rest.substr(0, dot));
        if (n && *n >= 0 && *n > top) top = *n, where = file;
      }
    if (top < 0) return std::nullopt;
    return std::pair{top + 1, where};
  }

  void error(const std::string& key, std::string msg) {
    Diagnostic d;
    d.file = config_;
    d.key = m_.wrapper_architecture.empty() ? key : "text_config." + key;  // where a wrapper keeps it
    d.message = std::move(msg);
    out.push_back(std::move(d));
  }

  // `key` (found `value`) against dimension `dim` of tensor `name`, when the tensor exists.
  void dim(const std::string& key, std::int64_t value, std::string_view name, std::size_t dim_index,
           const std::string& what) {
    const Found f = find(name);
    // A 4-bit tensor (bitsandbytes packs two codes per byte, [numel / 2, 1]) carries its shape
    // in its quant_state; the loader checks that one (weights.cpp).
    if (!f.info || f.info->shape.size() <= dim_index || f.info->dtype == SafetensorsDtype::U8) return;
    const std::int64_t have = f.info->shape[dim_index];
    if (have == value) return;
    error(key, "found " + std::to_string(value) + what + ", but the weights say " + std::to_string(have) + ": " +
                   f.name + " has shape " + shape_string(f.info->shape) + " in " + f.file +
                   " (config.json must describe the weights it sits beside)");
  }

  Diagnostics out;

 private:
  std::string config_;
  const std::vector<std::pair<std::string, const SafetensorsHeader*>>& headers_;
  const HfModelConfig& m_;
};

}  // namespace

Diagnostics check_config_against_weights(const HfModelConfig& m, const std::string& config_file,
                                         const std::vector<std::pair<std::string, const SafetensorsHeader*>>& headers) {
  Checker ck(config_file, headers, m);
  ck.dim("vocab_size", m.vocab_size, "model.embed_tokens.weight", 0, "");
  ck.dim("hidden_size", m.hidden_size, "model.embed_tokens.weight", 1, "");
  ck.dim("vocab_size", m.vocab_size, "lm_head.weight", 0, "");
  if (const auto layers = ck.layers_in_weights(); layers && layers->first != m.num_hidden_layers)
    ck.error("num_hidden_layers", "found " + std::to_string(m.num_hidden_layers) + ", but the weights hold " +
                                      std::to_string(layers->first) + " layers (model.layers.0 to model.layers." +
                                      std::to_string(layers->first - 1) + ", in " + layers->second + ")");
  const std::int64_t hd = m.head_dim;
  ck.dim("num_attention_heads", m.num_attention_heads * hd, "model.layers.0.self_attn.q_proj.weight", 0,
         " heads x head_dim " + std::to_string(hd) + " = " + std::to_string(m.num_attention_heads * hd) + " rows");
  ck.dim("num_key_value_heads", m.num_key_value_heads * hd, "model.layers.0.self_attn.k_proj.weight", 0,
         " KV heads x head_dim " + std::to_string(hd) + " = " + std::to_string(m.num_key_value_heads * hd) + " rows");
  ck.dim("hidden_size", m.hidden_size, "model.layers.0.self_attn.q_proj.weight", 1, "");
  ck.dim("intermediate_size", m.intermediate_size, "model.layers.0.mlp.gate_proj.weight", 0, "");
  if (m.fused_qkv) {  // Phi-3: [q | k | v] in one tensor
    const std::int64_t rows = (m.num_attention_heads + 2 * m.num_key_value_heads) * hd;
    ck.dim("num_key_value_heads", rows, "model.layers.0.self_attn.qkv_proj.weight", 0,
           " (heads + 2 x KV heads) x head_dim " + std::to_string(hd) + " = " + std::to_string(rows) + " rows");
    ck.dim("hidden_size", m.hidden_size, "model.layers.0.self_attn.qkv_proj.weight", 1, "");
  }
  if (m.fused_gate_up)  // Phi-3, GLM-4: [gate | up] in one tensor
    ck.dim("intermediate_size", 2 * m.intermediate_size, "model.layers.0.mlp.gate_up_proj.weight", 0,
           " x 2 (gate and up) rows");
  // Mixture of experts: the first MoE layer's router gives the expert count, its first expert
  // the expert width (Qwen/Mixtral per-expert tensors, or transformers 5's stacked ones).
  for (std::int64_t l = 0; l < m.num_hidden_layers && m.is_moe(); ++l) {
    if (!m.moe_layer(l)) continue;
    const ModelFamily& f = m.family_row();
    const std::string& count_key = m.num_experts_key;
    const std::string width_key(f.expert_width_key());
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
    const std::string hub = "model.layers." + std::to_string(l) + "." + std::string(f.moe_module()) + ".";
    for (const std::string& router : {p + "gate.weight", hub + "gate.weight"}) {
      ck.dim(count_key, m.num_experts, router, 0, " experts (the router's rows)");
      ck.dim("hidden_size", m.hidden_size, router, 1, "");
    }
    ck.dim(width_key, m.moe_intermediate_size, hub + "experts.0." + std::string(f.expert_gate()) + ".weight", 0, "");
    ck.dim(count_key, m.num_experts, p + "experts.gate_up_proj", 0, " experts");
    ck.dim(width_key, 2 * m.moe_intermediate_size, p + "experts.gate_up_proj", 1, " x 2 (gate and up) rows");
    if (m.shared_expert_intermediate_size > 0)
      ck.dim("shared_expert_intermediate_size", m.shared_expert_intermediate_size, p + "shared_expert.gate_proj.weight",
             0, "");
    break;
  }
  // One message per key is enough: the first disagreement says what is wrong.
  Diagnostics unique;
  for (auto& d : ck.out)
    if (std::none_of(unique.begin(), unique.end(), [&](const Diagnostic& u) { return u.key == d.key; }))
      unique.push_back(std::move(d));
  return unique;
}

Diagnostics check_model_weights(const HfModelConfig& m, const std::string& config_file, const std::string& model_dir) {
  Result<SafetensorsFiles> files = find_safetensors_files(model_dir);
  if (!files.ok()) return files.diagnostics;
  Diagnostics out = files.diagnostics;
  std::vector<Result<SafetensorsHeader>> read;
  read.reserve(files.value.files.size());
  for (const auto& f : files.value.files) {
    read.push_back(read_safetensors_header(f));
    out.insert(out.end(), read.back().diagnostics.begin(), read.back().diagnostics.end());
  }
  if (has_errors(out)) return out;
  std::vector<std::pair<std::string, const SafetensorsHeader*>> headers;
  for (std::size_t i = 0; i < read.size(); ++i) headers.emplace_back(files.value.files[i], &read[i].value);
  Diagnostics d = check_config_against_weights(m, config_file, headers);
  out.insert(out.end(), d.begin(), d.end());
  return out;
}

}  // namespace odyssey
