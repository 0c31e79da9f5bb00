// The generation engine (core/model/generate.h) against transformers: tests/reference/
// make_tiny_models.py builds the tiny random models of every family the decoder has, and
// tests/reference/generate_oracle.py continues a batch of three prompts of different lengths
// (left-padded) with transformers' generate(do_sample=False) in fp32, without and with an
// end-of-sequence id, and through a PEFT LoRA adapter. Odyssey's greedy continuations must be
// the same tokens. Beside it: the KV-cache logits equal a full forward over the same tokens
// (1e-5 relative, fp32), one prompt filled in two chunks equals one filled at once, seeded
// sampling reproduces itself, stop strings cut exactly, and bad input is refused by name.
// Packed projections (pack_projections) give the same continuations and logits.
#define QT_NO_KEYWORDS
#include <torch/torch.h>

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "model/generate.h"
#include "model/score.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "train/lora.h"

using namespace odyssey;
using namespace odyssey::model;

namespace {

std::vector<std::vector<std::int32_t>> rows(const nlohmann::json& j) {
  return j.get<std::vector<std::vector<std::int32_t>>>();
}

std::string show(const std::vector<std::int32_t>& v) {
  std::string s;
  for (std::int32_t x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

const char* kFamilies[] = {"qwen2",   "qwen3", "llama3", "mistral",      "llama_hd",  "smollm",
                           "smollm3", "olmo2", "olmo3",  "glm4",         "ministral", "granite",
                           "gemma2",  "phi3",  "gemma3", "rope_dynamic", "rope_yarn", "rope_longrope"};

}  // namespace

class TstGenerate : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  std::string dir_;
  nlohmann::json oracle_;

  CausalLM load(const std::string& name) {
    auto m = load_causal_lm(dir_ + "/" + name,
                            DecoderOptions{torch::kFloat32, torch::kCPU, AttentionBackend::Auto, false, {}});
    if (!m.ok()) qFatal("%s", format_all(m.diagnostics).c_str());
    return m.value.lm;
  }

  void run_script(const QStringList& args) {
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(QStringLiteral(ODYSSEY_PYTHON), args);
    QVERIFY2(p.waitForFinished(300000), "a reference script did not finish in 300 s");
    const QByteArray out = p.readAll();
    QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0, out.constData());
  }

  // Logits [B, V] (fp32) of each step of a cached generation over fixed tokens: the prompts
  // (left-padded) filled in `chunks` parts, then `extra` one token at a time.
  // ring: sliding-window layers keep only their window (KvCache::window); `bytes` gets the
  // cache's size.
  std::vector<torch::Tensor> cached_logits(CausalLM& lm, const torch::Tensor& ids, const torch::Tensor& mask,
                                           const torch::Tensor& pos, std::int64_t prompt_len, int chunks,
                                           bool ring = true, std::int64_t* bytes = nullptr) {
    torch::NoGradGuard ng;
    KvCache cache = lm->allocate_cache(ids.size(0), ids.size(1), ring);
    if (bytes) *bytes = cache.bytes();
    std::vector<torch::Tensor> out;
    std::int64_t at = 0;
    for (int c = 0; c < chunks; ++c) {
      const std::int64_t n = c + 1 == chunks ? prompt_len - at : prompt_len / chunks;
      const torch::Tensor h =
          lm->hidden_states_cached(ids.narrow(1, at, n), pos.narrow(1, at, n), mask.narrow(1, at, n), cache);
      for (std::int64_t j = 0; j < n; ++j) out.push_back(lm->logits(h.select(1, j)));
      at += n;
    }
    for (; at < ids.size(1); ++at) {
      const torch::Tensor h = lm->hidden_states_cached(ids.narrow(1, at, 1), pos.narrow(1, at, 1), {}, cache);
      out.push_back(lm->logits(h.select(1, 0)));
    }
    return out;
  }

 private Q_SLOTS:
  void initTestCase() {
    if (QStringLiteral(ODYSSEY_PYTHON).isEmpty())
      QSKIP(
          "ODYSSEY_PYTHON is empty: configure with -DODYSSEY_PYTHON=<python with transformers 5.17.0 and peft> "
          "(setup.sh does) to run the generation oracle");
    QVERIFY(tmp_.isValid());
    dir_ = tmp_.path().toStdString();
    run_script({QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/make_tiny_models.py"), tmp_.path(),
                QStringLiteral("--bad")});
    QStringList names;
    for (const char* n : kFamilies) names << QString::fromLatin1(n);
    run_script({QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/generate_oracle.py"), tmp_.path(),
                names.join(QLatin1Char(',')), tmp_.filePath(QStringLiteral("generate.json"))});
    std::ifstream in(dir_ + "/generate.json");
    oracle_ = nlohmann::json::parse(in);
  }

  void greedy_parity_data() {
    QTest::addColumn<QString>("name");
    for (const char* n : kFamilies) QTest::newRow(n) << QString::fromLatin1(n);
    QTest::newRow("qwen2 + PEFT LoRA adapter") << QStringLiteral("qwen2_lora");
    // The fused path (what a CUDA session runs: add_rms_norm pairs, rms_norm_linear, swiglu_down)
    // in its ATen form on the CPU.
    QTest::newRow("qwen2, fused kernels") << QStringLiteral("qwen2+fused");
    QTest::newRow("llama3, fused kernels") << QStringLiteral("llama3+fused");
    QTest::newRow("qwen2 + PEFT LoRA adapter, fused kernels") << QStringLiteral("qwen2_lora+fused");
    // Static decode steps (what CUDA graphs replay: the slot as a tensor, attention over the
    // whole cache through its mask), on the CPU without a graph.
    for (const char* n : {"qwen2", "llama3", "llama_hd", "mistral", "gemma2", "gemma3", "granite", "rope_yarn"})
      QTest::newRow((std::string(n) + ", static decode steps").c_str()) << QString::fromLatin1(n) + "+static";
    QTest::newRow("qwen2 + PEFT LoRA adapter, fused kernels, static decode steps")
        << QStringLiteral("qwen2_lora+fused+static");
    // Packed projections (CausalLMImpl::pack_projections, what an inference session does
    // before any adapter is attached): q/k/v with biases, GeGLU's gate/up, an adapter on the
    // packed columns, the fused path's static steps.
    for (const char* n :
         {"qwen2", "llama3", "llama_hd", "gemma2", "qwen2_lora", "qwen2_lora+fused+static", "llama3+fused+static"})
      QTest::newRow((std::string(n) + ", packed projections").c_str()) << QString::fromLatin1(n) + "+packed";
  }

  // Token-identical to generate(do_sample=False), for every row of a left-padded batch.
  void greedy_parity() {
    QFETCH(QString, name);
    std::string n = name.toStdString();
    const bool packed = n.ends_with("+packed");
    if (packed) n.resize(n.size() - 7);
    const bool static_steps = n.ends_with("+static");
    if (static_steps) n.resize(n.size() - 7);
    const bool fused = n.ends_with("+fused");
    if (fused) n.resize(n.size() - 6);
    const nlohmann::json& o = oracle_.at(n);
    CausalLM lm = load(n == "qwen2_lora" ? "qwen2" : n);
    lm->set_fused_kernels(fused);
    if (packed) QCOMPARE(lm->pack_projections(), 2 * lm->config().hf.num_hidden_layers);
    if (o.contains("adapter")) {
      const Diagnostics d = train::attach_adapter(lm, o["adapter"].get<std::string>());
      QVERIFY2(!has_errors(d), format_all(d).c_str());
    }
    GenerationOptions opts;
    opts.max_new_tokens = o["new_tokens"].get<std::int64_t>();
    opts.decode = static_steps ? GenerationOptions::Decode::Static : GenerationOptions::Decode::Eager;
    QVERIFY(!static_steps || lm->static_decode_supported());
    for (const char* which : {"greedy", "greedy_eos"}) {
      opts.eos_ids.clear();
      if (std::string(which) == "greedy_eos") opts.eos_ids = {o["eos"].get<std::int32_t>()};
      auto r = generate(lm, rows(o["prompts"]), opts, nullptr);
      QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
      const auto want = rows(o[which]);
      for (std::size_t b = 0; b < want.size(); ++b) {
        const std::string msg = n + " " + which + " row " + std::to_string(b) + ": odyssey " + show(r.value[b].ids) +
                                "\n transformers " + show(want[b]) + "\n (smallest top-2 logit gap " +
                                std::to_string(o["min_margin"][b].get<double>()) + ")";
        QVERIFY2(r.value[b].ids == want[b], msg.c_str());
        const bool hit_eos = !opts.eos_ids.empty() && want[b].back() == opts.eos_ids[0];
        QCOMPARE(QString::fromStdString(r.value[b].finish_reason),
                 hit_eos ? QStringLiteral("stop") : QStringLiteral("length"));
      }
    }
  }

  // Packing moves the weights, not the function: without autograd the logits equal the
  // separate products' (fp32, 1e-6 relative; one GEMM over the rows of three may round its
  // sums differently), with autograd the forward runs the separate projections on their views
  // (bit-equal) and their gradients reach the same parameters; an adapter merged after packing
  // (merge_lora writes the weight in place) lands in the packed rows.
  void packed_equals_separate() {
    for (const std::string n : {"qwen2", "llama_hd", "gemma2"}) {
      CausalLM plain = load(n), packed = load(n);
      QCOMPARE(packed->pack_projections(), 2 * packed->config().hf.num_hidden_layers);
      QCOMPARE(packed->pack_projections(), 0);  // once
      const auto& layer0 = packed->model->layer_list.front();
      QVERIFY(layer0->self_attn->q_proj->weight.is_alias_of(layer0->self_attn->packed.weight));
      const torch::Tensor ids = torch::randint(plain->config().hf.vocab_size, {2, 9}, torch::kInt64);
      auto rel = [](const torch::Tensor& a, const torch::Tensor& b) {
        return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
      };
      {
        torch::NoGradGuard ng;
        const double e = rel(packed->forward(ids), plain->forward(ids));
        qInfo("%s: packed against separate products, relative logit difference %.2e", n.c_str(), e);
        QVERIFY2(e <= 1e-6, (n + ": " + std::to_string(e)).c_str());
      }
      const torch::Tensor yp = packed->forward(ids), ys = plain->forward(ids);
      QVERIFY2(torch::equal(yp, ys), (n + ": the recorded forward differs").c_str());
      yp.sum().backward();
      ys.sum().backward();
      for (const char* w : {"q_proj", "k_proj", "v_proj"}) {
        const torch::Tensor gp =
            packed->named_parameters()["model.layers.0.self_attn." + std::string(w) + ".weight"].grad();
        const torch::Tensor gs =
            plain->named_parameters()["model.layers.0.self_attn." + std::string(w) + ".weight"].grad();
        QVERIFY2(gp.defined() && torch::equal(gp, gs), (n + ": " + w + "'s gradient differs").c_str());
      }
      // A merged adapter: the packed rows hold the merged weight.
      for (CausalLM* m : {&plain, &packed}) {
        (*m)->zero_grad();
        auto& q = (*m)->model->layer_list.front()->self_attn->q_proj;
        torch::manual_seed(7);
        q->add_lora(2, 2.0, 0.0);
        torch::NoGradGuard ng;
        q->lora_B->weight.normal_();
        q->merge_lora();
      }
      QVERIFY(layer0->self_attn->q_proj->weight.is_alias_of(layer0->self_attn->packed.weight));
      torch::NoGradGuard ng;
      const double e = rel(packed->forward(ids), plain->forward(ids));
      QVERIFY2(e <= 1e-6, (n + " after a merge: " + std::to_string(e)).c_str());
      // A weight replaced outside the packed rows (with other values, which the stale rows lack):
      // that layer computes q, k and v on their own.
      const torch::Tensor delta = 0.05 * torch::randn_like(layer0->self_attn->k_proj->weight);
      plain->model->layer_list.front()->self_attn->k_proj->weight.add_(delta);
      layer0->self_attn->k_proj->weight.set_data(layer0->self_attn->k_proj->weight + delta);
      QVERIFY(!layer0->self_attn->k_proj->weight.is_alias_of(layer0->self_attn->packed.weight));
      const double r = rel(packed->forward(ids), plain->forward(ids));
      QVERIFY2(r <= 1e-6, (n + " after a replaced weight: " + std::to_string(r)).c_str());
    }
  }

  void cache_equals_full_forward_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<int>("chunks");
    QTest::newRow("qwen2, prompt at once") << "qwen2" << 1;
    QTest::newRow("qwen2, prompt in 3 chunks") << "qwen2" << 3;
    QTest::newRow("gemma2 (soft-capping, window 5), 2 chunks") << "gemma2" << 2;
    QTest::newRow("gemma3 (local/global RoPE, window 5)") << "gemma3" << 1;
    // Phi-3's longrope picks its factors by the longest position of each forward (as transformers
    // does): filled at once, the prompt is already past original_max_position_embeddings (8).
    // Dynamic NTK (rope_dynamic) rescales with the length, so cached keys keep the rotation of
    // their step and a full forward differs by design (transformers' cache does the same; the
    // greedy parity above covers it).
    QTest::newRow("phi3 (partial rotary, longrope, window 7)") << "phi3" << 1;
    QTest::newRow("mistral (window 5), 2 chunks") << "mistral" << 2;
    QTest::newRow("rope_yarn") << "rope_yarn" << 1;
    QTest::newRow("llama_hd (head_dim 24, biases)") << "llama_hd" << 2;
  }

  // Logits of every cached step equal the full forward's at the same position (fp32, 1e-5
  // relative to the largest logit), on a left-padded batch.
  void cache_equals_full_forward() {
    QFETCH(QString, name);
    QFETCH(int, chunks);
    const std::string n = name.toStdString();
    const nlohmann::json& o = oracle_.at(n);
    CausalLM lm = load(n);
    const auto prompts = rows(o["prompts"]), cont = rows(o["greedy"]);
    std::int64_t longest = 0;
    for (const auto& p : prompts) longest = std::max<std::int64_t>(longest, static_cast<std::int64_t>(p.size()));
    const std::int64_t extra = 20, b = static_cast<std::int64_t>(prompts.size()), len = longest + extra;
    torch::Tensor ids = torch::zeros({b, len}, torch::kInt64), mask = torch::zeros_like(ids),
                  pos = torch::zeros_like(ids);
    for (std::int64_t r = 0; r < b; ++r) {
      std::vector<std::int32_t> all = prompts[static_cast<std::size_t>(r)];
      all.insert(all.end(), cont[static_cast<std::size_t>(r)].begin(),
                 cont[static_cast<std::size_t>(r)].begin() + extra);
      const std::int64_t pad = len - static_cast<std::int64_t>(all.size());
      for (std::size_t j = 0; j < all.size(); ++j) {
        ids[r][pad + static_cast<std::int64_t>(j)] = all[j];
        mask[r][pad + static_cast<std::int64_t>(j)] = 1;
        pos[r][pad + static_cast<std::int64_t>(j)] = static_cast<std::int64_t>(j);
      }
    }
    torch::Tensor full;
    {
      torch::NoGradGuard ng;
      full = lm->forward(ids, mask, pos);
    }
    // Sliding-window layers in a ring of `window` slots (the prompts and the 20 new tokens wrap
    // it several times; chunks longer than the window too), and holding every slot.
    const std::int64_t window = lm->config().hf.sliding_window;
    std::int64_t ring_bytes = 0, full_bytes = 0;
    for (const bool ring : {true, false}) {
      const auto steps = cached_logits(lm, ids, mask, pos, longest, chunks, ring, ring ? &ring_bytes : &full_bytes);
      QCOMPARE(static_cast<std::int64_t>(steps.size()), len);
      double worst = 0;
      for (std::int64_t j = 0; j < len; ++j) {
        for (std::int64_t r = 0; r < b; ++r) {
          if (mask[r][j].item<std::int64_t>() == 0) continue;  // padding slots: no logits to compare
          const torch::Tensor want = full[r][j];
          const double err = (steps[static_cast<std::size_t>(j)][r] - want).abs().max().item<double>() /
                             want.abs().max().item<double>();
          worst = std::max(worst, err);
        }
      }
      qInfo("%s%s: largest relative logit error %.2e over %lld positions", n.c_str(), ring ? "" : " (every slot kept)",
            worst, static_cast<long long>(len));
      QVERIFY2(worst <= 1e-5, (n + ": cached logits differ from the full forward by " + std::to_string(worst)).c_str());
    }
    if (window > 0 && window < len) {
      std::int64_t sliding = 0;
      for (std::int64_t i = 0; i < lm->config().hf.num_hidden_layers; ++i) sliding += lm->config().hf.sliding_layer(i);
      qInfo("%s: cache %lld bytes with rings of %lld slots on %lld of %lld layers, %lld holding every slot", n.c_str(),
            static_cast<long long>(ring_bytes), static_cast<long long>(window), static_cast<long long>(sliding),
            static_cast<long long>(lm->config().hf.num_hidden_layers), static_cast<long long>(full_bytes));
      QVERIFY(sliding > 0);
      QCOMPARE(ring_bytes, full_bytes / len * (len * (lm->config().hf.num_hidden_layers - sliding) + window * sliding) /
                               lm->config().hf.num_hidden_layers);
    } else {
      QCOMPARE(ring_bytes, full_bytes);
    }
  }

  // Sampling: a seed reproduces itself, another seed differs, top_k = 1 is greedy; each
  // processor keeps what it must.
  void sampling() {
    CausalLM lm = load("qwen2");
    const auto prompts = rows(oracle_["qwen2"]["prompts"]);
    GenerationOptions o;
    o.max_new_tokens = 32;
    o.sampling.temperature = 1.3;
    o.sampling.top_p = 0.95;
    o.sampling.min_p = 0.01;
    o.sampling.repetition_penalty = 1.2;
    o.sampling.seed = 1234;
    auto a = generate(lm, prompts, o, nullptr), b = generate(lm, prompts, o, nullptr);
    QVERIFY(a.ok() && b.ok());
    for (std::size_t i = 0; i < prompts.size(); ++i) QVERIFY(a.value[i].ids == b.value[i].ids);
    o.sampling.seed = 99;
    auto c = generate(lm, prompts, o, nullptr);
    bool differs = false;
    for (std::size_t i = 0; i < prompts.size(); ++i) differs |= c.value[i].ids != a.value[i].ids;
    QVERIFY2(differs, "seeds 1234 and 99 gave the same 96 sampled tokens");
    // Sampled tokens differ from greedy ones (temperature 1.3 over a random model's flat logits).
    const auto greedy = rows(oracle_["qwen2"]["greedy"]);
    QVERIFY(a.value[0].ids != std::vector<std::int32_t>(greedy[0].begin(), greedy[0].begin() + 32));
    // top_k = 1 leaves one token: sampling is greedy whatever the seed.
    GenerationOptions k1;
    k1.max_new_tokens = 32;
    k1.sampling.temperature = 2.0;
    k1.sampling.top_k = 1;
    k1.sampling.seed = 5;
    auto g = generate(lm, prompts, k1, nullptr);
    for (std::size_t i = 0; i < prompts.size(); ++i)
      QVERIFY(g.value[i].ids == std::vector<std::int32_t>(greedy[i].begin(), greedy[i].begin() + 32));
    // A tiny top_p keeps only the most likely token: greedy too.
    k1.sampling.top_k = 0;
    k1.sampling.top_p = 1e-6;
    auto t = generate(lm, prompts, k1, nullptr);
    for (std::size_t i = 0; i < prompts.size(); ++i)
      QVERIFY(t.value[i].ids == std::vector<std::int32_t>(greedy[i].begin(), greedy[i].begin() + 32));
    // min_p = 1 keeps only tokens as likely as the top one: greedy too.
    k1.sampling.top_p = 1.0;
    k1.sampling.min_p = 1.0;
    auto m = generate(lm, prompts, k1, nullptr);
    for (std::size_t i = 0; i < prompts.size(); ++i)
      QVERIFY(m.value[i].ids == std::vector<std::int32_t>(greedy[i].begin(), greedy[i].begin() + 32));
  }

  // A stop string cuts the text just before it; the ids end with the token that completed it;
  // streamed deltas add up to the text and never show a part of the stop string.
  void stop_strings() {
    CausalLM lm = load("qwen2");
    auto tok = Tokenizer::load(dir_ + "/qwen2");
    QVERIFY2(tok.ok(), format_all(tok.diagnostics).c_str());
    const auto prompts = rows(oracle_["qwen2"]["prompts"]);
    GenerationOptions o;
    o.max_new_tokens = 48;
    auto full = generate(lm, prompts, o, &tok.value);
    QVERIFY(full.ok());
    const std::string text = full.value[0].text;
    QVERIFY2(text.size() > 30, text.c_str());
    const std::string stop = text.substr(text.size() / 2, 4);
    const std::size_t at = text.find(stop);
    o.stop = {stop, "a stop string that never occurs"};
    std::string streamed;
    auto cut = generate(lm, {prompts[0]}, o, &tok.value, [&](std::size_t, std::int32_t, const std::string& delta) {
      streamed += delta;
      return true;
    });
    QVERIFY(cut.ok());
    const GenerationResult& r = cut.value[0];
    QCOMPARE(r.finish_reason, std::string("stop"));
    QCOMPARE(r.stop_string, stop);
    QCOMPARE(r.text, text.substr(0, at));
    QCOMPARE(streamed, r.text);
    // The ids end at the token that completed the stop string: one fewer does not contain it.
    const std::string with = tok.value.decode(r.ids, true);
    QVERIFY(with.find(stop) != std::string::npos);
    const std::vector<std::int32_t> fewer(r.ids.begin(), r.ids.end() - 1);
    QVERIFY(tok.value.decode(fewer, true).find(stop) == std::string::npos);
    // Only the stop string that never occurs: the row runs to max_new_tokens.
    o.stop = {"a stop string that never occurs"};
    auto never = generate(lm, {prompts[0]}, o, &tok.value);
    QCOMPARE(never.value[0].finish_reason, std::string("length"));
    QCOMPARE(never.value[0].text, text);
  }

  // Cancelling from the token callback stops every unfinished row with "cancelled".
  void cancel() {
    CausalLM lm = load("qwen2");
    GenerationOptions o;
    o.max_new_tokens = 40;
    int calls = 0;
    auto r = generate(lm, rows(oracle_["qwen2"]["prompts"]), o, nullptr,
                      [&](std::size_t, std::int32_t, const std::string&) { return ++calls < 7; });
    QVERIFY(r.ok());
    for (const auto& row : r.value) {
      QCOMPARE(row.finish_reason, std::string("cancelled"));
      QVERIFY(row.ids.size() <= 3);
    }
  }

  void bad_input() {
    CausalLM lm = load("qwen2");
    GenerationOptions o;
    o.max_positions = 256;
    auto empty = generate(lm, {{1, 2}, {}}, o, nullptr);
    QVERIFY(!empty.ok());
    QVERIFY2(format_all(empty.diagnostics).find("prompt 1: is empty") != std::string::npos,
             format_all(empty.diagnostics).c_str());
    auto outside = generate(lm, {{1, 512}}, o, nullptr);
    QVERIFY(format_all(outside.diagnostics).find("token id 512 is outside the model's vocabulary (512)") !=
            std::string::npos);
    auto longp = generate(lm, {std::vector<std::int32_t>(256, 3)}, o, nullptr);
    QVERIFY2(format_all(longp.diagnostics).find("256 tokens leave no room") != std::string::npos,
             format_all(longp.diagnostics).c_str());
    // Near the limit: generation stops at the model's positions with "length".
    o.max_new_tokens = 50;
    auto edge = generate(lm, {std::vector<std::int32_t>(250, 3)}, o, nullptr);
    QVERIFY(edge.ok());
    QCOMPARE(edge.value[0].ids.size(), std::size_t(6));
    QCOMPARE(edge.value[0].finish_reason, std::string("length"));
    o.sampling.temperature = -1;
    o.sampling.top_p = 0;
    o.stop = {""};
    const std::string e = format_all(generate(lm, {{1}}, o, nullptr).diagnostics);
    for (const char* key : {"temperature", "top_p", "stop: a stop string is empty", "stop strings need the tokenizer"})
      QVERIFY2(e.find(key) != std::string::npos, e.c_str());
  }

  // An adapter trained on another base is refused by name, and leaves no adapter behind.
  void adapter_of_another_base() {
    CausalLM lm = load("qwen3");  // head_dim 32: q_proj has another shape than qwen2's
    const Diagnostics d = train::attach_adapter(lm, oracle_["qwen2_lora"]["adapter"].get<std::string>());
    QVERIFY(has_errors(d));
    QVERIFY2(format_all(d).find("adapter_model.safetensors") != std::string::npos, format_all(d).c_str());
    for (auto& p : lm->named_parameters()) QVERIFY(p.key().find("lora_") == std::string::npos);
  }

  // score with an adapter (score --adapter, the Evaluate page) equals PEFT's loss.
  void score_through_an_adapter() {
    CausalLM lm = load("qwen2");
    const nlohmann::json& o = oracle_["qwen2_lora"];
    const Diagnostics d = train::attach_adapter(lm, o["adapter"].get<std::string>());
    QVERIFY2(!has_errors(d), format_all(d).c_str());
    const auto prompts = rows(o["prompts"]);
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      const double got = score_tokens(lm, prompts[i]).mean(), want = o["loss"][i].get<double>();
      QVERIFY2(std::abs(got - want) <= 1e-5 * std::abs(want),
               (std::to_string(got) + " vs PEFT " + std::to_string(want)).c_str());
    }
    // Removed again, the base's loss differs (the adapter's B matrices are not zero).
    train::remove_lora(lm);
    QVERIFY(std::abs(score_tokens(lm, prompts[0]).mean() - o["loss"][0].get<double>()) > 1e-3);
  }

  // A 4-bit base quantized on load (NF4, double quantization) continues as the model holding
  // bitsandbytes' quantized-and-dequantized weights does (generate_oracle.py --prompts
  // --load-in-4bit, fp32), and not as the 16-bit model does. The tiny Qwen2's down_proj is
  // [64, 96]: blocks of 64 cross its rows.
  void greedy_4bit_matches_bitsandbytes() {
    const auto prompts = rows(oracle_["qwen2"]["prompts"]);
    std::ofstream(dir_ + "/prompts4.jsonl") << [&] {
      std::string s;
      for (const auto& p : prompts) s += nlohmann::json{{"prompt_ids", p}}.dump() + "\n";
      return s;
    }();
    run_script({QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/generate_oracle.py"), QStringLiteral("--prompts"),
                QString::fromStdString(dir_ + "/qwen2"), QString::fromStdString(dir_ + "/prompts4.jsonl"),
                QString::fromStdString(dir_ + "/oracle4.jsonl"), QStringLiteral("--new-tokens"), QStringLiteral("32"),
                QStringLiteral("--load-in-4bit"), QStringLiteral("nf4")});
    std::vector<std::vector<std::int32_t>> want;
    std::ifstream in(dir_ + "/oracle4.jsonl");
    for (std::string line; std::getline(in, line);) want.push_back(nlohmann::json::parse(line)["ids"]);
    QCOMPARE(want.size(), prompts.size());
    DecoderOptions o{torch::kFloat32, torch::kCPU, AttentionBackend::Auto, false, {}};
    o.quant.bits = 4;
    o.quant.type = "nf4";
    auto m = load_causal_lm(dir_ + "/qwen2", o);
    QVERIFY2(m.ok(), format_all(m.diagnostics).c_str());
    GenerationOptions g;
    g.max_new_tokens = 32;
    auto r = generate(m.value.lm, prompts, g, nullptr);
    QVERIFY(r.ok());
    const auto full = rows(oracle_["qwen2"]["greedy"]);
    bool differs = false;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      QVERIFY2(r.value[i].ids == want[i],
               ("row " + std::to_string(i) + ": odyssey " + show(r.value[i].ids) + "\n bitsandbytes " + show(want[i]))
                   .c_str());
      differs |= want[i] != std::vector<std::int32_t>(full[i].begin(), full[i].begin() + 32);
    }
    QVERIFY2(differs, "the 4-bit continuations equal the 16-bit ones: the test would not see a missing quantization");
  }

  void eos_ids_from_the_model_directory() {
    auto tok = Tokenizer::load(dir_ + "/qwen2");
    QVERIFY(tok.ok());
    auto ids = generation_eos_ids(dir_ + "/qwen2", &tok.value);
    QVERIFY(ids.ok());
    QVERIFY(!ids.value.empty());
    const std::string bad = dir_ + "/bad_eos";
    QDir().mkpath(QString::fromStdString(bad));
    std::ofstream(bad + "/generation_config.json") << R"({"eos_token_id": "two"})";
    auto b = generation_eos_ids(bad, nullptr);
    QVERIFY(!b.ok());
    QVERIFY2(format_all(b.diagnostics).find("generation_config.json") != std::string::npos &&
                 format_all(b.diagnostics).find("eos_token_id") != std::string::npos,
             format_all(b.diagnostics).c_str());
  }
};

QTEST_GUILESS_MAIN(TstGenerate)
#include "tst_generate.moc"
