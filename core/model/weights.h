// Loading and saving a CausalLM's parameters by Hugging Face tensor name (decoder.h lists
// them). The expected names and shapes are the module's own, built from config.json, so a
// checkpoint is checked against config.json as a whole before anything is copied: every
// tensor missing, every tensor the model has no use for and every shape that disagrees is
// reported, each naming its file and tensor (and both shapes). Tied models: a checkpoint
// may carry lm_head.weight too (some do); it must then have the embedding's shape and is
// not used. `*.rotary_emb.inv_freq` (old Llama checkpoints) is a recomputed buffer, skipped.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/diagnostic.h"
#include "model/decoder.h"
#include "model/safetensors.h"

namespace odyssey::model {

struct LoadedModel {
  CausalLM lm{nullptr};
  DecoderConfig config;
};

// The projections that hold a 4-bit weight (QLoRA, docs/qlora.md), by Hugging Face module name
// ("model.layers.3.mlp.down_proj"); before load_weights has filled them too.
std::map<std::string, LinearImpl*> quantized_linears(CausalLM& lm);
// The mixture-of-experts layers whose experts are 4-bit, by module name
// ("model.layers.3.mlp.experts"; docs/moe.md).
std::map<std::string, ExpertsImpl*> quantized_experts(CausalLM& lm);
// The name of the model's first 4-bit weight (a projection's or a stacked expert parameter),
// empty when the base is 16-bit.
std::string first_4bit_weight(CausalLM& lm);
// Every 4-bit weight of the model by parameter name ("….q_proj.weight", "….experts.down_proj"),
// as loaded (null entries before load_weights has filled them).
std::map<std::string, c10::intrusive_ptr<kernels::Quant4Weight>> quant4_weights(CausalLM& lm);

// Mixture-of-experts checkpoints store each expert's projections as separate tensors
// (Qwen-MoE: model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight; Mixtral:
// model.layers.N.block_sparse_moe.experts.E.w1/w3/w2.weight and block_sparse_moe.gate.weight),
// which transformers 5 stacks into mlp.experts.gate_up_proj / down_proj. One such tensor is
// rows row0 .. row0 + rows of expert `expert` of the stacked parameter `param` (expert -1: the
// whole parameter, renamed).
struct ExpertPiece {
  std::string param;
  std::int64_t expert = -1, row0 = 0, rows = 0;
  std::vector<std::int64_t> shape;  // the tensor's shape in the checkpoint
};
// The per-expert checkpoint names of this model, each with its piece. Empty for dense models.
std::map<std::string, ExpertPiece> expert_pieces(CausalLM& lm);
// The parameters under the names checkpoints ship: expert parameters split per expert
// (expert_pieces), the rest as named_parameters() (what transformers 5.17's save_pretrained
// writes).
NamedTensors hub_layout_tensors(CausalLM& lm);

// Copy every parameter of `lm` from `ckpt` (converted to the parameter's dtype and device;
// stacked expert parameters from either layout).
// `where` names the checkpoint in messages about tensors it lacks. Nothing is copied when
// there are errors.
Diagnostics load_weights(CausalLM& lm, const SafetensorsCheckpoint& ckpt, const std::string& where);

// config.json + weights of a model directory: the model built on options.device in
// options.dtype, all parameters loaded.
Result<LoadedModel> load_causal_lm(const std::string& model_dir, const DecoderOptions& options);

// Parameters under HF names (no lm_head.weight when tied), as save_pretrained writes them:
// model.safetensors, or shards of at most max_shard_bytes with an index. With
// copy_config, config.json of the model's source directory is copied beside them.
Result<std::vector<std::string>> save_weights(CausalLM& lm, const std::string& dir,
                                              std::uint64_t max_shard_bytes = 5'000'000'000, bool copy_config = true);

// The same as a bitsandbytes 4-bit checkpoint ("-bnb-4bit", docs/qlora.md): every decoder
// projection `quant` quantizes is written as bitsandbytes saves a Linear4bit (packed uint8
// weight, absmax, quant_map, the nested constants when double-quantized, the packed quant
// state), the rest as save_weights writes it; config.json is the source's with a
// quantization_config transformers reads (BitsAndBytesConfig: load_in_4bit, the type, double
// quantization, compute dtype = the model's dtype). The projections must hold 16-bit weights
// (a merged model); they are quantized one at a time.
Result<std::vector<std::string>> save_weights_4bit(CausalLM& lm, const std::string& dir, const QuantSettings& quant,
                                                   std::uint64_t max_shard_bytes = 5'000'000'000);

}  // namespace odyssey::model
