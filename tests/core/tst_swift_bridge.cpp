// The ms-swift bridge: ms-swift command lines and YAML (ANCHORS.md's example, and scripts in
// the form of ms-swift's examples in tests/core/data/swift) import with the right values and
// line numbers; what does not map
// is listed, never dropped; bad input gives errors naming the argument; export is safe to
// paste into a shell (checked by running it through bash) and imports back to the same config.
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "common/text.h"
#include "config/swift_bridge.h"
#include "config/validate.h"

using namespace odyssey;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(ODYSSEY_TEST_DATA_DIR) + "/swift/" + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// All diagnostics of one severity, formatted, one per line.
std::string of(const Diagnostics& d, Severity s) {
  std::string out;
  for (const auto& x : d)
    if (x.severity == s) out += x.format() + "\n";
  return out;
}
std::string errors(const Diagnostics& d) { return of(d, Severity::Error); }
std::string warnings(const Diagnostics& d) { return of(d, Severity::Warning); }

QString preset(const TrainConfig& c) { return QString::fromStdString(save_preset_text(c)); }

TrainConfig random_config(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  auto pick = [&](std::vector<std::string> v) { return v[rng() % v.size()]; };
  auto coin = [&] { return rng() % 2 == 0; };
  const std::vector<std::string> weird{"plain",
                                       "Qwen/Qwen2.5-7B-Instruct",
                                       "dir with space/m",
                                       "$(touch x)",
                                       "it's",
                                       "-dash",
                                       "数据集",
                                       "#hash",
                                       "a=b",
                                       "~/home",
                                       "`id`",
                                       "",
                                       "tab\tbed",
                                       "back\\slash",
                                       "multi\nline",
                                       "--looks-like-an-arg"};
  TrainConfig c;
  c.model = pick(weird);
  c.template_name = pick({"auto", "chatml", "llama3"});
  c.system = pick(weird);
  c.torch_dtype = pick({"auto", "bfloat16", "float16", "float32"});
  c.dataset = {"a.jsonl#" + std::to_string(1 + rng() % 1000), "dir/b c.json", "x'y.jsonl", "$HOME/d.jsonl"};
  c.dataset.resize(1 + rng() % 4);
  if (coin()) c.val_dataset = {"v.jsonl", "w;rm.jsonl#3"};
  c.split_dataset_ratio = u(rng) * 0.5;
  c.max_length = static_cast<std::int64_t>(16 + rng() % 1000000);
  c.truncation_strategy = pick({"delete", "left", "right"});
  c.packing = coin();
  c.padding_free = coin();
  c.tuner_type = pick({"lora", "full"});
  c.lora_rank = static_cast<std::int64_t>(1 + rng() % 512);
  c.lora_alpha = static_cast<double>(rng() % 1024);
  c.lora_dropout = u(rng) * 0.5;
  c.use_rslora = coin();
  c.target_modules = coin() ? std::vector<std::string>{"all-linear"} : std::vector<std::string>{"q_proj", "v_proj"};
  c.learning_rate = u(rng) * 1e-3;
  c.lr_scheduler_type = pick({"cosine", "linear", "constant"});
  c.warmup_ratio = coin() ? 0.0 : u(rng);
  c.warmup_steps = coin() ? 0 : static_cast<std::int64_t>(rng() % 1000);
  c.weight_decay = u(rng);
  c.max_grad_norm = u(rng) * 5;
  c.adam_beta1 = u(rng) * 0.99;
  c.adam_beta2 = u(rng) * 0.99;
  c.adam_epsilon = 1e-8 * u(rng);
  c.num_train_epochs = 1 + u(rng) * 10;
  c.max_steps = coin() ? -1 : static_cast<std::int64_t>(1 + rng() % 100000);
  c.per_device_train_batch_size = static_cast<std::int64_t>(1 + rng() % 64);
  c.gradient_accumulation_steps = static_cast<std::int64_t>(1 + rng() % 64);
  c.seed = static_cast<std::int64_t>(rng() % 100000);
  c.use_galore = coin();
  if (c.use_galore) {
    c.galore_quantization = coin();
    c.galore_rank = static_cast<std::int64_t>(1 + rng() % 1024);
    c.galore_update_proj_gap = coin() ? 50 : static_cast<std::int64_t>(1 + rng() % 1000);
    c.galore_scale = coin() ? 1.0 : u(rng);
    if (coin()) c.galore_target_modules = {"q_proj", "k_proj"};
  }
  c.zero_stage = static_cast<std::int64_t>(rng() % 3);
  c.offload_optimizer = c.zero_stage == 2 && coin();
  c.attn_impl = pick({"auto", "flash_attn", "sdpa", "eager"});
  c.fused_kernels = coin();
  c.activation_checkpointing = pick({"auto", "all", "none"});
  c.sequence_parallel_size = static_cast<std::int64_t>(1 + rng() % 8);
  if (coin()) c.device = "cpu";
  else
    for (std::int64_t g = 0; g < 8; ++g)
      if (coin()) c.gpu_ids.push_back(g);
  const auto n = static_cast<std::int64_t>(rng() % 9);
  c.nproc_per_node = c.gpu_ids.empty() || n != static_cast<std::int64_t>(c.gpu_ids.size()) ? n : 0;
  c.nnodes = static_cast<std::int64_t>(1 + rng() % 3);
  if (c.nnodes * resolved_nproc_per_node(c) == 1) {  // ZeRO needs ranks to shard over (validate says so)
    c.zero_stage = 0;
    c.offload_optimizer = false;
  }
  c.logging_steps = static_cast<std::int64_t>(1 + rng() % 100);
  c.eval_steps = static_cast<std::int64_t>(rng() % 1000);
  c.save_steps = static_cast<std::int64_t>(1 + rng() % 1000);
  c.save_total_limit = static_cast<std::int64_t>(rng() % 5);
  c.output_dir = pick(weird);
  return c;
}

// An exported command rewritten as the ms-swift YAML config that means the same.
std::string to_yaml(const std::string& cmd) {
  auto q = [](const std::string& v) {
    std::string out = "\"";
    for (unsigned char ch : v) {
      if (ch == '"' || ch == '\\') out += '\\';
      if (ch == '\n') out += "\\n";
      else if (ch == '\t') out += "\\t";
      else out += static_cast<char>(ch);
    }
    return out + "\"";
  };
  std::string env = "ENV:\n", args;
  std::string key;
  std::vector<std::string> vals;
  auto flush = [&] {
    if (key.empty()) return;
    args += key + ": ";
    if (vals.size() == 1) args += q(vals[0]) + "\n";
    else {
      std::vector<std::string> qs;
      for (const auto& v : vals) qs.push_back(q(v));
      args += "[" + text::join(qs, ", ") + "]\n";
    }
    vals.clear();
  };
  bool in_swift = false;
  const auto words = text::shell_split(cmd, nullptr);
  for (const auto& w : *words) {
    if (!in_swift) {
      if (w == "swift") in_swift = true;
      else env += "  " + w.substr(0, w.find('=')) + ": " + q(w.substr(w.find('=') + 1)) + "\n";
    } else if (text::starts_with(w, "--")) {
      flush();
      key = w.substr(2, w.find('=') == std::string::npos ? std::string::npos : w.find('=') - 2);
      if (w.find('=') != std::string::npos) vals.push_back(w.substr(w.find('=') + 1));
    } else if (w != "sft") {
      vals.push_back(w);
    }
  }
  flush();
  return (env == "ENV:\n" ? std::string() : env) + args;
}

}  // namespace

class TstSwiftBridge : public QObject {
  Q_OBJECT
 private slots:
  void anchorsExample();
  void sequenceParallelScript();
  void olderTrainType();
  void scriptVariablesAndCommandSubstitution();
  void multiNodeLauncherEnv();
  void yamlConfig();
  void yamlErrorsHaveLines();
  void argumentForms();
  void argumentForms_data();
  void deepspeedStages();
  void unsupportedListedOnce();
  void notHonouredAreErrors();
  void notHonouredAreErrors_data();
  void offValuesPass();
  void schedulesMapOrFail();
  void configFileInScript();
  void adaptersAndReportTo();
  void typoSuggestsArgument();
  void qloraArgumentsMap();
  void badInput();
  void badInput_data();
  void wrongTypesNameTheArgument();
  void secretsNeverEchoed();
  void exportIsShellSafe();
  void exportListsOdysseyOnly();
  void exportQuickstart();
  void roundTripRandom();
};

void TstSwiftBridge::anchorsExample() {
  auto r = import_swift_command(
      "NPROC_PER_NODE=8 CELOSS_PARALLEL_SIZE=2048 swift sft --sequence_parallel_size 8 --attn_impl flash_attn "
      "--padding_free true --max_length 65536 --tuner_type lora");
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  const TrainConfig& c = r.value.config;
  QCOMPARE(c.sequence_parallel_size, 8);
  QCOMPARE(c.attn_impl, std::string("flash_attn"));
  QVERIFY(c.padding_free);
  QCOMPARE(c.max_length, 65536);
  QCOMPARE(c.tuner_type, std::string("lora"));
  QCOMPARE(c.nproc_per_node, 8);
  QCOMPARE(c.num_train_epochs, 3.0);           // ms-swift's default, said in a note
  QCOMPARE(c.gradient_accumulation_steps, 2);  // ceil(16 / 1 / 8)
  const std::string all = format_all(r.diagnostics);
  QVERIFY2(contains(all, "note: CELOSS_PARALLEL_SIZE=2048 not imported: Odyssey's fused_kernels"), all.c_str());
  QVERIFY2(warnings(r.diagnostics).empty(), all.c_str());
  for (const auto& d : r.diagnostics) QCOMPARE(d.line, 0);  // one line: no line numbers
  QCOMPARE(r.value.origin.keys.at("max_length").file, std::string("swift command"));
  auto cpu = import_swift_command("CUDA_VISIBLE_DEVICES= swift sft --max_length 64");
  QVERIFY2(cpu.ok(), format_all(cpu.diagnostics).c_str());
  QCOMPARE(cpu.value.config.device, std::string("cpu"));
}

void TstSwiftBridge::sequenceParallelScript() {
  auto r = import_swift_command(fixture("sequence_parallel.sh"));
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  const TrainConfig& c = r.value.config;
  QCOMPARE(c.model, std::string("Qwen/Qwen2.5-7B-Instruct"));
  QCOMPARE(c.dataset, std::vector<std::string>{"data/long_chat.jsonl"});
  QCOMPARE(c.torch_dtype, std::string("bfloat16"));
  QCOMPARE(c.per_device_train_batch_size, 2);
  QCOMPARE(c.gradient_accumulation_steps, 4);
  QCOMPARE(c.save_total_limit, 3);
  QCOMPARE(c.warmup_ratio, 0.03);
  QCOMPARE(c.sequence_parallel_size, 8);
  QCOMPARE(c.logging_steps, 2);
  QVERIFY(c.padding_free);  // the last argument, before a dangling backslash
  QCOMPARE(r.value.origin.keys.at("sequence_parallel_size").line, 18);
  const std::string w = warnings(r.diagnostics);
  QVERIFY2(contains(w,
                    "swift command: warning: not supported by Odyssey, not imported: --streaming false (line 8), "
                    "--save_only_model true (line 13), --use_logits_to_keep false (line 20)"),
           w.c_str());
  QVERIFY(contains(format_all(r.diagnostics), "CELOSS_PARALLEL_SIZE=2048 (line 3) not imported"));
}

void TstSwiftBridge::olderTrainType() {
  auto r = import_swift_command(fixture("lora_sft_train_type.sh"));
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  const TrainConfig& c = r.value.config;
  QCOMPARE(c.tuner_type, std::string("lora"));
  QCOMPARE(r.value.origin.keys.at("tuner_type").line, 5);
  const std::vector<std::string> ds{"data/zh.jsonl#500", "data/en.jsonl#500", "data/self-cognition.jsonl#500"};
  QCOMPARE(c.dataset, ds);  // values continued over three lines
  QCOMPARE(c.gpu_ids, std::vector<std::int64_t>{0});
  QCOMPARE(c.system, std::string("You are a helpful assistant."));
  QCOMPARE(c.num_train_epochs, 2.0);
  QCOMPARE(c.lora_alpha, 32.0);
  QCOMPARE(c.eval_steps, 50);
  QVERIFY2(warnings(r.diagnostics).empty(), format_all(r.diagnostics).c_str());
  // And the same with the ms-swift 2.x spellings.
  auto old = import_swift_command("swift sft --sft_type full --model_id_or_path m --dtype bf16 --max_length 99");
  QVERIFY2(old.ok(), format_all(old.diagnostics).c_str());
  QCOMPARE(old.value.config.tuner_type, std::string("full"));
  QCOMPARE(old.value.config.model, std::string("m"));
  QCOMPARE(old.value.config.torch_dtype, std::string("bfloat16"));
  QCOMPARE(old.value.config.learning_rate, 1e-5);  // ms-swift's default for full tuning
}

void TstSwiftBridge::scriptVariablesAndCommandSubstitution() {
  auto r = import_swift_command(fixture("deepspeed_zero2_vars.sh"));
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  const TrainConfig& c = r.value.config;
  QCOMPARE(c.gpu_ids, (std::vector<std::int64_t>{0, 1}));
  QCOMPARE(c.nproc_per_node, 0);  // NPROC_PER_NODE=$gpus = 2 = one per listed GPU
  QCOMPARE(c.learning_rate, 2e-4);
  QCOMPARE(c.output_dir, std::string("output/zero2-2"));
  QCOMPARE(c.lora_rank, 16);
  QCOMPARE(c.zero_stage, 2);
  QVERIFY(!c.offload_optimizer);
  QCOMPARE(c.gradient_accumulation_steps, 16);  // $(expr 32 / $gpus), integer arithmetic as bash computes it
  const std::string w = warnings(r.diagnostics);
  QVERIFY2(!contains(w, "need a shell"), w.c_str());
  QVERIFY2(contains(w, "--model_author odyssey (line 17)"), w.c_str());
  // expr and $(( )) over numbers and the script's variables are computed; other commands,
  // unknown variables and division by zero are not (nothing is run).
  auto arith = import_swift_command(
      "n=4\nswift sft --max_length 64 --lora_rank $((n * 4)) --seed $(expr $n \\* 3 + 1) --save_steps $(( (8) ))"
      " --gradient_accumulation_steps $(nproc) --logging_steps $((8 / 0)) --eval_steps $(expr $HOME + 1)");
  QVERIFY2(arith.ok(), format_all(arith.diagnostics).c_str());
  QCOMPARE(arith.value.config.lora_rank, 16);
  QCOMPARE(arith.value.config.seed, 13);
  const std::string aw = warnings(arith.diagnostics);
  for (const char* shell : {"--gradient_accumulation_steps '$(nproc)'", "--logging_steps '$((8 / 0))'",
                            "--eval_steps '$(expr $HOME + 1)'", "--save_steps '$(( (8) ))'"})
    QVERIFY2(contains(aw, shell), (std::string(shell) + " not in " + aw).c_str());
  // An unknown variable is not looked up in the environment.
  auto env = import_swift_command("swift sft --model $HOME/m --max_length 64");
  QVERIFY2(contains(warnings(env.diagnostics), "--model '$HOME/m'"), format_all(env.diagnostics).c_str());
  QCOMPARE(env.value.config.model, std::string());
}

void TstSwiftBridge::multiNodeLauncherEnv() {
  auto r = import_swift_command(fixture("multi_node1.sh"));
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  const TrainConfig& c = r.value.config;
  QCOMPARE(c.nnodes, 2);
  QCOMPARE(c.nproc_per_node, 0);
  QCOMPARE(c.gpu_ids.size(), std::size_t(4));
  QCOMPARE(c.tuner_type, std::string("full"));
  QCOMPARE(c.learning_rate, 1e-5);
  QCOMPARE(c.split_dataset_ratio, 0.02);
  QVERIFY(c.zero_stage == 2 && c.offload_optimizer);
  QCOMPARE(c.gradient_accumulation_steps, 2);  // ceil(16 / 1 / (2 x 4))
  const std::string notes = of(r.diagnostics, Severity::Note);
  QVERIFY2(contains(notes,
                    "launcher-only settings, not imported (Odyssey's launcher sets them on each machine): "
                    "NODE_RANK=0 (line 3), MASTER_ADDR=10.0.0.1 (line 4), MASTER_PORT=29600 (line 5)"),
           notes.c_str());
  QVERIFY(contains(notes, "learning_rate 1e-05 (full tuning), gradient_accumulation_steps 2"));
  QVERIFY(contains(export_swift_command(c), "NNODES=2 \\\n"));
}

void TstSwiftBridge::yamlConfig() {
  auto r = import_swift_yaml(fixture("sft.yaml"), "sft.yaml");
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  const TrainConfig& c = r.value.config;
  QCOMPARE(c.dataset, (std::vector<std::string>{"data/zh.jsonl#500", "data/en.jsonl#500", "data/self.jsonl"}));
  QCOMPARE(c.learning_rate, 1e-4);
  QCOMPARE(c.lora_rank, 16);
  QCOMPARE(c.zero_stage, 0);                         // deepspeed: zero2 on one process: nothing to shard over
  QCOMPARE(c.optimizer_dtype, std::string("auto"));  // LoRA: the adapters are fp32 anyway
  QVERIFY2(contains(format_all(r.diagnostics),
                    "--deepspeed (line 26) with one process: nothing to shard over, "
                    "imported as zero_stage 0"),
           format_all(r.diagnostics).c_str());
  QCOMPARE(c.gradient_accumulation_steps, 8);
  QCOMPARE(c.num_train_epochs, 2.0);
  QCOMPARE(c.system, std::string("You are a helpful assistant."));
  QCOMPARE(r.value.origin.keys.at("dataset").line, 12);
  QCOMPARE(r.value.origin.file, std::string("sft.yaml"));
  QVERIFY2(contains(warnings(r.diagnostics),
                    "sft.yaml: warning: not supported by Odyssey, not imported: "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (line 3), "
                    "--model_name odyssey-bot (line 18), --dataloader_num_workers 4 (line 25)"),
           format_all(r.diagnostics).c_str());
  auto json = import_swift_yaml(R"({"model": "m", "max_length": 64, "dataset": ["a.jsonl", "b.jsonl#9"]})", "c.json");
  QVERIFY2(json.ok(), format_all(json.diagnostics).c_str());
  QCOMPARE(json.value.config.dataset, (std::vector<std::string>{"a.jsonl", "b.jsonl#9"}));
  auto env = import_swift_yaml(
      "ENV:\n  NPROC_PER_NODE: 4\n  MAX_PIXELS: '1003520'\nmodel: m\nmax_length: 128\n"
      "eval_steps: null\ntrain_type: full\n",
      "e.yaml");
  QVERIFY2(env.ok(), format_all(env.diagnostics).c_str());
  QCOMPARE(env.value.config.nproc_per_node, 4);
  QCOMPARE(env.value.config.eval_steps, 0);
  QCOMPARE(env.value.config.tuner_type, std::string("full"));
  QVERIFY(contains(warnings(env.diagnostics), "MAX_PIXELS=1003520 (line 3)"));
}

void TstSwiftBridge::yamlErrorsHaveLines() {
  auto r = import_swift_yaml("model: m\nmax_length: 128\nlora_rank: abc\npacking: maybe\n", "bad.yaml");
  QVERIFY(!r.ok());
  const std::string e = errors(r.diagnostics);
  QVERIFY2(contains(e, "bad.yaml:3: error: lora_rank: found 'abc', expected an integer from 1 to 4096"), e.c_str());
  QVERIFY2(contains(e, "bad.yaml:4: error: packing: found 'maybe', expected true or false"), e.c_str());
  auto syntax = import_swift_yaml("model: [unclosed\n", "s.yaml");
  QVERIFY2(contains(errors(syntax.diagnostics), "s.yaml:2: error: invalid YAML"),
           format_all(syntax.diagnostics).c_str());
  QVERIFY(contains(errors(import_swift_yaml("- a\n- b\n", "l.yaml").diagnostics), "expected a mapping"));
  QVERIFY(contains(errors(import_swift_yaml("", "e.yaml").diagnostics), "empty"));
}

void TstSwiftBridge::argumentForms_data() {
  QTest::addColumn<QString>("args");
  QTest::addColumn<QString>("key");
  QTest::addColumn<QString>("expected");
  QTest::newRow("equals") << "--lora_rank=16"
                          << "lora_rank"
                          << "16";
  QTest::newRow("dashes") << "--lora-rank 16"
                          << "lora_rank"
                          << "16";
  QTest::newRow("bare bool") << "--packing"
                             << "packing"
                             << "true";
  QTest::newRow("bool False") << "--packing False"
                              << "packing"
                              << "false";
  QTest::newRow("multi dataset") << "--dataset a b#100 c"
                                 << "dataset"
                                 << "[a, b#100, c]";
  QTest::newRow("multi modules") << "--target_modules q_proj v_proj"
                                 << "target_modules"
                                 << "[q_proj, v_proj]";
  QTest::newRow("ALL modules") << "--lora_target_modules ALL"
                               << "target_modules"
                               << "[all-linear]";
  QTest::newRow("ckpt false") << "--gradient_checkpointing false"
                              << "activation_checkpointing"
                              << "none";
  QTest::newRow("ckpt true") << "--gradient_checkpointing true"
                             << "activation_checkpointing"
                             << "all";
  QTest::newRow("fa2") << "--attn_impl flash_attention_2"
                       << "attn_impl"
                       << "flash_attn";
  QTest::newRow("fa3") << "--attn_impl flash_attention_3"
                       << "attn_impl"
                       << "flash_attn";
  QTest::newRow("old flash") << "--use_flash_attn true"
                             << "attn_impl"
                             << "flash_attn";
  QTest::newRow("liger") << "--use_liger_kernel false"
                         << "fused_kernels"
                         << "false";
  QTest::newRow("fp16") << "--torch_dtype fp16"
                        << "torch_dtype"
                        << "float16";
  QTest::newRow("qwen template") << "--template qwen2_5"
                                 << "template"
                                 << "auto";
  QTest::newRow("system newline") << "--system 'a\\nb'"
                                  << "system"
                                  << "\"a\\nb\"";
  QTest::newRow("warmup sched") << "--lr_scheduler_type constant_with_warmup"
                                << "lr_scheduler_type"
                                << "constant";
  QTest::newRow("const drops warmup") << "--lr_scheduler_type constant --warmup_ratio 0.1"
                                      << "warmup_ratio"
                                      << "0.0";
  QTest::newRow("None is default") << "--eval_steps None"
                                   << "eval_steps"
                                   << "auto";
  QTest::newRow("max_steps -1") << "--max_steps -1"
                                << "max_steps"
                                << "none";
  QTest::newRow("last wins") << "--lora_rank 4 --lora_rank 32"
                             << "lora_rank"
                             << "32";
  QTest::newRow("last sched wins") << "--lr_scheduler_type constant --lr_scheduler_type cosine --warmup_ratio 0.1"
                                   << "warmup_ratio"
                                   << "0.1";
}

void TstSwiftBridge::argumentForms() {
  QFETCH(QString, args);
  QFETCH(QString, key);
  QFETCH(QString, expected);
  auto r = import_swift_command("swift sft --model m --max_length 64 " + args.toStdString());
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(QString::fromStdString(field_value_text(r.value.config, *find_field(key.toStdString()))), expected);
  for (const auto& d : r.diagnostics)  // only the repeated-argument rows warn, and only about that
    QVERIFY2(d.severity != Severity::Warning || contains(d.message, "is given twice"), d.format().c_str());
}

void TstSwiftBridge::deepspeedStages() {
  struct Case {
    const char* value;
    std::int64_t stage;
    bool offload;
  };
  for (Case k :
       {Case{"zero0", 0, false}, Case{"zero1", 1, false}, Case{"zero2", 2, false}, Case{"zero2_offload", 2, true}}) {
    auto r = import_swift_command(std::string("NPROC_PER_NODE=2 swift sft --max_length 64 --deepspeed ") + k.value);
    QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
    QCOMPARE(r.value.config.zero_stage, k.stage);
    QCOMPARE(r.value.config.offload_optimizer, k.offload);
    // One process: DeepSpeed has nothing to shard over; ms-swift trains, and so does the import.
    // With offload it is ZeRO-Offload on one GPU, kept: the optimizer state in host memory.
    auto one = import_swift_command(std::string("swift sft --max_length 64 --deepspeed ") + k.value);
    QVERIFY2(one.ok(), format_all(one.diagnostics).c_str());
    QCOMPARE(one.value.config.zero_stage, k.offload ? k.stage : 0);
    QCOMPARE(one.value.config.offload_optimizer, k.offload);
    QCOMPARE(contains(format_all(one.diagnostics), "with one process: nothing to shard over"),
             k.stage > 0 && !k.offload);
    QCOMPARE(contains(format_all(one.diagnostics), "with one process: ZeRO-Offload"), k.offload);
    const std::string problems = errors(validate_config(one.value, nullptr));  // the command names no model
    QVERIFY2(!contains(problems, "zero_stage") && !contains(problems, "offload_optimizer"), problems.c_str());
    // A full fine-tune under DeepSpeed on one process keeps fp32 master weights, gradients and
    // moments: optimizer_dtype fp32, written back as --deepspeed zero2; LoRA is fp32 anyway.
    auto full = import_swift_command(std::string("swift sft --max_length 64 --tuner_type full --deepspeed ") + k.value);
    QVERIFY2(full.ok(), format_all(full.diagnostics).c_str());
    QCOMPARE(full.value.config.optimizer_dtype, std::string(k.stage > 0 && !k.offload ? "fp32" : "auto"));
    QCOMPARE(one.value.config.optimizer_dtype, std::string("auto"));
    const std::string full_problems = errors(validate_config(full.value, nullptr));  // no model, no data
    QVERIFY2(!contains(full_problems, "optimizer_dtype") && !contains(full_problems, "zero_stage"),
             full_problems.c_str());
    if (k.stage > 0) {
      const std::string back = export_swift_command(full.value.config);
      QVERIFY2(contains(back, std::string("--deepspeed ") + (k.offload ? "zero2_offload" : "zero2")), back.c_str());
      QVERIFY2(!contains(back, "optimizer_dtype"), back.c_str());
    }
  }
  // ZeRO-3 shards parameters, which Odyssey does not: an error naming the stage to use instead.
  for (const char* v : {"zero3", "zero3_offload"}) {
    auto r = import_swift_command(std::string("NPROC_PER_NODE=2 swift sft --max_length 64 --deepspeed ") + v);
    QVERIFY(!r.ok());
    QVERIFY2(contains(errors(r.diagnostics), std::string("--deepspeed ") + v + " (ZeRO-3 shards the parameters"),
             format_all(r.diagnostics).c_str());
    QVERIFY(contains(errors(r.diagnostics),
                     std::string_view(v) == "zero3" ? "--deepspeed zero2 shards" : "--deepspeed zero2_offload shards"));
  }
  auto json = import_swift_command("swift sft --max_length 64 --deepspeed ds.json");
  QVERIFY(!json.ok());
  QVERIFY2(
      contains(errors(json.diagnostics), "--deepspeed ds.json (a DeepSpeed config file: Odyssey cannot tell its stage"),
      format_all(json.diagnostics).c_str());
}

void TstSwiftBridge::unsupportedListedOnce() {
  auto r = import_swift_command(
      "swift sft --model m --max_length 64 --bnb_4bit_quant_storage uint8 --report_to wandb tensorboard "
      "--eval_strategy steps "
      "--frobnicate_widgets 3 --template deepseek_r1");
  QVERIFY(r.ok());
  int n = 0;
  for (const auto& d : r.diagnostics) n += contains(d.message, "not supported by Odyssey") ? 1 : 0;
  QCOMPARE(n, 1);
  QVERIFY2(contains(warnings(r.diagnostics),
                    "not imported: --bnb_4bit_quant_storage uint8, --report_to wandb (Odyssey reports to tensorboard), "
                    "--eval_strategy steps, "
                    "--frobnicate_widgets 3, --template deepseek_r1 (template stays auto)"),
           format_all(r.diagnostics).c_str());
}

void TstSwiftBridge::notHonouredAreErrors_data() {
  QTest::addColumn<QString>("args");
  QTest::addColumn<QString>("listed");
  QTest::newRow("dora") << "--use_dora true"
                        << "--use_dora true (DoRA";
  QTest::newRow("dora flag") << "--use_dora"
                             << "--use_dora (DoRA";
  QTest::newRow("loss_scale") << "--loss_scale last_round"
                              << "--loss_scale last_round (Odyssey trains every assistant turn";
  QTest::newRow("pissa") << "--init_weights pissa"
                         << "--init_weights pissa (Odyssey initialises LoRA";
  QTest::newRow("modules_to_save") << "--modules_to_save embed_tokens lm_head"
                                   << "--modules_to_save embed_tokens lm_head (extra fully trained modules";
  QTest::newRow("optim") << "--optim adamw_bnb_8bit"
                         << "--optim adamw_bnb_8bit (Odyssey's optimizer is AdamW";
  QTest::newRow("neftune") << "--neftune_noise_alpha 5"
                           << "--neftune_noise_alpha 5 (NEFTune";
  QTest::newRow("freeze ratio") << "--freeze_parameters_ratio 0.5"
                                << "--freeze_parameters_ratio 0.5 (partial freezing";
  QTest::newRow("seq_cls") << "--task_type seq_cls"
                           << "--task_type seq_cls (Odyssey trains causal language models)";
  QTest::newRow("train empty think") << "--disable_ignore_empty_think true"
                                     << "--disable_ignore_empty_think true (Odyssey never trains an empty think block";
  QTest::newRow("scheduler") << "--lr_scheduler_type cosine_with_min_lr"
                             << "--lr_scheduler_type cosine_with_min_lr (Odyssey's cosine decays to 0";
  QTest::newRow("wsd") << "--lr_scheduler_type warmup_stable_decay"
                       << "(a warmup-stable-decay schedule is not implemented";
  QTest::newRow("kwargs") << "--lr_scheduler_kwargs '{\"min_lr_rate\": 0.1}'"
                          << "--lr_scheduler_kwargs";
}

// Arguments that would make Odyssey train something else are errors (exit 3) listing each
// with why, all in one message; the rest of the command still reports its own problems.
void TstSwiftBridge::notHonouredAreErrors() {
  QFETCH(QString, args);
  QFETCH(QString, listed);
  auto r = import_swift_command("swift sft --model m --max_length 64 " + args.toStdString());
  QVERIFY(!r.ok());
  QVERIFY2(contains(errors(r.diagnostics), "ms-swift arguments whose meaning Odyssey cannot honour"),
           format_all(r.diagnostics).c_str());
  QVERIFY2(contains(errors(r.diagnostics), listed.toStdString()), format_all(r.diagnostics).c_str());
  // Two at once: one error naming both, in the order given.
  auto two = import_swift_command("swift sft --max_length 64 --use_dora true " + args.toStdString());
  int n = 0;
  for (const auto& d : two.diagnostics) n += d.severity == Severity::Error ? 1 : 0;
  if (!args.startsWith("--use_dora")) {
    QCOMPARE(n, 1);
    QVERIFY(contains(errors(two.diagnostics), "--use_dora true (DoRA"));
    QVERIFY(contains(errors(two.diagnostics), listed.toStdString()));
  }
}

// ms-swift's defaults (the values that mean "off") import without a word.
void TstSwiftBridge::offValuesPass() {
  auto r = import_swift_command(
      "swift sft --model m --max_length 64 --use_dora false --loss_scale default --init_weights true --lora_bias none "
      "--optim adamw_torch_fused --neftune_noise_alpha 0 --freeze_parameters_ratio 0.0 --task_type causal_lm "
      "--modules_to_save --lr_scheduler_kwargs None --resume_only_model False --disable_ignore_empty_think false");
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  // Odyssey leaves an empty think block untrained, as ms-swift's ignore_empty_think does.
  for (const char* v : {"ignore_empty_think", "default+ignore_empty_think"}) {
    auto t = import_swift_command(std::string("swift sft --max_length 64 --loss_scale ") + v);
    QVERIFY2(t.ok(), format_all(t.diagnostics).c_str());
  }
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QVERIFY2(warnings(r.diagnostics).find("not imported") == std::string::npos, format_all(r.diagnostics).c_str());
}

void TstSwiftBridge::schedulesMapOrFail() {
  struct Case {
    const char* swift;
    const char* odyssey;
  };
  for (Case k : {Case{"linear", "linear"}, Case{"cosine", "cosine"}, Case{"constant", "constant"},
                 Case{"constant_with_warmup", "constant"}, Case{"cosine_with_restarts", "cosine"}}) {
    auto r = import_swift_command(std::string("swift sft --max_length 64 --lr_scheduler_type ") + k.swift);
    QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
    QCOMPARE(r.value.config.lr_scheduler_type, std::string(k.odyssey));
  }
  // Every other schedule transformers knows is an error naming it.
  for (const char* v : {"polynomial", "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay",
                        "inverse_sqrt", "reduce_lr_on_plateau"}) {
    auto r = import_swift_command(std::string("swift sft --max_length 64 --lr_scheduler_type ") + v);
    QVERIFY(!r.ok());
    QVERIFY2(contains(errors(r.diagnostics), std::string("--lr_scheduler_type ") + v + " ("),
             format_all(r.diagnostics).c_str());
    QVERIFY(contains(errors(r.diagnostics), "Odyssey runs linear, cosine, cosine_with_restarts (one cycle), constant"));
  }
}

// `swift sft x.yaml` (and --config x.yaml) in a script: the file's arguments, the command
// line's over them, the script's environment; the file found beside the script too.
void TstSwiftBridge::configFileInScript() {
  QTemporaryDir dir;
  QVERIFY(dir.isValid());
  const std::string d = dir.path().toStdString();
  std::ofstream(d + "/sft.yaml") << "model: m\nmax_length: 4096\nlora_rank: 16\ndeepspeed: zero2\nlearning_rate: 2e-4\n"
                                    "ENV:\n  NPROC_PER_NODE: 4\n";
  const std::string script =
      "#!/bin/bash\nexport CUDA_VISIBLE_DEVICES=0,1\nNPROC_PER_NODE=2 swift sft sft.yaml --lora_rank 32\n";
  std::ofstream(d + "/train.sh") << script;
  auto r = import_swift_command(script, d + "/train.sh");  // the current directory lacks sft.yaml: beside the script
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  const TrainConfig& c = r.value.config;
  QCOMPARE(c.max_length, 4096);
  QCOMPARE(c.lora_rank, 32);  // the command line over the file
  QCOMPARE(c.learning_rate, 2e-4);
  QCOMPARE(c.zero_stage, 2);      // two processes from the script's environment
  QCOMPARE(c.nproc_per_node, 0);  // the script's NPROC_PER_NODE=2 (one per listed GPU) over the file's ENV 4
  QVERIFY2(contains(format_all(r.diagnostics), "NPROC_PER_NODE=4 (line 7) in " + d +
                                                   "/sft.yaml's ENV not imported: the script sets NPROC_PER_NODE"),
           format_all(r.diagnostics).c_str());
  QCOMPARE(c.gpu_ids, (std::vector<std::int64_t>{0, 1}));
  QCOMPARE(r.value.origin.keys.at("max_length").file, d + "/sft.yaml");
  QCOMPARE(r.value.origin.keys.at("max_length").line, 2);
  QCOMPARE(r.value.origin.keys.at("lora_rank").file, d + "/train.sh");
  QVERIFY(contains(format_all(r.diagnostics), "arguments read from " + d + "/sft.yaml (line 3)"));
  // --config FILE is the same; errors in the file name the file and its line.
  std::ofstream(d + "/bad.yaml") << "model: m\nmax_length: 64\nlora_rank: many\n";
  auto bad = import_swift_command("swift sft --config " + d + "/bad.yaml --max_length 128", d + "/train.sh");
  QVERIFY(!bad.ok());
  QVERIFY2(contains(errors(bad.diagnostics), d + "/bad.yaml:3: error: lora_rank"), format_all(bad.diagnostics).c_str());
  auto cfg = import_swift_command("swift sft --config=" + d + "/sft.yaml --max_length 128");
  QVERIFY2(cfg.ok(), format_all(cfg.diagnostics).c_str());
  QCOMPARE(cfg.value.config.max_length, 128);
  QCOMPARE(cfg.value.config.nproc_per_node, 4);  // the file's ENV, which nothing overrides here
  QCOMPARE(cfg.value.config.zero_stage, 2);
}

// --adapters and --report_to are Odyssey keys of the same names; reporting targets Odyssey
// does not write are listed as not imported (they change nothing trained).
void TstSwiftBridge::adaptersAndReportTo() {
  auto r = import_swift_command("swift sft --max_length 64 --adapters out/checkpoint-100 --report_to none");
  QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.config.adapters, std::vector<std::string>{"out/checkpoint-100"});
  QCOMPARE(r.value.config.report_to, std::vector<std::string>{"none"});
  QVERIFY(contains(export_swift_command(r.value.config), "--report_to none"));
  QVERIFY(contains(export_swift_command(r.value.config), "--adapters out/checkpoint-100"));
  auto w = import_swift_command("swift sft --max_length 64 --report_to wandb swanlab");
  QVERIFY2(w.ok(), format_all(w.diagnostics).c_str());
  QCOMPARE(w.value.config.report_to, std::vector<std::string>{"none"});
  QVERIFY(contains(warnings(w.diagnostics), "--report_to wandb swanlab (Odyssey reports to tensorboard)"));
  auto all = import_swift_command("swift sft --max_length 64 --report_to all");
  QCOMPARE(all.value.config.report_to, std::vector<std::string>{"tensorboard"});
  QVERIFY(!contains(export_swift_command(all.value.config), "--report_to"));  // ms-swift's default
}

void TstSwiftBridge::qloraArgumentsMap() {
  // ms-swift's QLoRA arguments are Odyssey's keys (docs/qlora.md), both ways.
  auto r = import_swift_command(
      "swift sft --model m --max_length 64 --quant_bits 4 --quant_method bnb --bnb_4bit_quant_type fp4 "
      "--bnb_4bit_use_double_quant false --bnb_4bit_compute_dtype bfloat16");
  QVERIFY2(r.ok() && warnings(r.diagnostics).empty(), format_all(r.diagnostics).c_str());
  QCOMPARE(r.value.config.quant_bits, std::int64_t{4});
  QCOMPARE(r.value.config.quant_method, std::string("bnb"));
  QCOMPARE(r.value.config.bnb_4bit_quant_type, std::string("fp4"));
  QCOMPARE(r.value.config.bnb_4bit_use_double_quant, false);
  QCOMPARE(r.value.config.bnb_4bit_compute_dtype, std::string("bfloat16"));
  const std::string cmd = export_swift_command(r.value.config);
  for (const char* a : {"--quant_bits 4", "--bnb_4bit_quant_type fp4", "--bnb_4bit_use_double_quant false",
                        "--bnb_4bit_compute_dtype bfloat16"})
    QVERIFY2(contains(cmd, a), cmd.c_str());
  // Other quantization methods are named, not silently trained 16-bit.
  auto hqq = import_swift_command("swift sft --model m --max_length 64 --quant_bits 4 --quant_method hqq");
  QVERIFY2(!hqq.ok() && contains(format_all(hqq.diagnostics), "quant_method"), format_all(hqq.diagnostics).c_str());
}

void TstSwiftBridge::typoSuggestsArgument() {
  auto r = import_swift_command("swift sft --max_length 64 --lora_rnak 16 --per_device_eval_batch_size 2");
  const std::string w = warnings(r.diagnostics);
  QVERIFY2(contains(w, "--lora_rnak 16: unknown ms-swift argument, not imported; did you mean --lora_rank?"),
           w.c_str());
  QVERIFY2(!contains(w, "did you mean --per_device_train_batch_size"), w.c_str());  // a real ms-swift argument
  QCOMPARE(r.value.config.lora_rank, 8);
}

void TstSwiftBridge::badInput_data() {
  QTest::addColumn<QString>("text");
  QTest::addColumn<QString>("message");
  QTest::newRow("empty") << ""
                         << "swift command: error: the command is empty";
  QTest::newRow("comments only") << "# nothing\n\n# here\n"
                                 << "no 'swift sft' command found";
  QTest::newRow("unterminated") << "swift sft \\\n  --system 'oops \\\n  --model m\n"
                                << "swift command:2: error: unterminated single quote";
  QTest::newRow("infer") << "swift infer --model m"
                         << "'swift infer' on line 1 is not a training command";
  QTest::newRow("rlhf") << "swift rlhf --rlhf_type dpo"
                        << "'swift rlhf' on line 1 is preference or RL training";
  QTest::newRow("pt") << "swift pt --model m"
                      << "change it to 'swift sft'";
  QTest::newRow("megatron") << "megatron sft --model m"
                            << "Megatron-SWIFT ('megatron sft') is not supported";
  QTest::newRow("two sft") << "swift sft --model a\nswift sft --model b\n"
                           << "swift command:2: error: a second 'swift sft' command (the first is on line 1)";
  QTest::newRow("yaml arg") << "swift sft examples/no-such.yaml"
                            << "the command reads its arguments from 'examples/no-such.yaml', which is not a file";
  QTest::newRow("config arg") << "swift sft --config"
                              << "--config needs a file name";
  QTest::newRow("yaml by shell") << "swift sft $(pick).yaml"
                                 << "needs a shell to name; write its path";
  QTest::newRow("stray word") << "swift sft oops --model m"
                              << "unexpected word 'oops'";
  QTest::newRow("adalora") << "swift sft --train_type adalora"
                           << "Odyssey trains lora or full";
  QTest::newRow("two values") << "swift sft --lora_rank 8 16"
                              << "--lora_rank takes one value, found 2";
  QTest::newRow("two systems") << "swift sft --system a b"
                               << "--system takes one value, found 2: --system a b";
  QTest::newRow("no value") << "swift sft --model"
                            << "--model takes one value, found none";
  QTest::newRow("NUL") << QString("swift sft --model a") + QChar(0) + "b"
                       << "a control character";
  QTest::newRow("gpu uuid") << "CUDA_VISIBLE_DEVICES=GPU-1a2b swift sft"
                            << "from CUDA_VISIBLE_DEVICES: found 'GPU-1a2b'";
}

void TstSwiftBridge::badInput() {
  QFETCH(QString, text);
  QFETCH(QString, message);
  const QByteArray bytes = text.toUtf8();
  auto r = import_swift_command(std::string_view(bytes.constData(), static_cast<std::size_t>(bytes.size())));
  QVERIFY(!r.ok());
  QVERIFY2(contains(errors(r.diagnostics), message.toStdString()), format_all(r.diagnostics).c_str());
}

void TstSwiftBridge::wrongTypesNameTheArgument() {
  auto r = import_swift_command(
      "swift sft \\\n  --max_length abc \\\n  --lora_rank 1.5 \\\n  --train_type lora \\\n  --learning_rate -1\n");
  const std::string e = errors(r.diagnostics);
  QVERIFY2(contains(e, "swift command:2: error: max_length: found 'abc', expected an integer from 16 to 16777216"),
           e.c_str());
  QVERIFY2(contains(e,
                    "swift command:3: error: lora_rank: found '1.5', expected an integer from 1 to 4096; write a "
                    "whole number"),
           e.c_str());
  QVERIFY2(contains(e, "swift command:5: error: learning_rate: found '-1', expected a number from 0.0 to 10.0"),
           e.c_str());
  auto renamed = import_swift_command("swift sft --max_length 64 --use_liger_kernel maybe");
  QVERIFY2(contains(errors(renamed.diagnostics), "fused_kernels: from --use_liger_kernel: found 'maybe'"),
           format_all(renamed.diagnostics).c_str());
}

void TstSwiftBridge::secretsNeverEchoed() {
  auto r = import_swift_command(
      "export HF_TOKEN=hf_s3cr3t\nWANDB_API_KEY=k3y swift sft --max_length 64 --hub_token ms_s3cr3t "
      "--swanlab_token sw_s3cr3t\nhuggingface-cli login --token cli_s3cr3t\n");
  const std::string all = format_all(r.diagnostics);
  QVERIFY2(!contains(all, "s3cr3t") && !contains(all, "k3y"), all.c_str());
  QVERIFY2(contains(all, "HF_TOKEN=<hidden>") && contains(all, "--hub_token <hidden>"), all.c_str());
  QVERIFY2(contains(all, "other shell commands ignored: line 3: huggingface-cli …"), all.c_str());
}

void TstSwiftBridge::exportIsShellSafe() {
  const QString bash = QStandardPaths::findExecutable("bash");
  if (bash.isEmpty()) QSKIP("bash is not installed");
  QTemporaryDir dir;
  const std::string d = dir.path().toStdString();
  TrainConfig c;
  c.description = "x\ntouch " + d + "/m1 # $(touch " + d + "/m2)";
  c.system = "'; touch " + d + "/m3; echo '$(touch " + d + "/m4)`touch " + d + "/m5`\nline two";
  c.model = "#not-a-comment";
  c.output_dir = "-o $(touch " + d + "/m6)";
  c.dataset = {"a b.jsonl", "it's.jsonl#3", "$HOME/x.jsonl"};
  c.gpu_ids = {0, 1};
  c.max_length = 4096;
  const std::string cmd = export_swift_command(c);
  // Run it with `swift` replaced by a function that prints its arguments.
  const std::string script = "swift() { printf '%s\\0' \"$@\" > " + d + "/args; }\n" + cmd;
  QProcess p;
  p.start(bash, {"-c", QString::fromStdString(script)});
  QVERIFY(p.waitForFinished(10000));
  QCOMPARE(p.exitCode(), 0);
  for (int i = 1; i <= 6; ++i) QVERIFY2(!QFile::exists(dir.filePath(QString("m%1").arg(i))), cmd.c_str());
  QFile f(dir.filePath("args"));
  QVERIFY(f.open(QIODevice::ReadOnly));
  const QList<QByteArray> got = f.readAll().split('\0');
  auto after = [&](const char* flag) {
    for (int i = 0; i + 1 < got.size(); ++i)
      if (got[i] == flag) return got[i + 1].toStdString();
    return std::string("<missing>");
  };
  std::string sys = c.system;
  sys.replace(sys.find('\n'), 1, "\\n");  // ms-swift turns a written \n back into a newline
  QCOMPARE(after("--system"), sys);
  QCOMPARE(after("--model"), c.model);
  QVERIFY(got.contains(QByteArray("--output_dir=") + QByteArray::fromStdString(c.output_dir)));
  QCOMPARE(after("--dataset"), std::string("a b.jsonl"));
  // And it imports back to the same settings.
  auto back = import_swift_command(cmd);
  QVERIFY2(back.ok(), format_all(back.diagnostics).c_str());
  back.value.config.description = c.description;  // Odyssey-only: in the trailing comment
  QCOMPARE(preset(back.value.config), preset(c));
}

void TstSwiftBridge::exportListsOdysseyOnly() {
  TrainConfig c;
  c.model = "m";
  c.description = "demo";
  c.ulysses_size = 2;
  c.offload_activations = "true";
  c.max_bad_sample_ratio = 0.2;
  c.attn_impl = "cudnn";
  c.activation_checkpointing = "every:2";
  c.lora_alpha = 16.5;
  c.device = "cuda";
  const std::string cmd = export_swift_command(c);
  QVERIFY2(contains(cmd,
                    "\n# Odyssey-only settings not expressible in swift: description=demo, max_bad_sample_ratio=0.2, "
                    "lora_alpha=16.5, attn_impl=cudnn, activation_checkpointing=\"every:2\", "
                    "offload_activations=true, ulysses_size=2, device=cuda\n"),
           cmd.c_str());
  QVERIFY(contains(cmd, "--attn_impl sdpa") && contains(cmd, "--gradient_checkpointing true"));
  QVERIFY(!contains(cmd, "--lora_alpha"));
  QVERIFY(contains(export_swift_command(TrainConfig{}), "swift sft \\\n    --model ''"));
  QVERIFY(!contains(export_swift_command(TrainConfig{}), "Odyssey-only"));
}

void TstSwiftBridge::exportQuickstart() {
  auto q = load_embedded_quickstart();
  QVERIFY(q.ok());
  const std::string cmd = export_swift_command(q.value.config);
  for (const char* s :
       {"CUDA_VISIBLE_DEVICES='' \\\nswift sft \\\n    --model ../resources/quickstart/model", "--template chatml",
        "--max_steps 100", "--use_liger_kernel false", "--gradient_checkpointing false", "--tuner_type full",
        "--packing true", "--eval_steps 20", "--attn_impl flash_attn"})
    QVERIFY2(contains(cmd, s), (std::string(s) + " not in:\n" + cmd).c_str());
  auto back = import_swift_command(cmd);
  QVERIFY2(back.ok() && warnings(back.diagnostics).empty(), format_all(back.diagnostics).c_str());
  back.value.config.description = q.value.config.description;
  QCOMPARE(preset(back.value.config), preset(q.value.config));
}

void TstSwiftBridge::roundTripRandom() {
  std::mt19937_64 rng(20240611);
  for (int i = 0; i < 400; ++i) {
    const TrainConfig c = random_config(rng);
    const std::string cmd = export_swift_command(c);
    // ms-swift packs only with flash attention: packing or padding-free export --attn_impl
    // flash_attn (on the CPU it imports back as auto); any other attention is the
    // export's Odyssey-only comment.
    TrainConfig want = c;
    if (c.packing || c.padding_free) want.attn_impl = "flash_attn";
    if (c.device == "cpu" && want.attn_impl == "flash_attn") want.attn_impl = "auto";
    auto r = import_swift_command(cmd);
    QVERIFY2(r.ok() && warnings(r.diagnostics).empty(), (cmd + format_all(r.diagnostics)).c_str());
    if (preset(r.value.config) != preset(want)) qWarning("%s", cmd.c_str());
    QCOMPARE(preset(r.value.config), preset(want));
    // The same arguments as an ms-swift YAML config.
    auto y = import_swift_yaml(to_yaml(cmd), "rt.yaml");
    QVERIFY2(y.ok() && warnings(y.diagnostics).empty(), (to_yaml(cmd) + format_all(y.diagnostics)).c_str());
    QCOMPARE(preset(y.value.config), preset(want));
  }
}

QTEST_APPLESS_MAIN(TstSwiftBridge)
#include "tst_swift_bridge.moc"
