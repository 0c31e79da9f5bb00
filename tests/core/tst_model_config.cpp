// config.json parsing and model location. Parameter counts are checked against the
// counts Hugging Face publishes for these models (model cards / safetensors metadata).
#include <QProcess>
#include <QtTest>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>

#include "config/model_config.h"
#include "tokenizer/chat_template.h"

using namespace odyssey;
namespace fs = std::filesystem;

namespace {
HfModelConfig shape(const std::string& name) {
  auto loc = locate_model(name, "");
  auto r = load_located_model_config(loc);
  if (!r.ok()) qFatal("%s", format_all(r.diagnostics).c_str());
  return r.value;
}
void write(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << s;
}
bool contains(const std::string& h, const std::string& n) { return h.find(n) != std::string::npos; }
// Runs a Python oracle (ODYSSEY_PYTHON) and parses the one JSON object it prints; on failure
// *error says why (its stderr, or that it did not finish in `timeout_ms`).
std::optional<nlohmann::json> json_oracle(const QStringList& args, int timeout_ms, std::string* error) {
  QProcess p;
  p.start(QStringLiteral(ODYSSEY_PYTHON), args);
  if (!p.waitForFinished(timeout_ms)) {
    *error = args.front().toStdString() + " did not finish in " + std::to_string(timeout_ms / 1000) + " s";
    return std::nullopt;
  }
  if (p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
    *error = p.readAllStandardError().toStdString();
    return std::nullopt;
  }
  return nlohmann::json::parse(p.readAllStandardOutput().toStdString());
}
// The block's norm names, sorted, as the oracle lists them (a JSON list).
QString block_norms_listed(const HfModelConfig& m) {
  const BlockNormNames n = block_norm_names(m);
  std::vector<std::string> v;
  for (const std::string* s : {&n.attention_in, &n.attention_out, &n.mlp_in, &n.mlp_out})
    if (!s->empty()) v.push_back(*s);
  std::sort(v.begin(), v.end());
  return QString::fromStdString(nlohmann::json(v).dump());
}
}  // namespace

class TstModelConfig : public QObject {
  Q_OBJECT
  fs::path tmp_;
 private slots:
  void init() {
    tmp_ = fs::temp_directory_path() / ("odyssey-mc-" + std::to_string(::getpid()));
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
    qputenv("HF_HUB_CACHE", QByteArray::fromStdString((tmp_ / "hf").string()));
    qputenv("MODELSCOPE_CACHE", QByteArray::fromStdString((tmp_ / "ms").string()));
  }
  void cleanup() { fs::remove_all(tmp_); }

  // The MoE shapes: the published totals (Qwen3-30B-A3B 30.5B with 3.3B activated,
  // Qwen3-235B-A22B 235B with 22B activated, Qwen2-57B-A14B 57.4B with 14B activated) to the
  // rounding of the model cards, and which layers are MoE.
  void moeShapes() {
    struct Want {
      const char* id;
      double total, activated;  // billions, as published
    };
    for (const Want& w : {Want{"Qwen/Qwen3-30B-A3B", 30.5, 3.3}, Want{"Qwen/Qwen3-235B-A22B", 235.0, 22.0},
                          Want{"Qwen/Qwen2-57B-A14B", 57.4, 14.0}, Want{"mistralai/Mixtral-8x7B-v0.1", 46.7, 12.9}}) {
      const HfModelConfig m = shape(w.id);
      QVERIFY2(m.is_moe(), w.id);
      QCOMPARE(m.moe_layer_count(), m.num_hidden_layers);
      const double total = static_cast<double>(m.parameter_count()) / 1e9;
      // Activated: the dense model of the same shape with the activated MLP (embeddings once:
      // the published figures count the input embedding and lm_head both).
      const double activated = (static_cast<double>(m.parameter_count()) -
                                static_cast<double>(m.num_hidden_layers) *
                                    (static_cast<double>(m.mlp_parameters(0)) - m.activated_mlp_parameters())) /
                               1e9;
      qInfo("%s: %.2fB parameters, %.2fB activated", w.id, total, activated);
      QVERIFY2(std::abs(total - w.total) / w.total < 0.01, w.id);
      QVERIFY2(std::abs(activated - w.activated) / w.activated < 0.05, w.id);
    }
    const HfModelConfig q2 = shape("Qwen/Qwen2-57B-A14B");
    QCOMPARE(q2.shared_expert_intermediate_size, std::int64_t{20480});
    QVERIFY(q2.qkv_bias);
    QVERIFY(shape("Qwen/Qwen3-30B-A3B").norm_topk_prob);
    QCOMPARE(shape("mistralai/Mixtral-8x7B-v0.1").moe_intermediate_size, std::int64_t{14336});
  }

  void publishedParameterCounts() {
    // Hugging Face model cards: Qwen2.5-7B 7.61B, Qwen2.5-0.5B 0.49B; exact counts from the
    // safetensors index "total_size" / 2 bytes (bf16).
    QCOMPARE(shape("Qwen/Qwen2.5-7B-Instruct").parameter_count(), std::int64_t(7615616512));
    QCOMPARE(shape("Qwen/Qwen2.5-0.5B-Instruct").parameter_count(), std::int64_t(494032768));
    QCOMPARE(shape("meta-llama/Llama-3.1-8B-Instruct").parameter_count(), std::int64_t(8030261248));
  }

  // The shapes added for issue 22 (resources/model-shapes/SOURCES.md) against the parameter
  // counts of the models' safetensors ("total_size" / 2 bytes, bf16); Gemma-3's are the text
  // model alone (the published totals add the SigLIP vision tower and projector, ~0.42B).
  void addedShapesParameterCounts() {
    const std::pair<const char*, std::int64_t> want[] = {
        {"mistralai/Mistral-7B-v0.3", 7248023552},
        {"mistralai/Mistral-Nemo-Base-2407", 12247782400},
        {"google/gemma-2-9b", 9241705984},
        {"google/gemma-2-27b", 27227128320},
        {"microsoft/Phi-3.5-mini-instruct", 3821079552},
        {"microsoft/phi-4", 14659507200},
        {"meta-llama/Llama-3.1-8B", 8030261248},
        {"meta-llama/Llama-3.1-70B", 70553706496},
        {"meta-llama/Llama-3.3-70B-Instruct", 70553706496},
        {"Qwen/Qwen2.5-32B", 32763876352},
        {"Qwen/Qwen2.5-72B", 72706203648},
        {"deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", 7615616512},
        {"google/gemma-3-12b-it", 11766034176},
        {"google/gemma-3-27b-it", 27009346304},
        // Qwen2.5-VL-7B's text model (the hub's flat config.json, read through the wrapper):
        // Qwen2.5-7B's sizes; the vision tower is not counted.
        {"Qwen/Qwen2.5-VL-7B-Instruct", 7615616512},
        // Mixture of experts: every expert counts (Mixtral-8x7B's safetensors total / 2 bytes).
        {"mistralai/Mixtral-8x7B-v0.1", 46702792704}};
    for (const auto& [id, count] : want) QCOMPARE(shape(id).parameter_count(), count);
    auto g2 = shape("google/gemma-2-9b");
    QCOMPARE(QString::fromStdString(g2.family), QString("gemma2"));
    QVERIFY(g2.block_norms == BlockNorms::Sandwich && g2.norm_plus_one && g2.embed_scale_sqrt_hidden &&
            g2.tie_word_embeddings);
    QCOMPARE(g2.attn_logit_softcapping, 50.0);
    QCOMPARE(g2.final_logit_softcapping, 30.0);
    QCOMPARE(g2.sliding_window, std::int64_t{4096});
    QVERIFY(g2.sliding_layer(0) && !g2.sliding_layer(1));  // Gemma2Config: even layers slide
    auto g3 = shape("google/gemma-3-27b-it");
    QCOMPARE(g3.sliding_window, std::int64_t{1024});
    int sliding = 0;
    for (std::int64_t i = 0; i < g3.num_hidden_layers; ++i) sliding += g3.sliding_layer(i);
    QCOMPARE(sliding, 52);  // five of every six of 62 layers
    QVERIFY(g3.qk_norm && !g3.sliding_layer(5));
    auto nemo = shape("mistralai/Mistral-Nemo-Base-2407");
    QCOMPARE(nemo.head_dim, std::int64_t{128});      // not hidden / heads = 160
    QCOMPARE(nemo.sliding_window, std::int64_t{0});  // null: none
    auto phi = shape("microsoft/phi-4");
    QVERIFY(phi.fused_qkv);
    QCOMPARE(linear_module_names(phi).front(), std::string("qkv_proj"));
    QVERIFY(!fused_kernel_gaps(phi).empty());
    QVERIFY(fused_kernel_gaps(shape("mistralai/Mistral-7B-v0.3")).empty());
  }

  // Every bundled shape against what transformers builds from the same file on the meta device
  // (tests/reference/shape_params_oracle.py): the parameter count to the element and the depth.
  // Where the published safetensors totals are known (above) they agree with transformers too;
  // for the others (OLMo-2/3, GLM-4-0414, SmolLM3) transformers is the only exact count.
  void bundledShapesCountAsTransformersBuildsThem() {
    const QString python = QStringLiteral(ODYSSEY_PYTHON);
    if (python.isEmpty())
      QSKIP("ODYSSEY_PYTHON is empty: configure with the reference venv's python (packaging/install-deps.sh)");
    QStringList args{QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/shape_params_oracle.py")};
    std::vector<std::pair<std::string, std::string>> ids;  // hub id, the copy's directory
    for (const auto& e : fs::directory_iterator(ODYSSEY_SOURCE_DIR "/resources/model-shapes")) {
      if (e.path().extension() != ".json") continue;
      std::string id = e.path().stem().string();
      id.replace(id.find("--"), 2, "/");
      const fs::path dir = tmp_ / "shapes" / e.path().stem();
      fs::create_directories(dir);
      fs::copy_file(e.path(), dir / "config.json");
      ids.emplace_back(id, dir.string());
      args << QString::fromStdString(dir.string());
    }
    QVERIFY(ids.size() >= 38);  // every file of the directory (38 on 2026-12-06)
    std::string error;
    const std::optional<nlohmann::json> oracle = json_oracle(args, 300000, &error);
    QVERIFY2(oracle, error.c_str());
    const nlohmann::json& got = *oracle;
    for (const auto& [id, dir] : ids) {
      const nlohmann::json& o = got.at(dir);
      QVERIFY2(!o.contains("error"), (id + ": " + o.value("error", "")).c_str());
      const HfModelConfig m = shape(id);
      qInfo("%s: %lld parameters (transformers %lld)", id.c_str(), static_cast<long long>(m.parameter_count()),
            static_cast<long long>(o.at("parameters").get<std::int64_t>()));
      QVERIFY2(m.parameter_count() == o.at("parameters").get<std::int64_t>(), id.c_str());
      QCOMPARE(m.num_hidden_layers, o.at("layers").get<std::int64_t>());
    }
    // The OLMo and GLM-4 shapes read as their families.
    const HfModelConfig olmo2 = shape("allenai/OLMo-2-1124-7B"), olmo3 = shape("allenai/Olmo-3-7B-Think-DPO");
    for (const HfModelConfig* m : {&olmo2, &olmo3})
      QVERIFY(m->block_norms == BlockNorms::Post && m->qk_norm_whole && m->norm_weight_fp32 && m->rope_fp32);
    QCOMPARE(QString::fromStdString(olmo3.family), QString("olmo3"));
    int sliding = 0;
    for (std::int64_t i = 0; i < olmo3.num_hidden_layers; ++i) sliding += olmo3.sliding_layer(i);
    QCOMPARE(sliding, 24);  // three of every four of 32 layers, window 4096
    QCOMPARE(olmo3.sliding_window, std::int64_t{4096});
    const HfModelConfig glm = shape("THUDM/GLM-4-32B-0414");
    QVERIFY(glm.block_norms == BlockNorms::GlmSandwich && glm.rope_interleaved && glm.fused_gate_up && glm.qkv_bias);
    QCOMPARE(glm.partial_rotary_factor, 0.5);
    QCOMPARE(glm.head_dim, std::int64_t{128});
  }

  // Gemma-3 12B in the layout of the hub's config.json (written after it here): a
  // Gemma3ForConditionalGeneration whose text_config names only what differs from
  // Gemma3TextConfig's defaults (transformers 4.50's to_diff_dict). Read as its text model, it is
  // the bundled google/gemma-3-12b-it shape (that config's text model with the defaults spelled
  // out, resources/model-shapes/SOURCES.md), to the parameter.
  void gemma3WrapperReadsAsItsTextModel() {
    const std::string hub = R"({
      "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
      "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
      "model_type": "gemma3",
      "text_config": {"hidden_size": 3840, "intermediate_size": 15360, "model_type": "gemma3_text",
                      "num_attention_heads": 16, "num_hidden_layers": 48, "num_key_value_heads": 8,
                      "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
      "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
      "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                        "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                        "patch_size": 14, "vision_use_head": false}})";
    auto r = parse_model_config(hub, "config.json");
    QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
    const HfModelConfig& m = r.value;
    const HfModelConfig want = shape("google/gemma-3-12b-it");
    QCOMPARE(m.wrapper_architecture, std::string("Gemma3ForConditionalGeneration"));
    QCOMPARE(m.architecture, std::string("Gemma3ForCausalLM"));
    QCOMPARE(m.family, std::string("gemma3"));
    QCOMPARE(m.parameter_count(), want.parameter_count());
    QCOMPARE(m.vocab_size, std::int64_t{262208});
    QCOMPARE(m.head_dim, want.head_dim);
    QCOMPARE(m.max_position_embeddings, want.max_position_embeddings);
    QCOMPARE(m.sliding_window, std::int64_t{1024});
    QCOMPARE(m.layer_sliding, want.layer_sliding);
    QCOMPARE(m.attention_scale, want.attention_scale);
    QCOMPARE(m.torch_dtype, std::string("bfloat16"));
    QVERIFY(m.qk_norm && m.tie_word_embeddings && m.block_norms == BlockNorms::Sandwich);
    // Tensor names both ways; the vision tower is not the text model's.
    QCOMPARE(text_model_name(m, "language_model.model.layers.3.mlp.up_proj.weight"),
             std::string("model.layers.3.mlp.up_proj.weight"));
    QCOMPARE(text_model_name(m, "model.language_model.norm.weight"), std::string("model.norm.weight"));
    QCOMPARE(text_model_name(m, "vision_tower.vision_model.post_layernorm.weight"), std::string());
    QCOMPARE(text_model_name(m, "multi_modal_projector.mm_input_projection_weight"), std::string());
    QCOMPARE(wrapper_tensor_name(m, "model.embed_tokens.weight"),
             std::string("language_model.model.embed_tokens.weight"));
    QCOMPARE(wrapper_module_path(m, "model.layers.0.self_attn.q_proj"),
             std::string("model.language_model.layers.0.self_attn.q_proj"));
    QCOMPARE(text_model_name(want, "model.norm.weight"), std::string("model.norm.weight"));  // a text model: as is
    // A wrapper without text_config is named as such.
    auto bare = parse_model_config(R"({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3"})",
                                   "config.json");
    QVERIFY(!bare.ok());
    QVERIFY2(format_all(bare.diagnostics).find("config.json: error: text_config: missing or not an object") !=
                 std::string::npos,
             format_all(bare.diagnostics).c_str());
    // A text_config value of the wrong type names its key in text_config.
    auto bad = parse_model_config(
        R"({"architectures": ["Gemma3ForConditionalGeneration"], "text_config": {"num_hidden_layers": "48"}})",
        "config.json");
    QVERIFY(!bad.ok());
    QVERIFY2(
        format_all(bad.diagnostics).find("config.json (text_config): error: num_hidden_layers") != std::string::npos,
        format_all(bad.diagnostics).c_str());
  }

  // Mistral-Small-3.1 24B in its hub layout: Mistral3ForConditionalGeneration, a Mistral text
  // model in text_config (complete there, no tie_word_embeddings anywhere) and a Pixtral vision
  // tower. Read as its text model it is the bundled shape (resources/model-shapes/SOURCES.md):
  // 23,572,403,200 parameters by the Mistral block's formula (the hub's 24B adds the tower).
  // LLaVA's text model is named by text_config.model_type (llama when absent); MoE or unknown
  // text models are refused naming text_config.model_type.
  // Qwen2.5-VL, Qwen2-VL and Qwen3-VL: the hub's flat config.json (the bundled Qwen2.5-VL-7B shape is
  // that file) and transformers 5's nested one (text_config of model_type qwen2_5_vl_text, RoPE
  // as rope_parameters) read as a Qwen2 text model; "mrope" is plain RoPE on text (its three
  // sections get one position). Tensors keep a text model's names (model.X, lm_head.weight), the
  // vision tower under visual. (model.visual. in transformers 5's layout) is not the text model;
  // PEFT sees the language model at model.language_model.
  void qwenVlWrappersReadAsTheirTextModel() {
    const HfModelConfig m = shape("Qwen/Qwen2.5-VL-7B-Instruct");
    QCOMPARE(m.wrapper_architecture, std::string("Qwen2_5_VLForConditionalGeneration"));
    QCOMPARE(m.architecture, std::string("Qwen2ForCausalLM"));
    QCOMPARE(m.rope_theta, 1000000.0);
    QCOMPARE(m.sliding_window, std::int64_t{0});  // use_sliding_window false
    QVERIFY(!m.tie_word_embeddings && m.qkv_bias);
    QCOMPARE(text_model_name(m, "model.layers.3.mlp.up_proj.weight"), std::string("model.layers.3.mlp.up_proj.weight"));
    QCOMPARE(text_model_name(m, "model.language_model.norm.weight"), std::string("model.norm.weight"));
    QCOMPARE(text_model_name(m, "lm_head.weight"), std::string("lm_head.weight"));
    QCOMPARE(text_model_name(m, "visual.blocks.0.attn.qkv.weight"), std::string());
    QCOMPARE(text_model_name(m, "model.visual.merger.mlp.0.weight"), std::string());
    QCOMPARE(wrapper_tensor_name(m, "model.embed_tokens.weight"), std::string("model.embed_tokens.weight"));
    QCOMPARE(wrapper_module_path(m, "model.layers.0.self_attn.q_proj"),
             std::string("model.language_model.layers.0.self_attn.q_proj"));
    // transformers 5's nested form, Qwen2-VL, tied through text_config.
    auto nested = parse_model_config(R"({"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
        "text_config": {"model_type": "qwen2_vl_text", "hidden_size": 64, "intermediate_size": 96,
                        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
                        "tie_word_embeddings": true,
                        "rope_parameters": {"mrope_section": [2, 3, 3], "rope_theta": 500000.0, "rope_type": "default",
                                            "type": "mrope"}},
        "vision_config": {"depth": 1, "embed_dim": 32}})",
                                     "config.json");
    QVERIFY2(nested.ok(), format_all(nested.diagnostics).c_str());
    QCOMPARE(nested.value.architecture, std::string("Qwen2ForCausalLM"));
    QCOMPARE(nested.value.rope_theta, 500000.0);
    QVERIFY(nested.value.tie_word_embeddings);
    // YaRN over the sections (Qwen2.5-VL's model card adds it for long videos): on text the
    // scaling stays, only the sections go.
    const nlohmann::json yarn =
        nlohmann::json::parse(text_model_config_json(R"({"architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "hidden_size": 64, "rope_theta": 1000000.0,
        "rope_scaling": {"type": "yarn", "mrope_section": [16, 24, 24], "factor": 4,
                         "original_max_position_embeddings": 32768}})"));
    QCOMPARE(QString::fromStdString(yarn.at("rope_scaling").dump()),
             QStringLiteral(R"({"factor":4,"original_max_position_embeddings":32768,"type":"yarn"})"));
    QCOMPARE(yarn.at("model_type").get<std::string>(), std::string("qwen2"));
    // Qwen3-VL: a Qwen3 text model (q/k norms) in text_config, interleaved mrope sections,
    // transformers 5's names (model.language_model.X, the tower under model.visual.).
    auto qwen3 = parse_model_config(R"({"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
        "tie_word_embeddings": true,
        "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 64, "intermediate_size": 96, "head_dim": 24,
                        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
                        "rope_parameters": {"mrope_interleaved": true, "mrope_section": [4, 4, 4],
                                            "rope_theta": 5000000.0, "rope_type": "default"}},
        "vision_config": {"depth": 1, "deepstack_visual_indexes": [0]}})",
                                    "config.json");
    QVERIFY2(qwen3.ok(), format_all(qwen3.diagnostics).c_str());
    const HfModelConfig& q3 = qwen3.value;
    QCOMPARE(q3.architecture, std::string("Qwen3ForCausalLM"));
    QVERIFY(q3.qk_norm && q3.tie_word_embeddings);
    QCOMPARE(q3.head_dim, std::int64_t{24});
    QCOMPARE(q3.rope_theta, 5000000.0);
    QCOMPARE(text_model_name(q3, "model.language_model.layers.1.self_attn.q_norm.weight"),
             std::string("model.layers.1.self_attn.q_norm.weight"));
    QCOMPARE(text_model_name(q3, "model.visual.deepstack_merger_list.0.norm.weight"), std::string());
    QCOMPARE(wrapper_tensor_name(q3, "model.norm.weight"), std::string("model.language_model.norm.weight"));
    QCOMPARE(wrapper_tensor_name(q3, "lm_head.weight"), std::string("lm_head.weight"));
    // A text model Odyssey does not read is named as text_config.model_type.
    auto other = parse_model_config(R"({"architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "text_config": {"model_type": "qwen3_moe", "hidden_size": 64}})",
                                    "config.json");
    QVERIFY(!other.ok());
    QVERIFY2(
        format_all(other.diagnostics)
                .find("text_config.model_type: found 'qwen3_moe'; Odyssey reads Qwen2_5_VLForConditionalGeneration "
                      "with a text model of model_type qwen2_5_vl_text") != std::string::npos,
        format_all(other.diagnostics).c_str());
  }

  void mistral3AndLlavaWrappersReadAsTheirTextModel() {
    const std::string hub = R"({
      "architectures": ["Mistral3ForConditionalGeneration"], "image_token_index": 10, "model_type": "mistral3",
      "multimodal_projector_bias": false, "projector_hidden_act": "gelu", "spatial_merge_size": 2,
      "text_config": {"attention_dropout": 0.0, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
                      "initializer_range": 0.02, "intermediate_size": 32768, "max_position_embeddings": 131072,
                      "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 40,
                      "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000000.0,
                      "sliding_window": null, "use_cache": true, "vocab_size": 131072},
      "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
      "vision_config": {"attention_dropout": 0.0, "head_dim": 64, "hidden_act": "silu", "hidden_size": 1024,
                        "image_size": 1540, "intermediate_size": 4096, "model_type": "pixtral",
                        "num_attention_heads": 16, "num_channels": 3, "num_hidden_layers": 24, "patch_size": 14,
                        "rope_theta": 10000.0},
      "vision_feature_layer": -1})";
    auto r = parse_model_config(hub, "config.json");
    QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
    const HfModelConfig& m = r.value;
    const HfModelConfig want = shape("mistralai/Mistral-Small-3.1-24B-Instruct-2503");
    QCOMPARE(m.wrapper_architecture, std::string("Mistral3ForConditionalGeneration"));
    QCOMPARE(m.architecture, std::string("MistralForCausalLM"));
    QCOMPARE(m.parameter_count(), std::int64_t{23572403200});
    QCOMPARE(want.parameter_count(), std::int64_t{23572403200});
    QCOMPARE(m.head_dim, std::int64_t{128});
    QCOMPARE(m.sliding_window, want.sliding_window);
    QCOMPARE(m.torch_dtype, std::string("bfloat16"));
    // Silent on tying: parsed untied (its lm_head is stored), the loader asks the weights.
    QVERIFY(!m.tie_word_embeddings && m.tie_unstated);
    QCOMPARE(text_model_name(m, "language_model.lm_head.weight"), std::string("lm_head.weight"));
    QCOMPARE(text_model_name(m, "vision_tower.transformer.layers.0.attention.q_proj.weight"), std::string());
    // Stated: as stated, nothing left to the weights.
    auto stated = parse_model_config(R"({"architectures": ["Mistral3ForConditionalGeneration"],
        "tie_word_embeddings": true, "text_config": {"hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512}})",
                                     "config.json");
    QVERIFY2(stated.ok(), format_all(stated.diagnostics).c_str());
    QVERIFY(stated.value.tie_word_embeddings && !stated.value.tie_unstated);
    // LLaVA: llama unless text_config names another dense family; tied when either level says so.
    const std::string llava_text = R"("hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512)";
    auto llava = parse_model_config(R"({"architectures": ["LlavaForConditionalGeneration"], "text_config": {)" +
                                        llava_text + R"(, "tie_word_embeddings": true}})",
                                    "config.json");
    QVERIFY2(llava.ok(), format_all(llava.diagnostics).c_str());
    QCOMPARE(llava.value.architecture, std::string("LlamaForCausalLM"));
    QVERIFY(llava.value.tie_word_embeddings && !llava.value.tie_unstated);
    for (const char* type : {"qwen3_moe", "ministral3", "gemma3_text"}) {
      auto refused = parse_model_config(R"({"architectures": ["LlavaForConditionalGeneration"], "text_config": {)" +
                                            llava_text + R"(, "model_type": ")" + type + R"("}})",
                                        "config.json");
      const std::string text = format_all(refused.diagnostics);
      QVERIFY2(!refused.ok() && text.find("config.json: error: text_config.model_type: found '" + std::string(type) +
                                          "'; Odyssey reads LlavaForConditionalGeneration") != std::string::npos,
               text.c_str());
    }
  }

  void familiesAndDerivedFields() {
    auto q3 = shape("Qwen/Qwen3-8B");
    QCOMPARE(QString::fromStdString(q3.family), QString("qwen3"));
    QVERIFY(q3.qk_norm);
    QVERIFY(!q3.qkv_bias && !q3.o_bias);
    QCOMPARE(q3.head_dim, std::int64_t(128));
    auto q2 = shape("Qwen/Qwen2.5-7B");
    QVERIFY(q2.qkv_bias);
    QVERIFY(!q2.o_bias);  // Qwen2Attention: bias on q/k/v only
    QCOMPARE(q2.head_dim, std::int64_t(128));
    QCOMPARE(q2.num_key_value_heads, std::int64_t(4));
  }

  // The family table (config/model_family.cpp) against transformers: for each row, a config.json
  // with only the sizes set, read by Odyssey and by transformers 5.17 (the config class fills in
  // its defaults, the modeling file builds the layers: tests/reference/family_defaults_oracle.py).
  // Every default and every switch that shapes the weights must agree.
  void familyTableAgreesWithTransformers() {
    const QString python = QStringLiteral(ODYSSEY_PYTHON);
    if (python.isEmpty())
      QSKIP("ODYSSEY_PYTHON is empty: configure with the reference venv's python (packaging/install-deps.sh)");
    QStringList args{QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/family_defaults_oracle.py")};
    std::vector<std::pair<const ModelFamily*, std::string>> files;
    for (const ModelFamily& f : model_families()) {
      // vocab 32064: Phi3Config's default pad_token_id 32000 must fall inside the embedding.
      const std::string file = (tmp_ / std::string(f.id) / "config.json").string();
      write(file, R"({"architectures":[")" + std::string(f.architecture) + R"("],"model_type":")" +
                      std::string(f.model_type) +
                      R"(","hidden_size":64,"intermediate_size":128,"num_hidden_layers":6,"num_attention_heads":4,)"
                      R"("vocab_size":32064})");
      files.emplace_back(&f, file);
      args << QString::fromStdString(file);
    }
    // layer_types marking sliding layers: Ministral windows only those, as its modeling file does,
    // and so does a Mistral config.json with layer_types (transformers' AutoConfig reads it as
    // Ministral's: Ministral-8B-2410's config.json is one).
    for (const char* id : {"ministral", "mistral"}) {
      const std::string file = (tmp_ / (std::string(id) + "_layer_types") / "config.json").string();
      const ModelFamily* f = family_by_id(id);
      write(file, R"({"architectures":[")" + std::string(f->architecture) + R"("],"model_type":")" +
                      std::string(f->model_type) +
                      R"(","hidden_size":64,"intermediate_size":128,"num_hidden_layers":6,"num_attention_heads":4,)"
                      R"("vocab_size":32064,"sliding_window":5,"layer_types":["sliding_attention","full_attention",)"
                      R"("sliding_attention","full_attention","full_attention","sliding_attention"]})");
      files.emplace_back(f, file);
      args << QString::fromStdString(file);
    }
    std::string error;
    const std::optional<nlohmann::json> read = json_oracle(args, 600000, &error);
    QVERIFY2(read, error.c_str());
    const nlohmann::json& oracle = *read;
    for (const auto& [f, file] : files) {
      const std::string id(f->id);
      auto r = load_model_config(fs::path(file).parent_path().string());
      QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
      const HfModelConfig& m = r.value;
      const auto& o = oracle.at(file);
      QCOMPARE(m.family, id);
      auto same = [&](const char* what, auto ours, auto theirs) {
        if (ours != theirs)
          QTest::qFail(qPrintable(QString("%1: %2 is %3 in Odyssey, %4 in transformers")
                                      .arg(QString::fromStdString(id), what, QVariant::fromValue(ours).toString(),
                                           QVariant::fromValue(theirs).toString())),
                       __FILE__, __LINE__);
        return ours == theirs;
      };
      bool ok =
          same("head_dim", m.head_dim, o.at("head_dim").get<std::int64_t>()) &&
          same("rms_norm_eps", m.rms_norm_eps, o.at("rms_norm_eps").get<double>()) &&
          same("tie_word_embeddings", m.tie_word_embeddings, o.at("tie_word_embeddings").get<bool>()) &&
          same("rope_theta", m.rope_theta, o.at("rope_theta").get<double>()) &&
          same("partial_rotary_factor", m.partial_rotary_factor, o.at("partial_rotary_factor").get<double>()) &&
          same("qkv_bias", m.qkv_bias, o.at("qkv_bias").get<bool>()) &&
          same("o_bias", m.o_bias, o.at("o_bias").get<bool>()) &&
          same("qk_norm", m.qk_norm, o.at("qk_norm").get<bool>()) &&
          same("the q norm's width", m.q_norm_width(), o.at("q_norm_width").get<std::int64_t>()) &&
          same("the block's norms", block_norms_listed(m), QString::fromStdString(o.at("block_norms").dump())) &&
          same("activation", QString::fromStdString(m.hidden_act),
               QString::fromStdString(o.at("activation").get<std::string>())) &&
          same("sliding_window", m.sliding_window, o.at("sliding_window").get<std::int64_t>()) &&
          same("attn_logit_softcapping", m.attn_logit_softcapping, o.at("attn_logit_softcapping").get<double>()) &&
          same("final_logit_softcapping", m.final_logit_softcapping, o.at("final_logit_softcapping").get<double>()) &&
          same("num_experts", m.num_experts, o.at("num_experts").get<std::int64_t>());
      if (!ok) return;
      for (std::int64_t i = 0; i < m.num_hidden_layers; ++i)
        if (!same("a layer's sliding window", m.sliding_layer(i),
                  o.at("sliding_layers").at(static_cast<std::size_t>(i)).get<bool>()) ||
            !same("a layer's RoPE", m.rope_layer(i), o.at("rope_layers").at(static_cast<std::size_t>(i)).get<bool>()))
          return;
      if (m.is_moe()) {
        if (!same("num_experts_per_tok", m.num_experts_per_tok, o.at("num_experts_per_tok").get<std::int64_t>()) ||
            !same("moe_intermediate_size", m.moe_intermediate_size,
                  o.at("moe_intermediate_size").get<std::int64_t>()) ||
            !same("shared_expert_intermediate_size", m.shared_expert_intermediate_size,
                  o.at("shared_expert_intermediate_size").get<std::int64_t>()))
          return;
      }
      // The built-in template a family without a chat_template gets under `template: auto`.
      auto t = chat_template_for_family(id);
      QCOMPARE(t.ok(), !f->builtin_template.empty());
      if (t.ok()) QCOMPARE(std::string(t.value.name()), std::string(f->builtin_template));
    }
    // Each id, architecture and model_type names one row.
    for (const ModelFamily& f : model_families()) {
      QCOMPARE(family_by_id(f.id), &f);
      QCOMPARE(family_by_architecture(f.architecture), &f);
      QCOMPARE(family_by_model_type(f.model_type), &f);
    }
  }

  // Which key a family reads for the bias: Qwen2's q/k/v bias is in its attention module, so a
  // config.json's attention_bias changes nothing there; Llama's applies to q/k/v and o_proj;
  // Mistral's config class has no such key.
  void biasKeysFollowTheFamily() {
    auto parse = [](const std::string& arch, const std::string& extra) {
      auto r = parse_model_config(R"({"architectures":[")" + arch +
                                      R"("],"hidden_size":64,"intermediate_size":96,"num_hidden_layers":2,)"
                                      R"("num_attention_heads":4,"vocab_size":32)" +
                                      extra + "}",
                                  "c/config.json");
      if (!r.ok()) qFatal("%s", format_all(r.diagnostics).c_str());
      return r.value;
    };
    const HfModelConfig q2 = parse("Qwen2ForCausalLM", R"(,"attention_bias":false)");
    QVERIFY(q2.qkv_bias && !q2.o_bias);
    const HfModelConfig ll = parse("LlamaForCausalLM", R"(,"attention_bias":true,"mlp_bias":true)");
    QVERIFY(ll.qkv_bias && ll.o_bias && ll.mlp_bias);
    const HfModelConfig mi = parse("MistralForCausalLM", R"(,"attention_bias":true,"mlp_bias":true)");
    QVERIFY(!mi.qkv_bias && !mi.o_bias && !mi.mlp_bias);
    const HfModelConfig q2m = parse("Qwen2MoeForCausalLM", R"(,"qkv_bias":false)");
    QVERIFY(!q2m.qkv_bias && !q2m.o_bias);
  }

  void unsupportedArchitectureListsSupported() {
    auto r = parse_model_config(R"({"architectures":["MambaForCausalLM"],"hidden_size":8})", "x/config.json");
    QVERIFY(!r.ok());
    const std::string e = format_all(r.diagnostics);
    QVERIFY2(contains(e, "x/config.json") && contains(e, "architectures") && contains(e, "MambaForCausalLM") &&
                 contains(e, "Qwen2ForCausalLM") && contains(e, "LlamaForCausalLM") &&
                 contains(e, "MistralForCausalLM") && contains(e, "Gemma2ForCausalLM") &&
                 contains(e, "Gemma3ForCausalLM") && contains(e, "Phi3ForCausalLM") &&
                 contains(e, "GraniteForCausalLM"),
             e.c_str());
    // No architectures list: the model_type names the family, or the error names that key.
    auto t = parse_model_config(R"({"model_type":"mamba","hidden_size":8})", "y/config.json");
    QVERIFY(!t.ok());
    const std::string et = format_all(t.diagnostics);
    QVERIFY2(contains(et, "y/config.json") && contains(et, "model_type") && contains(et, "mamba") &&
                 contains(et, "gemma3_text") && contains(et, "MistralForCausalLM"),
             et.c_str());
    auto m = parse_model_config(
        R"({"model_type":"mistral","hidden_size":64,"intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":32})",
        "z/config.json");
    QVERIFY2(m.ok(), format_all(m.diagnostics).c_str());
    QCOMPARE(m.value.architecture, std::string("MistralForCausalLM"));
    QCOMPARE(m.value.sliding_window, std::int64_t{4096});  // MistralConfig's default when the key is absent
  }

  void badJsonAndTypes() {
    QVERIFY(contains(format_all(parse_model_config("{not json", "c.json").diagnostics), "invalid JSON"));
    QVERIFY(contains(format_all(parse_model_config("[1]", "c.json").diagnostics), "JSON object"));
    auto r = parse_model_config(
        R"({"architectures":["Qwen2ForCausalLM"],"hidden_size":"64","intermediate_size":1,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10})",
        "c.json");
    QVERIFY(contains(format_all(r.diagnostics), "hidden_size: found \"64\", expected a positive integer"));
    auto r2 = parse_model_config(
        R"({"architectures":["Qwen2ForCausalLM"],"hidden_size":64,"intermediate_size":1,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":3,"vocab_size":10})",
        "c.json");
    QVERIFY(contains(format_all(r2.diagnostics), "num_key_value_heads"));
    auto r3 = parse_model_config(R"({"architectures":["Qwen2ForCausalLM"]})", "c.json");
    QVERIFY(contains(format_all(r3.diagnostics), "hidden_size: missing"));
  }

  void locatesDirectoryRelativeToBase() {
    write(tmp_ / "presets" / "m" / "config.json", "{}");
    auto loc = locate_model("m", (tmp_ / "presets").string());
    QCOMPARE(loc.source, ModelLocation::Directory);
    QCOMPARE(QString::fromStdString(loc.path), QString::fromStdString((tmp_ / "presets" / "m").string()));
  }

  void locatesHuggingFaceCacheByRefsMain() {
    const fs::path root = tmp_ / "hf" / "models--Org--Tiny";
    write(root / "snapshots" / "old" / "config.json", "{}");
    write(root / "snapshots" / "abc123" / "config.json", "{}");
    write(root / "refs" / "main", "abc123\n");
    auto loc = locate_model("Org/Tiny", "");
    QCOMPARE(loc.source, ModelLocation::HuggingFaceCache);
    QVERIFY(contains(loc.path, "abc123"));
    auto all = cached_models();
    QVERIFY(std::any_of(all.begin(), all.end(), [](auto& p) { return p.first == "Org/Tiny"; }));
  }

  void locatesModelScopeCache() {
    write(tmp_ / "ms" / "models" / "Org" / "Other" / "config.json", "{}");
    auto loc = locate_model("Org/Other", "");
    QCOMPARE(loc.source, ModelLocation::ModelScopeCache);
  }

  void bundledShapeAndNotFound() {
    QCOMPARE(locate_model("Qwen/Qwen2.5-14B-Instruct", "").source, ModelLocation::BundledShape);
    QCOMPARE(locate_model("Nobody/Nothing", "").source, ModelLocation::NotFound);
    QCOMPARE(locate_model("/no/such/dir", "").source, ModelLocation::NotFound);
    QCOMPARE(locate_model("../escape/x", "").source, ModelLocation::NotFound);
  }

  // Issue 21 item 3/11: num_hidden_layers 10^9 passed validation and grew run and plan past
  // 4 GB; vocab_size 2^40 ended in an allocator message. Sizes beyond any model are refused
  // while config.json is read, naming the file, the key, the value and the bound.
  void absurdSizesAreRefusedWithTheKey() {
    const std::string base =
        R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": LAYERS,
            "vocab_size": VOCAB})";
    auto with = [&](const std::string& layers, const std::string& vocab) {
      std::string t = base;
      t.replace(t.find("LAYERS"), 6, layers);
      t.replace(t.find("VOCAB"), 5, vocab);
      return parse_model_config(t, "m/config.json");
    };
    QVERIFY(with("2", "512").ok());
    auto r = with("1000000000", "512");
    QVERIFY(!r.ok());
    QVERIFY2(contains(format_all(r.diagnostics),
                      "m/config.json: error: num_hidden_layers: found 1000000000, more than the " +
                          std::to_string(kMaxHiddenLayers)),
             format_all(r.diagnostics).c_str());
    r = with("2", "1099511627776");
    QVERIFY2(contains(format_all(r.diagnostics), "error: vocab_size: found 1099511627776, more than the 16777216"),
             format_all(r.diagnostics).c_str());
    r = with("2", "18446744073709551615");  // unsigned in JSON: must not wrap to -1
    QVERIFY2(contains(format_all(r.diagnostics), "error: vocab_size: found 18446744073709551615, more than"),
             format_all(r.diagnostics).c_str());
    // Every size the planner multiplies stays representable at the bounds.
    HfModelConfig m;
    m.hidden_size = kMaxHiddenSize, m.intermediate_size = kMaxIntermediateSize, m.num_hidden_layers = kMaxHiddenLayers;
    m.num_attention_heads = kMaxAttentionHeads, m.num_key_value_heads = kMaxAttentionHeads, m.head_dim = kMaxHeadDim;
    m.vocab_size = kMaxVocabSize;
    QVERIFY(m.parameter_count() > 0);
  }
};

QTEST_APPLESS_MAIN(TstModelConfig)
#include "tst_model_config.moc"
