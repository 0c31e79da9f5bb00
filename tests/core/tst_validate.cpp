// Cross-field validation: each rule fires with the key's file and line and a message
// that says what to change; valid layouts pass.
#include <QtTest>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <QElapsedTimer>
#include <QTemporaryDir>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>

#include "config/validate.h"
#include "model/weights_check.h"
#include "tokenizer/tokenizer.h"

using namespace odyssey;

namespace {

HfModelConfig qwen7b() {  // Qwen2.5-7B: 28 query heads, 4 KV heads
  auto r = load_located_model_config(locate_model("Qwen/Qwen2.5-7B-Instruct", ""));
  return r.value;
}
HfModelConfig qwen05b() {  // Qwen2.5-0.5B: 14 query heads, 2 KV heads
  return load_located_model_config(locate_model("Qwen/Qwen2.5-0.5B-Instruct", "")).value;
}

LoadedConfig parse(const std::string& yaml) {
  auto r = load_preset_text("model: m\ndataset: [d.jsonl]\n" + yaml, "v.yaml", "");
  if (!r.ok()) qFatal("%s", format_all(r.diagnostics).c_str());
  return r.value;
}

std::string of_severity(const Diagnostics& d, Severity severity) {
  std::string s;
  for (const auto& x : d)
    if (x.severity == severity) s += x.format() + "\n";
  return s;
}
std::string errors(const Diagnostics& d) { return of_severity(d, Severity::Error); }
std::string warnings(const Diagnostics& d) { return of_severity(d, Severity::Warning); }
bool contains(const std::string& h, const std::string& n) { return h.find(n) != std::string::npos; }

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kQuickstartModel = ODYSSEY_SOURCE_DIR "/resources/quickstart/model";
const std::string kQuickstartData = ODYSSEY_SOURCE_DIR "/resources/quickstart/data/train.jsonl";  // 2000 records

// A copy of the quickstart model (Qwen2, 4 layers, hidden 128, vocab 1024, real weights and
// tokenizer) in `dir`, whose config.json or tokenizer.json a test then edits.
std::string copy_model(const QTemporaryDir& dir, const std::string& name) {
  const fs::path to = fs::path(dir.path().toStdString()) / name;
  fs::create_directories(to);
  fs::copy(kQuickstartModel, to, fs::copy_options::recursive);
  return to.string();
}
void edit_json(const std::string& file, const std::function<void(json&)>& f) {
  json j = json::parse(std::ifstream(file));
  f(j);
  std::ofstream(file, std::ios::trunc) << j.dump(2);
}
LoadedConfig preset_for(const std::string& model, const std::string& dataset) {
  // chatml: the quickstart model's template (its tokenizer_config.json's is not one of the
  // built-in renderers, which validate refuses under "auto" as run does).
  auto r = load_preset_text("model: '" + model + "'\ndataset: ['" + dataset + "']\ndevice: cpu\ntemplate: chatml\n",
                            "t.yaml", "");
  if (!r.ok()) qFatal("%s", format_all(r.diagnostics).c_str());
  return r.value;
}

// Runs `f` with a deadline: should it block opening `fifo` (the bug), a writer is opened to
// release it, so that the test fails instead of hanging.
template <typename F>
auto before_deadline(F f, const std::string& fifo, qint64* ms) {
  QElapsedTimer t;
  t.start();
  auto fut = std::async(std::launch::async, f);
  if (fut.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  auto v = fut.get();
  *ms = t.elapsed();
  return v;
}

}  // namespace

class TstValidate : public QObject {
  Q_OBJECT
 private slots:
  void validLayoutsPass_data() {
    QTest::addColumn<QString>("yaml");
    QTest::newRow("single") << "";
    QTest::newRow("ulysses2") << "gpu_ids: [0,1]\nsequence_parallel_size: 2\nmax_length: 32768\n";
    QTest::newRow("ulysses4 dp2") << "nproc_per_node: 8\nsequence_parallel_size: 4\nmax_length: 65536\n";
    QTest::newRow("hybrid 4x2") << "nproc_per_node: 8\nsequence_parallel_size: 8\npacking: true\nmax_length: 65536\n";
    QTest::newRow("zero2 offload") << "tuner_type: full\nnproc_per_node: 2\nzero_stage: 2\noffload_optimizer: true\n";
    QTest::newRow("galore") << "tuner_type: full\nuse_galore: true\ngalore_rank: 64\n";
  }
  void validLayoutsPass() {
    QFETCH(QString, yaml);
    auto m = qwen7b();
    auto d = validate_config(parse(yaml.toStdString()), &m);
    QVERIFY2(errors(d).empty(), errors(d).c_str());
  }

  void gcdRuleSplitsUlyssesAndRing() {
    auto lc = parse("nproc_per_node: 8\nsequence_parallel_size: 8\npacking: true\nmax_length: 65536\n");
    auto p = parallel_layout(lc.config, qwen7b().num_key_value_heads);
    QCOMPARE(p.ulysses, std::int64_t(4));  // gcd(4 KV heads, 8)
    QCOMPARE(p.ring, std::int64_t(2));
    QCOMPARE(p.dp, std::int64_t(1));
    QCOMPARE(sequence_pad_multiple(p), std::int64_t(16));  // 4 x 2 zigzag chunks x 2
  }

  void ringNeedsPackingAndFlash() {
    auto m = qwen7b();
    auto e = errors(validate_config(parse("nproc_per_node: 8\nsequence_parallel_size: 8\nmax_length: 65536\n"), &m));
    QVERIFY2(contains(e, "v.yaml:4:") && contains(e, "ring attention needs packing"), e.c_str());
    e = errors(validate_config(
        parse("nproc_per_node: 8\nsequence_parallel_size: 8\npacking: true\nattn_impl: sdpa\nmax_length: 65536\n"),
        &m));
    QVERIFY2(contains(e, "attn_impl") && contains(e, "flash"), e.c_str());
  }

  void maxLengthPaddingRuleSuggestsValues() {
    auto m = qwen7b();
    auto e = errors(validate_config(parse("gpu_ids: [0,1]\nsequence_parallel_size: 2\nmax_length: 32769\n"), &m));
    QVERIFY2(contains(e, "v.yaml:5:") && contains(e, "max_length") && contains(e, "use 32768 or 32770"), e.c_str());
    e = errors(
        validate_config(parse("nproc_per_node: 8\nsequence_parallel_size: 8\npacking: true\nmax_length: 65544\n"), &m));
    QVERIFY2(contains(e, "not a multiple of 16") && contains(e, "zigzag"), e.c_str());
  }

  void headsAgainstUlyssesDegree() {
    auto m = qwen7b();
    auto e = errors(validate_config(
        parse("nproc_per_node: 8\nsequence_parallel_size: 8\nulysses_size: 8\nmax_length: 65536\n"), &m));
    QVERIFY2(contains(e, "ulysses_size") && contains(e, "28 attention heads"), e.c_str());
    auto small = qwen05b();  // 14 heads, 2 KV heads: KV replication is fine, heads are not
    e = errors(validate_config(
        parse("nproc_per_node: 4\nsequence_parallel_size: 4\nulysses_size: 4\nmax_length: 4096\n"), &small));
    QVERIFY2(contains(e, "does not divide the model's 14 attention heads"), e.c_str());
    e = errors(validate_config(
        parse("nproc_per_node: 6\nsequence_parallel_size: 6\nulysses_size: 3\npacking: true\nmax_length: 6144\n"), &m));
    QVERIFY2(contains(e, "neither divide"), e.c_str());
  }

  // Ring attention computes soft-capped and windowed layers with the reference ring
  // (tst_sequence_parallel checks it against one process): valid, with a warning naming
  // config.json's key and the fused alternative (Ulysses); a window at least max_length long
  // hides nothing, Ulysses alone warns of nothing.
  void ringWarnsOfTheReferencePathForWindowsAndSoftcapping() {
    auto shape = [](const char* id) { return load_located_model_config(locate_model(id, "")).value; };
    const std::string ring = "gpu_ids: [0,1]\nsequence_parallel_size: 2\nulysses_size: 1\npacking: true\n";
    const std::string ulysses = "gpu_ids: [0,1]\nsequence_parallel_size: 2\n";
    auto g2 = shape("google/gemma-2-9b");
    auto d = validate_config(parse(ring + "max_length: 4096\n"), &g2);
    QVERIFY2(!contains(errors(d), "sequence_parallel_size"), errors(d).c_str());
    QVERIFY2(contains(warnings(d), "sequence_parallel_size") && contains(warnings(d), "ring degree of 2") &&
                 contains(warnings(d), "attn_logit_softcapping") && contains(warnings(d), "reference ring attention"),
             warnings(d).c_str());
    d = validate_config(parse(ulysses + "max_length: 4096\n"), &g2);
    QVERIFY2(!contains(warnings(d) + errors(d), "softcapping"), (warnings(d) + errors(d)).c_str());
    auto mistral = shape("mistralai/Mistral-7B-v0.3");
    mistral.sliding_window = 4096;  // v0.1's window
    d = validate_config(parse(ring + "max_length: 32768\n"), &mistral);
    QVERIFY2(!contains(errors(d), "sequence_parallel_size"), errors(d).c_str());
    QVERIFY2(contains(warnings(d), "sliding_window 4096") && contains(warnings(d), "Ulysses alone"),
             warnings(d).c_str());
    d = validate_config(parse(ring + "max_length: 4096\n"), &mistral);
    QVERIFY2(!contains(warnings(d) + errors(d), "sliding"), (warnings(d) + errors(d)).c_str());
    d = validate_config(parse(ulysses + "max_length: 32768\n"), &mistral);
    QVERIFY2(!contains(warnings(d) + errors(d), "sliding"), (warnings(d) + errors(d)).c_str());
  }

  // PEFT's rule: target_modules must name at least one module of the model (Phi-3 has qkv_proj
  // and gate_up_proj, not q_proj ... up_proj).
  void loraTargetsMustExistInTheModel() {
    auto phi = load_located_model_config(locate_model("microsoft/phi-4", "")).value;
    auto e = errors(validate_config(parse("target_modules: [q_proj, v_proj]\n"), &phi));
    QVERIFY2(contains(e, "target_modules") && contains(e, "qkv_proj") && contains(e, "Phi3ForCausalLM"), e.c_str());
    e = errors(validate_config(parse("target_modules: [qkv_proj, o_proj]\n"), &phi));
    QVERIFY2(!contains(e, "target_modules"), e.c_str());
    e = errors(validate_config(parse("target_modules: [all-linear]\n"), &phi));
    QVERIFY2(!contains(e, "target_modules"), e.c_str());
  }

  // Mixture-of-experts keys (docs/moe.md) against a MoE shape and a dense one.
  void moeKeys() {
    auto moe = load_located_model_config(locate_model("Qwen/Qwen3-30B-A3B", "")).value;
    auto dense = qwen7b();
    const std::string lora0 = "lora_dropout: 0\n";
    QVERIFY(errors(validate_config(parse(lora0 + "target_parameters: [mlp.experts.gate_up_proj, down_proj]\n"), &moe))
                .empty());
    auto e = errors(validate_config(parse("target_parameters: [mlp.experts.down_proj]\n"), &moe));  // dropout 0.05
    QVERIFY2(contains(e, "target_parameters") && contains(e, "lora_dropout: 0"), e.c_str());
    e = errors(validate_config(parse(lora0 + "target_parameters: [mlp.gate.weight]\n"), &moe));
    QVERIFY2(contains(e, "'mlp.gate.weight'") || contains(e, "mlp.gate.weight"), e.c_str());
    QVERIFY2(contains(e, "expected a stacked expert parameter"), e.c_str());
    e = errors(validate_config(parse(lora0 + "target_parameters: [mlp.experts.down_proj]\n"), &dense));
    QVERIFY2(contains(e, "Qwen2ForCausalLM has no mixture-of-experts layers"), e.c_str());
    e = errors(validate_config(parse("tuner_type: full\ntarget_parameters: [mlp.experts.down_proj]\n"), &moe));
    QVERIFY2(contains(e, "target_parameters: is a LoRA setting"), e.c_str());
    // Expert parallelism: divides sp and the experts, MoE only, plain AdamW, no resume.
    const std::string sp4 = "nproc_per_node: 4\nsequence_parallel_size: 4\nmax_length: 4096\n";
    QVERIFY(errors(validate_config(parse(sp4 + "expert_parallel_size: 4\n"), &moe)).empty());
    e = errors(validate_config(parse(sp4 + "expert_parallel_size: 3\n"), &moe));
    QVERIFY2(contains(e, "expert_parallel_size") && contains(e, "does not divide sequence_parallel_size 4"), e.c_str());
    e = errors(validate_config(parse(sp4 + "expert_parallel_size: 4\n"), &dense));
    QVERIFY2(contains(e, "has no mixture-of-experts layers; use 1"), e.c_str());
    e = errors(validate_config(parse(sp4 + "expert_parallel_size: 2\nzero_stage: 2\n"), &moe));
    QVERIFY2(contains(e, "plain AdamW"), e.c_str());
    auto mixtral = load_located_model_config(locate_model("mistralai/Mixtral-8x7B-v0.1", "")).value;
    e = errors(validate_config(
        parse("nproc_per_node: 16\nsequence_parallel_size: 16\nmax_length: 4096\nexpert_parallel_size: 16\n"),
        &mixtral));
    QVERIFY2(contains(e, "does not divide the model's 8 experts"), e.c_str());
    // 4-bit experts split over ranks in whole blocks of 64 values (docs/moe.md, "4-bit experts").
    QVERIFY(errors(validate_config(parse(sp4 + "expert_parallel_size: 4\nquant_bits: 4\n"), &moe)).empty());
    auto odd = moe;
    odd.hidden_size = 2040, odd.moe_intermediate_size = 763;  // 2040 x 763 values an expert's down_proj
    e = errors(validate_config(parse(sp4 + "expert_parallel_size: 4\nquant_bits: 4\n"), &odd));
    QVERIFY2(contains(e, "1556520 values") && contains(e, "not whole 4-bit blocks of 64"), e.c_str());
    QVERIFY(errors(validate_config(parse(sp4 + "expert_parallel_size: 4\n"), &odd)).empty());
    // Router keys on a dense model change nothing: said, not refused.
    auto d = validate_config(parse("router_aux_loss_coef: 0.01\n"), &dense);
    QVERIFY(errors(d).empty());
    QVERIFY(std::any_of(d.begin(), d.end(),
                        [](const Diagnostic& x) { return x.format().find("no routers") != std::string::npos; }));
  }

  void explicitUlyssesMustDivide() {
    auto m = qwen7b();
    auto e = errors(validate_config(
        parse("nproc_per_node: 4\nsequence_parallel_size: 4\nulysses_size: 3\nmax_length: 4096\n"), &m));
    QVERIFY2(contains(e, "does not divide sequence_parallel_size 4"), e.c_str());
  }

  void processCountMustBeMultipleOfSp() {
    auto e = errors(validate_config(parse("sequence_parallel_size: 2\n"), nullptr));
    QVERIFY2(contains(e, "with 1 processes"), e.c_str());
    e = errors(validate_config(parse("gpu_ids: [0,1]\nnproc_per_node: 3\n"), nullptr));
    QVERIFY2(contains(e, "gpu_ids lists 2"), e.c_str());
    e = errors(validate_config(parse("gpu_ids: [1,1]\n"), nullptr));
    QVERIFY2(contains(e, "listed twice"), e.c_str());
  }

  void loraFieldsOnlyWithLora() {
    auto e = errors(validate_config(parse("tuner_type: full\nlora_rank: 16\n"), nullptr));
    QVERIFY2(contains(e, "v.yaml:4:") && contains(e, "lora_rank: is a LoRA setting"), e.c_str());
    // defaults of LoRA fields are fine with full, also when written out (a complete saved preset)
    QVERIFY(errors(validate_config(parse("tuner_type: full\n"), nullptr)).empty());
    QVERIFY(
        errors(validate_config(parse("tuner_type: full\nlora_rank: 8\nuse_galore: false\ngalore_rank: 128\n"), nullptr))
            .empty());
    TrainConfig full;
    full.tuner_type = "full";
    full.model = "m";
    full.dataset = {"d"};
    auto saved = load_preset_text(save_preset_text(full), "saved.yaml", "");
    QVERIFY(errors(validate_config(saved.value, nullptr)).empty());
  }

  void fourBitBaseRules() {
    // QLoRA (docs/qlora.md): 0 or 4 bits, LoRA only, 4-bit keys only with quant_bits 4, one dtype.
    QVERIFY(errors(validate_config(parse("quant_bits: 4\n"), nullptr)).empty());
    QVERIFY(errors(validate_config(parse("quant_bits: 4\nbnb_4bit_quant_type: fp4\nbnb_4bit_use_double_quant: false\n"
                                         "bnb_4bit_compute_dtype: bfloat16\ntorch_dtype: bfloat16\n"),
                                   nullptr))
                .empty());
    auto e = errors(validate_config(parse("quant_bits: 4\ntuner_type: full\n"), nullptr));
    QVERIFY2(contains(e, "quant_bits: a 4-bit base is frozen, so it needs tuner_type: lora"), e.c_str());
    e = errors(validate_config(parse("quant_bits: 8\n"), nullptr));
    QVERIFY2(contains(e, "8-bit bases are not supported"), e.c_str());
    e = errors(validate_config(parse("quant_bits: 3\n"), nullptr));
    QVERIFY2(contains(e, "expected 0 (16-bit base) or 4"), e.c_str());
    e = errors(validate_config(parse("bnb_4bit_quant_type: fp4\n"), nullptr));
    QVERIFY2(contains(e, "bnb_4bit_quant_type: is a 4-bit setting but quant_bits is 0"), e.c_str());
    e = errors(
        validate_config(parse("quant_bits: 4\ntorch_dtype: float32\nbnb_4bit_compute_dtype: bfloat16\n"), nullptr));
    QVERIFY2(contains(e, "bnb_4bit_compute_dtype: found bfloat16 with torch_dtype float32"), e.c_str());
    auto hqq = load_preset_text("model: m\ndataset: [d.jsonl]\nquant_bits: 4\nquant_method: hqq\n", "v.yaml", "");
    QVERIFY2(!hqq.ok() && contains(format_all(hqq.diagnostics), "v.yaml:4:") &&
                 contains(format_all(hqq.diagnostics), "quant_method"),
             format_all(hqq.diagnostics).c_str());
  }

  void optimizerCombinations() {
    QVERIFY(contains(errors(validate_config(parse("use_galore: true\n"), nullptr)), "needs tuner_type: full"));
    QVERIFY(
        contains(errors(validate_config(parse("tuner_type: full\ngalore_rank: 8\n"), nullptr)), "use_galore is false"));
    QVERIFY(contains(errors(validate_config(parse("offload_optimizer: true\n"), nullptr)), "set zero_stage: 2"));
    // One process: ZeRO shards nothing; with offload it is ZeRO-Offload (valid), without it an
    // error naming the way out.
    QVERIFY(errors(validate_config(parse("zero_stage: 2\noffload_optimizer: true\n"), nullptr)).empty());
    QVERIFY(
        errors(validate_config(parse("tuner_type: full\nzero_stage: 1\noffload_optimizer: true\n"), nullptr)).empty());
    QVERIFY(contains(errors(validate_config(parse("zero_stage: 2\n"), nullptr)), "offload_optimizer: true"));
    QVERIFY(contains(errors(validate_config(
                         parse("tuner_type: full\nuse_galore: true\nzero_stage: 2\nnproc_per_node: 2\n"), nullptr)),
                     "GaLore"));
  }

  // optimizer_dtype (docs/optimizers.md): fp32 masters on one process without ZeRO, or under
  // ZeRO; bf16 not under ZeRO; fp32 not with GaLore; over several processes fp32 asks for ZeRO by
  // name; with LoRA (fp32 adapters) either is a warning.
  void optimizerDtypeRules() {
    QVERIFY(errors(validate_config(parse("tuner_type: full\noptimizer_dtype: fp32\n"), nullptr)).empty());
    QVERIFY(errors(validate_config(parse("tuner_type: full\noptimizer_dtype: bf16\n"), nullptr)).empty());
    QVERIFY(errors(validate_config(parse("tuner_type: full\noptimizer_dtype: fp32\nzero_stage: 2\nnproc_per_node: 2\n"),
                                   nullptr))
                .empty());
    QVERIFY(
        contains(errors(validate_config(
                     parse("tuner_type: full\noptimizer_dtype: bf16\nzero_stage: 2\nnproc_per_node: 2\n"), nullptr)),
                 "optimizer_dtype: found bf16 with zero_stage 2"));
    QVERIFY(
        contains(errors(validate_config(parse("tuner_type: full\noptimizer_dtype: fp32\nuse_galore: true\n"), nullptr)),
                 "optimizer_dtype: found fp32 with use_galore"));
    const std::string two =
        errors(validate_config(parse("tuner_type: full\noptimizer_dtype: fp32\nnproc_per_node: 2\n"), nullptr));
    QVERIFY2(contains(two, "optimizer_dtype: found fp32 with zero_stage 0 over 2 processes") &&
                 contains(two, "set zero_stage: 1 or 2"),
             two.c_str());
    const Diagnostics lora = validate_config(parse("tuner_type: lora\noptimizer_dtype: bf16\n"), nullptr);
    QVERIFY(errors(lora).empty());
    QVERIFY2(contains(warnings(lora), "LoRA adapters train in fp32"), warnings(lora).c_str());
    QVERIFY(!load_preset_text("model: m\ndataset: [d.jsonl]\noptimizer_dtype: fp16\n", "v.yaml", "").ok());
  }

  // Checkpoint segments: a kept attention output is a checkpoint of its own (keep_attention:
  // all refuses more layers per input), a policy with no two checkpointed layers side by side
  // makes the key moot (a warning), and more layers than the model has is an error naming them.
  void layersPerCheckpointRules() {
    QVERIFY(contains(errors(validate_config(parse("layers_per_checkpoint: 2\nkeep_attention: all\n"), nullptr)),
                     "layers_per_checkpoint: found 2 with keep_attention: all"));
    QVERIFY(errors(validate_config(parse("layers_per_checkpoint: 2\n"), nullptr)).empty());
    QVERIFY(errors(validate_config(parse("layers_per_checkpoint: 1\nkeep_attention: all\n"), nullptr)).empty());
    const Diagnostics every =
        validate_config(parse("layers_per_checkpoint: 3\nactivation_checkpointing: every:2\n"), nullptr);
    QVERIFY(errors(every).empty());
    QVERIFY(std::any_of(every.begin(), every.end(), [](const Diagnostic& d) {
      return d.severity == Severity::Warning && contains(d.format(), "layers_per_checkpoint") &&
             contains(d.format(), "no effect");
    }));
    const HfModelConfig m = qwen05b();  // 24 layers
    QVERIFY(contains(errors(validate_config(parse("layers_per_checkpoint: 25\n"), &m)),
                     "found 25, more than the model's 24 layers"));
    QVERIFY(errors(validate_config(parse("layers_per_checkpoint: 24\n"), &m)).empty());
    QVERIFY(contains(
        format_all(
            load_preset_text("model: m\ndataset: [d.jsonl]\nlayers_per_checkpoint: -1\n", "v.yaml", "").diagnostics),
        "layers_per_checkpoint"));
  }

  void cpuRules() {
    auto e = errors(validate_config(parse("device: cpu\nattn_impl: flash_attn\ngpu_ids: [0]\n"), nullptr));
    QVERIFY(contains(e, "attn_impl: found flash_attn with device cpu"));
    QVERIFY(contains(e, "gpu_ids: device is cpu"));
  }

  void stepsAndRates() {
    QVERIFY(contains(errors(validate_config(parse("max_steps: 0\n"), nullptr)), "max_steps"));
    QVERIFY(contains(errors(validate_config(parse("num_train_epochs: 0\n"), nullptr)), "train nothing"));
    QVERIFY(contains(errors(validate_config(parse("max_steps: 10\nwarmup_steps: 10\n"), nullptr)), "warmup_steps"));
  }

  void defaultKeyErrorsSayDefault() {
    // sequence_parallel_size set, max_length at its default 2048 is fine for sp 2; use 3
    auto lc = parse("nproc_per_node: 3\nsequence_parallel_size: 3\n");
    auto e = errors(validate_config(lc, nullptr));
    QVERIFY2(contains(e, "max_length") && contains(e, "at its default"), e.c_str());
  }

  void missingFilesWarnOrFail() {
    auto lc = parse("");
    auto soft = check_config(lc, false);
    QVERIFY2(soft.ok(), format_all(soft.diagnostics).c_str());
    QVERIFY(contains(format_all(soft.diagnostics), "warning: model"));
    auto hard = check_config(lc, true);
    QVERIFY(!hard.ok());
    QVERIFY(contains(errors(hard.diagnostics), "dataset: found 'd.jsonl': no such file"));
  }

  void bundledShapeIsNoteButNotTrainable() {
    auto r = load_preset_text("model: Qwen/Qwen2.5-7B-Instruct\ndataset: [x]\n", "b.yaml", "");
    auto soft = check_config(r.value, false);
    QVERIFY(soft.model.has_value());
    QVERIFY(soft.ok());
    auto hard = check_config(r.value, true);
    QVERIFY(contains(errors(hard.diagnostics), "needs the weights on disk"));
  }

  // A multimodal wrapper's head is checked in both layouts it ships in: the hub's older one
  // (language_model.lm_head.weight) and transformers 5's (lm_head.weight at the top, the text
  // model under model.language_model.); a vocab_size the head disagrees with is an error at
  // validate, naming text_config.vocab_size and the tensor, not a failure of the loader later.
  void wrapperHeadCheckedInEitherLayout() {
    json config;
    config["architectures"] = {"Mistral3ForConditionalGeneration"};
    config["text_config"] = {{"hidden_size", 64},        {"intermediate_size", 96},  {"num_hidden_layers", 2},
                             {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 16},
                             {"vocab_size", 512}};
    auto cfg = parse_model_config(config.dump(), "config.json");
    QVERIFY2(cfg.ok(), format_all(cfg.diagnostics).c_str());
    // A header of two BF16 tensors, the embedding [512, 64] and the head [rows, 64].
    auto header = [](const std::string& embed, const std::string& head, std::int64_t head_rows) {
      const std::int64_t embed_bytes = 512 * 64 * 2, head_bytes = head_rows * 64 * 2;
      json h;
      h[embed] = {{"dtype", "BF16"}, {"shape", {512, 64}}, {"data_offsets", {0, embed_bytes}}};
      h[head] = {
          {"dtype", "BF16"}, {"shape", {head_rows, 64}}, {"data_offsets", {embed_bytes, embed_bytes + head_bytes}}};
      std::string text = h.dump();
      while (text.size() % 8 != 0) text += ' ';
      std::string bytes(8, '\0');
      for (std::size_t i = 0; i < 8; ++i) bytes[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
      bytes += text;
      auto r = parse_safetensors_header(bytes, bytes.size() + static_cast<std::uint64_t>(embed_bytes + head_bytes),
                                        "model.safetensors");
      if (!r.ok()) qFatal("%s", format_all(r.diagnostics).c_str());
      return r.value;
    };
    const std::pair<std::string, std::string> layouts[] = {
        {"language_model.model.embed_tokens.weight", "language_model.lm_head.weight"},
        {"model.language_model.embed_tokens.weight", "lm_head.weight"}};
    for (const auto& [embed, head] : layouts) {
      const SafetensorsHeader good = header(embed, head, 512), bad = header(embed, head, 500);
      QVERIFY(check_config_against_weights(cfg.value, "config.json", {{"model.safetensors", &good}}).empty());
      const std::string e =
          format_all(check_config_against_weights(cfg.value, "config.json", {{"model.safetensors", &bad}}));
      QVERIFY2(contains(e, "config.json: error: text_config.vocab_size: found 512, but the weights say 500: " + head +
                               " has shape [500, 64] in model.safetensors"),
               e.c_str());
    }
  }

  // Issue 21 item 3: config.json naming 10^9 layers where the weights hold 4 passed
  // `validate --check-files`. Sizes beyond any model are refused as config.json is read;
  // sizes that merely disagree with the weights are caught from the safetensors headers
  // (no tensor data read), each naming config.json, the key, and what the weights say.
  void configSizesAreCheckedAgainstTheWeights() {
    QTemporaryDir dir;
    const std::string m = copy_model(dir, "m");
    const std::string cfg = m + "/config.json";
    auto ok = check_config(preset_for(m, kQuickstartData), true);
    QVERIFY2(ok.ok(), format_all(ok.diagnostics).c_str());

    edit_json(cfg, [](json& j) { j["num_hidden_layers"] = 1000000000; });
    auto r = check_config(preset_for(m, kQuickstartData), true);
    QVERIFY2(contains(errors(r.diagnostics), cfg + ": error: num_hidden_layers: found 1000000000, more than the 4096"),
             errors(r.diagnostics).c_str());
    edit_json(cfg, [](json& j) { j["num_hidden_layers"] = 24; });
    r = check_config(preset_for(m, kQuickstartData), true);
    QVERIFY2(contains(errors(r.diagnostics), cfg +
                                                 ": error: num_hidden_layers: found 24, but the weights hold 4 layers "
                                                 "(model.layers.0 to model.layers.3, in " +
                                                 m + "/model.safetensors)"),
             errors(r.diagnostics).c_str());
    // Without --check-files the weights are not read (presets are shared between machines).
    QVERIFY(check_config(preset_for(m, kQuickstartData), false).ok());
    edit_json(cfg, [](json& j) { j["num_hidden_layers"] = 4, j["vocab_size"] = 1099511627776; });
    r = check_config(preset_for(m, kQuickstartData), true);
    QVERIFY2(contains(errors(r.diagnostics), cfg + ": error: vocab_size: found 1099511627776, more than the 16777216"),
             errors(r.diagnostics).c_str());
    edit_json(cfg, [](json& j) { j["vocab_size"] = 4096, j["intermediate_size"] = 999; });
    r = check_config(preset_for(m, kQuickstartData), true);
    const std::string e = errors(r.diagnostics);
    QVERIFY2(contains(e, cfg + ": error: vocab_size: found 4096, but the weights say 1024: model.embed_tokens.weight "
                               "has shape [1024, 128]"),
             e.c_str());
    QVERIFY2(contains(e, cfg + ": error: intermediate_size: found 999, but the weights say 352"), e.c_str());
  }

  // Issue 21 item 5: a FIFO named model.safetensors hung `run` for ever while `validate`
  // called it valid. Now it is refused by a stat before anything opens it.
  void fifoWeightsAreRefusedNotWaitedOn() {
    QTemporaryDir dir;
    const std::string m = copy_model(dir, "m");
    const std::string weights = m + "/model.safetensors";
    fs::remove(weights);
    QCOMPARE(::mkfifo(weights.c_str(), 0600), 0);
    qint64 ms = 0;
    auto r = before_deadline([&] { return check_config(preset_for(m, kQuickstartData), true); }, weights, &ms);
    QVERIFY2(ms < 5000, std::to_string(ms).c_str());
    QVERIFY2(contains(errors(r.diagnostics), weights + ": error: cannot read the file: is a FIFO (named pipe), "
                                                       "not a regular file"),
             errors(r.diagnostics).c_str());
    // A FIFO as tokenizer.json and as a dataset: the same, the dataset even without --check-files.
    fs::remove(weights);
    fs::copy_file(kQuickstartModel + "/model.safetensors", weights);
    const std::string tok = m + "/tokenizer.json";
    fs::remove(tok);
    QCOMPARE(::mkfifo(tok.c_str(), 0600), 0);
    r = before_deadline([&] { return check_config(preset_for(m, kQuickstartData), true); }, tok, &ms);
    QVERIFY2(ms < 5000 && contains(errors(r.diagnostics), tok + ": error: cannot be read: is a FIFO"),
             errors(r.diagnostics).c_str());
    const std::string data = dir.filePath("data.jsonl").toStdString();
    QCOMPARE(::mkfifo(data.c_str(), 0600), 0);
    r = before_deadline([&] { return check_config(preset_for(kQuickstartModel, data), false); }, data, &ms);
    QVERIFY2(ms < 5000 && contains(errors(r.diagnostics), "dataset: found '" + data + "': is a FIFO (named pipe)"),
             errors(r.diagnostics).c_str());
  }

  // Issue 21 item 11: a special token whose id is beyond vocab_size failed the run at step 1
  // with "index out of range in self". validate --check-files names tokenizer.json and the
  // token; Tokenizer::check_vocab is the check the trainer calls at load.
  void tokenizerIdsBeyondTheVocabulary() {
    QTemporaryDir dir;
    const std::string m = copy_model(dir, "m");
    edit_json(m + "/tokenizer.json", [](json& j) { j["added_tokens"][2]["id"] = 5000; });  // <|im_end|>
    auto r = check_config(preset_for(m, kQuickstartData), true);
    QVERIFY2(contains(errors(r.diagnostics), m +
                                                 "/tokenizer.json: error: added_tokens: special token '<|im_end|>' has "
                                                 "id 5000, beyond the model's vocab_size 1024 (" +
                                                 m + "/config.json)"),
             errors(r.diagnostics).c_str());
    auto tok = Tokenizer::load(m);
    QVERIFY(tok.ok());
    QVERIFY(has_errors(tok.value.check_vocab(1024, "config.json")));
    QVERIFY(!has_errors(tok.value.check_vocab(5001, "config.json")));
    // An id no model could have is refused as tokenizer.json is read (the tables of every id
    // took gigabytes).
    edit_json(m + "/tokenizer.json", [](json& j) { j["added_tokens"][2]["id"] = 2147483647; });
    tok = Tokenizer::load(m);
    QVERIFY2(contains(format_all(tok.diagnostics),
                      "added_tokens[2].id: '<|im_end|>' has id 2147483647; token ids go from 0 to 16777215"),
             format_all(tok.diagnostics).c_str());
  }

  // Issue 21 item 3: dataset: [train.jsonl#2000000] took 2.5 GB, #10^12 ended in bad_alloc at
  // step 1. N is capped when the preset is read, and checked against the file's records at
  // validate --check-files.
  void sampleCountsAreBounded() {
    auto big = load_preset_text("model: m\ndataset: [train.jsonl#1000000000000]\n", "n.yaml", "");
    QVERIFY2(contains(format_all(big.diagnostics),
                      "n.yaml:2:11: error: dataset: found 'train.jsonl#1000000000000': "
                      "#1000000000000 asks for more than 10000000 samples"),
             format_all(big.diagnostics).c_str());
    auto r = check_config(preset_for(kQuickstartModel, kQuickstartData + "#2000000"), true);
    QVERIFY2(contains(errors(r.diagnostics), "dataset: found '" + kQuickstartData +
                                                 "#2000000': #2000000 would use each of "
                                                 "the file's 2000 records more than 100 times; ask for at most 200000"),
             errors(r.diagnostics).c_str());
    QVERIFY(check_config(preset_for(kQuickstartModel, kQuickstartData + "#200000"), true).ok());
    QVERIFY(check_config(preset_for(kQuickstartModel, kQuickstartData + "#2000000"), false).ok());  // not read
  }
};

QTEST_APPLESS_MAIN(TstValidate)
#include "tst_validate.moc"
