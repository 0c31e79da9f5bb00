// The decoder model against the real reference: tests/reference/make_tiny_models.py builds
// tiny random Qwen2 (bias, tied, sharded), Qwen3 (q/k norm, head_dim 32) and Llama-3
// (llama3 RoPE, untied) models with transformers 5.17, and the other families of the one
// decoder (Mistral with a sliding window, Llama with head_dim != hidden/heads and biases,
// SmolLM, Granite, every RoPE kind, Gemma-2, Phi-3, Gemma-3: family_models() there), and
// records logits, loss and every parameter's gradient on a padded batch (one full, one
// right-padded, one left-padded row) and logits of an unpadded batch.
// Odyssey loads each directory and must agree in fp32 within 1e-4 relative, where
// relative error = max|odyssey - hf| / max|hf| over the tensor (the fp32 result of the same
// ATen kernels in a different order of additions differs by a few 1e-7; 1e-4 is the
// issue's bound). Broken checkpoints must give errors naming the file and the tensor.
#define QT_NO_KEYWORDS
#include <torch/torch.h>

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "common/text.h"
#include "model/decoder.h"
#include "model/rope.h"
#include "model/safetensors.h"
#include "model/score.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "train/lora.h"

using namespace odyssey;
using namespace odyssey::model;

namespace {

constexpr double kTolerance = 1e-4;  // the bound for fp32

struct Err {
  double abs = 0, rel = 0;
};

Err compare(const torch::Tensor& got, const torch::Tensor& want) {
  const double scale = want.abs().max().item<double>();
  const double abs = (got.to(torch::kFloat32) - want).abs().max().item<double>();
  return {abs, scale > 0 ? abs / scale : abs};
}

bool contains(const std::string& h, const std::string& n) { return h.find(n) != std::string::npos; }

}  // namespace

class TstDecoderParity : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  std::string dir_;

  // Runs one of the Python oracles (ODYSSEY_PYTHON: transformers, PEFT) and returns what it
  // printed when it failed or did not finish in 300 s, empty when it succeeded.
  static QByteArray run_python(const QStringList& args) {
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(QStringLiteral(ODYSSEY_PYTHON), args);
    if (!p.waitForFinished(300000)) return "did not finish in 300 s: " + args.join(' ').toUtf8();
    const QByteArray o = p.readAll();
    return p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0 ? QByteArray() : "FAILED: " + o;
  }

  torch::Tensor ref(const SafetensorsCheckpoint& r, const std::string& name) {
    auto t = r.load(name, torch::kFloat32);
    if (!t.ok()) qFatal("%s", format_all(t.diagnostics).c_str());
    return t.value;
  }

 private Q_SLOTS:
  void initTestCase() {
    const QString python = QStringLiteral(ODYSSEY_PYTHON);
    if (python.isEmpty())
      QSKIP(
          "ODYSSEY_PYTHON is empty: configure with -DODYSSEY_PYTHON=<python with transformers 5.17.0, torch, "
          "safetensors> (setup.sh does) to run the parity tests");
    QVERIFY(tmp_.isValid());
    dir_ = tmp_.path().toStdString();
    const QByteArray err =
        run_python({QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/make_tiny_models.py"), tmp_.path(), "--bad"});
    QVERIFY2(err.isEmpty(), err.constData());
  }

  void parity_data() {
    QTest::addColumn<QString>("name");
    QTest::newRow("qwen2 (bias, tied, sharded)") << "qwen2";
    QTest::newRow("qwen3 (qk norm, head_dim 32)") << "qwen3";
    QTest::newRow("llama3 (llama3 rope, untied)") << "llama3";
    QTest::newRow("mistral (head_dim 24, sliding window 5)") << "mistral";
    QTest::newRow("llama (head_dim 24, attention and mlp bias, GQA 1)") << "llama_hd";
    QTest::newRow("smollm (tied, GQA 4)") << "smollm";
    QTest::newRow("smollm3 (NoPE on the second of three layers, tied)") << "smollm3";
    QTest::newRow("ministral (window 5 on the layers layer_types marks, head_dim 24)") << "ministral";
    QTest::newRow("olmo2 (output norms only, q/k norm over all heads, fp32-weighted norms, bias)") << "olmo2";
    QTest::newRow("olmo3 (olmo2's block, window 5 on 3 of 4 layers, their own RoPE base)") << "olmo3";
    QTest::newRow("glm4 (GLM sandwich norms, gate_up_proj, interleaved half rotary, qkv bias)") << "glm4";
    QTest::newRow("granite (multipliers, logits_scaling)") << "granite";
    QTest::newRow("rope linear") << "rope_linear";
    QTest::newRow("rope dynamic (past max_position_embeddings)") << "rope_dynamic";
    QTest::newRow("rope yarn") << "rope_yarn";
    QTest::newRow("rope yarn (mscale, mscale_all_dim)") << "rope_yarn_mscale";
    QTest::newRow("rope longrope (long factors)") << "rope_longrope";
    QTest::newRow("gemma2 (sandwich norms, soft-capping, GeGLU, alternating window)") << "gemma2";
    QTest::newRow("phi3 (fused qkv/gate_up, partial rotary, longrope, window 7)") << "phi3";
    QTest::newRow("gemma3 (qk norm, local/global RoPE, window on 2 of 3)") << "gemma3";
    QTest::newRow("gemma3 multimodal checkpoint (Gemma3ForConditionalGeneration, its text model)") << "gemma3_mm";
    QTest::newRow("mistral3 multimodal checkpoint (Mistral-Small-3.1's layout: own lm_head, config silent on tying)")
        << "mistral3_mm";
    QTest::newRow("mistral3 multimodal, no lm_head stored, config silent: tied as Mistral3Config's default")
        << "mistral3_tied";
    QTest::newRow("llava multimodal checkpoint (a Qwen2 text model, tied through text_config)") << "llava_mm";
    QTest::newRow("config ties lm_head, weights hold their own: untied, as transformers does") << "tied_own_head";
    QTest::newRow("qwen2.5-vl multimodal checkpoint (text_config, mrope sections, text model's own names)")
        << "qwen2_5_vl_mm";
    QTest::newRow("qwen2-vl multimodal checkpoint, flat config.json as the hub's, tied") << "qwen2_vl_flat";
    QTest::newRow("qwen3-vl multimodal checkpoint (a Qwen3 text model, interleaved mrope)") << "qwen3_vl_mm";
    QTest::newRow("qwen3_moe (5 experts, top 2, norm_topk_prob, mlp_only_layers, aux loss)") << "qwen3_moe";
    QTest::newRow("qwen3_moe (9 experts, top 8, decoder_sparse_step 2, tied, aux loss)") << "qwen3_moe_top8";
    QTest::newRow("qwen2_moe (3 experts, top 1, shared expert, qkv bias, aux loss)") << "qwen2_moe";
    QTest::newRow("mixtral (7 experts, top 2, aux loss)") << "mixtral";
  }

  void parity() {
    QFETCH(QString, name);
    const std::string n = name.toStdString();
    auto loaded =
        load_causal_lm(dir_ + "/" + n, DecoderOptions{torch::kFloat32, torch::kCPU, AttentionBackend::Auto, false, {}});
    QVERIFY2(loaded.ok(), format_all(loaded.diagnostics).c_str());
    CausalLM lm = loaded.value.lm;
    // tie_word_embeddings as transformers settles it (the logits below tell a wrong head apart:
    // these models' lm_head and embedding differ).
    const bool distinct_head = n == "mistral3_mm" || n == "tied_own_head";
    if (distinct_head || n == "mistral3_tied") QCOMPARE(lm->config().hf.tie_word_embeddings, !distinct_head);
    QCOMPARE(contains(format_all(loaded.diagnostics), "differs from the embedding"), n == "tied_own_head");
    auto r = SafetensorsCheckpoint::open(dir_ + "/" + n + ".reference.safetensors");
    QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
    const auto& R = r.value;
    const torch::Tensor ids = ref(R, "input_ids").to(torch::kInt64);
    const torch::Tensor mask = ref(R, "attention_mask").to(torch::kInt64);
    const torch::Tensor labels = ref(R, "labels").to(torch::kInt64);

    lm->zero_grad();
    // MoE models with output_router_logits: transformers' loss adds router_aux_loss_coef times the
    // load-balancing loss, whose gradient reaches the routers through the recorded statistics.
    const HfModelConfig& hf = lm->config().hf;
    const bool aux = hf.is_moe() && hf.output_router_logits;
    lm->set_router_aux_loss(aux);
    const torch::Tensor logits = lm->forward(ids, mask);
    torch::Tensor loss = causal_lm_loss(logits, labels);
    if (aux) {
      const auto stats = lm->router_stats();
      QVERIFY(stats && !stats->empty());
      const torch::Tensor a = stats->aux_loss();
      const Err ea = compare(a.reshape({1}), ref(R, "aux_loss"));
      qInfo("%s: aux loss %.8f vs %.8f (rel %.3g)", n.c_str(), a.item<double>(), ref(R, "aux_loss").item<double>(),
            ea.rel);
      QVERIFY(ea.rel <= kTolerance);
      stats->grad_scale = hf.router_aux_loss_coef;
      loss = loss + hf.router_aux_loss_coef * a;
    }
    loss.backward();
    lm->set_router_aux_loss(false);
    const Err el = compare(logits.detach(), ref(R, "logits"));
    const Err ell = compare(loss.detach().reshape({1}), ref(R, "loss"));
    qInfo("%s: padded logits max abs %.3g rel %.3g; loss %.8f vs %.8f (abs %.3g rel %.3g); attention backend %s",
          n.c_str(), el.abs, el.rel, loss.item<double>(), ref(R, "loss").item<double>(), ell.abs, ell.rel,
          lm->attention_backend_ran().c_str());
    QVERIFY(el.rel <= kTolerance);
    QVERIFY(ell.rel <= kTolerance);

    std::set<std::string> want;
    for (const std::string& k : R.names())
      if (k.starts_with("grad.")) want.insert(k.substr(5));
    std::set<std::string> have;
    Err worst;
    std::string worst_name;
    for (const auto& p : lm->named_parameters(true)) {
      have.insert(p.key());
      QVERIFY2(p.value().grad().defined(), p.key().c_str());
      const Err e = compare(p.value().grad(), ref(R, "grad." + p.key()));
      if (e.rel > kTolerance)
        qWarning("%s: gradient of %s: max abs %.3g rel %.3g", n.c_str(), p.key().c_str(), e.abs, e.rel);
      if (e.rel >= worst.rel) {
        worst = e;
        worst_name = p.key();
      }
    }
    QCOMPARE(have, want);  // the module's names are HF's, one to one
    qInfo("%s: %zu parameter gradients, worst %s max abs %.3g rel %.3g", n.c_str(), have.size(), worst_name.c_str(),
          worst.abs, worst.rel);
    QVERIFY(worst.rel <= kTolerance);

    torch::NoGradGuard no_grad;
    const Err en = compare(lm->forward(ref(R, "nopad.input_ids").to(torch::kInt64)), ref(R, "nopad.logits"));
    qInfo("%s: unpadded (is_causal) logits max abs %.3g rel %.3g; attention backend %s", n.c_str(), en.abs, en.rel,
          lm->attention_backend_ran().c_str());
    QVERIFY(en.rel <= kTolerance);

    // The training path: both unpadded rows as one padding-free row of two samples (positions
    // restart, attention and windows never cross the boundary) give the same logits.
    const torch::Tensor np = ref(R, "nopad.input_ids").to(torch::kInt64);
    const std::int64_t len = np.size(1);
    const torch::Tensor pos = torch::arange(len, torch::kInt64).repeat({np.size(0)}).view({1, -1});
    const torch::Tensor cu = torch::arange(0, np.numel() + 1, len, torch::kInt32);
    const torch::Tensor packed = lm->logits(lm->hidden_states_packed(np.reshape({1, -1}), pos, cu, len));
    const Err ep = compare(packed.view({np.size(0), len, -1}), ref(R, "nopad.logits"));
    qInfo("%s: padding-free packed row logits max abs %.3g rel %.3g", n.c_str(), ep.abs, ep.rel);
    QVERIFY(ep.rel <= kTolerance);

    // The fused path (fused_kernels: true; on the CPU the same fused math in ATen ops): what
    // it covers runs fused, the rest falls back (fused_kernel_gaps); the logits stay HF's.
    lm->set_fused_kernels(true);
    const torch::Tensor fused = lm->logits(lm->hidden_states_packed(np.reshape({1, -1}), pos, cu, len));
    lm->set_fused_kernels(false);
    const Err ef = compare(fused.view({np.size(0), len, -1}), ref(R, "nopad.logits"));
    qInfo("%s: fused path, packed row logits max abs %.3g rel %.3g; falls back for: %s", n.c_str(), ef.abs, ef.rel,
          text::join(fused_kernel_gaps(lm->config().hf), "; ").c_str());
    QVERIFY(ef.rel <= kTolerance);

    // Kept attention (keep_attention) on the training row: every layer checkpointed and keeping
    // its attention output, so each recomputation runs the attention backward from what its
    // forward kept (a sliding window through the CPU kernel's mask, soft-capped layers through
    // the tiles: model/tiled_attention.h); loss and every gradient against transformers' on the
    // same two samples. MoE rows add the load-balancing loss; the padded check above covers them.
    if (!hf.is_moe()) {
      torch::AutoGradMode grad_mode(true);
      const auto layers = static_cast<std::size_t>(hf.num_hidden_layers);
      lm->set_checkpoint_layers(std::vector<bool>(layers, true));
      lm->set_keep_attention_layers(std::vector<bool>(layers, true));
      lm->zero_grad();
      const torch::Tensor kept = lm->logits(lm->hidden_states_packed(np.reshape({1, -1}), pos, cu, len));
      const torch::Tensor kept_loss = causal_lm_loss(kept.view({np.size(0), len, -1}), np);
      kept_loss.backward();
      lm->set_checkpoint_layers({});
      lm->set_keep_attention_layers({});
      const Err ek = compare(kept_loss.detach().reshape({1}), ref(R, "nopad.loss"));
      Err kw;
      std::string kw_name;
      for (const auto& p : lm->named_parameters(true)) {
        QVERIFY2(p.value().grad().defined(), p.key().c_str());
        const Err e = compare(p.value().grad(), ref(R, "nopad.grad." + p.key()));
        if (e.rel >= kw.rel) {
          kw = e;
          kw_name = p.key();
        }
      }
      qInfo("%s: kept attention, packed row loss rel %.3g, worst gradient %s max abs %.3g rel %.3g", n.c_str(), ek.rel,
            kw_name.c_str(), kw.abs, kw.rel);
      QVERIFY(ek.rel <= kTolerance);
      QVERIFY(kw.rel <= kTolerance);
    }

    // Checkpoint segments (layers_per_checkpoint) on the training row, every family (MoE
    // layers included): every layer checkpointed, one stored input per 2 layers and per all of
    // them; the loss and every gradient bit for bit those of checkpointing each layer on its own
    // (which the kept-attention check above holds against transformers' on the same samples).
    {
      torch::AutoGradMode grad_mode(true);
      const auto layers = static_cast<std::size_t>(hf.num_hidden_layers);
      auto step = [&](std::int64_t per_checkpoint) {
        lm->set_checkpoint_layers(std::vector<bool>(layers, true));
        lm->set_layers_per_checkpoint(per_checkpoint);
        lm->zero_grad();
        const torch::Tensor out = lm->logits(lm->hidden_states_packed(np.reshape({1, -1}), pos, cu, len));
        const torch::Tensor seg_loss = causal_lm_loss(out.view({np.size(0), len, -1}), np);
        seg_loss.backward();
        std::vector<torch::Tensor> got{seg_loss.detach()};
        for (const auto& p : lm->named_parameters(true))
          got.push_back(p.value().grad().defined() ? p.value().grad().clone() : torch::Tensor());
        return got;
      };
      const auto each = step(1);
      for (const std::int64_t per : {std::int64_t{2}, static_cast<std::int64_t>(layers)}) {
        const auto seg = step(per);
        QCOMPARE(seg.size(), each.size());
        for (std::size_t k = 0; k < seg.size(); ++k) {
          QCOMPARE(seg[k].defined(), each[k].defined());
          if (seg[k].defined())
            QVERIFY2(torch::equal(seg[k], each[k]),
                     qPrintable(QString("%1: %2 layers per stored input, tensor %3 differs from one per layer")
                                    .arg(QString::fromStdString(n))
                                    .arg(per)
                                    .arg(k)));
        }
      }
      lm->set_checkpoint_layers({});
      lm->set_layers_per_checkpoint(1);
    }
  }

  // Saved under HF names, sharded, then loaded again: the same parameters bit for bit.
  void saveRoundTrip() {
    for (const std::string n : {"qwen2", "llama3"}) {
      auto a = load_causal_lm(dir_ + "/" + n, DecoderOptions{});
      QVERIFY2(a.ok(), format_all(a.diagnostics).c_str());
      const std::string out = dir_ + "/saved-" + n;
      auto files = save_weights(a.value.lm, out, 40'000);
      QVERIFY2(files.ok(), format_all(files.diagnostics).c_str());
      QVERIFY(files.value.size() > 1);
      auto b = load_causal_lm(out, DecoderOptions{});
      QVERIFY2(b.ok(), format_all(b.diagnostics).c_str());
      auto pb = b.value.lm->named_parameters(true);
      for (const auto& p : a.value.lm->named_parameters(true))
        QVERIFY2(torch::equal(p.value(), pb[p.key()]), p.key().c_str());
      auto ck = SafetensorsCheckpoint::open(out);
      QVERIFY(ck.ok());
      QCOMPARE(ck.value.info("lm_head.weight") != nullptr, n == "llama3");  // tied: not written
    }
  }

  void badInput_data() {
    QTest::addColumn<QString>("dir");
    QTest::addColumn<QStringList>("needles");
    const QString up = QStringLiteral("model.layers.0.mlp.up_proj.weight");
    QTest::newRow("tensor removed") << "bad_missing" << QStringList{up, "model.safetensors", "missing", "[96, 64]"};
    QTest::newRow("tensor added") << "bad_extra"
                                  << QStringList{"model.layers.0.mlp.extra_proj.weight", "model.safetensors",
                                                 "unexpected"};
    QTest::newRow("shape changed") << "bad_shape"
                                   << QStringList{up, "model.safetensors", "[97, 64]", "[96, 64]", "config.json"};
    QTest::newRow("dtype I64") << "bad_dtype" << QStringList{up, "model.safetensors", "I64"};
    QTest::newRow("architecture") << "bad_arch"
                                  << QStringList{"config.json",      "architectures",      "MambaForCausalLM",
                                                 "Qwen2ForCausalLM", "MistralForCausalLM", "Gemma2ForCausalLM",
                                                 "Phi3ForCausalLM"};
    QTest::newRow("shard truncated") << "bad_truncated" << QStringList{"model-00006-of-00006.safetensors", "truncated"};
    QTest::newRow("MoE: an expert's tensor removed")
        << "bad_moe_missing_expert"
        << QStringList{"model.layers.0.mlp.experts.3.up_proj.weight", "missing", "5 experts", "model.safetensors"};
    QTest::newRow("MoE: router of 4 rows for 5 experts")
        << "bad_moe_router" << QStringList{"config.json", "[5, 64]", "model.layers.2.mlp.gate.weight", "[4, 64]"};
    QTest::newRow("Gemma-3 multimodal: a language-model tensor removed")
        << "bad_mm_missing" << QStringList{"language_model.model.layers.1.mlp.up_proj.weight", "missing", "[96, 64]"};
    QTest::newRow("Gemma-3 multimodal: text_config with a layer fewer than the weights")
        << "bad_mm_layers"
        << QStringList{"config.json", "text_config.num_hidden_layers", "found 2", "the weights hold 3 layers"};
    QTest::newRow("MoE: top-k above the expert count")
        << "bad_moe_topk" << QStringList{"config.json", "num_experts_per_tok", "6 experts per token", "5"};
  }

  // The same MoE model stored in transformers 5's stacked layout (mlp.experts.gate_up_proj)
  // instead of one tensor per expert loads to the same parameters, and save_weights writes the
  // per-expert layout back, as transformers 5.17's save_pretrained does.
  void moeLayouts() {
    auto a = load_causal_lm(dir_ + "/qwen3_moe", DecoderOptions{});
    auto b = load_causal_lm(dir_ + "/qwen3_moe_stacked", DecoderOptions{});
    QVERIFY2(a.ok(), format_all(a.diagnostics).c_str());
    QVERIFY2(b.ok(), format_all(b.diagnostics).c_str());
    auto pb = b.value.lm->named_parameters(true);
    for (const auto& p : a.value.lm->named_parameters(true))
      QVERIFY2(torch::equal(p.value(), pb[p.key()]), p.key().c_str());
    const std::string out = dir_ + "/qwen3_moe_saved";
    auto saved = save_weights(b.value.lm, out);
    QVERIFY2(saved.ok(), format_all(saved.diagnostics).c_str());
    auto ck = SafetensorsCheckpoint::open(out);
    QVERIFY(ck.ok());
    auto orig = SafetensorsCheckpoint::open(dir_ + "/qwen3_moe");
    QVERIFY(orig.ok());
    QCOMPARE(std::set<std::string>(ck.value.names().begin(), ck.value.names().end()),
             std::set<std::string>(orig.value.names().begin(), orig.value.names().end()));
    const std::string e = "model.layers.2.mlp.experts.4.down_proj.weight";
    QVERIFY(torch::equal(ref(ck.value, e), ref(orig.value, e)));
  }

  void badInput() {
    QFETCH(QString, dir);
    QFETCH(QStringList, needles);
    auto r = load_causal_lm(dir_ + "/" + dir.toStdString(), DecoderOptions{});
    QVERIFY(!r.ok());
    QVERIFY(!r.value.lm);
    const std::string text = format_all(r.diagnostics);
    qInfo("%s", text.c_str());
    for (const QString& n : needles) QVERIFY2(contains(text, n.toStdString()), qPrintable("missing '" + n + "'"));
  }

  // `odyssey-train score`'s per-sample loss against transformers' model(ids, labels=ids).loss,
  // with a byte-level BPE tokenizer trained by the script (lm_head in chunks of 7 rows).
  void scoreMatchesTransformers() {
    auto tok = Tokenizer::load(dir_ + "/qwen2");
    QVERIFY2(tok.ok(), format_all(tok.diagnostics).c_str());
    auto m = load_causal_lm(dir_ + "/qwen2", DecoderOptions{});
    QVERIFY2(m.ok(), format_all(m.diagnostics).c_str());
    const auto ref = nlohmann::json::parse(std::ifstream(dir_ + "/qwen2.score.json"))["samples"];
    std::ifstream data(dir_ + "/score.jsonl");
    std::string line;
    std::size_t i = 0;
    std::vector<std::vector<std::int32_t>> all;
    for (; std::getline(data, line); ++i) {
      const std::string text = nlohmann::json::parse(line)["text"].get<std::string>();
      auto ids = tok.value.encode(text, true);
      QVERIFY(ids.ok());
      QCOMPARE(ids.value, ref[i]["ids"].get<std::vector<std::int32_t>>());
      all.push_back(ids.value);
      const SampleScore s = score_tokens(m.value.lm, ids.value, 7);
      if (ref[i]["loss"].is_null()) {
        QCOMPARE(s.targets, std::int64_t{0});
        continue;
      }
      const double want = ref[i]["loss"].get<double>();
      qInfo("sample %zu: %lld tokens, loss %.7f vs transformers %.7f", i, static_cast<long long>(s.tokens), s.mean(),
            want);
      QVERIFY(std::abs(s.mean() - want) <= kTolerance * std::abs(want));
    }
    QCOMPARE(i, ref.size());

    // Packed (score --pack-tokens): rows of at most 90 tokens, so samples share rows (46 + 44,
    // 64 + 21 tokens); every sample's loss is still transformers' for it alone, reported once,
    // in order. packedScoreEqualsAlone has a sample longer than its rows.
    std::vector<ScoreInput> inputs;
    std::int64_t shared_rows = 0, run = 0;
    for (const auto& ids : all) {
      inputs.push_back({ids, {}});
      if (ids.size() > 1) {  // how many samples land in a row with another (as score_samples packs)
        const bool fits = run > 0 && run + static_cast<std::int64_t>(ids.size()) <= 90;
        shared_rows += fits;
        run = fits ? run + static_cast<std::int64_t>(ids.size()) : static_cast<std::int64_t>(ids.size());
      }
    }
    QVERIFY2(shared_rows > 0, "the texts no longer share a row");
    std::vector<std::size_t> order;
    score_samples(
        m.value.lm, inputs, 90,
        [&](std::size_t k, const SampleScore& s) {
          order.push_back(k);
          QCOMPARE(s.tokens, static_cast<std::int64_t>(all[k].size()));
          if (ref[k]["loss"].is_null()) {
            QCOMPARE(s.targets, std::int64_t{0});
            return;
          }
          const double want = ref[k]["loss"].get<double>();
          QCOMPARE(s.targets, static_cast<std::int64_t>(all[k].size()) - 1);
          QVERIFY2(std::abs(s.mean() - want) <= kTolerance * std::abs(want),
                   ("packed sample " + std::to_string(k) + ": " + std::to_string(s.mean()) + " vs transformers " +
                    std::to_string(want))
                       .c_str());
        },
        7);
    QCOMPARE(order.size(), all.size());
    for (std::size_t k = 0; k < order.size(); ++k) QCOMPARE(order[k], k);
  }

  // Packed scoring on families whose attention a packed row could get wrong: a sliding window
  // shorter than the samples (Mistral, window 5; Gemma-2 soft-capped, window 5) and labelled
  // samples (a conversation's trained tokens): each sample's loss as scored alone.
  void packedScoreEqualsAlone_data() {
    QTest::addColumn<QString>("name");
    QTest::newRow("mistral (window 5)") << "mistral";
    QTest::newRow("gemma2 (soft-capped, window 5)") << "gemma2";
    QTest::newRow("qwen3") << "qwen3";
  }
  void packedScoreEqualsAlone() {
    QFETCH(QString, name);
    auto m = load_causal_lm(dir_ + "/" + name.toStdString(), DecoderOptions{});
    QVERIFY2(m.ok(), format_all(m.diagnostics).c_str());
    CausalLM lm = m.value.lm;
    torch::manual_seed(3);
    std::vector<std::vector<std::int32_t>> ids, labels;
    for (std::int64_t n : {9, 1, 14, 3, 30, 6, 2, 11}) {
      std::vector<std::int32_t> x, l;
      for (std::int64_t p = 0; p < n; ++p) {
        x.push_back(static_cast<std::int32_t>(torch::randint(1, 100, {1}).item<std::int64_t>()));
        l.push_back(p % 3 == 1 ? -100 : x.back());  // every third token untrained
      }
      ids.push_back(x);
      labels.push_back(l);
    }
    for (const bool labelled : {false, true}) {
      std::vector<ScoreInput> inputs;
      for (std::size_t k = 0; k < ids.size(); ++k)
        inputs.push_back(
            {ids[k], labelled ? std::span<const std::int32_t>(labels[k]) : std::span<const std::int32_t>()});
      std::vector<SampleScore> packed(ids.size());
      score_samples(lm, inputs, 20, [&](std::size_t k, const SampleScore& s) { packed[k] = s; });
      for (std::size_t k = 0; k < ids.size(); ++k) {
        const SampleScore alone = labelled ? score_labelled(lm, ids[k], labels[k]) : score_tokens(lm, ids[k]);
        QCOMPARE(packed[k].tokens, alone.tokens);
        QCOMPARE(packed[k].targets, alone.targets);
        QVERIFY2(std::abs(packed[k].loss_sum - alone.loss_sum) <= 1e-5 * std::max(1.0, std::abs(alone.loss_sum)),
                 (name.toStdString() + " sample " + std::to_string(k) + (labelled ? " (labelled)" : "") + ": " +
                  std::to_string(packed[k].loss_sum) + " packed vs " + std::to_string(alone.loss_sum) + " alone")
                     .c_str());
      }
    }
  }

  // The other families' LoRA adapters (all-linear, B made non-zero) as Odyssey writes them load
  // in PEFT with the same logits (peft_oracle.py: no warnings, every key matched; PEFT's merge
  // too), and Odyssey's merged export loads in transformers with the same logits. Phi-3: PEFT
  // targets its fused qkv_proj and gate_up_proj as whole modules.
  void adapterLoadsInPeft_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("attn");
    QTest::addColumn<QStringList>("experts");  // PEFT target_parameters (MoE)
    QTest::newRow("mistral") << "mistral"
                             << "sdpa" << QStringList{};
    QTest::newRow("granite") << "granite"
                             << "sdpa" << QStringList{};
    QTest::newRow("gemma2") << "gemma2"
                            << "eager" << QStringList{};
    QTest::newRow("phi3") << "phi3"
                          << "sdpa" << QStringList{};
    QTest::newRow("gemma3") << "gemma3"
                            << "sdpa" << QStringList{};
    // OLMo-2/3's whole-width q/k norms and output norms; GLM-4's gate_up_proj (a whole module in
    // PEFT) beside separate q/k/v.
    QTest::newRow("olmo2") << "olmo2"
                           << "sdpa" << QStringList{};
    QTest::newRow("olmo3") << "olmo3"
                           << "sdpa" << QStringList{};
    QTest::newRow("glm4") << "glm4"
                          << "sdpa" << QStringList{};
    // The multimodal checkpoint: the adapter lists its language model's modules by path (the
    // vision tower has q/k/v_proj too); the merged export keeps the vision tower.
    QTest::newRow("gemma3 multimodal") << "gemma3_mm"
                                       << "sdpa" << QStringList{};
    QTest::newRow("mistral3 multimodal") << "mistral3_mm"
                                         << "sdpa" << QStringList{};
    QTest::newRow("llava multimodal") << "llava_mm"
                                      << "sdpa" << QStringList{};
    QTest::newRow("qwen2.5-vl multimodal") << "qwen2_5_vl_mm"
                                           << "sdpa" << QStringList{};
    QTest::newRow("qwen2-vl multimodal, flat config") << "qwen2_vl_flat"
                                                      << "sdpa" << QStringList{};
    QTest::newRow("qwen3-vl multimodal") << "qwen3_vl_mm"
                                         << "sdpa" << QStringList{};
    // MoE: LoRA on the stacked experts too (PEFT's ParamWrapper), both parameters (nested) or one.
    QTest::newRow("qwen3_moe experts") << "qwen3_moe"
                                       << "sdpa" << QStringList{"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
    QTest::newRow("qwen2_moe experts + shared expert")
        << "qwen2_moe"
        << "sdpa" << QStringList{"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
    QTest::newRow("mixtral down_proj only") << "mixtral"
                                            << "sdpa" << QStringList{"experts.down_proj"};
  }

  // bf16 on the CPU against transformers in bf16 on the CPU (peft_oracle.py --merged-dir --dtype
  // bfloat16): the same ATen ops in the same order give the same bits. OLMo-2/3 rotate q and k in
  // fp32 (their rotary module hands over fp32 cos/sin; Llama's casts them to bf16): rotating them
  // in bf16 as the other families do put their logits 1e-3 .. 1e-2 away.
  void bf16OnCpuMatchesTransformers_data() {
    QTest::addColumn<QString>("name");
    for (const char* n : {"llama3", "olmo2", "olmo3", "glm4", "qwen3"}) QTest::newRow(n) << n;
  }
  void bf16OnCpuMatchesTransformers() {
    QFETCH(QString, name);
    const std::string n = name.toStdString(), model_dir = dir_ + "/" + n;
    auto loaded =
        load_causal_lm(model_dir, DecoderOptions{torch::kBFloat16, torch::kCPU, AttentionBackend::Auto, false, {}});
    QVERIFY2(loaded.ok(), format_all(loaded.diagnostics).c_str());
    CausalLM lm = loaded.value.lm;
    torch::manual_seed(7);
    const torch::Tensor ids = torch::randint(1, 512, {2, 16}, torch::kInt64);
    torch::Tensor logits;
    {
      torch::NoGradGuard no_grad;
      lm->eval();
      logits = lm->forward(ids).to(torch::kFloat32);
    }
    const std::string in = dir_ + "/bf16-" + n + ".in.safetensors", out = dir_ + "/bf16-" + n + ".out.safetensors";
    QVERIFY(save_safetensors(in, {{"input_ids", ids.to(torch::kFloat32)}}).ok());
    const QByteArray err = run_python({QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/peft_oracle.py"),
                                       "--merged-dir", QString::fromStdString(model_dir), "--dtype", "bfloat16",
                                       QString::fromStdString(in), QString::fromStdString(out)});
    QVERIFY2(err.isEmpty(), err.constData());
    auto got = SafetensorsFile::open(out);
    QVERIFY(got.ok());
    const torch::Tensor want = got.value->load("logits", torch::kFloat32).value;
    const Err e = compare(logits, want);
    const std::int64_t differ = logits.ne(want).sum().item<std::int64_t>();
    qInfo("%s: bf16 logits on the CPU against transformers bf16: %lld of %lld differ, max abs %.3g rel %.3g", n.c_str(),
          static_cast<long long>(differ), static_cast<long long>(want.numel()), e.abs, e.rel);
    QCOMPARE(differ, std::int64_t{0});
  }

  // The fused path's projection with an adapter (LinearImpl::forward on a bf16 input, fp32 adapters cast to it: the
  // adapter's product written first, the base GEMM adding onto it) against PEFT's definition in float64,
  // y = x W^T + b + scaling * B(A(dropout(x))), with and without a bias and LoRA dropout; the gradients of x, A and
  // B by autograd on both. The dropout mask is the one the projection drew (the same seed, the same draw); with
  // dropout the projection is kernels::linear, which keeps no mask and redraws it in backward.
  void fusedProjectionMatchesDefinition_data() {
    QTest::addColumn<bool>("bias");
    QTest::addColumn<double>("dropout");
    QTest::newRow("no bias, no dropout") << false << 0.0;
    QTest::newRow("bias, no dropout") << true << 0.0;
    QTest::newRow("no bias, dropout 0.25") << false << 0.25;
    QTest::newRow("bias, dropout 0.25") << true << 0.25;
  }
  void fusedProjectionMatchesDefinition() {
    QFETCH(bool, bias);
    QFETCH(double, dropout);
    const std::int64_t in = 24, out = 40, r = 4;
    const double scaling = 2.0;
    torch::manual_seed(3);
    Linear lin(in, out, bias, torch::TensorOptions().dtype(torch::kBFloat16));
    lin->add_lora(r, scaling, dropout);
    lin->lora_in_input_dtype = true;
    {
      torch::NoGradGuard no_grad;
      lin->weight.copy_(torch::randn({out, in}) * 0.2);
      if (bias) lin->bias.copy_(torch::randn({out}));
      lin->lora_B->weight.copy_(torch::randn({out, r}) * 0.5);  // nonzero: the adapter weighs in y
    }
    lin->train();
    const torch::Tensor x0 = torch::randn({2, 7, in}).to(torch::kBFloat16);
    const torch::Tensor g = torch::randn({2, 7, out});
    const torch::Tensor x = x0.clone().requires_grad_(true);
    torch::manual_seed(11);
    const torch::Tensor y = lin->forward(x);
    QCOMPARE(y.scalar_type(), torch::kBFloat16);
    (y.to(torch::kFloat32) * g).sum().backward();

    // The definition in float64 on the same values, the mask drawn again from the same seed
    // (the projection's draw took the default CPU generator's next 64 bits: kernels::LoraDropout).
    torch::manual_seed(11);
    torch::Tensor dropped = x0;
    if (dropout > 0.0) {
      const auto draw = odyssey::kernels::LoraDropout::draw(dropout);
      const torch::Tensor m = odyssey::kernels::lora_dropout_mask(*draw, 14, in, x0.options()).view(x0.sizes());
      dropped = (m * x0).mul_(1.0 / (1.0 - dropout));                     // as the projection rounds it
      QVERIFY(m.eq(0).any().item<bool>() && m.eq(1).any().item<bool>());  // the draw dropped some, kept some
    }
    auto f64 = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat64); };
    const torch::Tensor xr = f64(x0).requires_grad_(true);
    const torch::Tensor mask = f64(dropped).ne(0).to(torch::kFloat64) / (1.0 - dropout);
    const torch::Tensor ar = f64(lin->lora_A->weight).requires_grad_(true);
    const torch::Tensor br = f64(lin->lora_B->weight).requires_grad_(true);
    // The adapter sees the bf16 dropped values as the projection does (x / (1 - p) rounded).
    const torch::Tensor xd = dropout > 0.0 ? xr * mask + (f64(dropped) - f64(x0) * mask).detach() : xr;
    torch::Tensor yr =
        torch::matmul(xr, f64(lin->weight).t()) + scaling * torch::matmul(torch::matmul(xd, ar.t()), br.t());
    if (bias) yr = yr + f64(lin->bias);
    (yr * g.to(torch::kFloat64)).sum().backward();

    const Err ey = compare(y, yr.detach()), ex = compare(x.grad(), xr.grad()),
              ea = compare(lin->lora_A->weight.grad(), ar.grad()), eb = compare(lin->lora_B->weight.grad(), br.grad());
    qInfo("y %.3g, dx %.3g, dA %.3g, dB %.3g (relative to the largest entry)", ey.rel, ex.rel, ea.rel, eb.rel);
    QCOMPARE(lin->lora_A->weight.grad().scalar_type(), torch::kFloat32);
    // bf16 products (8 significant bits) of inner size 24 and 4: a few parts in a thousand.
    for (const Err& e : {ey, ex, ea, eb}) QVERIFY2(e.rel < 2e-2, std::to_string(e.rel).c_str());
  }

  void adapterLoadsInPeft() {
    QFETCH(QString, name);
    QFETCH(QString, attn);
    QFETCH(QStringList, experts);
    const std::string n = name.toStdString(), model_dir = dir_ + "/" + n;
    auto loaded =
        load_causal_lm(model_dir, DecoderOptions{torch::kFloat32, torch::kCPU, AttentionBackend::Auto, false, {}});
    QVERIFY2(loaded.ok(), format_all(loaded.diagnostics).c_str());
    CausalLM lm = loaded.value.lm;
    train::LoraSettings s;
    s.rank = 4;
    s.alpha = 8;
    s.target_modules = train::lora_module_names();  // all-linear
    for (const QString& e : experts) s.target_parameters.push_back(e.toStdString());
    torch::manual_seed(5);
    QVERIFY(train::apply_lora(lm, s) > 0);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : lm->named_parameters(true))
        if (p.key().ends_with("lora_B.weight") || p.key().ends_with("lora.lora_B")) p.value().normal_(0.0, 0.05);
    }
    const torch::Tensor ids = torch::randint(1, 512, {2, 16}, torch::kInt64);
    torch::Tensor logits;
    {
      torch::NoGradGuard no_grad;
      lm->eval();
      logits = lm->forward(ids);
    }
    const std::string base = dir_ + "/peft-" + n;
    std::filesystem::create_directories(base + "/adapter");
    const Diagnostics d = train::save_adapter(lm, s, model_dir, base + "/adapter");
    QVERIFY2(!has_errors(d), format_all(d).c_str());
    const std::string in = base + "/in.safetensors", out = base + "/out.safetensors";
    QVERIFY(save_safetensors(in, {{"input_ids", ids.to(torch::kFloat32)}}).ok());
    const QString oracle = QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/peft_oracle.py");
    QByteArray err = run_python({oracle, "--attn", attn, QString::fromStdString(model_dir),
                                 QString::fromStdString(base + "/adapter"), QString::fromStdString(in),
                                 QString::fromStdString(out)});
    QVERIFY2(err.isEmpty(), err.constData());
    auto got = SafetensorsFile::open(out);
    QVERIFY(got.ok());
    const Err el = compare(logits, got.value->load("logits", torch::kFloat32).value);
    const Err em = compare(logits, got.value->load("merged_logits", torch::kFloat32).value);
    const auto cfg = nlohmann::json::parse(std::ifstream(base + "/adapter/adapter_config.json"));
    qInfo("%s: adapter (target_modules %s) in PEFT: logits max abs %.3g rel %.3g; PEFT merged max abs %.3g rel %.3g",
          n.c_str(), cfg["target_modules"].dump().c_str(), el.abs, el.rel, em.abs, em.rel);
    QVERIFY(el.rel <= kTolerance);
    QVERIFY(em.rel <= kTolerance);
    if (n == "gemma3_mm") {
      // An adapter PEFT trained on every q_proj of the wrapper also adapts the vision tower: its
      // tensors are left out with a warning (the text model never runs the tower), the logits are
      // the language adapters' own; any other stray tensor is still an error.
      auto st = SafetensorsFile::open(base + "/adapter/adapter_model.safetensors");
      QVERIFY(st.ok());
      NamedTensors with_vision;
      for (const auto& key : st.value->names())
        with_vision.emplace_back(key, st.value->load(key, torch::kFloat32).value);
      with_vision.emplace_back(
          "base_model.model.model.vision_tower.vision_model.encoder.layers.0.self_attn.q_proj.lora_A.weight",
          torch::ones({4, 32}));
      const std::string vision_dir = base + "/adapter_vision";
      std::filesystem::create_directories(vision_dir);
      std::filesystem::copy_file(base + "/adapter/adapter_config.json", vision_dir + "/adapter_config.json");
      QVERIFY(save_safetensors(vision_dir + "/adapter_model.safetensors", with_vision).ok());
      auto fresh =
          load_causal_lm(model_dir, DecoderOptions{torch::kFloat32, torch::kCPU, AttentionBackend::Auto, false, {}});
      QVERIFY(fresh.ok());
      const Diagnostics ad = train::attach_adapter(fresh.value.lm, vision_dir);
      QVERIFY2(!has_errors(ad) && contains(format_all(ad), "1 adapter tensors of the vision tower are not used"),
               format_all(ad).c_str());
      {
        torch::NoGradGuard no_grad;
        fresh.value.lm->eval();
        QVERIFY(compare(fresh.value.lm->forward(ids), logits).rel <= 1e-6);
      }
      with_vision.emplace_back("base_model.model.model.language_model.layers.0.mlp.extra_proj.lora_A.weight",
                               torch::ones({4, 64}));
      QVERIFY(save_safetensors(vision_dir + "/adapter_model.safetensors", with_vision).ok());
      const Diagnostics stray = train::attach_adapter(fresh.value.lm, vision_dir);
      QVERIFY2(has_errors(stray) && contains(format_all(stray), "extra_proj.lora_A.weight: is not an adapter tensor"),
               format_all(stray).c_str());
    }
    if (!experts.isEmpty()) {
      QVERIFY(cfg.contains("target_parameters"));
      // And back into Odyssey: the adapter on a fresh base gives the same logits.
      auto fresh =
          load_causal_lm(model_dir, DecoderOptions{torch::kFloat32, torch::kCPU, AttentionBackend::Auto, false, {}});
      QVERIFY(fresh.ok());
      const Diagnostics ad = train::attach_adapter(fresh.value.lm, base + "/adapter");
      QVERIFY2(!has_errors(ad), format_all(ad).c_str());
      torch::NoGradGuard no_grad;
      fresh.value.lm->eval();
      const Err er = compare(fresh.value.lm->forward(ids), logits);
      qInfo("%s: the adapter attached again in Odyssey: logits max abs %.3g", n.c_str(), er.abs);
      QVERIFY(er.rel <= 1e-6);
    }

    train::merge_lora(lm);
    const std::string merged = base + "/merged";
    std::filesystem::create_directories(merged);
    std::filesystem::copy_file(model_dir + "/config.json", merged + "/config.json");
    auto saved = save_weights(lm, merged, 5'000'000'000, false);
    QVERIFY2(saved.ok(), format_all(saved.diagnostics).c_str());
    err = run_python({oracle, "--attn", attn, "--merged-dir", QString::fromStdString(merged),
                      QString::fromStdString(in), QString::fromStdString(out)});
    QVERIFY2(err.isEmpty(), err.constData());
    auto got2 = SafetensorsFile::open(out);
    QVERIFY(got2.ok());
    const Err eg = compare(logits, got2.value->load("logits", torch::kFloat32).value);
    qInfo("%s: merged export in transformers: logits max abs %.3g rel %.3g", n.c_str(), eg.abs, eg.rel);
    QVERIFY(eg.rel <= kTolerance);
    // And in Odyssey (a full fine-tune's checkpoint is written the same way and read back so).
    auto again =
        load_causal_lm(merged, DecoderOptions{torch::kFloat32, torch::kCPU, AttentionBackend::Auto, false, {}});
    QVERIFY2(again.ok(), format_all(again.diagnostics).c_str());
    torch::NoGradGuard no_grad;
    again.value.lm->eval();
    const Err eo = compare(again.value.lm->forward(ids), logits);
    QVERIFY2(eo.rel <= kTolerance, std::to_string(eo.rel).c_str());
  }

  // transformers 4.x checkpoints (rope_scaling + top-level rope_theta) read like 5.x ones.
  void ropeConfigForms() {
    const std::string v4 =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 96,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 512,"
        " \"max_position_embeddings\": 131072, \"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 8.0,"
        " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192,"
        " \"rope_type\": \"llama3\"}}";
    auto c = parse_decoder_config(v4, "config.json");
    QVERIFY2(c.ok(), format_all(c.diagnostics).c_str());
    QCOMPARE(c.value.rope.type, std::string("llama3"));
    QCOMPARE(c.value.rope.theta, 500000.0);
    QCOMPARE(c.value.rope.original_max_position_embeddings, std::int64_t{8192});
    // Llama-3.1-8B's first and last inverse frequencies after the adjustment (HF's values).
    const torch::Tensor f = rope_inv_freq(c.value.rope, 128);
    QVERIFY(std::abs(f[0].item<double>() - 1.0) < 1e-7);
    QVERIFY(std::abs(f[63].item<double>() / (1.0 / std::pow(500000.0, 126.0 / 128.0) / 8.0) - 1.0) < 1e-5);

    // An unknown kind names the key and the kinds Odyssey implements.
    std::string bad = v4;
    bad.replace(bad.find("llama3"), 6, "proportional");
    auto y = parse_decoder_config(bad, "config.json");
    QVERIFY(!y.ok());
    const std::string ey = format_all(y.diagnostics);
    QVERIFY2(contains(ey, "config.json") && contains(ey, "rope_scaling.rope_type") && contains(ey, "proportional") &&
                 contains(ey, "linear") && contains(ey, "dynamic") && contains(ey, "yarn") &&
                 contains(ey, "longrope") && contains(ey, "llama3"),
             ey.c_str());
    // Bundled shapes in their hub forms: Gemma-3 (4.x: rope_local_base_freq for the sliding
    // layers, rope_scaling linear x8 for the full ones) and Phi-3.5-mini (longrope, 48 factors,
    // attention factor sqrt(1 + ln(131072 / 4096) / ln 4096) as transformers computes it).
    auto bundled = [](const char* name) {
      std::ifstream in(std::string(ODYSSEY_SOURCE_DIR "/resources/model-shapes/") + name + ".json");
      std::stringstream ss;
      ss << in.rdbuf();
      auto r = parse_decoder_config(ss.str(), name);
      if (!r.ok()) qFatal("%s", format_all(r.diagnostics).c_str());
      return r.value;
    };
    const DecoderConfig g3 = bundled("google--gemma-3-27b-it");
    QCOMPARE(g3.rope.type, std::string("linear"));
    QCOMPARE(g3.rope.factor, 8.0);
    QCOMPARE(g3.rope.theta, 1000000.0);
    QVERIFY(g3.rope_local.has_value());
    QCOMPARE(g3.rope_local->type, std::string("default"));
    QCOMPARE(g3.rope_local->theta, 10000.0);
    const DecoderConfig phi = bundled("microsoft--Phi-3.5-mini-instruct");
    QCOMPARE(phi.rope.type, std::string("longrope"));
    QCOMPARE(phi.rope.long_factor.size(), std::size_t{48});
    QCOMPARE(phi.rope.original_max_position_embeddings, std::int64_t{4096});
    QVERIFY(std::abs(phi.rope.attention_factor - std::sqrt(1 + std::log(32.0) / std::log(4096.0))) < 1e-12);
    QCOMPARE(rope_inv_freq(phi.rope, 96, 4096).size(0), std::int64_t{48});
    // OLMo-3 7B: YaRN x8 on the full layers only (Olmo3Config puts rope_scaling under
    // full_attention), the sliding layers plain RoPE at the same base.
    const DecoderConfig o3 = bundled("allenai--Olmo-3-7B-Think-DPO");
    QCOMPARE(o3.rope.type, std::string("yarn"));
    QCOMPARE(o3.rope.factor, 8.0);
    QCOMPARE(o3.rope.attention_factor, 1.2079441541679836);
    QVERIFY(o3.rope_local.has_value());
    QCOMPARE(o3.rope_local->type, std::string("default"));
    QCOMPARE(o3.rope_local->theta, 500000.0);

    // Phi-3's "su" is longrope; a longrope without its factors is refused naming them.
    std::string su = v4;
    su.replace(su.find("\"llama3\""), 8, "\"su\"");
    auto s2 = parse_decoder_config(su, "config.json");
    QVERIFY(!s2.ok());
    QVERIFY2(contains(format_all(s2.diagnostics), "rope_scaling.short_factor"), format_all(s2.diagnostics).c_str());
  }
};

QTEST_APPLESS_MAIN(TstDecoderParity)
#include "tst_decoder_parity.moc"
