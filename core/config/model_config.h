// The shape of a Hugging Face decoder model, read from its config.json, and where a model
// argument (directory or hub id) is found on this machine. No LibTorch: the GUI, the
// validator and the memory planner use it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/diagnostic.h"
#include "config/model_family.h"

namespace odyssey {

// Which RMSNorms a decoder block has around its two branches (attention, MLP): on the branch's
// input, on its output before the residual add, or both (block_norm_names has their names).
enum class BlockNorms {
  Pre,          // input_layernorm, post_attention_layernorm (the MLP's input): Llama and most families
  Sandwich,     // both sides: input_layernorm, post_attention_layernorm, pre_/post_feedforward_layernorm (Gemma)
  Post,         // outputs only: post_attention_layernorm, post_feedforward_layernorm (OLMo-2/3)
  GlmSandwich,  // both sides, GLM-4's names: input_layernorm, post_self_attn_layernorm,
                // post_attention_layernorm (the MLP's input), post_mlp_layernorm
};

// The decoder is one model with switches; a family is a row of the family table
// (config/model_family.h) mapping config.json to them (docs/adding-a-model.md). Every switch's
// default is the Llama block.
struct HfModelConfig {
  std::string architecture;  // e.g. Qwen2ForCausalLM
  std::string model_type;    // qwen2, qwen3, llama, mistral, granite, gemma2, gemma3_text, phi3
  std::string family;        // the family table's id: qwen2, qwen3, llama3, mistral, gemma2, ...
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;  // explicit in Qwen3, else hidden_size / heads
  std::int64_t vocab_size = 0;
  std::int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;       // q/k/v bias (Qwen2 always; Llama, Qwen3: attention_bias)
  bool o_bias = false;         // o_proj bias (attention_bias where the family reads it; Qwen2 never)
  bool qk_norm = false;        // q/k RMSNorm (Qwen3, Gemma-3, OLMo-2/3)
  bool qk_norm_whole = false;  // the q/k norm spans all heads' width, before the split (OLMo-2/3); else one head's
  bool mlp_bias = false;       // gate/up/down bias (Llama's mlp_bias)
  std::string torch_dtype;     // as stored on disk
  // A multimodal checkpoint whose language model Odyssey trains (Gemma-3 4B/12B/27B ship as
  // Gemma3ForConditionalGeneration, Mistral-Small-3.1/3.2 as Mistral3ForConditionalGeneration):
  // its architecture; "" for a text model. The fields above
  // are then the text model's (config.json's text_config), and text_model_name() maps its
  // tensors (docs/model.md, "Multimodal checkpoints").
  std::string wrapper_architecture;
  // config.json does not state tie_word_embeddings and the wrapper's config class defaults it
  // to true (Mistral3ForConditionalGeneration): transformers then ties lm_head to the embedding
  // only where the weights hold no lm_head.weight. Parsed as untied; load_causal_lm resolves it
  // from the weights (resolve_tied_head).
  bool tie_unstated = false;

  // ---- switches of the other families (defaults: the Llama block) ----
  std::string hidden_act = "silu";           // MLP activation: silu (SwiGLU) or gelu_pytorch_tanh (GeGLU)
  bool norm_plus_one = false;                // RMSNorm scales by (1 + w), in fp32 before the cast (Gemma)
  BlockNorms block_norms = BlockNorms::Pre;  // where the block's norms sit (Gemma: Sandwich, OLMo: Post)
  bool norm_weight_fp32 = false;             // RMSNorm's weight times the fp32 normalized input, then the cast (OLMo);
                                             // Llama: the weight times the input cast back first
  bool embed_scale_sqrt_hidden = false;      // embeddings times sqrt(hidden) in their dtype (Gemma)
  bool fused_qkv = false;                    // one qkv_proj (Phi-3)
  bool fused_gate_up = false;                // one gate_up_proj, [gate | up] (Phi-3, GLM-4)
  bool rope_interleaved = false;             // RoPE rotates pairs (0, 1), (2, 3), ... (GLM-4); else halves
  bool rope_fp32 = false;                    // q and k rotated in fp32, rounded once (OLMo: its rotary hands over
                                             // fp32 cos/sin); else cos/sin in the activations' dtype
  double embedding_multiplier = 1.0;         // Granite
  double residual_multiplier = 1.0;          // Granite: residual + branch * m
  double attention_scale = 0.0;              // softmax scale; 0: head_dim^-0.5 (Granite's attention_multiplier,
                                             // Gemma's query_pre_attn_scalar^-0.5)
  double logits_scaling = 1.0;               // Granite: logits / logits_scaling
  double attn_logit_softcapping = 0.0;       // Gemma-2: tanh(s / c) * c on attention scores; 0: off
  double final_logit_softcapping = 0.0;      // Gemma-2: the same on the logits; 0: off
  std::int64_t sliding_window = 0;           // keys at most sliding_window - 1 behind the query; 0: none
  std::vector<bool> layer_sliding;           // per layer: the window applies (empty: every layer when set)
  double partial_rotary_factor = 1.0;        // fraction of head_dim that RoPE rotates (Phi-3)
  std::vector<bool> layer_rope;              // per layer: RoPE applies (empty: every layer; SmolLM3's NoPE layers)

  // ---- mixture of experts (Qwen3-MoE, Qwen2-MoE, Mixtral; docs/moe.md) ----
  std::int64_t num_experts = 0;                      // routed experts per MoE layer; 0: every MLP dense
  std::string num_experts_key = "num_experts";       // the config.json key it came from (num_local_experts)
  std::int64_t num_experts_per_tok = 0;              // top-k
  std::int64_t moe_intermediate_size = 0;            // one expert's width (Mixtral: intermediate_size)
  std::int64_t shared_expert_intermediate_size = 0;  // Qwen2-MoE's shared expert (sigmoid-gated); 0: none
  bool norm_topk_prob = false;                       // the k probabilities renormalized to sum 1 (Mixtral: always)
  std::int64_t decoder_sparse_step = 1;              // layer i is MoE when (i + 1) % step == 0 ...
  std::vector<std::int64_t> mlp_only_layers;         // ... and i is not listed here
  double router_aux_loss_coef = 0.001;               // the load-balancing loss's weight when output_router_logits
  bool output_router_logits = false;                 // transformers adds the load-balancing loss to the loss
  double router_jitter_noise = 0.0;                  // Mixtral: the MoE input times U(1 - j, 1 + j) in training
  // Whether layer i's MLP is a mixture of experts.
  bool moe_layer(std::int64_t i) const;
  std::int64_t moe_layer_count() const;
  bool is_moe() const { return num_experts > 0; }
  // PEFT 0.21 on transformers 5 reads the MLP names of LoRA's target_modules (gate_proj,
  // up_proj, down_proj) on this model as transformers 4's per-expert modules: gate_proj + up_proj
  // become the experts' gate_up_proj at twice the rank and alpha, down_proj their down_proj
  // (peft/utils/transformers_weight_conversion.py; measured for Qwen3-MoE, not for Qwen2-MoE or
  // Mixtral). Odyssey gives the names the same meaning (train/lora.cpp, the planner).
  bool mlp_names_mean_experts() const { return family_row().moe == MoeKind::Qwen3Moe && is_moe(); }
  // The family table's row of `family` (the Llama switches for a configuration built by hand).
  const ModelFamily& family_row() const { return family_or_default(family); }
  // Parameters one token runs through in the MLPs, averaged over the layers (top-k experts,
  // the shared expert and its gate, the router; dense layers' MLP): the "activated" MLP of
  // MoE models, for FLOPs and MFU. Dense models: 3 x hidden x intermediate.
  double activated_mlp_parameters() const;

  // Whether layer i attends through the sliding window.
  bool sliding_layer(std::int64_t i) const {
    if (sliding_window <= 0) return false;
    if (layer_sliding.empty()) return true;
    return i >= 0 && static_cast<std::size_t>(i) < layer_sliding.size() && layer_sliding[static_cast<std::size_t>(i)];
  }
  // Whether layer i rotates its queries and keys (RoPE); false on NoPE layers.
  bool rope_layer(std::int64_t i) const {
    return layer_rope.empty() || i < 0 || static_cast<std::size_t>(i) >= layer_rope.size() ||
           layer_rope[static_cast<std::size_t>(i)];
  }
  // RMSNorm weights per block (2, or 4 with sandwich norms), q/k norms not counted.
  std::int64_t norms_per_block() const {
    return block_norms == BlockNorms::Sandwich || block_norms == BlockNorms::GlmSandwich ? 4 : 2;
  }
  // Whether a norm follows each branch before the residual add (Gemma, OLMo).
  bool output_norms() const { return block_norms != BlockNorms::Pre; }
  // The width of the q norm's and the k norm's weights (0 and 0 without QK-norm).
  std::int64_t q_norm_width() const { return qk_norm ? (qk_norm_whole ? num_attention_heads : 1) * head_dim : 0; }
  std::int64_t k_norm_width() const { return qk_norm ? (qk_norm_whole ? num_key_value_heads : 1) * head_dim : 0; }

  // Parameter count of the model as configured (embeddings, blocks, norms, lm_head).
  std::int64_t parameter_count() const;
  // Parameters of the seven linear projections of one dense block.
  std::int64_t block_linear_parameters() const;
  // Parameters of the MLP of layer i (dense, or every expert, the router and the shared expert).
  std::int64_t mlp_parameters(std::int64_t layer) const;
};

// Upper bounds on config.json's sizes, checked before anything uses them: a config.json
// with num_hidden_layers 10^9 passed validation and then grew `run` and `plan` past 4 GB,
// vocab_size 2^40 ended in an allocator message. Each bound is far above any released
// model (Llama 3.1 405B: 126 layers, hidden 16384, 53248 MLP, 128256 tokens; Gemma 3:
// 262144 tokens) and low enough that every product the planner forms fits in 64 bits.
inline constexpr std::int64_t kMaxHiddenLayers = 4096;
inline constexpr std::int64_t kMaxHiddenSize = 1 << 18;
inline constexpr std::int64_t kMaxIntermediateSize = 1 << 20;
inline constexpr std::int64_t kMaxVocabSize = 1 << 24;
inline constexpr std::int64_t kMaxAttentionHeads = 1 << 12;
inline constexpr std::int64_t kMaxHeadDim = 1 << 12;
inline constexpr std::int64_t kMaxPositionEmbeddings = std::int64_t{1} << 30;
inline constexpr std::int64_t kMaxExperts = 1 << 12;  // Qwen3-235B-A22B: 128; DeepSeek-V3: 256

// The ops of this model that the fused kernels (kernels/, fused_kernels: true) do not cover,
// one phrase each ("attention-logit soft-capping (attn_logit_softcapping 50)", ...): the engine
// computes them with the reference (unfused) formulas, logs one line per op and the plan lists
// them. Empty for Qwen2/Qwen3/Llama/Mistral.
std::vector<std::string> fused_kernel_gaps(const HfModelConfig& m);

// The checkpoint names of a block's RMSNorms by place: before and after the attention, before
// and after the MLP; "" where the block has none.
struct BlockNormNames {
  std::string attention_in, attention_out, mlp_in, mlp_out;
};
BlockNormNames block_norm_names(const HfModelConfig& m);

// The block's linear modules as PEFT names them (q_proj ... down_proj; Phi-3: qkv_proj, o_proj,
// gate_up_proj, down_proj): what LoRA's target_modules can match in this model.
std::vector<std::string> linear_module_names(const HfModelConfig& m);

// Architectures Odyssey trains; others are refused with this list.
const std::vector<std::string>& supported_architectures();

// Parse config.json text; `file` names it in diagnostics.
Result<HfModelConfig> parse_model_config(const std::string& json_text, const std::string& file);

// Multimodal checkpoints read as their text model (HfModelConfig::wrapper_architecture):
// Gemma3ForConditionalGeneration, Mistral3ForConditionalGeneration (Mistral-Small-3.1/3.2),
// LlavaForConditionalGeneration (a dense text family in text_config) and
// Qwen2VLForConditionalGeneration / Qwen2_5_VLForConditionalGeneration (a Qwen2 text model,
// flat or in text_config) and Qwen3VLForConditionalGeneration (a Qwen3 text model); their
// multimodal RoPE is read as plain RoPE, exact on text. The wrapper's
// architecture; "" when `json_text` is not one of them.
std::string wrapper_architecture_of(const std::string& json_text);
// config.json of a wrapper as its text model's own config.json would read: text_config over
// the text model's defaults (transformers writes only what differs from them), with the
// wrapper's dtype, tie_word_embeddings and quantization_config; other text unchanged.
std::string text_model_config_json(const std::string& json_text);
// A wrapper checkpoint's tensor name as the text model names it ("language_model.model.X" and
// "model.language_model.X" -> "model.X", "language_model.lm_head.weight" -> "lm_head.weight";
// Qwen2-VL's and Qwen2.5-VL's "model.X" unchanged), or "" for a tensor of the rest (the vision
// tower, the projector). Text models: unchanged.
std::string text_model_name(const HfModelConfig& m, const std::string& stored);
// The reverse for writing a checkpoint as the wrapper's loaders read it ("language_model.model.X",
// which transformers 5 saves too; Qwen2-VL and Qwen2.5-VL their own "model.X", Qwen3-VL
// "model.language_model.X"); and the module path PEFT and vLLM see for a text-model module
// ("model.X" -> "model.language_model.X").
std::string wrapper_tensor_name(const HfModelConfig& m, const std::string& text_name);
std::string wrapper_module_path(const HfModelConfig& m, const std::string& text_path);
Result<HfModelConfig> load_model_config(const std::string& model_dir);

struct ModelLocation {
  enum Source { Directory, HuggingFaceCache, ModelScopeCache, BundledShape, NotFound };
  Source source = NotFound;
  std::string path;                // directory holding config.json (or "bundled:<shape>")
  std::string hub_id;              // org/name when the argument was a hub id
  std::string requested_revision;  // from "@rev" or model_revision; empty: main
  std::string revision;            // Hugging Face cache: the snapshot's commit hash
  std::string problem;             // NotFound: why (a revision missing, a partial download)
  std::string describe() const;
};

// Find `model` (a path, absolute or relative to base_dir or the current directory, or a
// hub id such as Qwen/Qwen2.5-7B-Instruct, optionally Qwen/Qwen2.5-7B-Instruct@<revision>)
// on this machine: a directory with config.json, the Hugging Face cache (hf_hub_cache_dir:
// refs/<branch or tag> names the snapshot's commit; a commit hash or its unique prefix of 7+
// characters names the snapshot), the ModelScope cache (modelscope_cache_dir), or failing
// those the shape Odyssey bundles for well-known models (resources/model-shapes/, planning
// only). `revision` is the preset's model_revision (empty: main). Layouts and variables:
// docs/model.md, "Where a model is found".
ModelLocation locate_model(const std::string& model, const std::string& base_dir, const std::string& revision = {});

// "org/name@rev" -> ("org/name", "rev"); false (id = model) when there is no such suffix.
bool split_hub_revision(const std::string& model, std::string* id, std::string* revision);

// The caches as huggingface_hub and modelscope find them: $HF_HUB_CACHE,
// $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub,
// ~/.cache/huggingface/hub; $MODELSCOPE_CACHE, ~/.cache/modelscope/hub.
std::filesystem::path hf_hub_cache_dir();
std::filesystem::path modelscope_cache_dir();

// config.json of a located model (the bundled shape's text when that is all there is).
Result<HfModelConfig> load_located_model_config(const ModelLocation& loc);

// Models found in the Hugging Face and ModelScope caches (for the GUI's picker).
std::vector<std::pair<std::string, std::string>> cached_models();  // (hub id, directory)

}  // namespace odyssey
