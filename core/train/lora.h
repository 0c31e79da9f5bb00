// LoRA on a CausalLM, in PEFT's layout: adapters are sub-modules of the decoder's Linear
// (model/decoder.h), so named_parameters() gives PEFT's names without the
// "base_model.model." prefix and without the adapter name, e.g.
// "model.layers.0.self_attn.q_proj.lora_A.weight".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/diagnostic.h"
#include "model/decoder.h"

namespace odyssey::train {

// The module names LoRA can target and what "all-linear" expands to.
const std::vector<std::string>& lora_module_names();

struct LoraSettings {
  std::int64_t rank = 8;
  double alpha = 32.0;
  double dropout = 0.0;
  bool rslora = false;
  std::vector<std::string> target_modules;  // resolved: subset of lora_module_names()
  // An adapter whose adapter_config.json names module paths ("model.layers.0.self_attn.q_proj",
  // as PEFT writes all-linear's resolution): its entries as written, matched as PEFT matches
  // them (the name, or a name ending in "." + the entry). Empty: target_modules' names in every
  // layer.
  std::vector<std::string> target_paths;
  // PEFT's target_parameters: stacked MoE expert parameters ("mlp.experts.gate_up_proj",
  // "mlp.experts.down_proj", or any suffix of "model.layers.N.mlp.experts.<name>" as PEFT
  // matches them), each adapted per expert (model::ExpertLora; docs/moe.md). Adapter dropout
  // must be 0 with them (PEFT refuses it too).
  std::vector<std::string> target_parameters;
  // Whether the stacked parameter `name` ("model.layers.0.mlp.experts.down_proj") gets an adapter.
  bool targets_parameter(const std::string& name) const;
  // Whether the module `name` (leaf `leaf_name`, "q_proj") gets an adapter.
  bool targets(const std::string& name, const std::string& leaf_name) const;
  double scaling() const;
};

// target_modules as the user wrote them ("all-linear" or names) → resolved names, or an
// error naming the key, the bad entry and the accepted names.
Result<std::vector<std::string>> resolve_target_modules(const std::vector<std::string>& requested);

// Adds adapters to every targeted Linear of every layer, freezes every base parameter.
// Initialisation uses the default generator (seed it first). Returns the number of
// trainable parameters.
std::int64_t apply_lora(model::CausalLM& lm, const LoraSettings& s);

// Merges every adapter into its base weight and removes it (`export --merge`).
void merge_lora(model::CausalLM& lm);

// Removes every adapter without merging it: the base model again (switching adapters at
// inference, docs/inference.md).
void remove_lora(model::CausalLM& lm);

// A PEFT adapter directory on a loaded base, for inference: its adapter_config.json applied
// (apply_lora) and its weights loaded. Any adapter already there is removed first. Errors
// name the file and what does not match: a target module this model lacks, a tensor missing
// or of another shape (an adapter trained on another base). On errors no adapter is left.
Diagnostics attach_adapter(model::CausalLM& lm, const std::string& dir);

// Every adapter tensor of `lm` under the name PEFT saves it with, less "base_model.model."
// ("model.layers.0.self_attn.q_proj.lora_A.weight"; MoE experts:
// "model.layers.0.mlp.experts.base_layer.lora_A.weight" and the like), in a stable order.
std::vector<std::pair<std::string, torch::Tensor>> adapter_tensors(model::CausalLM& lm);

// PEFT files: adapter_config.json and adapter_model.safetensors with tensor names
// "base_model.model.<name>" (fp32). base_model_name_or_path is written as given.
Diagnostics save_adapter(model::CausalLM& lm, const LoraSettings& s, const std::string& base_model,
                         const std::string& dir);

// adapter_config.json of a PEFT adapter directory → settings (refuses what Odyssey cannot
// apply: DoRA, bias other than "none", modules_to_save, layers_to_transform, patterns).
Result<LoraSettings> read_adapter_config(const std::string& dir);

// Copies adapter weights from a PEFT adapter directory into `lm` (adapters already
// applied with matching settings). Every adapter tensor of the model must be in the file
// with its shape; extra tensors are errors too.
Diagnostics load_adapter_weights(model::CausalLM& lm, const std::string& dir);

}  // namespace odyssey::train
