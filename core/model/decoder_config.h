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

#include "common/diagnostic.h"
#include "config/model_config.h"

namespace odyssey {

struct RopeParams {
  std::string type = "default";  // "default" or "llama3"
  double theta = 10000.0;
  // llama3 only (transformers' _compute_llama3_parameters).
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 0;
};

struct DecoderConfig {
  HfModelConfig hf;
  RopeParams rope;
  bool qkv_bias = false;  // Qwen2: always; Llama/Qwen3: attention_bias
  bool o_bias = false;    // Llama/Qwen3: attention_bias; Qwen2: never
  bool mlp_bias = false;  // Llama: mlp_bias
  std::optional<std::int64_t> pad_token_id;  // nn.Embedding's padding_idx (no gradient)
  double initializer_range = 0.02;
  std::string file;       // config.json it came from, for messages
};

// Parse config.json text (`file` names it in diagnostics). Errors name the key.
Result<DecoderConfig> parse_decoder_config(const std::string& json_text, const std::string& file);
Result<DecoderConfig> load_decoder_config(const std::string& model_dir);

}  // namespace odyssey
