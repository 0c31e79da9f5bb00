// The shape of a Hugging Face decoder model, read from its config.json, and where a model
// argument (directory or hub id) is found on this machine. No LibTorch: the GUI, the
// validator and the memory planner use it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/diagnostic.h"

namespace odyssey {

struct HfModelConfig {
  std::string architecture;        // e.g. Qwen2ForCausalLM
  std::string model_type;          // qwen2, qwen3, llama
  std::string family;              // qwen2, qwen3, llama3: picks template and block details
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;       // explicit in Qwen3, else hidden_size / heads
  std::int64_t vocab_size = 0;
  std::int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;     // q/k/v bias (Qwen2)
  bool qk_norm = false;            // q/k RMSNorm (Qwen3)
  std::string torch_dtype;         // as stored on disk

  // Parameter count of the model as configured (embeddings, blocks, norms, lm_head).
  std::int64_t parameter_count() const;
  // Parameters of the seven linear projections of one block.
  std::int64_t block_linear_parameters() const;
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

// Architectures Odyssey trains; others are refused with this list.
const std::vector<std::string>& supported_architectures();

// Parse config.json text; `file` names it in diagnostics.
Result<HfModelConfig> parse_model_config(const std::string& json_text, const std::string& file);
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
