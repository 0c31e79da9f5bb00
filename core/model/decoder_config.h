// What the decoder model needs from config.json beyond HfModelConfig (config/model_config.h):
// the rotary embedding parameters, the bias layout of each family, the embedding's padding
// index and the features Odyssey refuses (sliding windows, other activations, other RoPE
// types). No LibTorch.
//
// RoPE parameters are read as transformers 5 writes them (`rope_parameters: {rope_type,
// rope_theta, factor, ...}`) and as 4.x checkpoints on the hub have them (top-level
// `rope_theta` plus `rope_scaling: {rope_type|type, factor, ...}`), the same precedence
// as PreTrainedConfig.standardize_rope_params in transformers 5.17.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/diagnostic.h"
#include "config/model_config.h"

namespace odyssey {

struct RopeParams {
  // default, linear, dynamic (NTK), yarn, longrope (Phi-3's "su" too), llama3: the formulas of
  // transformers 5.17's modeling_rope_utils.py.
  std::string type = "default";
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;  // RoPE rotates the first int(head_dim x this) channels (Phi-3)
  double factor = 1.0;                 // linear, dynamic, yarn, llama3, longrope
  // llama3 (_compute_llama3_parameters).
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 0;  // llama3, yarn, longrope
  std::int64_t max_position_embeddings = 0;           // dynamic: the length the base is scaled past
  // yarn.
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;
  // yarn, longrope: cos and sin are multiplied by it (computed as transformers does when absent).
  double attention_factor = 1.0;
  // longrope: per-frequency divisors, short up to original_max_position_embeddings, long past it.
  std::vector<double> short_factor, long_factor;
};

// 4-bit base weights (QLoRA, docs/qlora.md) in bitsandbytes' layout: which projections hold
// them and how. The decoder layers' projections are quantized; embeddings, norms and lm_head
// stay 16-bit, as transformers + bitsandbytes leave them, and so does every module that
// skip_modules names.
struct QuantSettings {
  int bits = 0;              // 0: 16-bit base weights; 4
  std::string type = "nf4";  // nf4 | fp4
  bool double_quant = true;  // the absmax values quantized again (8-bit, blocks of 256)
  std::int64_t blocksize = 64;
  std::string compute_dtype;              // bnb_4bit_compute_dtype as written ("" when not given)
  std::vector<std::string> skip_modules;  // llm_int8_skip_modules
  bool prequantized = false;              // the checkpoint holds 4-bit tensors (config.json's quantization_config)
  // Mixture-of-experts layers keep 16-bit experts: a pre-quantized checkpoint whose experts are
  // 16-bit (transformers 5 + bitsandbytes quantizes Linear modules only, and its experts are
  // stacked parameters), so the model computes what that checkpoint describes. Set by the
  // loader from the tensors; quantizing on load makes the experts 4-bit (docs/moe.md).
  bool experts_16bit = false;
  // Whether the module of this Hugging Face name ("model.layers.0.mlp.down_proj") is quantized:
  // bits is 4 and no skip_modules entry names it or a module containing it ("mlp",
  // "layers.0.mlp", "down_proj" or the full name; whole name components only).
  bool quantizes(const std::string& module_name) const;
};

// config.json's `quantization_config` (absent: bits 0). bitsandbytes 4-bit is read;
// 8-bit bitsandbytes and other methods (gptq, awq, fp8, ...) are errors naming the key.
Result<QuantSettings> parse_quantization_config(const std::string& json_text, const std::string& file);

struct DecoderConfig {
  HfModelConfig hf;
  QuantSettings quant;                   // the 4-bit base of this model (from config.json, or set by the loader)
  RopeParams rope;                       // every layer's, or the full-attention layers' when rope_local is set
  std::optional<RopeParams> rope_local;  // Gemma-3: sliding-window layers (rope_local_base_freq)

  std::optional<std::int64_t> pad_token_id;  // nn.Embedding's padding_idx (no gradient)
  double initializer_range = 0.02;
  std::string file;  // config.json it came from, for messages
};

// The RoPE kinds parse_decoder_config accepts, for messages.
const char* supported_rope_types();

// Parse config.json text (`file` names it in diagnostics). Errors name the key.
Result<DecoderConfig> parse_decoder_config(const std::string& json_text, const std::string& file);
Result<DecoderConfig> load_decoder_config(const std::string& model_dir);

}  // namespace odyssey
