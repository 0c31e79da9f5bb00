#include "config/model_family.h"

namespace odyssey {

namespace {

// The defaults are transformers 5.17's config classes (Qwen2Config, Gemma2Config, ...) and
// modeling files; each row's comment names what differs from the Llama block.
std::vector<ModelFamily> make_families() {
  std::vector<ModelFamily> v;
  ModelFamily f;

  f = {};  // Qwen2 / Qwen2.5: q/k/v bias hard-coded in Qwen2Attention
  f.architecture = "Qwen2ForCausalLM", f.model_type = "qwen2", f.id = "qwen2";
  f.attention_bias = AttentionBias::QkvAlways;
  f.builtin_template = "qwen2_5";
  v.push_back(f);

  f = {};  // Qwen3: q/k RMSNorm, head_dim 128 whatever the width
  f.architecture = "Qwen3ForCausalLM", f.model_type = "qwen3", f.id = "qwen3";
  f.qk_norm = true, f.head_dim = 128;
  f.builtin_template = "qwen3";
  v.push_back(f);

  f = {};  // Llama-2/3, SmolLM: the reference block (attention_bias, mlp_bias)
  f.architecture = "LlamaForCausalLM", f.model_type = "llama", f.id = "llama3";
  f.mlp_bias_key = true;
  f.builtin_template = "llama3_1";
  v.push_back(f);

  f = {};  // SmolLM3: the Llama block with every fourth layer unrotated (NoPE), tied embeddings
  f.architecture = "SmolLM3ForCausalLM", f.model_type = "smollm3", f.id = "smollm3";
  f.mlp_bias_key = true, f.tie_word_embeddings = true;
  f.rope_theta = 2'000'000.0;  // SmolLM3Config.default_theta
  f.nope_layers = true, f.no_rope_layer_interval = 4;
  v.push_back(f);

  f = {};  // Mistral: no bias keys, a 4096-token sliding window by default (layer_types: Ministral's reading)
  f.architecture = "MistralForCausalLM", f.model_type = "mistral", f.id = "mistral";
  f.attention_bias = AttentionBias::None;
  f.sliding = true, f.sliding_window = 4096, f.layer_types_slide = true;
  v.push_back(f);

  f = {};  // Ministral (8B-2410): Mistral's block with the window on the layers layer_types marks
  f.architecture = "MinistralForCausalLM", f.model_type = "ministral", f.id = "ministral";
  f.attention_bias = AttentionBias::None;
  f.sliding = true, f.sliding_window = 4096, f.layer_types_slide = true;
  v.push_back(f);

  f = {};  // Granite: scaling multipliers
  f.architecture = "GraniteForCausalLM", f.model_type = "granite", f.id = "granite";
  f.mlp_bias_key = true;
  f.granite_multipliers = true;
  v.push_back(f);

  f = {};  // Gemma-2: the Gemma block, soft-capping, every other layer sliding from the first
  f.architecture = "Gemma2ForCausalLM", f.model_type = "gemma2", f.id = "gemma2";
  f.gemma_block = true, f.activation = "gelu_pytorch_tanh", f.tie_word_embeddings = true, f.head_dim = 256;
  f.sliding = true, f.sliding_window = 4096, f.sliding_period = 2, f.layer_types_slide = true;
  f.attn_logit_softcapping = 50, f.final_logit_softcapping = 30;
  v.push_back(f);

  f = {};  // Gemma-3 (text): the Gemma block, q/k norm, five of six layers sliding with their own RoPE base
  f.architecture = "Gemma3ForCausalLM", f.model_type = "gemma3_text", f.id = "gemma3";
  f.gemma_block = true, f.activation = "gelu_pytorch_tanh", f.tie_word_embeddings = true, f.head_dim = 256;
  f.qk_norm = true;
  f.rope_theta = 1'000'000.0, f.local_rope = true;  // Gemma3TextConfig.default_theta; rope_local_base_freq
  f.sliding = true, f.sliding_window = 4096, f.sliding_period = 6, f.sliding_period_key = "sliding_window_pattern";
  f.layer_types_slide = true;
  v.push_back(f);

  f = {};  // Phi-3 / Phi-3.5 / Phi-4-mini: fused projections, partial rotary, no bias keys
  f.architecture = "Phi3ForCausalLM", f.model_type = "phi3", f.id = "phi3";
  f.attention_bias = AttentionBias::None;
  f.fused_projections = true, f.partial_rotary = true;
  f.rms_norm_eps = 1e-5;
  f.sliding = true;  // sliding_window: none unless config.json sets one
  v.push_back(f);

  f = {};  // GLM-4 (0414): the GLM block, q/k/v bias by default, half of each head rotated in pairs
  f.architecture = "Glm4ForCausalLM", f.model_type = "glm4", f.id = "glm4";
  f.attention_bias = AttentionBias::QkvFromAttentionBias;
  f.glm_block = true, f.partial_rotary = true, f.partial_rotary_factor = 0.5;
  f.rms_norm_eps = 1.5625e-07, f.head_dim = 128;
  v.push_back(f);

  f = {};  // OLMo-2: the OLMo block (post-norms only, q/k norm over the whole projection)
  f.architecture = "Olmo2ForCausalLM", f.model_type = "olmo2", f.id = "olmo2";
  f.olmo_block = true, f.qk_norm = true;
  f.rms_norm_eps = 1e-5;
  v.push_back(f);

  f = {};  // OLMo-3: OLMo-2's block, three of four layers sliding (4096) with their own RoPE
  f.architecture = "Olmo3ForCausalLM", f.model_type = "olmo3", f.id = "olmo3";
  f.olmo_block = true, f.qk_norm = true;
  f.rms_norm_eps = 1e-5;
  f.rope_theta = 500'000.0, f.local_rope = true, f.local_rope_theta = 500'000.0, f.local_rope_theta_key = "";
  f.sliding = true, f.sliding_window = 4096, f.sliding_period = 4, f.layer_types_slide = true;
  v.push_back(f);

  f = {};  // Qwen3-MoE: Qwen3's attention, 128 experts of 768, top 8
  f.architecture = "Qwen3MoeForCausalLM", f.model_type = "qwen3_moe", f.id = "qwen3_moe";
  f.qk_norm = true;
  f.moe = MoeKind::Qwen3Moe, f.num_experts = 128, f.num_experts_per_tok = 8, f.moe_intermediate_size = 768;
  v.push_back(f);

  f = {};  // Qwen2-MoE: qkv_bias, 60 experts of 1408, top 4, a 5632-wide shared expert
  f.architecture = "Qwen2MoeForCausalLM", f.model_type = "qwen2_moe", f.id = "qwen2_moe";
  f.attention_bias = AttentionBias::QkvFromKey;
  f.moe = MoeKind::Qwen2Moe, f.num_experts = 60, f.num_experts_per_tok = 4, f.moe_intermediate_size = 1408;
  f.shared_expert_intermediate_size = 5632;
  v.push_back(f);

  f = {};  // Mixtral: Mistral's attention, RoPE base 1e6, 8 experts of intermediate_size, top 2
  f.architecture = "MixtralForCausalLM", f.model_type = "mixtral", f.id = "mixtral";
  f.attention_bias = AttentionBias::None;
  f.rms_norm_eps = 1e-5, f.rope_theta = 1'000'000.0;
  f.sliding = true;  // sliding_window: none unless config.json sets one
  f.moe = MoeKind::Mixtral, f.num_experts = 8, f.num_experts_per_tok = 2;
  v.push_back(f);
  return v;
}

template <typename Field>
const ModelFamily* find(std::string_view value, Field field) {
  for (const ModelFamily& f : model_families())
    if (f.*field == value) return &f;
  return nullptr;
}

}  // namespace

const std::vector<ModelFamily>& model_families() {
  static const std::vector<ModelFamily> v = make_families();
  return v;
}

const ModelFamily* family_by_architecture(std::string_view a) { return find(a, &ModelFamily::architecture); }
const ModelFamily* family_by_model_type(std::string_view t) { return find(t, &ModelFamily::model_type); }
const ModelFamily* family_by_id(std::string_view id) { return find(id, &ModelFamily::id); }

const ModelFamily& family_or_default(std::string_view id) {
  static const ModelFamily kDefault = [] {
    ModelFamily f;
    f.mlp_bias_key = true;
    return f;
  }();
  const ModelFamily* f = family_by_id(id);
  return f ? *f : kDefault;
}

}  // namespace odyssey
