// The parallel pieces in real processes (docs/parallel.md): this test launches itself as N
// ranks through the engine's launcher (store transport, CPU) and each rank checks
//   - the collectives against values every rank can compute alone, and their counters;
//   - Ulysses, ring and hybrid attention against one process's attention over the whole row:
//     packed samples whose lengths need padding, and one sample followed by padding (Ulysses
//     then runs plain causal SDPA, the cuDNN path on GPUs), KV heads more than, equal to and
//     fewer than the Ulysses degree; outputs and the gradients of Q, K and V within 1e-5 (fp32), and
//     exactly zero gradient on padding (padded keys are masked);
//   - the layout: every token on exactly one rank, zigzag chunks, padding multiples;
//   - a tiny Qwen3-MoE model under sequence parallelism and expert parallelism (docs/moe.md)
//     against the same model in one process over the whole row: the loss, the load-balancing
//     aux loss and every gradient within 1e-5 (fp32; full fine-tuning and LoRA on the experts),
//     experts split over 2 and 4 ranks and over blocks of a larger sequence-parallel group;
// and a rank that dies makes the launcher stop the other and report the rank.
#include "dist/comm.h"
#include "dist/expert_parallel.h"
#include "dist/launcher.h"
#include "dist/mesh.h"
#include "dist/sequence_parallel.h"
#include "model/attention.h"
#include "kernels/quant4.h"
#include "model/decoder.h"
#include "model/weights.h"
#include "run/run_lock.h"
#include "train/batch.h"
#include "train/lora.h"

#include <QtTest>

#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

using namespace odyssey;

namespace {

// ---- worker side ----------------------------------------------------------------------------

struct Case {
  int ulysses = 1, ring = 1;
  std::int64_t q_heads = 4, kv_heads = 2;
  bool one_sample = false;  // "...s1": the row is one sample (plain causal attention after the all-to-all)
  std::int64_t window = 0;  // "...w5": sliding window (attend_masked)
  double softcap = 0.0;     // "...c1.5": attention-logit soft-capping (attend_masked)
};

Case parse_case(const std::string& s) {
  Case c;
  std::sscanf(s.c_str(), "u%dr%dq%ldkv%ld", &c.ulysses, &c.ring, &c.q_heads, &c.kv_heads);
  c.one_sample = s.find("s1") != std::string::npos;
  if (auto w = s.find('w'); w != std::string::npos) c.window = std::atol(s.c_str() + w + 1);
  if (auto x = s.find('c'); x != std::string::npos) c.softcap = std::atof(s.c_str() + x + 1);
  return c;
}

dist::Mesh worker_mesh(const dist::DistEnv& env, int ulysses, int ring, int ep = 1) {
  ParallelLayout layout;
  layout.ep = ep;
  layout.world_size = env.world;
  layout.sp = ulysses * ring;
  layout.ulysses = ulysses;
  layout.ring = ring;
  layout.dp = env.world / layout.sp;
  const auto store = dist::connect_store(env, std::chrono::seconds(60));
  return dist::build_mesh(env, layout, dist::Transport::Store, store, torch::kCPU, std::chrono::seconds(60));
}

int attention_worker(const dist::DistEnv& env, const Case& c) {
  dist::Mesh mesh = worker_mesh(env, c.ulysses, c.ring);
  const std::vector<std::int64_t> lengths = c.one_sample
                                                ? std::vector<std::int64_t>{49}
                                                : std::vector<std::int64_t>{7, 13, 1, 22, 6};  // 49: every split pads
  std::int64_t t = 0;
  std::vector<std::int32_t> ids, pos;
  for (auto n : lengths)
    for (std::int64_t i = 0; i < n; ++i) {
      ids.push_back(static_cast<std::int32_t>(t++));
      pos.push_back(static_cast<std::int32_t>(i));
    }
  const std::int64_t d = 8;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  torch::manual_seed(7);  // the same tensors on every rank
  const torch::Tensor q = torch::randn({t, c.q_heads, d}), k = torch::randn({t, c.kv_heads, d}),
                      v = torch::randn({t, c.kv_heads, d}), w = torch::randn({t, c.q_heads, d});
  const torch::Tensor pad_noise = torch::randn({t, std::max(c.q_heads, c.kv_heads), d}) * 3;

  // One process over the whole row.
  const train::PackedRow whole = train::make_packed_row(ids, std::vector<std::int32_t>(ids.size(), 0), pos);
  torch::Tensor qr = q.clone().requires_grad_(true), kr = k.clone().requires_grad_(true),
                vr = v.clone().requires_grad_(true);
  const bool masked = c.window > 0 || c.softcap > 0;
  torch::Tensor ref;
  if (masked) {  // the single-process path of the decoder for windowed / soft-capped layers
    torch::Tensor keep = model::block_causal_mask(whole.cu_seqlens, t, torch::kCPU);
    if (c.window > 0) keep = model::window_mask(keep, t, c.window, torch::kCPU);
    ref = model::masked_attention(qr.transpose(0, 1).unsqueeze(0), kr.transpose(0, 1).unsqueeze(0),
                                  vr.transpose(0, 1).unsqueeze(0), keep, scale, c.softcap,
                                  model::AttentionBackend::Auto, nullptr)
              .squeeze(0)
              .transpose(0, 1);
  } else {
    ref = model::varlen_causal_attention(qr, kr, vr, whole.cu_seqlens, whole.max_seqlen, scale, nullptr);
  }
  (ref * w).sum().backward();

  // This rank's shard: input_ids carry the global token index, -1 for padding.
  const train::PackedRow shard = dist::shard_row(whole, mesh.ulysses_group.get(), mesh.ring_group.get(), -1);
  const torch::Tensor idx = shard.input_ids[0];
  const torch::Tensor valid = idx.ge(0), safe = idx.clamp_min(0);
  const auto n = idx.size(0);
  auto local = [&](const torch::Tensor& full) {
    // Padding rows hold noise: if a real query attended a padded key, the output would show it.
    const torch::Tensor noise = pad_noise.narrow(1, 0, full.size(1)).narrow(0, 0, n);
    return torch::where(valid.view({n, 1, 1}), full.index_select(0, safe), noise).clone().requires_grad_(true);
  };
  torch::Tensor ql = local(q), kl = local(k), vl = local(v);
  const torch::Tensor out =
      masked ? shard.attention->attend_masked(ql, kl, vl, scale, c.window, c.softcap, model::AttentionBackend::Auto,
                                              nullptr)
             : shard.attention->attend(ql, kl, vl, scale, model::AttentionBackend::Auto, nullptr, nullptr);
  (out * torch::where(valid.view({n, 1, 1}), w.index_select(0, safe), torch::zeros({})).detach()).sum().backward();

  auto err = [&](const torch::Tensor& got, const torch::Tensor& want) {
    const torch::Tensor g = got.index({valid}), r = want.index_select(0, safe.index({valid}));
    return (g - r).abs().max().item<double>() / std::max(1e-12, r.abs().max().item<double>());
  };
  const double e_out = err(out, ref), e_q = err(ql.grad(), qr.grad()), e_k = err(kl.grad(), kr.grad()),
               e_v = err(vl.grad(), vr.grad());
  const torch::Tensor pad = valid.logical_not();
  const double pad_grad = pad.any().item<bool>() ? std::max({ql.grad().index({pad}).abs().max().item<double>(),
                                                             kl.grad().index({pad}).abs().max().item<double>(),
                                                             vl.grad().index({pad}).abs().max().item<double>()})
                                                 : 0.0;
  // Every real token is on exactly one rank of the sp group.
  torch::Tensor count = torch::zeros({t}, torch::kFloat64);
  count.index_add_(0, safe.index({valid}), torch::ones({valid.sum().item<std::int64_t>()}, torch::kFloat64));
  mesh.world_group->all_reduce(count);
  const bool covered = count.eq(1.0).all().item<bool>();
  std::printf(
      "{\"rank\": %d, \"case\": \"ulysses %d x ring %d, %ld q heads, %ld kv heads%s, window %ld, softcap %g\", "
      "\"local_tokens\": %ld, "
      "\"padding\": %ld, \"out\": %.3g, \"dq\": %.3g, \"dk\": %.3g, \"dv\": %.3g, \"padding_grad\": %.3g, "
      "\"covered\": %s}\n",
      env.rank, c.ulysses, c.ring, static_cast<long>(c.q_heads), static_cast<long>(c.kv_heads),
      c.one_sample ? ", one sample" : "", static_cast<long>(c.window), c.softcap, static_cast<long>(n),
      static_cast<long>(pad.sum().item<std::int64_t>()), e_out, e_q, e_k, e_v, pad_grad, covered ? "true" : "false");
  std::fflush(stdout);
  const bool ok = e_out < 1e-5 && e_q < 1e-5 && e_k < 1e-5 && e_v < 1e-5 && pad_grad == 0.0 && covered;
  return ok ? 0 : 1;
}

int collectives_worker(const dist::DistEnv& env) {
  dist::Mesh mesh = worker_mesh(env, env.world, 1);
  dist::Group& g = *mesh.world_group;
  const int n = g.size(), r = g.rank();
  bool ok = true;
  auto expect = [&](bool cond, const char* what) {
    if (!cond) std::printf("rank %d: %s wrong\n", r, what);
    ok = ok && cond;
  };
  torch::Tensor a = torch::full({5}, static_cast<double>(r + 1), torch::kFloat64);
  g.all_reduce(a);
  expect(a.eq(n * (n + 1) / 2.0).all().item<bool>(), "all_reduce");
  // all_to_all: rank r sends 100 r + j to rank j; receives 100 j + r from rank j.
  torch::Tensor x = torch::arange(n, torch::kFloat32) + 100.0f * static_cast<float>(r);
  torch::Tensor y = g.all_to_all(x.view({n, 1}));
  expect(y.view({n}).equal(torch::arange(n, torch::kFloat32) * 100.0f + static_cast<float>(r)), "all_to_all");
  // all_to_all_v: rank r sends r + j + 1 rows [r, j] to rank j, except none to the next rank
  // (empty messages travel too); from rank j it gets j + r + 1 rows [j, r], none from the previous.
  {
    std::vector<std::int64_t> send, recv;
    std::vector<torch::Tensor> rows;
    for (int j = 0; j < n; ++j) {
      send.push_back(j == (r + 1) % n ? 0 : r + j + 1);
      recv.push_back(r == (j + 1) % n ? 0 : j + r + 1);
      rows.push_back(torch::tensor({static_cast<float>(r), static_cast<float>(j)}).repeat({send.back(), 1}));
    }
    const torch::Tensor got = g.all_to_all_v(torch::cat(rows), send, recv);
    std::vector<torch::Tensor> want;
    for (int j = 0; j < n; ++j)
      want.push_back(
          torch::tensor({static_cast<float>(j), static_cast<float>(r)}).repeat({recv[static_cast<std::size_t>(j)], 1}));
    expect(got.equal(torch::cat(want)), "all_to_all_v");
  }
  torch::Tensor gathered = g.all_gather(torch::full({2}, static_cast<std::int64_t>(r), torch::kInt64));
  expect(gathered.equal(torch::arange(n, torch::kInt64).repeat_interleave(2)), "all_gather");
  torch::Tensor rs = g.reduce_scatter(torch::arange(2 * n, torch::kFloat64));
  expect(rs.equal(torch::tensor({2.0 * r, 2.0 * r + 1}, torch::kFloat64) * n), "reduce_scatter");
  torch::Tensor ring = g.send_recv(torch::full({3}, static_cast<float>(r)), (r + 1) % n, (r - 1 + n) % n);
  expect(ring.eq(static_cast<float>((r - 1 + n) % n)).all().item<bool>(), "send_recv");
  g.barrier();
  const auto st = g.stats();
  expect(st[static_cast<int>(dist::Op::AllReduce)].calls == 1 && st[static_cast<int>(dist::Op::AllReduce)].bytes == 40,
         "all_reduce counters");
  std::int64_t sent_rows = 0;
  for (int j = 0; j < n; ++j) sent_rows += j == (r + 1) % n ? 0 : r + j + 1;
  expect(st[static_cast<int>(dist::Op::AllToAll)].calls == 2 &&
             st[static_cast<int>(dist::Op::AllToAll)].bytes == 4 * n + 8 * sent_rows,
         "all_to_all counters");
  expect(st[static_cast<int>(dist::Op::Barrier)].calls == 1, "barrier counter");
  // A rank that calls first waits inside the collective for the last one: take_stats's
  // transfer time (per call, the least over the ranks) leaves that wait out.
  mesh.take_stats(nullptr);
  if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  torch::Tensor late = torch::ones({4});
  g.all_reduce(late);
  std::vector<double> transfer;
  const auto coll = mesh.take_stats(nullptr, &transfer);
  expect(coll.size() == 1 && transfer.size() == 1 && coll[0].op == "all_reduce" && coll[0].calls == 1,
         "stats after a late rank");
  if (!coll.empty() && !transfer.empty()) {
    if (r == 0) expect(coll[0].time_s >= 0.3, "the early rank's time (it waited)");
    expect(transfer[0] > 0 && transfer[0] < 0.2 && transfer[0] <= coll[0].time_s, "the transfer time");
  }
  std::printf("{\"rank\": %d, \"collectives\": %s}\n", r, ok ? "\"ok\"" : "\"wrong\"");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

// ---- MoE under sequence and expert parallelism ----------------------------------------------

struct MoeCase {
  int ulysses = 1, ring = 1, ep = 1, top_k = 2;
  bool lora = false;   // "...l": LoRA on attention and on the experts (target_parameters), base frozen
  bool quant = false;  // "...q": a 4-bit base (NF4, double quantization), the experts 4-bit too
};

MoeCase parse_moe_case(const std::string& s) {
  MoeCase c;
  int used = 0;
  std::sscanf(s.c_str(), "moe-u%dr%de%dk%d%n", &c.ulysses, &c.ring, &c.ep, &c.top_k, &used);
  const std::string flags = s.substr(static_cast<std::size_t>(used));
  c.lora = flags.find('l') != std::string::npos;
  c.quant = flags.find('q') != std::string::npos;
  return c;
}

constexpr double kAuxCoef = 0.5;

// Eight experts of a two-layer Qwen3-MoE (the second layer dense: mlp_only_layers), built
// from the same seed on every rank.
model::CausalLM tiny_moe(const MoeCase& c) {
  const std::string config =
      R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 32,
          "intermediate_size": 40, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 8, "vocab_size": 50, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
          "initializer_range": 0.2, "num_experts": 8, "num_experts_per_tok": )" +
      std::to_string(c.top_k) + R"(, "moe_intermediate_size": 24, "norm_topk_prob": )" +
      // Top-1 renormalized is a weight of exactly 1 whose gradient is rounding noise: not normalized there.
      (c.top_k == 1 ? "false" : "true") + R"(, "mlp_only_layers": [1],
          "output_router_logits": true, "router_aux_loss_coef": 0.5, "tie_word_embeddings": false})";
  auto cfg = parse_decoder_config(config, "tiny-moe/config.json");
  if (!cfg.ok()) throw std::runtime_error(format_all(cfg.diagnostics));
  if (c.quant) {
    cfg.value.quant.bits = 4;
    cfg.value.quant.type = "nf4";
    cfg.value.quant.double_quant = true;
  }
  torch::manual_seed(11);
  model::CausalLM lm(cfg.value, model::DecoderOptions{});
  lm->initialize_random();
  if (c.quant) {  // every projection and expert stack drawn and quantized, the same on every rank
    torch::NoGradGuard no_grad;
    for (const auto& [name, l] : model::quantized_linears(lm))
      l->quant = kernels::quantize_4bit(torch::randn({l->out_features, l->in_features}) * 0.2, kernels::Quant4Type::NF4,
                                        64, true);
    for (const auto& [name, e] : model::quantized_experts(lm))
      for (auto* q : {&e->gate_up_quant, &e->down_quant})
        *q = kernels::quantize_4bit(
            torch::randn(e->shape_of(q == &e->gate_up_quant ? "gate_up_proj" : "down_proj")) * 0.2,
            kernels::Quant4Type::NF4, 64, true);
  }
  if (c.lora) {
    train::LoraSettings s;
    s.rank = 2;
    s.alpha = 4;
    s.target_modules = {"q_proj", "v_proj"};
    s.target_parameters = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
    train::apply_lora(lm, s);
    torch::NoGradGuard no_grad;
    for (auto& p : lm->named_parameters())  // B starts at zero: give it values, or A's gradient is 0
      if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.3);
  }
  lm->set_router_aux_loss(true);
  return lm;
}

// The row the model workers shard: five documents of 7, 13, 1, 22 and 6 tokens (49: every
// split pads, three are longer than the tiny configs' window of 5), ids in [1, 50).
train::PackedRow five_document_row() {
  torch::manual_seed(5);
  std::vector<std::int32_t> ids, labels, pos;
  for (std::int64_t n : {7, 13, 1, 22, 6})
    for (std::int64_t i = 0; i < n; ++i) {
      ids.push_back(static_cast<std::int32_t>(torch::randint(1, 50, {1}).item<std::int64_t>()));
      labels.push_back(i == 0 ? -100 : ids.back());
      pos.push_back(static_cast<std::int32_t>(i));
    }
  return train::make_packed_row(ids, labels, pos);
}

// The worst relative difference of the gradients a worker compares with the single process's.
struct WorstGradient {
  double rel = 0;
  std::string name;
  std::int64_t compared = 0;
  void add(const std::string& key, const torch::Tensor& got, const torch::Tensor& want) {
    const double err = (got - want).abs().max().item<double>() / std::max(1e-12, want.abs().max().item<double>());
    if (err > rel || name.empty()) {
      rel = err;
      name = key;
    }
    ++compared;
  }
};

int moe_worker(const dist::DistEnv& env, const MoeCase& c) {
  dist::Mesh mesh = worker_mesh(env, c.ulysses, c.ring, c.ep);
  const train::PackedRow whole = five_document_row();

  // One process over the whole row: cross-entropy sum + coef · aux (the aux gradient through
  // the router probabilities, RouterStats::grad_scale).
  model::CausalLM ref = tiny_moe(c);
  const torch::Tensor ref_ce = train::row_loss_sum(ref, whole);
  ref->router_stats()->grad_scale = kAuxCoef;
  const double ref_aux = ref->router_stats()->aux_loss().item<double>();
  ref_ce.backward();

  // This rank: its shard of the row, its share of the experts.
  model::CausalLM lm = tiny_moe(c);
  lm->set_router_stats_sum(dist::row_statistics_sum(mesh.sp_group.get()), mesh.sp);
  lm->split_experts(dist::expert_group(mesh.ep_group.get()));
  const train::PackedRow shard = dist::shard_row(whole, mesh.ulysses_group.get(), mesh.ring_group.get(), 0);
  const torch::Tensor ce = train::row_loss_sum(lm, shard);
  // The statistic is the whole row's on every rank; each rank's backward adds the aux
  // gradient of its own tokens, so the sum over ranks is the row's.
  lm->router_stats()->grad_scale = kAuxCoef;
  const double aux = lm->router_stats()->aux_loss().item<double>();
  ce.backward();
  torch::Tensor ce_sum = ce.detach().reshape({1}).clone();
  mesh.sp_group->all_reduce(ce_sum);

  const std::int64_t e = 8, local = e / c.ep, first = mesh.ep_rank * local;
  WorstGradient worst;
  const auto want = ref->named_parameters();
  for (auto& p : lm->named_parameters()) {
    if (!p.value().requires_grad()) continue;
    const std::string& name = p.key();
    torch::Tensor g = p.value().grad().defined() ? p.value().grad().clone() : torch::zeros_like(p.value());
    const bool expert = name.find(".mlp.experts.") != std::string::npos;
    // Replicated parameters: the ranks' shares of the row add up; a share of the experts: the
    // ranks holding the same share add up (the other expert-parallel blocks of the group).
    (expert ? mesh.expert_dp_group : mesh.sp_group)->all_reduce(g);
    torch::Tensor r = want[name].grad();
    if (!r.defined()) r = torch::zeros_like(want[name]);
    if (expert && c.ep > 1) {
      // This rank's experts in the whole model's tensors: base [E, out, in]; LoRA A [E·r, in]
      // expert-major; LoRA B [out, r·E] with the expert index fastest (PEFT's layout).
      if (name.find("lora_A") != std::string::npos) {
        const std::int64_t rank = r.size(0) / e;
        r = r.narrow(0, first * rank, local * rank);
      } else if (name.find("lora_B") != std::string::npos) {
        const std::int64_t rank = r.size(1) / e;
        r = r.view({r.size(0), rank, e}).narrow(2, first, local).reshape({r.size(0), rank * local});
      } else {
        r = r.narrow(0, first, local);
      }
    }
    if (g.sizes() != r.sizes()) throw std::runtime_error(name + ": gradient shape differs from the whole model's");
    worst.add(name, g, r);
  }
  const double e_ce = std::abs(ce_sum.item<double>() - ref_ce.item<double>()) / std::abs(ref_ce.item<double>());
  const double e_aux = std::abs(aux - ref_aux) / std::abs(ref_aux);
  std::printf(
      "{\"rank\": %d, \"case\": \"ulysses %d x ring %d, experts over %d, top-%d%s%s\", \"local_tokens\": %ld, "
      "\"loss\": %.3g, \"aux\": %.3g, \"aux_value\": %.6f, \"gradients\": %ld, \"worst_gradient\": %.3g, "
      "\"worst_name\": \"%s\"}\n",
      env.rank, c.ulysses, c.ring, c.ep, c.top_k, c.lora ? ", LoRA" : "", c.quant ? ", 4-bit base" : "",
      static_cast<long>(shard.tokens()), e_ce, e_aux, aux, static_cast<long>(worst.compared), worst.rel,
      worst.name.c_str());
  std::fflush(stdout);
  return e_ce < 1e-5 && e_aux < 1e-5 && worst.rel < 1e-5 && worst.compared > 0 ? 0 : 1;
}

// A dense family's whole model under sequence parallelism against one process over the same
// row ("fam-<family>-u<U>r<R>"): the loss summed over the ranks and every gradient summed over
// them equal the single process's within 1e-5. The families whose block differs where the
// sharding could see it: OLMo's q/k norm spans all heads (computed before the Ulysses
// all-to-all splits them), OLMo-3's sliding layers rotate with their own base, Gemma-2 soft-caps,
// GLM-4 rotates interleaved pairs of half of each head.
std::string family_config(const std::string& family) {
  const std::string sizes =
      R"("hidden_size": 32, "intermediate_size": 40, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 8, "vocab_size": 50, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
         "initializer_range": 0.2, "tie_word_embeddings": false, )";
  if (family == "qwen2")
    return R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "num_hidden_layers": 2, )" + sizes +
           R"("rope_theta": 10000.0})";
  if (family == "olmo2")
    return R"({"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "num_hidden_layers": 2, )" + sizes +
           R"("attention_bias": true})";
  if (family == "olmo3")
    return R"({"architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3", "num_hidden_layers": 4, )" + sizes +
           R"("sliding_window": 5, "rope_theta": 10000.0})";
  if (family == "glm4")
    return R"({"architectures": ["Glm4ForCausalLM"], "model_type": "glm4", "num_hidden_layers": 2, )" + sizes +
           R"("partial_rotary_factor": 0.5})";
  if (family == "gemma2")
    return R"({"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "num_hidden_layers": 2, )" + sizes +
           R"("query_pre_attn_scalar": 8, "sliding_window": 5, "attn_logit_softcapping": 1.5,
              "final_logit_softcapping": 3.0})";
  throw std::runtime_error("no tiny config for family " + family);
}

// "...-d" (LoRA dropout): the fused path in training mode with LoRA r2 on every projection at
// dropout 0.3; the shards' masks are the whole row's (PackedRow::token_rows), so the sums still
// equal the single process's. The first layer checkpointed: its re-run in backward draws the
// masks again.
int family_worker(const dist::DistEnv& env, const std::string& spec) {
  char family[32] = {};
  int ulysses = 1, ring = 1;
  if (std::sscanf(spec.c_str(), "fam-%31[^-]-u%dr%d", family, &ulysses, &ring) != 3)
    throw std::runtime_error("bad family case " + spec);
  const bool dropout = spec.size() > 2 && spec.compare(spec.size() - 2, 2, "-d") == 0;
  dist::Mesh mesh = worker_mesh(env, ulysses, ring);
  auto cfg = parse_decoder_config(family_config(family), std::string(family) + "/config.json");
  if (!cfg.ok()) throw std::runtime_error(format_all(cfg.diagnostics));
  auto build = [&] {
    torch::manual_seed(13);
    model::DecoderOptions options;
    options.fused_kernels = dropout;
    model::CausalLM lm(cfg.value, options);
    lm->initialize_random();
    torch::NoGradGuard no_grad;  // norms away from 1 (or 0 for Gemma's 1 + w), so their gradients count
    for (auto& p : lm->named_parameters())
      if (p.key().find("norm") != std::string::npos) p.value().normal_(0.5, 0.3);
    if (dropout) {
      train::LoraSettings s;
      s.rank = 2;
      s.alpha = 4;
      s.dropout = 0.3;
      s.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
      train::apply_lora(lm, s);
      for (auto& p : lm->named_parameters())  // B starts at zero: give it values, or A's gradient is 0
        if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.3);
      lm->set_checkpoint_layers({true, false});
      lm->train();
    }
    return lm;
  };
  const train::PackedRow whole = five_document_row();
  model::CausalLM ref = build();
  const torch::Tensor ref_ce = train::row_loss_sum(ref, whole);
  ref_ce.backward();
  model::CausalLM lm = build();
  const train::PackedRow shard = dist::shard_row(whole, mesh.ulysses_group.get(), mesh.ring_group.get(), 0);
  const torch::Tensor ce = train::row_loss_sum(lm, shard);
  ce.backward();
  torch::Tensor ce_sum = ce.detach().reshape({1}).clone();
  mesh.sp_group->all_reduce(ce_sum);
  WorstGradient worst;
  const auto want = ref->named_parameters();
  for (auto& p : lm->named_parameters()) {
    if (!p.value().requires_grad()) continue;  // LoRA: the frozen base
    torch::Tensor g = p.value().grad().defined() ? p.value().grad().clone() : torch::zeros_like(p.value());
    mesh.sp_group->all_reduce(g);
    const torch::Tensor r = want[p.key()].grad();
    if (!r.defined()) throw std::runtime_error(p.key() + ": no gradient in the single process");
    worst.add(p.key(), g, r);
  }
  const double e_ce = std::abs(ce_sum.item<double>() - ref_ce.item<double>()) / std::abs(ref_ce.item<double>());
  std::printf(
      "{\"rank\": %d, \"case\": \"%s%s, ulysses %d x ring %d\", \"local_tokens\": %ld, \"loss\": %.3g, "
      "\"gradients\": %ld, \"worst_gradient\": %.3g, \"worst_name\": \"%s\"}\n",
      env.rank, family, dropout ? " LoRA dropout" : "", ulysses, ring, static_cast<long>(shard.tokens()), e_ce,
      static_cast<long>(worst.compared), worst.rel, worst.name.c_str());
  std::fflush(stdout);
  return e_ce < 1e-5 && worst.rel < 1e-5 && worst.compared > 0 ? 0 : 1;
}

int die_worker(const dist::DistEnv& env) {
  dist::Mesh mesh = worker_mesh(env, env.world, 1);
  if (env.rank == 1) std::_Exit(3);  // gone before the collective
  torch::Tensor a = torch::ones({1});
  mesh.world_group->all_reduce(a);  // waits for rank 1 until the launcher stops this rank
  return 0;
}

int worker_main(const std::string& what) {
  std::string error;
  const dist::DistEnv env = dist::read_dist_env(&error);
  if (!error.empty()) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  try {
    if (what == "collectives") return collectives_worker(env);
    if (what == "die") return die_worker(env);
    if (what.rfind("moe-", 0) == 0) return moe_worker(env, parse_moe_case(what));
    if (what.rfind("fam-", 0) == 0) return family_worker(env, what);
    return attention_worker(env, parse_case(what));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", env.rank, e.what());
    return 1;
  }
}

// ---- test side ------------------------------------------------------------------------------

struct Launched {
  int code = -1;
  QString status_reason;
  int failed_rank = -2;
  double seconds = 0;
};

Launched launch_ranks(int n, const QString& what) {
  QTemporaryDir dir;
  dist::LaunchOptions o;
  o.executable = std::filesystem::read_symlink("/proc/self/exe").string();
  o.arguments = {"--sp-worker", what.toStdString()};
  o.nproc = n;
  o.run_dir = dir.path().toStdString();
  o.rank_exit_grace_s = 10;
  // The launcher supervises a directory its caller owns (run_lock.h), as `odyssey-train run` does.
  const auto claim = run::claim_run_dir(run::RunDir(o.run_dir));
  if (!claim.ok()) qFatal("%s", format_all(claim.diagnostics).c_str());
  QElapsedTimer t;
  t.start();
  Launched l;
  l.code = dist::launch(o);
  l.seconds = static_cast<double>(t.elapsed()) / 1000.0;
  QFile f(dir.filePath("status.json"));
  if (f.open(QIODevice::ReadOnly)) {
    const QJsonObject s = QJsonDocument::fromJson(f.readAll()).object();
    l.status_reason = s.value("reason").toString();
    l.failed_rank = s.value("failed_rank").toInt(-2);
  }
  return l;
}

// A data-driven test's row: its `ranks` processes run worker `spec`, and every rank passes.
void ranks_pass() {
  QFETCH(int, ranks);
  QFETCH(QString, spec);
  const Launched l = launch_ranks(ranks, spec);
  QCOMPARE(l.code, 0);
}

}  // namespace

class TstSequenceParallel : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void layoutZigzagAndPadding() {
    // Samples 5 and 3 over ring 2 x ulysses 2: each padded to a multiple of 4, then a padding
    // sample to a multiple of lcm(4, 4) = 4.
    const dist::SpLayout L = dist::plan_sp_layout({0, 5, 8}, 8, 2, 2);
    QCOMPARE(L.padded, std::int64_t{12});  // 8 + 4
    QCOMPARE(L.shard_order.size(), std::size_t{2});
    // Sample 0 (padded to 8, chunks of 2): shard 0 has chunks 0 and 3, shard 1 chunks 1 and 2.
    const std::vector<std::int64_t> s0{0, 1, 6, 7, 8, 11}, s1{2, 3, 4, 5, 9, 10};
    QCOMPARE(L.shard_order[0], s0);
    QCOMPARE(L.shard_order[1], s1);
    QCOMPARE(L.source[5], std::int64_t{-1});  // padding continues sample 0
    QCOMPARE(L.position[5], std::int64_t{5});
    const dist::SpLayout U = dist::plan_sp_layout({0, 3, 7}, 7, 4, 1);
    QCOMPARE(U.padded, std::int64_t{8});
    QCOMPARE(U.cu_seqlens, (std::vector<std::int32_t>{0, 3, 7, 8}));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, dist::plan_sp_layout({0, 3}, 7, 2, 1));
  }

  void headsThatFit() {
    std::string why;
    QVERIFY(dist::heads_fit_ulysses(28, 4, 2, &why));
    QVERIFY(dist::heads_fit_ulysses(28, 4, 4, &why));
    QVERIFY(dist::heads_fit_ulysses(32, 4, 8, &why));  // KV heads replicated
    QVERIFY(!dist::heads_fit_ulysses(14, 2, 4, &why));
    QVERIFY(why.find("14 attention heads") != std::string::npos);
    QVERIFY(!dist::heads_fit_ulysses(12, 6, 4, &why));
  }

  void collectives_data() {
    QTest::addColumn<int>("ranks");
    QTest::newRow("2 ranks") << 2;
    QTest::newRow("4 ranks") << 4;
  }
  void collectives() {
    QFETCH(int, ranks);
    const Launched l = launch_ranks(ranks, "collectives");
    QCOMPARE(l.code, 0);
  }

  void attention_data() {
    QTest::addColumn<int>("ranks");
    QTest::addColumn<QString>("spec");
    QTest::newRow("Ulysses 2, KV 4 > degree") << 2 << "u2r1q4kv4";
    QTest::newRow("Ulysses 2, KV 2 = degree") << 2 << "u2r1q4kv2";
    QTest::newRow("Ulysses 2, KV 1 < degree (replicated)") << 2 << "u2r1q4kv1";
    QTest::newRow("Ulysses 2, one sample + padding") << 2 << "u2r1q4kv2s1";
    QTest::newRow("ring 2") << 2 << "u1r2q4kv2";
    QTest::newRow("Ulysses 2, sliding window 5") << 2 << "u2r1q4kv2w5";
    QTest::newRow("Ulysses 2, soft-capping 1.5") << 2 << "u2r1q4kv2c1.5";
    QTest::newRow("Ulysses 4, window 5 + soft-capping, KV 2 (replicated)") << 4 << "u4r1q8kv2w5c1.5";
    QTest::newRow("Ulysses 2, one sample + padding, window 9") << 2 << "u2r1q4kv2s1w9";
    QTest::newRow("Ulysses 4, KV 2 (replicated)") << 4 << "u4r1q8kv2";
    QTest::newRow("Ulysses 4, one sample + padding, KV 2 (replicated)") << 4 << "u4r1q8kv2s1";
    QTest::newRow("ring 4") << 4 << "u1r4q2kv1";
    QTest::newRow("Ulysses 2 x ring 2") << 4 << "u2r2q4kv2";
    QTest::newRow("Ulysses 2 x ring 2, KV 1 (replicated)") << 4 << "u2r2q4kv1";
    // Ring blocks masked by the window (whole blocks outside it skipped) and soft-capped.
    QTest::newRow("ring 2, sliding window 5") << 2 << "u1r2q4kv2w5";
    QTest::newRow("ring 2, soft-capping 1.5") << 2 << "u1r2q4kv2c1.5";
    QTest::newRow("ring 2, one sample + padding, window 9") << 2 << "u1r2q4kv2s1w9";
    QTest::newRow("ring 4, window 5 + soft-capping, KV 1") << 4 << "u1r4q2kv1w5c1.5";
    QTest::newRow("Ulysses 2 x ring 2, window 5 + soft-capping") << 4 << "u2r2q4kv2w5c1.5";
  }
  void attention() { ranks_pass(); }

  void moeParallel_data() {
    QTest::addColumn<int>("ranks");
    QTest::addColumn<QString>("spec");
    QTest::newRow("Ulysses 2, experts not split (the row's aux statistic)") << 2 << "moe-u2r1e1k2";
    QTest::newRow("Ulysses 2, experts over 2") << 2 << "moe-u2r1e2k2";
    QTest::newRow("ring 2, experts over 2, top-1") << 2 << "moe-u1r2e2k1";
    QTest::newRow("Ulysses 2, experts over 2, top-8 (all), LoRA") << 2 << "moe-u2r1e2k8l";
    QTest::newRow("Ulysses 4, experts over 4, LoRA") << 4 << "moe-u4r1e4k2l";
    QTest::newRow("Ulysses 2 x ring 2, experts over 4") << 4 << "moe-u2r2e4k2";
    QTest::newRow("Ulysses 4, experts over 2 (two blocks hold each share), top-1") << 4 << "moe-u4r1e2k1";
    QTest::newRow("Ulysses 2 x ring 2, experts over the Ulysses pairs, LoRA") << 4 << "moe-u2r2e2k2l";
    // QLoRA: the 4-bit expert stacks split into shares (kernels::slice_4bit) compute what the
    // whole stacks do; the expert adapters' gradients equal one process's.
    QTest::newRow("Ulysses 2, 4-bit experts over 2, LoRA") << 2 << "moe-u2r1e2k2lq";
    QTest::newRow("Ulysses 4, 4-bit experts over 4, top-1, LoRA") << 4 << "moe-u4r1e4k1lq";
  }
  void moeParallel() { ranks_pass(); }

  // Whole dense models of the families whose blocks differ where a shard could see it.
  void familyParallel_data() {
    QTest::addColumn<int>("ranks");
    QTest::addColumn<QString>("spec");
    QTest::newRow("OLMo-2, Ulysses 2 (q/k norm over all heads before the all-to-all)") << 2 << "fam-olmo2-u2r1";
    QTest::newRow("OLMo-2, ring 2") << 2 << "fam-olmo2-u1r2";
    QTest::newRow("OLMo-3, Ulysses 2 (window 5, local RoPE base)") << 2 << "fam-olmo3-u2r1";
    QTest::newRow("OLMo-3, Ulysses 2 x ring 2") << 4 << "fam-olmo3-u2r2";
    QTest::newRow("Gemma-2, ring 2 (window 5, soft-capping)") << 2 << "fam-gemma2-u1r2";
    QTest::newRow("GLM-4, Ulysses 2 x ring 2 (interleaved half rotary)") << 4 << "fam-glm4-u2r2";
    QTest::newRow("Qwen2, LoRA dropout, Ulysses 2") << 2 << "fam-qwen2-u2r1-d";
    QTest::newRow("Qwen2, LoRA dropout, Ulysses 2 x ring 2") << 4 << "fam-qwen2-u2r2-d";
  }
  void familyParallel() { ranks_pass(); }

  void deadRankStopsTheOthers() {
    const Launched l = launch_ranks(2, "die");
    qInfo("rank 1 exited with code 3: the launcher returned after %.2f s", l.seconds);
    QCOMPARE(l.code, 1);
    QCOMPARE(l.failed_rank, 1);
    QVERIFY2(l.status_reason.contains("exit code 3"), qPrintable(l.status_reason));
    QVERIFY(l.seconds < 20);
  }
};

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--sp-worker") return worker_main(argv[2]);
  TstSequenceParallel t;
  return QTest::qExec(&t, argc, argv);
}
#include "tst_sequence_parallel.moc"
