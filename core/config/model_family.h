// The family table: one row per architecture Odyssey trains, holding what transformers'
// config class and modeling file fix for that family — the defaults config.json may override
// and the switches it cannot. Config parsing (model_config.cpp), the decoder's layout
// (model/decoder_config.cpp, model/moe.cpp, the weight loader), the chat-template choice
// (tokenizer/chat_template.cpp), LoRA's target names and the planner read this one place
// instead of comparing family names. Adding a family: docs/adding-a-model.md. No LibTorch.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace odyssey {

// Where the attention projections carry a bias, and which config.json key (if any) says so.
enum class AttentionBias {
  None,                  // no bias and no key (MistralConfig, Phi3Config, MixtralConfig have none)
  QkvAlways,             // q/k/v, hard-coded in the attention module (Qwen2); o_proj none
  QkvFromKey,            // q/k/v as `qkv_bias` says, default true (Qwen2-MoE); o_proj none
  QkvFromAttentionBias,  // q/k/v as `attention_bias` says, default true (GLM-4); o_proj none
  AllFromKey,            // q/k/v and o_proj as `attention_bias` says, default false (Llama, Qwen3, Granite, Gemma)
};

// The MLP: dense, or one of the mixture-of-experts layouts (docs/moe.md).
enum class MoeKind {
  Dense,
  Qwen3Moe,  // top-k softmax routing, norm_topk_prob, decoder_sparse_step, mlp_only_layers
  Qwen2Moe,  // the same plus a sigmoid-gated shared expert
  Mixtral,   // top-2, routing weights in fp32, experts under block_sparse_moe as w1/w3/w2
};

struct ModelFamily {
  std::string_view architecture;  // config.json "architectures"[0]
  std::string_view model_type;    // config.json "model_type"
  std::string_view id;            // Odyssey's name (HfModelConfig::family, messages, the planner's docs)

  // ---- the block ----
  AttentionBias attention_bias = AttentionBias::AllFromKey;
  bool mlp_bias_key = false;  // reads `mlp_bias` (Llama, Granite)
  bool qk_norm = false;       // q/k RMSNorm over head_dim (Qwen3, Gemma-3)
  // Gemma: (1 + w) RMSNorm in fp32, sandwich norms, embeddings times sqrt(hidden), the softmax
  // scale from query_pre_attn_scalar, tanh-GELU under `hidden_activation`.
  bool gemma_block = false;
  bool granite_multipliers = false;  // embedding/residual/attention multipliers, logits_scaling
  // OLMo-2/3: no norm on the branches' inputs, post_attention_layernorm and
  // post_feedforward_layernorm on their outputs; q/k RMSNorm over the whole projection (all
  // heads) before the split; every RMSNorm multiplies its weight in fp32, then casts.
  bool olmo_block = false;
  // One qkv_proj and one gate_up_proj, partial_rotary_factor, "yarn" read as longrope (Phi-3).
  bool fused_projections = false;
  // GLM-4: sandwich norms under GLM's names (input_layernorm, post_self_attn_layernorm,
  // post_attention_layernorm before the MLP, post_mlp_layernorm), one gate_up_proj beside
  // separate q/k/v, RoPE on interleaved pairs of the first partial_rotary_factor of each head.
  bool glm_block = false;
  // Reads partial_rotary_factor (top level or in rope_parameters); its class default.
  bool partial_rotary = false;
  double partial_rotary_factor = 1.0;
  std::string_view activation = "silu";  // the class default of hidden_act / hidden_activation
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  std::int64_t head_dim = 0;  // the class default; 0: hidden_size / num_attention_heads

  // ---- positions and attention ----
  double rope_theta = 10000.0;
  // Sliding layers rotate with their own RoPE: default kind, base from local_rope_theta_key
  // (Gemma-3: rope_local_base_freq) or the class default local_rope_theta (OLMo-3: 500000
  // whatever rope_theta says, as transformers 5.17's Olmo3Config fills it), never rope_scaling.
  bool local_rope = false;
  double local_rope_theta = 10000.0;
  std::string_view local_rope_theta_key = "rope_local_base_freq";
  // Some layers without RoPE (NoPE, SmolLM3): config.json's no_rope_layers (1 = rotate), else
  // every no_rope_layer_interval-th layer (class default below) skips the rotation.
  bool nope_layers = false;
  std::int64_t no_rope_layer_interval = 0;
  // Sliding windows: whether the family has them, the class default of sliding_window (0:
  // none unless config.json sets one) and, for families that alternate, the period: layer i
  // is full when (i + 1) % period == 0 (Gemma-2 2, Gemma-3 6); 0: every layer slides.
  bool sliding = false;
  double sliding_window = 0;
  std::int64_t sliding_period = 0;
  std::string_view sliding_period_key;  // the key that may override the period (Gemma-3: sliding_window_pattern)
  // config.json's layer_types, when given, says which layers the window applies to
  // ("sliding_attention"; the others attend fully): Gemma, Ministral, and Mistral, whose
  // config.json transformers' AutoConfig reads as Ministral's when it has layer_types
  // (Ministral-8B-2410 ships so). Elsewhere only "full_attention" entries are accepted.
  bool layer_types_slide = false;
  double attn_logit_softcapping = 0;   // class default; 0: off
  double final_logit_softcapping = 0;  // class default; 0: off

  // ---- mixture of experts ----
  MoeKind moe = MoeKind::Dense;
  std::int64_t num_experts = 0, num_experts_per_tok = 0;  // class defaults
  std::int64_t moe_intermediate_size = 0;                 // 0: intermediate_size (Mixtral)
  std::int64_t shared_expert_intermediate_size = 0;       // Qwen2-MoE's default

  // ---- data ----
  // The built-in renderer (ChatTemplate::name()) used under `template: auto` when the
  // tokenizer ships no chat_template; "" when the family has none (a template file is needed).
  std::string_view builtin_template;

  bool is_moe() const { return moe != MoeKind::Dense; }
  // The checkpoint's module holding the router and experts ("mlp" or "block_sparse_moe"), the
  // experts' projection names (gate, up, down) and the key of one expert's width.
  std::string_view moe_module() const { return moe == MoeKind::Mixtral ? "block_sparse_moe" : "mlp"; }
  std::string_view expert_gate() const { return moe == MoeKind::Mixtral ? "w1" : "gate_proj"; }
  std::string_view expert_up() const { return moe == MoeKind::Mixtral ? "w3" : "up_proj"; }
  std::string_view expert_down() const { return moe == MoeKind::Mixtral ? "w2" : "down_proj"; }
  std::string_view expert_width_key() const {
    return moe == MoeKind::Mixtral ? "intermediate_size" : "moe_intermediate_size";
  }
  bool router_weights_fp32() const { return moe == MoeKind::Mixtral; }
};

// Every row, in the order messages list them.
const std::vector<ModelFamily>& model_families();
// The row of an architecture, a model_type or an id; nullptr when Odyssey has none.
const ModelFamily* family_by_architecture(std::string_view architecture);
const ModelFamily* family_by_model_type(std::string_view model_type);
const ModelFamily* family_by_id(std::string_view id);
// The row of `id`, or the Llama row's switches under an empty name for an id no row has (a
// configuration built by hand, as tests and the planner's what-if shapes do).
const ModelFamily& family_or_default(std::string_view id);

}  // namespace odyssey
