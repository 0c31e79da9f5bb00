#include "config/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <utility>

#include "common/json_dump.h"
#include "common/regular_file.h"
#include "common/text.h"
#include "config/model_family.h"

namespace odyssey {

// Defined in the generated embedded_data.cpp (resources/model-shapes/*.json).
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_model_shapes();

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// config.json, refs/main: small files, read only when regular (a FIFO would block).
constexpr std::uint64_t kMaxSmallFileBytes = 64 << 20;

std::string read_text(const fs::path& p, bool* ok, std::string* why = nullptr) {
  std::string out, w;
  *ok = read_regular_file(p.string(), kMaxSmallFileBytes, &out, &w);
  if (why) *why = w;
  return out;
}

// The mixture-of-experts keys of Qwen3MoeConfig, Qwen2MoeConfig and MixtralConfig (their
// defaults when absent), checked against each other.
void parse_moe(const json& j, const std::string& file, HfModelConfig* m, Diagnostics* diags) {
  const ModelFamily& f = m->family_row();
  const bool mixtral = f.moe == MoeKind::Mixtral;
  auto found = [](const json& v) { return "found " + text::excerpt(dump_json(v)); };
  auto int_key = [&](const char* key, std::int64_t* out, std::int64_t min, std::int64_t max) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return false;
    if (!it->is_number_integer() || it->get<std::int64_t>() < min || it->get<std::int64_t>() > max) {
      diags->push_back(error_at(
          file, key, found(*it) + ", expected an integer from " + std::to_string(min) + " to " + std::to_string(max)));
      return true;  // present (and wrong): not looked for under another name
    }
    *out = it->get<std::int64_t>();
    return true;
  };
  auto bool_key = [&](const char* key, bool* out) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_boolean()) diags->push_back(error_at(file, key, found(*it) + ", expected true or false"));
    else *out = it->get<bool>();
  };
  // The class defaults: Qwen3MoeConfig 128 experts, top 8, 768 wide; Qwen2MoeConfig 60, 4,
  // 1408 and a 5632-wide shared expert; MixtralConfig 8 experts, top 2.
  m->num_experts = f.num_experts;
  m->num_experts_per_tok = f.num_experts_per_tok;
  // The experts' count is num_experts (Qwen) or num_local_experts (Mixtral; transformers 5.17
  // writes Qwen3-MoE's under that name too).
  const char* count_key = mixtral ? "num_local_experts" : "num_experts";
  if (!int_key(count_key, &m->num_experts, mixtral ? 1 : 0, kMaxExperts)) {
    const char* other = mixtral ? "num_experts" : "num_local_experts";
    if (int_key(other, &m->num_experts, mixtral ? 1 : 0, kMaxExperts)) count_key = other;
  }
  m->num_experts_key = count_key;
  int_key("num_experts_per_tok", &m->num_experts_per_tok, 1, kMaxExperts);
  if (m->num_experts > 0 && m->num_experts_per_tok > m->num_experts)
    diags->push_back(error_at(file, "num_experts_per_tok",
                              std::to_string(m->num_experts_per_tok) + " experts per token, but the model has " +
                                  std::to_string(m->num_experts) + " (" + count_key + "); top-k cannot exceed it"));
  if (mixtral) {
    m->moe_intermediate_size = m->intermediate_size;
    m->norm_topk_prob = true;
    if (auto it = j.find("router_jitter_noise"); it != j.end() && !it->is_null()) {
      if (!it->is_number() || it->get<double>() < 0 || it->get<double>() >= 1)
        diags->push_back(error_at(file, "router_jitter_noise", found(*it) + ", expected a number in [0, 1)"));
      else m->router_jitter_noise = it->get<double>();
    }
  } else {
    m->moe_intermediate_size = f.moe_intermediate_size;
    int_key("moe_intermediate_size", &m->moe_intermediate_size, 1, kMaxIntermediateSize);
    if (f.shared_expert_intermediate_size > 0) {
      m->shared_expert_intermediate_size = f.shared_expert_intermediate_size;
      int_key("shared_expert_intermediate_size", &m->shared_expert_intermediate_size, 1, kMaxIntermediateSize);
    }
    bool_key("norm_topk_prob", &m->norm_topk_prob);
    int_key("decoder_sparse_step", &m->decoder_sparse_step, 1, kMaxHiddenLayers);
    if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
      if (!it->is_array())
        diags->push_back(error_at(file, "mlp_only_layers", found(*it) + ", expected a list of layer indices"));
      for (const auto& v : it->is_array() ? *it : json::array()) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= m->num_hidden_layers) {
          diags->push_back(
              error_at(file, "mlp_only_layers",
                       found(v) + ", expected layer indices from 0 to " + std::to_string(m->num_hidden_layers - 1)));
          break;
        }
        m->mlp_only_layers.push_back(v.get<std::int64_t>());
      }
    }
  }
  if (auto it = j.find("router_aux_loss_coef"); it != j.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() < 0)
      diags->push_back(error_at(file, "router_aux_loss_coef", found(*it) + ", expected a number >= 0"));
    else m->router_aux_loss_coef = it->get<double>();
  }
  bool_key("output_router_logits", &m->output_router_logits);
}

}  // namespace

bool HfModelConfig::moe_layer(std::int64_t i) const {
  if (num_experts <= 0 || decoder_sparse_step <= 0 || (i + 1) % decoder_sparse_step != 0) return false;
  return std::find(mlp_only_layers.begin(), mlp_only_layers.end(), i) == mlp_only_layers.end();
}

std::int64_t HfModelConfig::moe_layer_count() const {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < num_hidden_layers; ++i) n += moe_layer(i) ? 1 : 0;
  return n;
}

std::int64_t HfModelConfig::mlp_parameters(std::int64_t layer) const {
  if (!moe_layer(layer))
    return 3 * hidden_size * intermediate_size + (mlp_bias ? 2 * intermediate_size + hidden_size : 0);
  std::int64_t p =
      num_experts * 3 * hidden_size * moe_intermediate_size + num_experts * hidden_size;  // experts, router
  if (shared_expert_intermediate_size > 0) p += 3 * hidden_size * shared_expert_intermediate_size + hidden_size;
  return p;
}

double HfModelConfig::activated_mlp_parameters() const {
  if (num_hidden_layers <= 0) return 0.0;
  double sum = 0.0;
  const auto h = static_cast<double>(hidden_size);
  for (std::int64_t i = 0; i < num_hidden_layers; ++i) {
    if (!moe_layer(i)) {
      sum += 3.0 * h * static_cast<double>(intermediate_size);
      continue;
    }
    sum += 3.0 * h * static_cast<double>(num_experts_per_tok * moe_intermediate_size) +
           h * static_cast<double>(num_experts);  // the k experts, the router
    if (shared_expert_intermediate_size > 0) sum += 3.0 * h * static_cast<double>(shared_expert_intermediate_size) + h;
  }
  return sum / static_cast<double>(num_hidden_layers);
}

std::int64_t HfModelConfig::block_linear_parameters() const {
  const std::int64_t hd = head_dim;  // fused qkv_proj / gate_up_proj (Phi-3) hold the same numbers
  const std::int64_t q = hidden_size * num_attention_heads * hd;
  const std::int64_t kv = 2 * hidden_size * num_key_value_heads * hd;
  const std::int64_t o = num_attention_heads * hd * hidden_size;
  const std::int64_t mlp = 3 * hidden_size * intermediate_size;
  return q + kv + o + mlp;
}

std::int64_t HfModelConfig::parameter_count() const {
  const std::int64_t hd = head_dim;
  // Attention, norms and biases; the MLP per layer (dense or experts).
  std::int64_t block =
      block_linear_parameters() - 3 * hidden_size * intermediate_size + norms_per_block() * hidden_size;
  if (qkv_bias) block += (num_attention_heads + 2 * num_key_value_heads) * hd;
  if (o_bias) block += hidden_size;
  block += q_norm_width() + k_norm_width();
  std::int64_t total = num_hidden_layers * block + vocab_size * hidden_size + hidden_size;
  for (std::int64_t i = 0; i < num_hidden_layers; ++i) total += mlp_parameters(i);
  if (!tie_word_embeddings) total += vocab_size * hidden_size;
  return total;
}

std::vector<std::string> fused_kernel_gaps(const HfModelConfig& m) {
  std::vector<std::string> out;
  auto num = [](double v) { return text::format_double(v); };
  if (m.attn_logit_softcapping > 0)
    out.push_back("attention-logit soft-capping (attn_logit_softcapping " + num(m.attn_logit_softcapping) +
                  "): tiled exact attention (GEMMs per tile of query rows, no [T, T] scores kept) instead of "
                  "flash attention");
  if (m.sliding_window > 0)
    out.push_back("sliding-window attention (sliding_window " + std::to_string(m.sliding_window) +
                  "): flash attention's local band on CUDA; tiled exact attention where soft-capping, "
                  "attn_impl eager or the CPU rule flash out");
  if (m.final_logit_softcapping > 0 || m.logits_scaling != 1.0)
    out.push_back(
        "logit scaling/soft-capping (final_logit_softcapping, logits_scaling): the chunked reference loss "
        "instead of the fused linear cross-entropy");
  if (m.norm_plus_one) out.push_back("(1 + w) RMSNorm: the reference norm");
  if (m.block_norms == BlockNorms::Sandwich || m.block_norms == BlockNorms::GlmSandwich)
    out.push_back("sandwich norms (pre/post feed-forward): the unfused decoder layer");
  if (m.block_norms == BlockNorms::Post)
    out.push_back("norms on the branches' outputs only (post-attention, post-feed-forward): the unfused decoder layer");
  if (m.norm_weight_fp32) out.push_back("RMSNorm weights applied in fp32: the reference norm");
  if (m.residual_multiplier != 1.0) out.push_back("residual_multiplier: the unfused decoder layer");
  if (m.hidden_act != "silu") out.push_back("GeGLU (" + m.hidden_act + "): the reference MLP");
  if (m.fused_qkv) out.push_back("fused qkv_proj: the reference projections");
  if (m.fused_gate_up) out.push_back("fused gate_up_proj: the SwiGLU of the packed product, no MLP tiers");
  if (m.rope_interleaved) out.push_back("RoPE on interleaved pairs: the reference RoPE");
  if (m.rope_fp32) out.push_back("RoPE in fp32 (cos/sin wider than q and k): the reference RoPE");
  if (m.partial_rotary_factor < 1.0)
    out.push_back("partial rotary (partial_rotary_factor " + num(m.partial_rotary_factor) + "): the reference RoPE");
  return out;
}

BlockNormNames block_norm_names(const HfModelConfig& m) {
  switch (m.block_norms) {
    case BlockNorms::Pre: return {"input_layernorm", "", "post_attention_layernorm", ""};
    case BlockNorms::Sandwich:
      return {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"};
    case BlockNorms::Post: return {"", "post_attention_layernorm", "", "post_feedforward_layernorm"};
    case BlockNorms::GlmSandwich:
      return {"input_layernorm", "post_self_attn_layernorm", "post_attention_layernorm", "post_mlp_layernorm"};
  }
  return {};
}

std::vector<std::string> linear_module_names(const HfModelConfig& m) {
  if (m.fused_qkv) return {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
  if (m.fused_gate_up) return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj"};
  // MoE: the dense layers' MLP and Qwen2-MoE's shared expert have these; the experts are
  // parameters ([experts, out, in]), not Linear modules (docs/moe.md, "LoRA").
  return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
}

namespace {

// Gemma3TextConfig's defaults for what Odyssey reads (transformers 4.50 and 5.17 agree):
// the hub's Gemma-3 4B/12B/27B configs name only what differs from them in text_config.
const json& gemma3_text_defaults() {
  static const json d = {{"architectures", {"Gemma3ForCausalLM"}},
                         {"model_type", "gemma3_text"},
                         {"vocab_size", 262208},
                         {"hidden_size", 2304},
                         {"intermediate_size", 9216},
                         {"num_hidden_layers", 26},
                         {"num_attention_heads", 8},
                         {"num_key_value_heads", 4},
                         {"head_dim", 256},
                         {"hidden_activation", "gelu_pytorch_tanh"},
                         {"max_position_embeddings", 131072},
                         {"rms_norm_eps", 1e-6},
                         {"rope_theta", 1000000.0},
                         {"rope_local_base_freq", 10000.0},
                         {"query_pre_attn_scalar", 256},
                         {"sliding_window", 4096},
                         {"sliding_window_pattern", 6},
                         {"final_logit_softcapping", nullptr},
                         {"attn_logit_softcapping", nullptr},
                         {"pad_token_id", 0},
                         {"tie_word_embeddings", true}};
  return d;
}

// The multimodal wrappers read as their text model. transformers 5 names them alike: the
// language model at model.language_model (checkpoints saved before 5.0: language_model.model),
// lm_head at the top (before: language_model.lm_head), the vision tower and projector beside.
// Qwen2-VL and Qwen2.5-VL store theirs as a text model does (model.X, lm_head.weight; the
// vision tower under visual.), which transformers 5.17 still writes, and their hub configs keep
// the text model's keys at the top level (transformers 5 nests them in text_config); Qwen3-VL
// stores transformers 5's names (model.language_model.X, model.visual.).
struct Wrapper {
  std::string_view architecture, model_type;
  std::string_view text_model_type;  // text_config's model_type when it names none
  // Who decides tie_word_embeddings (each as its transformers config class does):
  //   TextOverTop  the text config's value, else the wrapper's (Gemma3Config);
  //   TopOrText    either one saying true (LlavaConfig.__post_init__);
  //   TopDefaultTrue the wrapper's own, which defaults to true when config.json is silent
  //                (Mistral3Config): the weights then decide (HfModelConfig::tie_unstated).
  enum Tie { TextOverTop, TopOrText, TopDefaultTrue } tie;
  // How the text model's tensors are written: language_model.model.X (LanguageModel), as a text
  // model's (Bare), or model.language_model.X (Nested); each reads all of its wrapper's forms.
  enum Names { LanguageModel, Bare, Nested } names = LanguageModel;
  // text_config's own model_type for text_model_type ("qwen2_5_vl_text": a Qwen2 text model);
  // flat configs (no text_config) and multimodal RoPE ("mrope": three position sections, equal
  // on text, so plain RoPE there) come with it.
  std::string_view text_config_type;
};

const std::vector<Wrapper>& wrappers() {
  static const std::vector<Wrapper> w = {
      {"Gemma3ForConditionalGeneration", "gemma3", "gemma3_text", Wrapper::TextOverTop, Wrapper::LanguageModel, ""},
      {"Mistral3ForConditionalGeneration", "mistral3", "mistral", Wrapper::TopDefaultTrue, Wrapper::LanguageModel, ""},
      {"LlavaForConditionalGeneration", "llava", "llama", Wrapper::TopOrText, Wrapper::LanguageModel, ""},
      {"Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", "qwen2", Wrapper::TopOrText, Wrapper::Bare,
       "qwen2_5_vl_text"},
      {"Qwen2VLForConditionalGeneration", "qwen2_vl", "qwen2", Wrapper::TopOrText, Wrapper::Bare, "qwen2_vl_text"},
      {"Qwen3VLForConditionalGeneration", "qwen3_vl", "qwen3", Wrapper::TopOrText, Wrapper::Nested, "qwen3_vl_text"},
  };
  return w;
}

// The wrapper `j` is (see wrapper_architecture_of), and its text model's config (see
// text_model_config_json): on the parsed object, so each is parsed once.
const Wrapper* wrapper_of(const json& j) {
  if (!j.is_object()) return nullptr;
  auto arch = j.find("architectures");
  const bool listed = arch != j.end() && arch->is_array() && !arch->empty() && (*arch)[0].is_string();
  const bool unlisted = arch == j.end() || !arch->is_array();
  const json type = j.value("model_type", json());
  for (const Wrapper& w : wrappers())
    if (listed ? (*arch)[0].get<std::string>() == w.architecture : unlisted && type == w.model_type) return &w;
  return nullptr;
}

// The text model's config.json: text_config over its family's defaults (Gemma-3's hub configs
// name only what differs from Gemma3TextConfig's; the other text models' parsers apply their
// own family's defaults), the model_type the wrapper implies, and the wrapper's dtype,
// quantization_config and tie_word_embeddings as the wrapper's config class resolves it.
json text_model_of(const json& j, const Wrapper& w) {
  const auto tc = j.find("text_config");
  const bool has_text = tc != j.end() && tc->is_object();
  json t = w.text_model_type == "gemma3_text" ? gemma3_text_defaults() : json::object();
  std::string type(w.text_model_type);
  if (!has_text && !w.text_config_type.empty())  // a flat hub config: the text model's keys at the top
    for (const auto& [k, v] : j.items())
      if (k != "architectures" && k != "model_type" && k != "vision_config") t[k] = v;
  if (has_text) {
    if (auto mt = tc->find("model_type"); mt != tc->end() && mt->is_string()) type = mt->get<std::string>();
    for (const auto& [k, v] : tc->items())
      if (k != "architectures" && k != "model_type") t[k] = v;
  }
  if (!w.text_config_type.empty() && type == w.text_config_type) type = w.text_model_type;
  // Multimodal RoPE gives each of three sections of the rotary dimensions its own position
  // (time, height, width); a text token has the same position in all three, which is the RoPE
  // the rest of the parameters describe (plain, or a scaling kind): the "mrope" marker and the
  // section keys go, as transformers' Qwen2_5_VLTextConfig turns "mrope" into "default".
  if (!w.text_config_type.empty())
    for (const char* key : {"rope_scaling", "rope_parameters"}) {
      const auto it = t.find(key);
      if (it == t.end() || !it->is_object()) continue;
      for (const char* k : {"mrope_section", "mrope_interleaved"}) it->erase(k);
      for (const char* k : {"type", "rope_type"})
        if (it->value(k, json()) == "mrope") it->erase(k);
      if (!it->contains("type") && !it->contains("rope_type")) (*it)["rope_type"] = "default";
    }
  t["model_type"] = type;
  if (const ModelFamily* f = family_by_model_type(type)) t["architectures"] = json::array({f->architecture});
  else t.erase("architectures");  // parse_model_config names text_config.model_type
  for (const char* k : {"torch_dtype", "dtype", "quantization_config"})
    if (auto it = j.find(k); it != j.end() && !(has_text && tc->contains(k))) t[k] = *it;
  const auto top = j.find("tie_word_embeddings");
  const bool top_set = top != j.end() && top->is_boolean();
  const auto text_tie = t.find("tie_word_embeddings");
  const bool text_set = text_tie != t.end() && text_tie->is_boolean();
  switch (w.tie) {
    case Wrapper::TextOverTop:
      if (top != j.end() && !(has_text && tc->contains("tie_word_embeddings"))) t["tie_word_embeddings"] = *top;
      break;
    case Wrapper::TopOrText:
      t["tie_word_embeddings"] = (top_set && top->get<bool>()) || (text_set && text_tie->get<bool>());
      break;
    case Wrapper::TopDefaultTrue:
      if (top != j.end()) t["tie_word_embeddings"] = *top;
      else t["tie_word_embeddings"] = false;  // until the weights say (tie_unstated)
      break;
  }
  return t;
}

}  // namespace

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> out;
    for (const ModelFamily& f : model_families()) out.emplace_back(f.architecture);
    for (const Wrapper& w : wrappers()) out.emplace_back(w.architecture);  // their text model (wrapper_of)
    return out;
  }();
  return v;
}

std::string wrapper_architecture_of(const std::string& json_text) {
  if (json_nesting_depth(json_text) > kMaxJsonDepth) return {};  // parse_model_config refuses it
  const Wrapper* w = wrapper_of(json::parse(json_text, nullptr, false));
  return w ? std::string(w->architecture) : std::string();
}

std::string text_model_config_json(const std::string& json_text) {
  if (json_nesting_depth(json_text) > kMaxJsonDepth) return json_text;
  const json j = json::parse(json_text, nullptr, false);
  const Wrapper* w = wrapper_of(j);
  return w ? text_model_of(j, *w).dump() : json_text;
}

Result<HfModelConfig> parse_model_config(const std::string& json_text, const std::string& file) {
  if (json_nesting_depth(json_text) > kMaxJsonDepth) {  // nlohmann's parser recurses per level
    Result<HfModelConfig> r;
    r.diagnostics.push_back(
        error_at(file, "", "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels; not a config.json"));
    return r;
  }
  Result<HfModelConfig> r;
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    r.diagnostics.push_back(error_at(file, "", "invalid JSON: " + text::excerpt(e.what())));
    return r;
  }
  if (!j.is_object()) {
    r.diagnostics.push_back(error_at(file, "", "expected a JSON object at the top level"));
    return r;
  }
  // A multimodal wrapper (Gemma-3 4B/12B/27B): its text model, from text_config.
  if (const Wrapper* w = wrapper_of(j)) {
    const std::string wrapper(w->architecture);
    auto tc = j.find("text_config");
    if ((tc == j.end() && w->text_config_type.empty()) || (tc != j.end() && !tc->is_object())) {
      r.diagnostics.push_back(error_at(file, "text_config",
                                       "missing or not an object; " + wrapper +
                                           " keeps its language model's settings there, and Odyssey trains that "
                                           "language model"));
      return r;
    }
    const json text = text_model_of(j, *w);
    const std::string type = text.value("model_type", std::string());
    const ModelFamily* f = family_by_model_type(type);
    // Gemma-3 and the Qwen-VL wrappers take their own text model only; Mistral-3 and LLaVA any
    // dense family.
    const bool own_only = w->text_model_type == "gemma3_text" || !w->text_config_type.empty();
    if (!f || f->is_moe() || (w->text_model_type == "gemma3_text") != (type == "gemma3_text") ||
        (own_only && type != w->text_model_type)) {
      std::vector<std::string> types;
      for (const ModelFamily& g : model_families())
        if (!g.is_moe() && g.model_type != "gemma3_text") types.emplace_back(g.model_type);
      const std::string want = !w->text_config_type.empty() ? std::string(w->text_config_type)
                               : own_only                   ? std::string("gemma3_text")
                                                            : text::join(types, ", ");
      r.diagnostics.push_back(error_at(
          file, "text_config.model_type",
          "found " + text::quoted(type) + "; Odyssey reads " + wrapper + " with a text model of model_type " + want));
      return r;
    }
    r = parse_model_config(text.dump(), file + " (text_config)");
    r.value.wrapper_architecture = wrapper;
    r.value.tie_unstated = w->tie == Wrapper::TopDefaultTrue && !j.contains("tie_word_embeddings");
    return r;
  }
  HfModelConfig& m = r.value;
  auto found = [](const json& v) { return "found " + text::excerpt(dump_json(v)); };
  auto get_int = [&](const char* key, std::int64_t* out, bool required, std::int64_t max) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (required) r.diagnostics.push_back(error_at(file, key, "missing; expected a positive integer"));
      return;
    }
    if (!it->is_number_integer() ||
        (it->is_number_unsigned() ? it->get<std::uint64_t>() == 0 : it->get<std::int64_t>() <= 0)) {
      r.diagnostics.push_back(error_at(file, key, found(*it) + ", expected a positive integer"));
      return;
    }
    if (it->is_number_unsigned() ? it->get<std::uint64_t>() > static_cast<std::uint64_t>(max)
                                 : it->get<std::int64_t>() > max) {
      r.diagnostics.push_back(error_at(file, key,
                                       found(*it) + ", more than the " + std::to_string(max) +
                                           " Odyssey accepts (far beyond any released model; a config.json this "
                                           "size describes no weights that a machine holds)"));
      return;
    }
    *out = it->get<std::int64_t>();
  };
  auto get_num = [&](const char* key, double* out) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_number()) {
      r.diagnostics.push_back(error_at(file, key, found(*it) + ", expected a number"));
      return;
    }
    *out = it->get<double>();
  };
  auto get_bool = [&](const char* key, bool* out) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_boolean()) {
      r.diagnostics.push_back(error_at(file, key, found(*it) + ", expected true or false"));
      return;
    }
    *out = it->get<bool>();
  };

  auto arch = j.find("architectures");
  if (arch != j.end() && arch->is_array() && !arch->empty() && (*arch)[0].is_string())
    m.architecture = (*arch)[0].get<std::string>();
  if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string()) m.model_type = mt->get<std::string>();
  // No architectures list (some hand-written configs): the model_type names the family.
  const ModelFamily* row =
      m.architecture.empty() ? family_by_model_type(m.model_type) : family_by_architecture(m.architecture);
  if (row) {
    m.family = std::string(row->id);
    m.architecture = std::string(row->architecture);
  } else {
    std::vector<std::string> types;
    for (const ModelFamily& f : model_families()) types.emplace_back(f.model_type);
    const bool by_type = m.architecture.empty();
    r.diagnostics.push_back(error_at(
        file, by_type ? "model_type" : "architectures",
        "found " +
            (by_type ? (m.model_type.empty() ? std::string("none (and no architectures)") : text::quoted(m.model_type))
                     : text::quoted(m.architecture)) +
            "; Odyssey trains " + text::join(supported_architectures(), ", ") + " (model_type " +
            text::join(types, ", ") + ")"));
    return r;
  }
  const ModelFamily& f = *row;
  const bool gemma = f.gemma_block;

  get_int("hidden_size", &m.hidden_size, true, kMaxHiddenSize);
  get_int("intermediate_size", &m.intermediate_size, true, kMaxIntermediateSize);
  get_int("num_hidden_layers", &m.num_hidden_layers, true, kMaxHiddenLayers);
  get_int("num_attention_heads", &m.num_attention_heads, true, kMaxAttentionHeads);
  get_int("vocab_size", &m.vocab_size, true, kMaxVocabSize);
  m.num_key_value_heads = 0;
  get_int("num_key_value_heads", &m.num_key_value_heads, false, kMaxAttentionHeads);
  m.head_dim = f.head_dim;
  get_int("head_dim", &m.head_dim, false, kMaxHeadDim);
  get_int("max_position_embeddings", &m.max_position_embeddings, false, kMaxPositionEmbeddings);
  m.rope_theta = f.rope_theta;
  get_num("rope_theta", &m.rope_theta);
  // transformers 5 writes rope settings into "rope_parameters" instead of the top level.
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object() && !j.contains("rope_theta")) {
    if (auto t = rp->find("rope_theta"); t != rp->end() && t->is_number()) m.rope_theta = t->get<double>();
  }
  m.rms_norm_eps = f.rms_norm_eps;
  get_num("rms_norm_eps", &m.rms_norm_eps);
  m.tie_word_embeddings = f.tie_word_embeddings;
  get_bool("tie_word_embeddings", &m.tie_word_embeddings);
  if (auto dt = j.find("torch_dtype"); dt != j.end() && dt->is_string()) m.torch_dtype = dt->get<std::string>();
  else if (auto dt2 = j.find("dtype"); dt2 != j.end() && dt2->is_string()) m.torch_dtype = dt2->get<std::string>();
  if (has_errors(r.diagnostics)) return r;

  if (m.num_key_value_heads == 0) m.num_key_value_heads = m.num_attention_heads;
  if (m.head_dim == 0) {
    if (m.hidden_size % m.num_attention_heads != 0) {
      r.diagnostics.push_back(error_at(file, "hidden_size",
                                       std::to_string(m.hidden_size) + " is not divisible by num_attention_heads " +
                                           std::to_string(m.num_attention_heads) + " and head_dim is not given"));
      return r;
    }
    m.head_dim = m.hidden_size / m.num_attention_heads;
  }
  if (m.head_dim > kMaxHeadDim) {
    r.diagnostics.push_back(error_at(file, "head_dim",
                                     std::to_string(m.head_dim) +
                                         " (hidden_size / num_attention_heads) is more than the " +
                                         std::to_string(kMaxHeadDim) + " Odyssey accepts"));
    return r;
  }
  if (m.num_attention_heads % m.num_key_value_heads != 0) {
    r.diagnostics.push_back(error_at(file, "num_key_value_heads",
                                     "num_attention_heads " + std::to_string(m.num_attention_heads) +
                                         " is not a multiple of num_key_value_heads " +
                                         std::to_string(m.num_key_value_heads)));
    return r;
  }

  // ---- the family's switches (the row's defaults, config/model_family.cpp) ----
  switch (f.attention_bias) {
    case AttentionBias::None: break;
    case AttentionBias::QkvAlways: m.qkv_bias = true; break;
    case AttentionBias::QkvFromKey:
      m.qkv_bias = true;
      get_bool("qkv_bias", &m.qkv_bias);
      break;
    case AttentionBias::QkvFromAttentionBias:
      m.qkv_bias = true;
      get_bool("attention_bias", &m.qkv_bias);
      break;
    case AttentionBias::AllFromKey:
      get_bool("attention_bias", &m.qkv_bias);
      m.o_bias = m.qkv_bias;
      break;
  }
  if (f.mlp_bias_key) get_bool("mlp_bias", &m.mlp_bias);
  m.qk_norm = f.qk_norm;
  if (f.olmo_block) {
    m.block_norms = BlockNorms::Post;
    m.qk_norm_whole = m.norm_weight_fp32 = m.rope_fp32 = true;
  }
  // A number that may be null (null: off); absent: the family's default.
  auto get_optional = [&](const char* key, double* out, double absent) {
    auto it = j.find(key);
    if (it == j.end()) {
      *out = absent;
      return;
    }
    if (it->is_null()) {
      *out = 0.0;
      return;
    }
    if (!it->is_number() || it->get<double>() <= 0) {
      r.diagnostics.push_back(error_at(file, key, found(*it) + ", expected a positive number or null"));
      return;
    }
    *out = it->get<double>();
  };

  const char* act_key = gemma ? "hidden_activation" : "hidden_act";
  m.hidden_act = std::string(f.activation);
  if (auto it = j.find(act_key); it != j.end() && !it->is_null()) {
    if (!it->is_string() || (it->get<std::string>() != "silu" && it->get<std::string>() != "gelu_pytorch_tanh"))
      r.diagnostics.push_back(error_at(file, act_key,
                                       found(*it) + "; Odyssey's MLP computes \"silu\" (SwiGLU) and "
                                                    "\"gelu_pytorch_tanh\" (GeGLU)"));
    else m.hidden_act = it->get<std::string>();
  }
  if (gemma) {
    m.norm_plus_one = m.embed_scale_sqrt_hidden = true;
    m.block_norms = BlockNorms::Sandwich;
    double qpas = 256.0;
    get_num("query_pre_attn_scalar", &qpas);
    if (qpas <= 0) r.diagnostics.push_back(error_at(file, "query_pre_attn_scalar", "must be positive"));
    else m.attention_scale = 1.0 / std::sqrt(qpas);
    get_optional("attn_logit_softcapping", &m.attn_logit_softcapping, f.attn_logit_softcapping);
    get_optional("final_logit_softcapping", &m.final_logit_softcapping, f.final_logit_softcapping);
  }
  if (f.granite_multipliers) {
    double attn = 1.0;
    get_num("embedding_multiplier", &m.embedding_multiplier);
    get_num("residual_multiplier", &m.residual_multiplier);
    get_num("attention_multiplier", &attn);
    get_num("logits_scaling", &m.logits_scaling);
    m.attention_scale = attn;
    if (m.logits_scaling == 0)
      r.diagnostics.push_back(error_at(file, "logits_scaling", "must not be 0 (logits are divided by it)"));
  }
  if (f.fused_projections) m.fused_qkv = m.fused_gate_up = true;
  if (f.glm_block) {
    m.block_norms = BlockNorms::GlmSandwich;
    m.fused_gate_up = m.rope_interleaved = true;
  }
  if (f.partial_rotary) {
    m.partial_rotary_factor = f.partial_rotary_factor;
    get_num("partial_rotary_factor", &m.partial_rotary_factor);
    if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object())
      if (auto prf = rp->find("partial_rotary_factor"); prf != rp->end() && prf->is_number())
        m.partial_rotary_factor = prf->get<double>();
  }
  if (m.partial_rotary_factor <= 0 || m.partial_rotary_factor > 1)
    r.diagnostics.push_back(error_at(file, "partial_rotary_factor", "must be in (0, 1]"));

  // Sliding-window attention: Mistral and Phi-3 on every layer where sliding_window is set,
  // Gemma, Ministral and a Mistral config.json with layer_types on the layers it names
  // (default: Gemma-2 every other layer from the first, Gemma-3 five of every six, Ministral and
  // Mistral every layer). Qwen2's use_sliding_window stays refused.
  if (f.sliding) {
    double w = 0;
    get_optional("sliding_window", &w, f.sliding_window);
    if (w != std::floor(w) || w > static_cast<double>(kMaxPositionEmbeddings))
      r.diagnostics.push_back(error_at(file, "sliding_window", "expected a positive integer or null"));
    else m.sliding_window = static_cast<std::int64_t>(w);
  } else if (auto it = j.find("use_sliding_window"); it != j.end() && it->is_boolean() && it->get<bool>()) {
    std::vector<std::string> windowed;
    for (const ModelFamily& g : model_families())
      if (g.sliding) windowed.emplace_back(g.architecture);
    r.diagnostics.push_back(error_at(file, "use_sliding_window",
                                     "true; Odyssey applies sliding windows to " + text::join(windowed, ", ") +
                                         " only; this architecture's decoder attends to the full context"));
  }
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    std::vector<bool> parsed;
    bool ok = it->is_array(), any_sliding = false;
    if (!ok) r.diagnostics.push_back(error_at(file, "layer_types", found(*it) + ", expected a list of layer types"));
    for (const auto& t : ok ? *it : json::array()) {
      const bool full = t.is_string() && t.get<std::string>() == "full_attention";
      const bool sliding = t.is_string() && t.get<std::string>() == "sliding_attention";
      if (full || (sliding && f.layer_types_slide)) {
        parsed.push_back(sliding);
        any_sliding = any_sliding || sliding;
        continue;
      }
      r.diagnostics.push_back(
          error_at(file, "layer_types",
                   "found " + text::excerpt(dump_json(t)) +
                       (f.layer_types_slide ? "; Odyssey supports \"full_attention\" and \"sliding_attention\""
                                            : "; Odyssey supports \"full_attention\" layers for " + m.architecture)));
      ok = false;
      break;
    }
    // Which layers slide matters only when some do (a list of full layers of another length,
    // e.g. a config.json edited to fewer layers, says nothing more).
    if (ok && any_sliding && static_cast<std::int64_t>(parsed.size()) != m.num_hidden_layers)
      r.diagnostics.push_back(error_at(
          file, "layer_types",
          std::to_string(parsed.size()) + " entries for num_hidden_layers " + std::to_string(m.num_hidden_layers)));
    else if (ok && f.layer_types_slide)
      m.layer_sliding = any_sliding ? parsed : std::vector<bool>(static_cast<std::size_t>(m.num_hidden_layers), false);
  } else if (f.sliding_period > 0) {  // Gemma-2/3, OLMo-3: every period-th layer full
    std::int64_t pattern = f.sliding_period;
    if (!f.sliding_period_key.empty())
      get_int(std::string(f.sliding_period_key).c_str(), &pattern, false, kMaxHiddenLayers);
    for (std::int64_t i = 0; i < m.num_hidden_layers; ++i) m.layer_sliding.push_back((i + 1) % pattern != 0);
  }
  if (m.sliding_window <= 0) m.layer_sliding.clear();  // null window: sliding layers attend fully
  if (f.nope_layers) {  // SmolLM3: no_rope_layers (1: rotate, 0: NoPE), else every interval-th layer unrotated
    if (auto it = j.find("no_rope_layers"); it != j.end() && !it->is_null()) {
      bool ok = it->is_array() && static_cast<std::int64_t>(it->size()) == m.num_hidden_layers;
      for (const auto& x : ok ? *it : json::array())
        ok = ok && x.is_number_integer() && (x.get<std::int64_t>() == 0 || x.get<std::int64_t>() == 1);
      if (!ok)
        r.diagnostics.push_back(error_at(file, "no_rope_layers",
                                         found(*it) + ", expected a list of " + std::to_string(m.num_hidden_layers) +
                                             " entries of 1 (the layer applies RoPE) or 0 (it does not)"));
      else
        for (const auto& x : *it) m.layer_rope.push_back(x.get<std::int64_t>() == 1);
    } else {
      std::int64_t interval = f.no_rope_layer_interval;  // a positive integer (get_int refuses others)
      get_int("no_rope_layer_interval", &interval, false, kMaxHiddenLayers);
      for (std::int64_t i = 0; i < m.num_hidden_layers; ++i) m.layer_rope.push_back((i + 1) % interval != 0);
    }
  }
  if (f.is_moe()) parse_moe(j, file, &m, &r.diagnostics);
  return r;
}

namespace {
Wrapper::Names names_of(const HfModelConfig& m) {
  for (const Wrapper& w : wrappers())
    if (w.architecture == m.wrapper_architecture) return w.names;
  return Wrapper::LanguageModel;
}
}  // namespace

std::string text_model_name(const HfModelConfig& m, const std::string& stored) {
  if (m.wrapper_architecture.empty()) return stored;
  for (const char* p : {"language_model.model.", "model.language_model."})
    if (stored.starts_with(p)) return "model." + stored.substr(std::string_view(p).size());
  if (stored == "language_model.lm_head.weight" || stored == "lm_head.weight") return "lm_head.weight";
  // Qwen2-VL / Qwen2.5-VL: the text model's own names; the vision tower under (model.)visual.
  if (names_of(m) == Wrapper::Bare && stored.starts_with("model.") && !stored.starts_with("model.visual."))
    return stored;
  return {};
}

std::string wrapper_tensor_name(const HfModelConfig& m, const std::string& text_name) {
  if (m.wrapper_architecture.empty()) return text_name;
  const Wrapper::Names names = names_of(m);
  if (names == Wrapper::Bare) return text_name;
  if (names == Wrapper::Nested)
    return text_name.starts_with("model.") ? "model.language_model." + text_name.substr(6) : text_name;
  if (text_name.starts_with("model.")) return "language_model." + text_name;
  if (text_name == "lm_head.weight") return "language_model.lm_head.weight";
  return text_name;
}

std::string wrapper_module_path(const HfModelConfig& m, const std::string& text_path) {
  if (m.wrapper_architecture.empty() || !text_path.starts_with("model.")) return text_path;
  return "model.language_model." + text_path.substr(6);
}

Result<HfModelConfig> load_model_config(const std::string& model_dir) {
  const fs::path p = fs::path(model_dir) / "config.json";
  bool ok = false;
  std::string why;
  std::string t = read_text(p, &ok, &why);
  if (!ok) {
    Result<HfModelConfig> r;
    r.diagnostics.push_back(
        error_at(p.string(), "", "cannot be read (" + why + "); a Hugging Face model directory holds config.json"));
    return r;
  }
  return parse_model_config(t, p.string());
}

}  // namespace odyssey
