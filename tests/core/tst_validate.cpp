// Cross-field validation: each rule fires with the key's file and line and a message
// that says what to change; valid layouts pass.
#include <QtTest>

#include "config/validate.h"

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

std::string errors(const Diagnostics& d) {
  std::string s;
  for (const auto& x : d)
    if (x.severity == Severity::Error) s += x.format() + "\n";
  return s;
}
bool contains(const std::string& h, const std::string& n) { return h.find(n) != std::string::npos; }

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
        parse("nproc_per_node: 8\nsequence_parallel_size: 8\npacking: true\nattn_impl: sdpa\nmax_length: 65536\n"), &m));
    QVERIFY2(contains(e, "attn_impl") && contains(e, "flash"), e.c_str());
  }

  void maxLengthPaddingRuleSuggestsValues() {
    auto m = qwen7b();
    auto e = errors(validate_config(parse("gpu_ids: [0,1]\nsequence_parallel_size: 2\nmax_length: 32769\n"), &m));
    QVERIFY2(contains(e, "v.yaml:5:") && contains(e, "max_length") && contains(e, "use 32768 or 32770"), e.c_str());
    e = errors(validate_config(
        parse("nproc_per_node: 8\nsequence_parallel_size: 8\npacking: true\nmax_length: 65544\n"), &m));
    QVERIFY2(contains(e, "not a multiple of 16") && contains(e, "zigzag"), e.c_str());
  }

  void headsAgainstUlyssesDegree() {
    auto m = qwen7b();
    auto e = errors(validate_config(parse("nproc_per_node: 8\nsequence_parallel_size: 8\nulysses_size: 8\nmax_length: 65536\n"), &m));
    QVERIFY2(contains(e, "ulysses_size") && contains(e, "28 attention heads"), e.c_str());
    auto small = qwen05b();  // 14 heads, 2 KV heads: KV replication is fine, heads are not
    e = errors(validate_config(parse("nproc_per_node: 4\nsequence_parallel_size: 4\nulysses_size: 4\nmax_length: 4096\n"), &small));
    QVERIFY2(contains(e, "does not divide the model's 14 attention heads"), e.c_str());
    e = errors(validate_config(parse("nproc_per_node: 6\nsequence_parallel_size: 6\nulysses_size: 3\npacking: true\nmax_length: 6144\n"), &m));
    QVERIFY2(contains(e, "neither divide"), e.c_str());
  }

  void explicitUlyssesMustDivide() {
    auto m = qwen7b();
    auto e = errors(validate_config(parse("nproc_per_node: 4\nsequence_parallel_size: 4\nulysses_size: 3\nmax_length: 4096\n"), &m));
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
    QVERIFY(errors(validate_config(parse("tuner_type: full\nlora_rank: 8\nuse_galore: false\ngalore_rank: 128\n"), nullptr)).empty());
    TrainConfig full;
    full.tuner_type = "full";
    full.model = "m";
    full.dataset = {"d"};
    auto saved = load_preset_text(save_preset_text(full), "saved.yaml", "");
    QVERIFY(errors(validate_config(saved.value, nullptr)).empty());
  }

  void optimizerCombinations() {
    QVERIFY(contains(errors(validate_config(parse("use_galore: true\n"), nullptr)), "needs tuner_type: full"));
    QVERIFY(contains(errors(validate_config(parse("tuner_type: full\ngalore_rank: 8\n"), nullptr)), "use_galore is false"));
    QVERIFY(contains(errors(validate_config(parse("offload_optimizer: true\n"), nullptr)), "zero_stage: 1 or 2"));
    QVERIFY(contains(errors(validate_config(parse("tuner_type: full\nuse_galore: true\nzero_stage: 2\nnproc_per_node: 2\n"), nullptr)),
                     "GaLore"));
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
};

QTEST_APPLESS_MAIN(TstValidate)
#include "tst_validate.moc"
