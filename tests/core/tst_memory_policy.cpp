// The one memory policy (core/train/memory_policy.h) that the trainer and odyssey-bench both
// run: the planner's choices taken layer by layer where the configuration says auto, fixed
// counts where odyssey-bench's flags give them, and nothing planned on the CPU. The planner
// itself is tested in tst_memory_planner; here, that the policy reads it as the engine must
// (checkpointed layers first, kept attention only on checkpointed layers, MLP tiers only on
// the others, offloaded before recomputing) and that the model receives exactly those sets.
#include "config/model_config.h"
#include "config/train_config.h"
#include "model/activation_checkpoint.h"
#include "model/decoder.h"
#include "planner/memory_terms.h"
#include "train/lora.h"
#include "train/memory_policy.h"

#include <fstream>
#include <sstream>

#include <QTest>  // after LibTorch's headers: Qt's `slots` keyword is a macro

using namespace odyssey;

namespace {

constexpr std::int64_t kGiB = planner::kGiB;

HfModelConfig qwen25_7b() {  // the bundled shape (resources/model-shapes)
  const std::string file = std::string(ODYSSEY_SOURCE_DIR) + "/resources/model-shapes/Qwen--Qwen2.5-7B.json";
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  auto m = parse_model_config(text.str(), file);
  if (!m.ok()) qFatal("%s", format_all(m.diagnostics).c_str());
  return m.value;
}

TrainConfig lora_32k() {
  TrainConfig c;
  c.tuner_type = "lora", c.lora_rank = 16, c.target_modules = {"all-linear"};
  c.torch_dtype = "bfloat16", c.device = "cuda", c.max_length = 32768, c.padding_free = true;
  c.activation_checkpointing = "auto", c.keep_attention = "auto", c.offload_activations = "true";
  return c;
}

PlannerOptions gpu_of(std::int64_t gib) {
  PlannerOptions o;
  o.gpu_memory_bytes = gib * kGiB;
  return o;
}

std::int64_t first_false(const std::vector<bool>& v) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!v[i]) return static_cast<std::int64_t>(i);
  return static_cast<std::int64_t>(v.size());
}

}  // namespace

class TestMemoryPolicy : public QObject {
  Q_OBJECT
 private slots:
  // offload_activations auto: the engine offloads where the plan chose to (Qwen2.5-7B LoRA 32K
  // under 32 GiB on a 128 GiB host: offload recomputes less, tst_memory_planner
  // offloadAutoChoosesWhereItHelps), with the plan's layers; not on a whole H200, where nothing
  // is recomputed (8K tokens), nor with false.
  void offloadAutoFollowsThePlan() {
    const HfModelConfig m = qwen25_7b();
    TrainConfig c = lora_32k();
    c.offload_activations = "auto";
    PlannerOptions o = gpu_of(32);
    o.host_memory_bytes = 128 * kGiB;
    const train::MemoryPolicy mp = train::memory_policy(c, m, o);
    QVERIFY(mp.plan && mp.plan->offload_activations);
    QVERIFY(mp.offload_checkpoints);
    QVERIFY(mp.plan_matches());
    QVERIFY2(mp.why.find("offload_activations auto") != std::string::npos, mp.why.c_str());
    c.offload_activations = "false";
    const train::MemoryPolicy off = train::memory_policy(c, m, o);
    QVERIFY(!off.offload_checkpoints);
    QVERIFY(off.plan_matches());
    QVERIFY(off.count(off.checkpoint) > mp.count(mp.checkpoint) ||
            off.count(off.keep_attention) < mp.count(mp.keep_attention) ||
            off.count(off.mlp_recompute) > mp.count(mp.mlp_recompute));  // what offload saved
    c.offload_activations = "auto", c.max_length = 8192;
    o.gpu_memory_bytes = 0;  // a whole H200, 8K tokens
    const train::MemoryPolicy roomy = train::memory_policy(c, m, o);
    QVERIFY(!roomy.offload_checkpoints);
    QCOMPARE(roomy.count(roomy.checkpoint), std::int64_t{0});
  }

  // The run's warning when this host's processes would pin more than is free: none while it
  // fits or nothing is pinned, else the plan's bytes per process, the processes and what is free.
  void hostShortfallWarnsWithTheNumbers() {
    TrainConfig c = lora_32k();
    c.offload_activations = "true";
    PlannerOptions o = gpu_of(32);
    o.host_memory_bytes = 128 * kGiB;
    const train::MemoryPolicy mp = train::memory_policy(c, qwen25_7b(), o);
    QVERIFY(mp.plan && mp.plan->host_bytes > kGiB);
    const std::int64_t pinned = mp.plan->host_bytes;
    QVERIFY(train::host_shortfall(mp, 1, pinned).empty());
    QVERIFY(train::host_shortfall(mp, 1, 0).empty());  // MemAvailable unknown
    QVERIFY(!train::host_shortfall(mp, 2, pinned).empty());
    const std::string w = train::host_shortfall(mp, 1, pinned - 1);
    QVERIFY2(w.find("per process (1 on this host") != std::string::npos &&
                 w.find("MemAvailable") != std::string::npos &&
                 w.find("offload_activations: false") != std::string::npos,
             w.c_str());
    c.offload_activations = "false";
    const train::MemoryPolicy none = train::memory_policy(c, qwen25_7b(), o);
    QCOMPARE(none.plan->host_bytes, std::int64_t{0});  // nothing pinned: nothing to warn of
    QVERIFY(train::host_shortfall(none, 8, 1).empty());
  }

  // Under budgets from tight to roomy, auto takes the plan's counts, layer by layer as the
  // engine reads them: the first layers checkpointed, attention kept on some of those only,
  // the MLP tiers on the others (offloaded ones first), and the plan predicts what runs.
  void autoFollowsThePlan_data() {
    QTest::addColumn<int>("gib");
    for (int g : {24, 30, 36, 48, 64, 141}) QTest::newRow(qPrintable(QString::number(g) + " GiB")) << g;
  }
  void autoFollowsThePlan() {
    QFETCH(int, gib);
    const HfModelConfig m = qwen25_7b();
    const TrainConfig c = lora_32k();
    const train::MemoryPolicy p = train::memory_policy(c, m, gpu_of(gib));
    QVERIFY(p.plan);
    const MemoryPlan direct = plan_memory(c, m, gpu_of(gib));
    QCOMPARE(p.plan->peak_bytes, direct.peak_bytes);
    QVERIFY(p.plan_matches());
    const std::int64_t ck = p.count(p.checkpoint);
    QCOMPARE(ck, direct.checkpointed_layers);
    QCOMPARE(first_false(p.checkpoint), ck);  // the first ck layers
    QCOMPARE(p.count(p.keep_attention), direct.attention_kept_layers);
    QCOMPARE(p.count(p.mlp_offload), direct.mlp_offloaded_layers);
    QCOMPARE(p.count(p.mlp_recompute), direct.mlp_recomputed_layers);
    QCOMPARE(p.count(p.mlp_park), direct.mlp_parked_layers);
    for (std::size_t i = 0; i < p.checkpoint.size(); ++i) {
      if (p.keep_attention[i] || p.mlp_park[i]) QVERIFY(p.checkpoint[i]);
      QCOMPARE(bool(p.mlp_park[i]), parks_mlp(direct, static_cast<std::int64_t>(i)));
      if (p.mlp_offload[i] || p.mlp_recompute[i]) QVERIFY(!p.checkpoint[i]);
      QVERIFY(!(p.mlp_offload[i] && p.mlp_recompute[i]));
      if (p.mlp_recompute[i])  // offloaded layers come before recomputing ones
        for (std::size_t j = i + 1; j < p.checkpoint.size(); ++j) QVERIFY(!p.mlp_offload[j]);
    }
    QCOMPARE(p.mlp_offload_lead, planner::mlp_offload_lead(direct.mlp_offloaded_layers));
    QCOMPARE(p.mlp_tile, direct.mlp_tile_tokens);
    QVERIFY(p.offload_checkpoints);
    QCOMPARE(p.over_capacity.empty(), direct.fits);
    QVERIFY2(p.why.find(std::to_string(ck) + " of 28 layers (auto") == 0, p.why.c_str());
  }

  // odyssey-bench's --checkpointing N / --mlp-offload N / --mlp-recompute N: exactly those
  // layers, whatever the plan would choose; the plan predicts it only when its counts agree.
  void fixedCounts() {
    const HfModelConfig m = qwen25_7b();
    TrainConfig c = lora_32k();
    train::LayerCounts f;
    f.checkpoint_first = 10, f.mlp_offload_first = 3, f.mlp_recompute_first = 5;
    const train::MemoryPolicy p = train::memory_policy(c, m, gpu_of(141), f);
    for (std::size_t i = 0; i < 28; ++i) {
      QCOMPARE(bool(p.checkpoint[i]), i < 10);
      QCOMPARE(bool(p.mlp_offload[i]), i >= 10 && i < 13);
      QCOMPARE(bool(p.mlp_recompute[i]), i >= 13 && i < 18);
    }
    QCOMPARE(p.mlp_offload_lead, std::int64_t{4});
    QVERIFY(!p.plan_matches());  // a roomy H200 plan checkpoints nothing
    // --mlp-park N: the first N checkpointed layers, with offload_activations only.
    f.mlp_park_first = 4;
    const train::MemoryPolicy parked = train::memory_policy(c, m, gpu_of(141), f);
    for (std::size_t i = 0; i < 28; ++i) QCOMPARE(bool(parked.mlp_park[i]), i < 4);
    QVERIFY(parked.why.find("4 of the checkpointed layers park their MLP") != std::string::npos);
    // --mlp-park-stride S: every S-th checkpointed layer from the first, until N are parked.
    f.mlp_park_stride = 3;
    const train::MemoryPolicy strided = train::memory_policy(c, m, gpu_of(141), f);
    for (std::size_t i = 0; i < 28; ++i) QCOMPARE(bool(strided.mlp_park[i]), i % 3 == 0 && i < 12);
    f.mlp_park_stride = 1;
    c.offload_activations = "false";
    const train::MemoryPolicy on_gpu = train::memory_policy(c, m, gpu_of(141), f);
    QCOMPARE(on_gpu.count(on_gpu.mlp_park), std::int64_t{0});
    c.offload_activations = "true";
    f.mlp_park_first = -1;
    // All layers, attention kept on all, nothing on the MLP: the plan for "all" predicts it.
    c.keep_attention = "all";
    f = {};
    f.checkpoint_first = 28;
    const train::MemoryPolicy all = train::memory_policy(c, m, gpu_of(141), f);
    QCOMPARE(all.count(all.checkpoint), std::int64_t{28});
    QCOMPARE(all.count(all.keep_attention), std::int64_t{28});
    QCOMPARE(all.count(all.mlp_offload) + all.count(all.mlp_recompute), std::int64_t{0});
    QCOMPARE(all.plan->checkpointed_layers, std::int64_t{28});
    // More layers than the model has: all of them.
    f.checkpoint_first = 100;
    const train::MemoryPolicy more = train::memory_policy(c, m, gpu_of(141), f);
    QCOMPARE(more.count(more.checkpoint), std::int64_t{28});
  }

  // The configured policies: every:K, all with keep_attention none, none; on the CPU nothing
  // is planned and auto checkpoints nothing.
  void configuredPolicies() {
    const HfModelConfig m = qwen25_7b();
    TrainConfig c = lora_32k();
    c.activation_checkpointing = "every:3";
    const train::MemoryPolicy every = train::memory_policy(c, m, gpu_of(141));
    for (std::size_t i = 0; i < 28; ++i) QCOMPARE(bool(every.checkpoint[i]), i % 3 == 0);
    QCOMPARE(every.count(every.mlp_offload) + every.count(every.mlp_recompute), std::int64_t{0});
    c.activation_checkpointing = "all", c.keep_attention = "none";
    const train::MemoryPolicy all = train::memory_policy(c, m, gpu_of(141));
    QCOMPARE(all.count(all.checkpoint), std::int64_t{28});
    QCOMPARE(all.count(all.keep_attention), std::int64_t{0});
    c.activation_checkpointing = "auto", c.device = "cpu";
    const train::MemoryPolicy cpu = train::memory_policy(c, m, std::nullopt);
    QVERIFY(!cpu.plan);
    QCOMPARE(cpu.count(cpu.checkpoint), std::int64_t{0});
    QVERIFY2(cpu.why.find("CPU") != std::string::npos, cpu.why.c_str());
  }

  // A job the planner refuses outright: an error when the plan decides, no plan (and no
  // error) when every choice is given.
  void refusedJob() {
    HfModelConfig m = qwen25_7b();
    m.num_hidden_layers = 28000000;
    TrainConfig c = lora_32k();
    QVERIFY_THROWS_EXCEPTION(train::MemoryPolicyRefused, train::memory_policy(c, m, gpu_of(80)));
    c.activation_checkpointing = "all", c.keep_attention = "none", c.mlp_tile_tokens = 4096;
    const train::MemoryPolicy p = train::memory_policy(c, m, gpu_of(80));
    QVERIFY(!p.plan);
    QCOMPARE(p.mlp_tile, std::int64_t{4096});
  }

  // apply_memory_policy hands the model exactly the policy's layer sets.
  void appliedToTheModel() {
    DecoderConfig dc;
    dc.hf.hidden_size = 32, dc.hf.intermediate_size = 64, dc.hf.num_hidden_layers = 4;
    dc.hf.num_attention_heads = 4, dc.hf.num_key_value_heads = 2, dc.hf.head_dim = 8, dc.hf.vocab_size = 64;
    model::CausalLM lm(dc, model::DecoderOptions{});
    TrainConfig c = lora_32k();
    train::LayerCounts f;
    f.checkpoint_first = 2;
    c.keep_attention = "all", c.mlp_tile_tokens = 512;
    const train::MemoryPolicy p = train::memory_policy(c, dc.hf, gpu_of(141), f);
    train::apply_memory_policy(lm, p);
    QCOMPARE(lm->checkpoint_layers(), (std::vector<bool>{true, true, false, false}));
    QCOMPARE(lm->keep_attention_layers(), (std::vector<bool>{true, true, false, false}));
    QCOMPARE(lm->mlp_tile_tokens(), std::int64_t{512});
    QCOMPARE(lm->layers_per_checkpoint(), std::int64_t{1});
    c.keep_attention = "none", c.layers_per_checkpoint = 3;
    train::apply_memory_policy(lm, train::memory_policy(c, dc.hf, gpu_of(141), f));
    QCOMPARE(lm->layers_per_checkpoint(), std::int64_t{3});
  }

  // Checkpoint segments (model::checkpointed_segment): five "layers" (a projection, dropout that
  // draws from the CPU generator, tanh) run plainly, checkpointed one by one, and in segments of
  // 2, 3 and 5. The loss, the input's and every weight's gradient are bit for bit the plain
  // run's (the dropout masks drawn again from forward's generator states); the generator is
  // where the plain run left it; and each layer runs as often as the segment says: forward,
  // plus once in backward, plus once more to rebuild a later layer's input unless it is its
  // segment's last.
  void segmentsRebuildBitForBit() {
    torch::manual_seed(7);
    const int layers = 5;
    std::vector<torch::Tensor> w;
    for (int i = 0; i < layers; ++i) w.push_back((torch::randn({6, 6}) * 0.4).requires_grad_(true));
    const torch::Tensor x0 = torch::randn({4, 6});
    std::vector<int> calls(layers, 0);
    auto layer = [&](int i) {
      return [&, i](const torch::Tensor& x) {
        ++calls[static_cast<std::size_t>(i)];
        return torch::tanh(torch::dropout(torch::matmul(x, w[static_cast<std::size_t>(i)]), 0.3, true));
      };
    };
    struct Run {
      torch::Tensor loss, dx, next_draw;
      std::vector<torch::Tensor> dw;
    };
    auto run = [&](int segment) {  // 0: no checkpointing
      for (auto& t : w) t.mutable_grad() = torch::Tensor();
      std::fill(calls.begin(), calls.end(), 0);
      torch::manual_seed(11);
      torch::Tensor x = x0.clone().requires_grad_(true);
      torch::Tensor h = x;
      for (int i = 0; i < layers;) {
        if (segment == 0) {
          h = layer(i)(h);
          ++i;
          continue;
        }
        std::vector<std::function<torch::Tensor(const torch::Tensor&)>> fns;
        for (; i < layers && static_cast<int>(fns.size()) < segment; ++i) fns.push_back(layer(i));
        h = model::checkpointed_segment(std::move(fns), h);
      }
      Run r;
      r.loss = h.pow(2).sum();
      r.loss.backward();
      r.dx = x.grad().clone();
      for (auto& t : w) r.dw.push_back(t.grad().clone());
      r.next_draw = torch::rand({3});
      return r;
    };
    const Run plain = run(0);
    for (int i = 0; i < layers; ++i) QCOMPARE(calls[static_cast<std::size_t>(i)], 1);
    for (int segment : {1, 2, 3, 5}) {
      const Run r = run(segment);
      QVERIFY2(torch::equal(r.loss, plain.loss), qPrintable(QString("segment %1: loss").arg(segment)));
      QVERIFY2(torch::equal(r.dx, plain.dx), qPrintable(QString("segment %1: input gradient").arg(segment)));
      for (int i = 0; i < layers; ++i)
        QVERIFY2(torch::equal(r.dw[static_cast<std::size_t>(i)], plain.dw[static_cast<std::size_t>(i)]),
                 qPrintable(QString("segment %1: weight %2").arg(segment).arg(i)));
      QVERIFY2(torch::equal(r.next_draw, plain.next_draw), qPrintable(QString("segment %1: generator").arg(segment)));
      for (int i = 0; i < layers; ++i) {
        const bool last_of_segment = (i + 1) % segment == 0 || i + 1 == layers;
        QCOMPARE(calls[static_cast<std::size_t>(i)], last_of_segment ? 2 : 3);
      }
    }
    // The input must require grad (a segment without one would have no backward at all).
    QVERIFY_THROWS_EXCEPTION(c10::Error, model::checkpointed_segment({layer(0)}, x0));
  }

  // The planner's trainable count on a MoE model is the adapters train::apply_lora adds: the
  // MLP names adapting the experts (Qwen3-MoE: gate_up at twice the rank), target_parameters
  // entries as PEFT matches them (a suffix of the layer's parameter name, or one layer's full
  // name), and names that adapt no expert (gate_proj without up_proj). A tiny Qwen3-MoE with a
  // dense layer (mlp_only_layers), built by the engine.
  void expertAdaptersAsTheEngineAddsThem_data() {
    QTest::addColumn<QStringList>("modules");
    QTest::addColumn<QStringList>("parameters");
    QTest::newRow("all-linear (the MLP names mean the experts)") << QStringList{"all-linear"} << QStringList{};
    QTest::newRow("q, v + both stacked parameters")
        << QStringList{"q_proj", "v_proj"} << QStringList{"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
    QTest::newRow("q + a shorter suffix") << QStringList{"q_proj"} << QStringList{"experts.down_proj"};
    QTest::newRow("q + one layer's gate_up")
        << QStringList{"q_proj"} << QStringList{"model.layers.2.mlp.experts.gate_up_proj"};
    QTest::newRow("gate_proj alone adapts no expert") << QStringList{"q_proj", "gate_proj"} << QStringList{};
    QTest::newRow("down_proj by name and gate_up as a parameter")
        << QStringList{"q_proj", "down_proj"} << QStringList{"mlp.experts.gate_up_proj"};
  }
  void expertAdaptersAsTheEngineAddsThem() {
    QFETCH(QStringList, modules);
    QFETCH(QStringList, parameters);
    auto cfg = parse_decoder_config(
        R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 32,
            "intermediate_size": 40, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 8, "vocab_size": 50, "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 24, "mlp_only_layers": [1], "tie_word_embeddings": false})",
        "tiny-moe/config.json");
    QVERIFY2(cfg.ok(), format_all(cfg.diagnostics).c_str());
    TrainConfig c = lora_32k();
    c.lora_rank = 4;
    c.target_modules.clear();
    for (const QString& m : modules) c.target_modules.push_back(m.toStdString());
    for (const QString& p : parameters) c.target_parameters.push_back(p.toStdString());
    const auto resolved = train::resolve_target_modules(c.target_modules);
    QVERIFY(resolved.ok());
    train::LoraSettings ls;
    ls.rank = c.lora_rank;
    ls.target_modules = resolved.value;
    ls.target_parameters = c.target_parameters;
    model::CausalLM lm(cfg.value, model::DecoderOptions{});
    const std::int64_t engine = train::apply_lora(lm, ls);
    const planner_detail::Terms t = planner_detail::compute_terms(c, cfg.value.hf, gpu_of(80));
    QCOMPARE(t.trainable, engine);
  }
};

QTEST_APPLESS_MAIN(TestMemoryPolicy)
#include "tst_memory_policy.moc"
