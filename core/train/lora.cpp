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
    for (const auto& [n, lin] : {std::pair<const char*, Linear>{"q_proj", at->q_proj},
                                 {"k_proj", at->k_proj},
                                 {"v_proj", at->v_proj},
                                 {"o_proj", at->o_proj},
                                 {"qkv_proj", at->qkv_proj}})
      if (lin) out.emplace_back(a + n, lin);
    // A MoE layer: the shared expert's projections (Qwen2-MoE) are Linear modules, as in PEFT;
    // the experts are stacked parameters and the router is not a Linear (transformers 5.17).
    const bool moe = !mlp;
    const model::Mlp& dense = moe ? layers[i]->moe->shared_expert : mlp;
    if (!dense) continue;
    const std::string d = moe ? m + "shared_expert." : m;
    for (const auto& [n, lin] : {std::pair<const char*, Linear>{"gate_proj", dense->gate_proj},
                                 {"up_proj", dense->up_proj},
                                 {"down_proj", dense->down_proj},
                                 {"gate_up_proj", dense->gate_up_proj}})
      if (lin) out.emplace_back(d + n, lin);
  }
  return out;
}

std::string leaf(const std::string& name) { return name.substr(name.rfind('.') + 1); }

// Every MoE layer's stacked experts by HF module name ("model.layers.3.mlp.experts").
std::vector<std::pair<std::string, model::Experts>> expert_modules(model::CausalLM& lm) {
  std::vector<std::pair<std::string, model::Experts>> out;
  const auto& layers = lm->model->layer_list;
  for (std::size_t i = 0; i < layers.size(); ++i)
    if (layers[i]->moe) out.emplace_back("model.layers." + std::to_string(i) + ".mlp.experts", layers[i]->moe->experts);
  return out;
}

// HfModelConfig::mlp_names_mean_experts: PEFT's reading of the MLP names on Qwen3-MoE, applied
// here so that an adapter means in PEFT what it means in Odyssey; the dense MLPs of such a model
// (mlp_only_layers) get no adapter by name.
bool mlp_names_mean_experts(const model::CausalLM& lm) { return lm->config().hf.mlp_names_mean_experts(); }

// PEFT's adapter tensor names of one experts module: with both parameters adapted the first
// one registered (gate_up_proj) is wrapped first and becomes the inner "base_layer"
// (BaseTuner._inject_parameters, PEFT 0.21); one adapted parameter: the module's own names.
std::vector<std::pair<std::string, model::ExpertLora>> expert_adapters(const std::string& module,
                                                                       const model::Experts& e) {
  std::vector<std::pair<std::string, model::ExpertLora>> out;
  if (e->gate_up_lora) out.emplace_back(module + (e->down_lora ? ".base_layer" : ""), e->gate_up_lora);
  if (e->down_lora) out.emplace_back(module, e->down_lora);
  return out;
}

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

bool LoraSettings::targets_parameter(const std::string& name) const {
  return std::any_of(target_parameters.begin(), target_parameters.end(), [&](const std::string& e) {
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
          error_at("", "target_modules", "'" + t + "' is not a module LoRA can target; expected one of: " + accepted));
    }
  }
  if (requested.empty())
    r.diagnostics.push_back(error_at("", "target_modules", "is empty; name at least one module (or all-linear)"));
  for (const auto& n : all)
    if (chosen.count(n)) r.value.push_back(n);
  return r;
}

std::int64_t apply_lora(model::CausalLM& lm, const LoraSettings& s) {
  for (auto& p : lm->parameters(true)) p.set_requires_grad(false);
  std::int64_t trainable = 0;
  const double scaling = s.scaling();
  const bool experts_by_name = mlp_names_mean_experts(lm);
  auto mlp_leaf = [](const std::string& l) { return l == "gate_proj" || l == "up_proj" || l == "down_proj"; };
  const HfModelConfig& hf = lm->config().hf;
  for (auto& [name, lin] : linears(lm)) {
    // Module paths match as PEFT sees the model (a multimodal wrapper: model.language_model.X).
    if (!s.targets(wrapper_module_path(hf, name), leaf(name))) continue;
    if (experts_by_name && mlp_leaf(leaf(name))) continue;  // PEFT reads these as the experts
    lin->add_lora(s.rank, scaling, s.dropout);
    trainable += lin->lora_A->weight.numel() + lin->lora_B->weight.numel();
  }
  auto named = [&](const std::string& module, const char* l) {
    return experts_by_name && s.targets(module + "." + l, l);
  };
  for (auto& [name, e] : expert_modules(lm))
    for (const char* param : {"gate_up_proj", "down_proj"}) {
      const bool gate_up = std::string(param) == "gate_up_proj";
      // By name (PEFT's conversion): gate_up_proj needs both gate_proj and up_proj, at twice the rank and alpha.
      const bool fused_by_name = gate_up && named(name, "gate_proj") && named(name, "up_proj");
      const bool by_name = gate_up ? fused_by_name : named(name, "down_proj");
      if (!by_name && !s.targets_parameter(name + "." + param)) continue;
      const std::int64_t rank = fused_by_name ? 2 * s.rank : s.rank;
      const double alpha = fused_by_name ? 2 * s.alpha : s.alpha;
      e->add_lora(param, rank,
                  s.rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / static_cast<double>(rank));
      const model::ExpertLora& l = std::string(param) == "gate_up_proj" ? e->gate_up_lora : e->down_lora;
      trainable += l->lora_A.numel() + l->lora_B.numel();
    }
  return trainable;
}

void merge_lora(model::CausalLM& lm) {
  for (auto& [name, lin] : linears(lm)) lin->merge_lora();
  for (auto& [name, e] : expert_modules(lm)) e->merge_lora();
}

void remove_lora(model::CausalLM& lm) {
  for (auto& [name, lin] : linears(lm)) {
    if (!lin->has_lora()) continue;
    lin->unregister_module("lora_A");
    lin->unregister_module("lora_B");
    lin->lora_A = nullptr;
    lin->lora_B = nullptr;
  }
  for (auto& [name, e] : expert_modules(lm)) e->remove_lora();
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
    return {error_at((fs::path(dir) / "adapter_config.json").string(), "target_modules",
                     "none of " + text::join(settings.value.target_modules, ", ") +
                         " is a module of this model (its linear modules: " + text::join(have, ", ") +
                         "): the adapter was trained on another base")};
  }
  Diagnostics d = load_adapter_weights(lm, dir);
  if (has_errors(d)) remove_lora(lm);
  return d;
}

std::vector<std::pair<std::string, torch::Tensor>> adapter_tensors(model::CausalLM& lm) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& [name, lin] : linears(lm)) {
    if (!lin->has_lora()) continue;
    out.emplace_back(name + ".lora_A.weight", lin->lora_A->weight);
    out.emplace_back(name + ".lora_B.weight", lin->lora_B->weight);
  }
  for (auto& [module, e] : expert_modules(lm))
    for (auto& [name, l] : expert_adapters(module, e)) {
      out.emplace_back(name + ".lora_A.weight", l->lora_A);
      out.emplace_back(name + ".lora_B.weight", l->lora_B);
    }
  return out;
}

Diagnostics save_adapter(model::CausalLM& lm, const LoraSettings& s, const std::string& base_model,
                         const std::string& dir) {
  Diagnostics d;
  NamedTensors tensors;
  const HfModelConfig& hf = lm->config().hf;
  for (auto& [name, t] : adapter_tensors(lm))
    tensors.emplace_back(kPrefix + wrapper_module_path(hf, name), t.detach().to(torch::kCPU, torch::kFloat32));
  std::set<std::string> expert_params;  // adapted, as target_parameters entries
  for (auto& [module, e] : expert_modules(lm)) {
    if (e->gate_up_lora) expert_params.insert("mlp.experts.gate_up_proj");
    if (e->down_lora) expert_params.insert("mlp.experts.down_proj");
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
  // A multimodal wrapper (Gemma-3 4B/12B/27B): the vision tower has q_proj, k_proj and v_proj
  // too, so the adapted modules are listed by path (PEFT matches a dotted entry exactly) and PEFT
  // adapts the language model only, as here.
  const bool by_path = !hf.wrapper_architecture.empty();
  std::vector<std::string> present;
  for (const auto& n : by_path ? std::vector<std::string>{} : s.target_modules)
    for (auto& [name, lin] : linears(lm))
      if (lin->has_lora() && leaf(name) == n) {
        present.push_back(n);
        break;
      }
  if (by_path)
    for (auto& [name, lin] : linears(lm))
      if (lin->has_lora()) present.push_back(wrapper_module_path(hf, name));
  // Qwen3-MoE: the MLP names that mean the experts (mlp_names_mean_experts) stay listed, so PEFT
  // gives gate_up_proj the same doubled rank.
  if (mlp_names_mean_experts(lm) && !expert_params.empty())
    for (const auto& n : s.target_modules)
      if ((n == "gate_proj" || n == "up_proj" || n == "down_proj") &&
          std::find(present.begin(), present.end(), n) == present.end())
        present.push_back(n);
  c["target_modules"] = present;
  if (!expert_params.empty())
    c["target_parameters"] = std::vector<std::string>(expert_params.begin(), expert_params.end());
  c["task_type"] = "CAUSAL_LM";
  c["use_dora"] = false;
  c["use_rslora"] = s.rslora;
  const std::string file = (fs::path(dir) / "adapter_config.json").string();
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << dump_json(c, 2) << "\n";
  out.flush();
  if (!out) d.push_back(error_at(file, "", "could not be written (disk full or not writable?)"));
  return d;
}

Result<LoraSettings> read_adapter_config(const std::string& dir) {
  Result<LoraSettings> r;
  const std::string file = (fs::path(dir) / "adapter_config.json").string();
  std::string text, why;
  if (!read_regular_file(file, std::uint64_t{16} << 20, &text, &why)) {
    r.diagnostics.push_back(
        error_at(file, "", "cannot be read (" + why + "); a PEFT adapter directory has adapter_config.json"));
    return r;
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    r.diagnostics.push_back(error_at(file, "", "is not a JSON object"));
    return r;
  }
  auto need = [&](const char* key, nlohmann::json::value_t t1, nlohmann::json::value_t t2) -> const nlohmann::json* {
    auto it = j.find(key);
    if (it == j.end() || (it->type() != t1 && it->type() != t2)) {
      r.diagnostics.push_back(error_at(file, key, "missing or of the wrong type"));
      return nullptr;
    }
    return &*it;
  };
  using V = nlohmann::json::value_t;
  if (auto* p = need("peft_type", V::string, V::string); p && *p != "LORA")
    r.diagnostics.push_back(
        error_at(file, "peft_type", "is " + p->get<std::string>() + "; only LORA adapters are supported"));
  if (auto* p = need("r", V::number_unsigned, V::number_integer)) r.value.rank = p->get<std::int64_t>();
  if (auto* p = need("lora_alpha", V::number_float, V::number_unsigned)) r.value.alpha = p->get<double>();
  if (auto it = j.find("lora_alpha"); it != j.end() && it->is_number_integer()) r.value.alpha = it->get<double>();
  if (auto it = j.find("lora_dropout"); it != j.end() && it->is_number()) r.value.dropout = it->get<double>();
  if (auto it = j.find("use_rslora"); it != j.end() && it->is_boolean()) r.value.rslora = it->get<bool>();
  if (auto it = j.find("use_dora"); it != j.end() && it->is_boolean() && it->get<bool>())
    r.diagnostics.push_back(error_at(file, "use_dora", "DoRA adapters are not supported"));
  if (auto it = j.find("bias"); it != j.end() && it->is_string() && *it != "none")
    r.diagnostics.push_back(error_at(file, "bias", "must be \"none\"; adapters that train biases are not supported"));
  for (const char* key : {"modules_to_save", "layers_to_transform"})
    if (auto it = j.find(key); it != j.end() && !it->is_null() && !(it->is_array() && it->empty()))
      r.diagnostics.push_back(error_at(file, key, "is set; Odyssey applies adapters to whole layers only"));
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (auto it = j.find(key); it != j.end() && it->is_object() && !it->empty())
      r.diagnostics.push_back(error_at(file, key, "per-module ranks or alphas are not supported"));
  // target_parameters (PEFT: LoRA on MoE experts' stacked parameters).
  if (auto it = j.find("target_parameters"); it != j.end() && !it->is_null()) {
    if (!it->is_array())
      r.diagnostics.push_back(error_at(file, "target_parameters", "expected a list of parameter names"));
    for (const auto& t : it->is_array() ? *it : nlohmann::json::array()) {
      const std::string name = t.is_string() ? t.get<std::string>() : std::string();
      if (name.ends_with("experts.gate_up_proj") || name.ends_with("experts.down_proj") || name == "gate_up_proj" ||
          name == "down_proj")
        r.value.target_parameters.push_back(name);
      else
        r.diagnostics.push_back(
            error_at(file, "target_parameters",
                     "'" + (t.is_string() ? name : dump_json(t)) +
                         "' is not a parameter Odyssey adapts; expected mlp.experts.gate_up_proj or "
                         "mlp.experts.down_proj (MoE experts)"));
    }
    if (!r.value.target_parameters.empty() && r.value.dropout > 0)
      r.diagnostics.push_back(error_at(file, "lora_dropout", "must be 0 with target_parameters (PEFT refuses it too)"));
  }
  std::vector<std::string> targets;
  bool targets_listed = true;
  if (auto it = j.find("target_modules"); it != j.end() && it->is_array()) {
    for (const auto& t : *it)
      if (t.is_string()) targets.push_back(t.get<std::string>());
  } else if (it != j.end() && it->is_string()) {
    targets.push_back(it->get<std::string>());
  } else if (r.value.target_parameters.empty()) {
    r.diagnostics.push_back(error_at(file, "target_modules", "missing; expected a list of module names"));
  } else {
    targets_listed = false;  // expert parameters only
  }
  if (targets_listed && !(targets.empty() && !r.value.target_parameters.empty())) {
    auto resolved = resolve_target_modules(targets);
    for (auto& dd : resolved.diagnostics) dd.file = file;
    r.diagnostics.insert(r.diagnostics.end(), resolved.diagnostics.begin(), resolved.diagnostics.end());
    r.value.target_modules = resolved.value;
  }
  if (std::any_of(targets.begin(), targets.end(),
                  [](const std::string& t) { return t.find('.') != std::string::npos; }))
    r.value.target_paths = targets;
  if (r.value.rank < 1) r.diagnostics.push_back(error_at(file, "r", "must be at least 1"));
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
  const HfModelConfig& hf = lm->config().hf;
  for (auto& [name, t] : adapter_tensors(lm)) targets.emplace_back(kPrefix + wrapper_module_path(hf, name), t);
  // A multimodal wrapper's adapter trained by PEFT on every q/k/v_proj also adapts the vision
  // tower, which a text-only model never runs: those tensors are left out, and said so once.
  if (!hf.wrapper_architecture.empty()) {
    std::int64_t vision = 0;
    for (auto it = unused.begin(); it != unused.end();)
      if (it->find(".vision_tower.") != std::string::npos || it->find(".multi_modal_projector.") != std::string::npos) {
        ++vision;
        it = unused.erase(it);
      } else {
        ++it;
      }
    if (vision > 0)
      d.push_back({Severity::Warning, file, 0, 0, "",
                   std::to_string(vision) + " adapter tensors of the vision tower are not used: Odyssey runs " +
                       hf.wrapper_architecture + "'s language model on text"});
  }
  for (auto& [name, t] : targets) {
    // PEFT also writes names with the adapter name ("...lora_A.default.weight") in some paths.
    std::string found = name;
    if (!unused.count(found)) {
      const std::string alt = name.substr(0, name.size() - 7) + ".default.weight";
      if (unused.count(alt)) found = alt;
    }
    if (!unused.count(found)) {
      d.push_back(error_at(file, name, "missing from the adapter (adapter_config.json targets this module)"));
      continue;
    }
    unused.erase(found);
    const auto* info = st.info(found);
    std::vector<std::int64_t> shape(info->shape.begin(), info->shape.end());
    if (shape != t.sizes().vec()) {
      std::ostringstream m;
      m << "has shape " << torch::IntArrayRef(shape) << ", the model expects " << t.sizes();
      d.push_back(error_at(file, found, m.str()));
    }
  }
  for (const auto& n : unused) d.push_back(error_at(file, n, "is not an adapter tensor of this model"));
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
