#include "train/lora.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/json_dump.h"
#include "common/regular_file.h"
#include "common/text.h"
#include "model/safetensors.h"

namespace odyssey::train {
namespace {

namespace fs = std::filesystem;
using model::Linear;

constexpr const char* kPrefix = "base_model.model.";

Diagnostic error(const std::string& file, const std::string& key, std::string message) {
  Diagnostic d;
  d.file = file;
  d.key = key;
  d.message = std::move(message);
  return d;
}

// Every targetable Linear by HF module name ("model.layers.3.mlp.down_proj").
std::vector<std::pair<std::string, Linear>> linears(model::CausalLM& lm) {
  std::vector<std::pair<std::string, Linear>> out;
  const auto& layers = lm->model->layer_list;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string a = "model.layers." + std::to_string(i) + ".self_attn.";
    const std::string m = "model.layers." + std::to_string(i) + ".mlp.";
    const auto& at = layers[i]->self_attn;
    const auto& mlp = layers[i]->mlp;
    // Phi-3 has qkv_proj and gate_up_proj instead of q/k/v and gate/up (null here).
    for (const auto& [n, lin] : {std::pair<const char*, Linear>{"q_proj", at->q_proj}, {"k_proj", at->k_proj},
                                 {"v_proj", at->v_proj}, {"o_proj", at->o_proj}, {"qkv_proj", at->qkv_proj}})
      if (lin) out.emplace_back(a + n, lin);
    for (const auto& [n, lin] : {std::pair<const char*, Linear>{"gate_proj", mlp->gate_proj}, {"up_proj", mlp->up_proj},
                                 {"down_proj", mlp->down_proj}, {"gate_up_proj", mlp->gate_up_proj}})
      if (lin) out.emplace_back(m + n, lin);
  }
  return out;
}

std::string leaf(const std::string& name) { return name.substr(name.rfind('.') + 1); }

}  // namespace

const std::vector<std::string>& lora_module_names() {
  static const std::vector<std::string> names{"q_proj",  "k_proj",    "v_proj",   "o_proj",      "gate_proj",
                                              "up_proj", "down_proj", "qkv_proj", "gate_up_proj"};
  return names;
}

bool LoraSettings::targets(const std::string& name, const std::string& leaf_name) const {
  if (target_paths.empty())
    return std::find(target_modules.begin(), target_modules.end(), leaf_name) != target_modules.end();
  // PEFT's rule for a list: the module's name is an entry or ends with "." + the entry.
  return std::any_of(target_paths.begin(), target_paths.end(), [&](const std::string& e) {
    return name == e || (name.size() > e.size() && name.ends_with(e) && name[name.size() - e.size() - 1] == '.');
  });
}

double LoraSettings::scaling() const {
  return rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / static_cast<double>(rank);
}

Result<std::vector<std::string>> resolve_target_modules(const std::vector<std::string>& requested) {
  Result<std::vector<std::string>> r;
  const auto& all = lora_module_names();
  std::set<std::string> chosen;
  for (const auto& t : requested) {
    if (t == "all-linear" || t == "all_linear") {
      chosen.insert(all.begin(), all.end());
    } else if (std::find(all.begin(), all.end(), t) != all.end()) {
      chosen.insert(t);
    } else if (t.find('.') != std::string::npos && std::find(all.begin(), all.end(), leaf(t)) != all.end()) {
      chosen.insert(leaf(t));  // a module path ("model.layers.0.self_attn.q_proj"): target_paths
    } else {
      std::string accepted = "all-linear";
      for (const auto& n : all) accepted += ", " + n;
      r.diagnostics.push_back(
          error("", "target_modules", "'" + t + "' is not a module LoRA can target; expected one of: " + accepted));
    }
  }
  if (requested.empty())
    r.diagnostics.push_back(error("", "target_modules", "is empty; name at least one module (or all-linear)"));
  for (const auto& n : all)
    if (chosen.count(n)) r.value.push_back(n);
  return r;
}

std::int64_t apply_lora(model::CausalLM& lm, const LoraSettings& s) {
  for (auto& p : lm->parameters(true)) p.set_requires_grad(false);
  std::int64_t trainable = 0;
  const double scaling = s.scaling();
  for (auto& [name, lin] : linears(lm)) {
    if (!s.targets(name, leaf(name))) continue;
    lin->add_lora(s.rank, scaling, s.dropout);
    trainable += lin->lora_A->weight.numel() + lin->lora_B->weight.numel();
  }
  return trainable;
}

void merge_lora(model::CausalLM& lm) {
  for (auto& [name, lin] : linears(lm)) lin->merge_lora();
}

void remove_lora(model::CausalLM& lm) {
  for (auto& [name, lin] : linears(lm)) {
    if (!lin->has_lora()) continue;
    lin->unregister_module("lora_A");
    lin->unregister_module("lora_B");
    lin->lora_A = nullptr;
    lin->lora_B = nullptr;
  }
}

Diagnostics attach_adapter(model::CausalLM& lm, const std::string& dir) {
  remove_lora(lm);
  auto settings = read_adapter_config(dir);
  if (!settings.ok()) return settings.diagnostics;
  if (apply_lora(lm, settings.value) == 0) {
    std::vector<std::string> have;
    for (auto& [name, lin] : linears(lm)) have.push_back(leaf(name));
    std::sort(have.begin(), have.end());
    have.erase(std::unique(have.begin(), have.end()), have.end());
    return {error((fs::path(dir) / "adapter_config.json").string(), "target_modules",
                  "none of " + text::join(settings.value.target_modules, ", ") +
                      " is a module of this model (its linear modules: " + text::join(have, ", ") +
                      "): the adapter was trained on another base")};
  }
  Diagnostics d = load_adapter_weights(lm, dir);
  if (has_errors(d)) remove_lora(lm);
  return d;
}

Diagnostics save_adapter(model::CausalLM& lm, const LoraSettings& s, const std::string& base_model,
                         const std::string& dir) {
  Diagnostics d;
  NamedTensors tensors;
  for (auto& [name, lin] : linears(lm)) {
    if (!lin->has_lora()) continue;
    tensors.emplace_back(kPrefix + name + ".lora_A.weight", lin->lora_A->weight.detach().to(torch::kCPU, torch::kFloat32));
    tensors.emplace_back(kPrefix + name + ".lora_B.weight", lin->lora_B->weight.detach().to(torch::kCPU, torch::kFloat32));
  }
  const std::string weights = (fs::path(dir) / "adapter_model.safetensors").string();
  auto saved = save_safetensors(weights, tensors, {{"format", "pt"}});
  if (!saved.ok()) return saved.diagnostics;
  nlohmann::ordered_json c;
  c["base_model_name_or_path"] = base_model;
  c["bias"] = "none";
  c["fan_in_fan_out"] = false;
  c["inference_mode"] = true;
  c["init_lora_weights"] = true;
  c["lora_alpha"] = s.alpha;
  c["lora_dropout"] = s.dropout;
  c["modules_to_save"] = nullptr;
  c["peft_type"] = "LORA";
  c["r"] = s.rank;
  // The modules of this model that have adapters (all-linear on Phi-3: qkv_proj, o_proj,
  // gate_up_proj, down_proj), so PEFT finds every listed name.
  std::vector<std::string> present;
  for (const auto& n : s.target_modules)
    for (auto& [name, lin] : linears(lm))
      if (lin->has_lora() && leaf(name) == n) {
        present.push_back(n);
        break;
      }
  c["target_modules"] = present;
  c["task_type"] = "CAUSAL_LM";
  c["use_dora"] = false;
  c["use_rslora"] = s.rslora;
  const std::string file = (fs::path(dir) / "adapter_config.json").string();
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << dump_json(c, 2) << "\n";
  out.flush();
  if (!out) d.push_back(error(file, "", "could not be written (disk full or not writable?)"));
  return d;
}

Result<LoraSettings> read_adapter_config(const std::string& dir) {
  Result<LoraSettings> r;
  const std::string file = (fs::path(dir) / "adapter_config.json").string();
  std::string text, why;
  if (!read_regular_file(file, std::uint64_t{16} << 20, &text, &why)) {
    r.diagnostics.push_back(error(file, "", "cannot be read (" + why + "); a PEFT adapter directory has adapter_config.json"));
    return r;
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    r.diagnostics.push_back(error(file, "", "is not a JSON object"));
    return r;
  }
  auto need = [&](const char* key, nlohmann::json::value_t t1, nlohmann::json::value_t t2) -> const nlohmann::json* {
    auto it = j.find(key);
    if (it == j.end() || (it->type() != t1 && it->type() != t2)) {
      r.diagnostics.push_back(error(file, key, "missing or of the wrong type"));
      return nullptr;
    }
    return &*it;
  };
  using V = nlohmann::json::value_t;
  if (auto* p = need("peft_type", V::string, V::string); p && *p != "LORA")
    r.diagnostics.push_back(error(file, "peft_type", "is " + p->get<std::string>() + "; only LORA adapters are supported"));
  if (auto* p = need("r", V::number_unsigned, V::number_integer)) r.value.rank = p->get<std::int64_t>();
  if (auto* p = need("lora_alpha", V::number_float, V::number_unsigned)) r.value.alpha = p->get<double>();
  if (auto it = j.find("lora_alpha"); it != j.end() && it->is_number_integer()) r.value.alpha = it->get<double>();
  if (auto it = j.find("lora_dropout"); it != j.end() && it->is_number()) r.value.dropout = it->get<double>();
  if (auto it = j.find("use_rslora"); it != j.end() && it->is_boolean()) r.value.rslora = it->get<bool>();
  if (auto it = j.find("use_dora"); it != j.end() && it->is_boolean() && it->get<bool>())
    r.diagnostics.push_back(error(file, "use_dora", "DoRA adapters are not supported"));
  if (auto it = j.find("bias"); it != j.end() && it->is_string() && *it != "none")
    r.diagnostics.push_back(error(file, "bias", "must be \"none\"; adapters that train biases are not supported"));
  for (const char* key : {"modules_to_save", "layers_to_transform"})
    if (auto it = j.find(key); it != j.end() && !it->is_null() && !(it->is_array() && it->empty()))
      r.diagnostics.push_back(error(file, key, "is set; Odyssey applies adapters to whole layers only"));
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (auto it = j.find(key); it != j.end() && it->is_object() && !it->empty())
      r.diagnostics.push_back(error(file, key, "per-module ranks or alphas are not supported"));
  std::vector<std::string> targets;
  if (auto it = j.find("target_modules"); it != j.end() && it->is_array()) {
    for (const auto& t : *it)
      if (t.is_string()) targets.push_back(t.get<std::string>());
  } else if (it != j.end() && it->is_string()) {
    targets.push_back(it->get<std::string>());
  } else {
    r.diagnostics.push_back(error(file, "target_modules", "missing; expected a list of module names"));
  }
  auto resolved = resolve_target_modules(targets);
  for (auto& dd : resolved.diagnostics) dd.file = file;
  r.diagnostics.insert(r.diagnostics.end(), resolved.diagnostics.begin(), resolved.diagnostics.end());
  r.value.target_modules = resolved.value;
  if (std::any_of(targets.begin(), targets.end(), [](const std::string& t) { return t.find('.') != std::string::npos; }))
    r.value.target_paths = targets;
  if (r.value.rank < 1) r.diagnostics.push_back(error(file, "r", "must be at least 1"));
  return r;
}

Diagnostics load_adapter_weights(model::CausalLM& lm, const std::string& dir) {
  Diagnostics d;
  const std::string file = (fs::path(dir) / "adapter_model.safetensors").string();
  auto opened = SafetensorsFile::open(file);
  if (!opened.ok()) return opened.diagnostics;
  const auto& st = *opened.value;
  std::set<std::string> unused;
  for (const auto& n : st.names()) unused.insert(n);
  std::vector<std::pair<std::string, torch::Tensor>> targets;
  for (auto& [name, lin] : linears(lm)) {
    if (!lin->has_lora()) continue;
    targets.emplace_back(kPrefix + name + ".lora_A.weight", lin->lora_A->weight);
    targets.emplace_back(kPrefix + name + ".lora_B.weight", lin->lora_B->weight);
  }
  for (auto& [name, t] : targets) {
    // PEFT also writes names with the adapter name ("...lora_A.default.weight") in some paths.
    std::string found = name;
    if (!unused.count(found)) {
      const std::string alt = name.substr(0, name.size() - 7) + ".default.weight";
      if (unused.count(alt)) found = alt;
    }
    if (!unused.count(found)) {
      d.push_back(error(file, name, "missing from the adapter (adapter_config.json targets this module)"));
      continue;
    }
    unused.erase(found);
    const auto* info = st.info(found);
    std::vector<std::int64_t> shape(info->shape.begin(), info->shape.end());
    if (shape != t.sizes().vec()) {
      std::ostringstream m;
      m << "has shape " << torch::IntArrayRef(shape) << ", the model expects " << t.sizes();
      d.push_back(error(file, found, m.str()));
    }
  }
  for (const auto& n : unused) d.push_back(error(file, n, "is not an adapter tensor of this model"));
  if (has_errors(d)) return d;
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : targets) {
    std::string found = st.info(name) ? name : name.substr(0, name.size() - 7) + ".default.weight";
    auto dd = st.load_into(found, t);
    d.insert(d.end(), dd.begin(), dd.end());
  }
  return d;
}

}  // namespace odyssey::train
