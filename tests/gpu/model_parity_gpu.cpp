// The decoder on a CUDA GPU (no Qt: the GPU machines have none). Two checks:
//
// parity [DIR]  bf16 parity with transformers on the GPU. DIR is written by
//   tests/reference/make_tiny_models.py DIR --device cuda --dtype bfloat16 (run here when
//   DIR is not given): HF's bf16 logits/loss/gradients and HF's fp32 ones on the same GPU.
//   Tolerance (docs/model.md): bf16 keeps 8 significant bits, unit roundoff u = 2^-8; two
//   correct bf16 programs that round at different points (other GEMM tilings, cuDNN vs
//   flash attention) each sit some multiple of u away from the exact result. So Odyssey's
//   bf16 result is judged against the fp32 reference and must be no further from it than
//   HF's own bf16 result is, within a factor 2, plus u:
//     rel(odyssey_bf16, hf_fp32) <= 2 * rel(hf_bf16, hf_fp32) + 2^-8
//   with rel(a, b) = max|a - b| / max|b|. The direct distance to HF's bf16 is printed too.
//
// bench [--seq N] [--layers L] [--attention cudnn,flash,...]  forward + backward of a Qwen2.5-7B-shaped model (random
//   init, bf16, all parameters trainable) on one sequence of N tokens: attention backend,
//   seconds per step, peak memory. Layers and the loss are recomputed in backward (see
//   docs/model.md: without it the saved activations alone exceed an H200 at 32K).
//
// attention [--seq N] [--attention cudnn,flash,varlen-flash,window-mask,tiled,tiled-band,tiled-gemm,tiled-cudnn]
//   [--window W]
//   [--heads HQ,HKV,D]  attention alone at the 7B shape's heads (28, 4, 128) or the given ones:
//   milliseconds, achieved TFLOP/s and peak memory, forward and forward + backward (one JSON line
//   each). With --window: varlen-flash runs flash's local band (after checking it against the
//   explicit mask, window_parity) and window-mask the explicit [T, T] mask path; the other
//   backends are skipped. tiled: model/tiled_attention.h with Gemma-2's soft-capping (50), and the
//   window when given (the band kernels where they take the shape: forward, and backward with a
//   window); tiled-band: the band kernels forward and backward with or without a window;
//   tiled-gemm: the same with the band kernels off (its GEMM tiles); tiled-cudnn: cuDNN's
//   rectangles and the band kernels' diagonal (kernels/cudnn_attention.h; no window, whole
//   rows only: its check is one causal row of 4,096). ODYSSEY_BAND_TANH=exact: the
//   band kernels' tanhf (approx by default). Each tiled backend is first checked against the
//   dense formula in float64 (tiled_parity: outputs and gradients on the first 2,048 rows).
#include <ATen/DeviceAccelerator.h>
#include <ATen/SDPBackend.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "model/rope.h"
#include "kernels/band_attention.h"
#include "kernels/cudnn_attention.h"
#include "model/tiled_attention.h"
#include "model/weights.h"

using namespace odyssey;
using namespace odyssey::model;

namespace {

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  const double d = (a.to(torch::kFloat32).cpu() - b).abs().max().item<double>();
  return scale > 0 ? d / scale : d;
}

torch::Tensor get(const SafetensorsCheckpoint& r, const std::string& name) {
  auto t = r.load(name, torch::kFloat32);
  if (!t.ok()) throw std::runtime_error(format_all(t.diagnostics));
  return t.value;
}

struct Check {
  double odyssey_vs_fp32, hf_vs_fp32, odyssey_vs_hf;
  bool ok() const { return odyssey_vs_fp32 <= 2.0 * hf_vs_fp32 + std::ldexp(1.0, -8); }
};

bool report(const std::string& what, const Check& c) {
  std::printf("  %-44s odyssey-fp32 %.3e  hf-fp32 %.3e  odyssey-hf %.3e  %s\n", what.c_str(), c.odyssey_vs_fp32,
              c.hf_vs_fp32, c.odyssey_vs_hf, c.ok() ? "ok" : "FAIL");
  return c.ok();
}

bool parity_one(const std::string& dir, const std::string& name) {
  const torch::Device cuda(torch::kCUDA, 0);
  auto loaded =
      load_causal_lm(dir + "/" + name, DecoderOptions{torch::kBFloat16, cuda, AttentionBackend::CuDNN, false, {}});
  if (!loaded.ok()) throw std::runtime_error(format_all(loaded.diagnostics));
  CausalLM lm = loaded.value.lm;
  auto rr = SafetensorsCheckpoint::open(dir + "/" + name + ".reference.safetensors");
  if (!rr.ok()) throw std::runtime_error(format_all(rr.diagnostics));
  const auto& R = rr.value;
  const auto ids = get(R, "input_ids").to(cuda, torch::kInt64);
  const auto mask = get(R, "attention_mask").to(cuda, torch::kInt64);
  const auto labels = get(R, "labels").to(cuda, torch::kInt64);
  lm->zero_grad();
  // MoE models with output_router_logits: the load-balancing loss joins the loss (moe.h).
  const HfModelConfig& hf_config = lm->config().hf;
  const bool aux = hf_config.is_moe() && hf_config.output_router_logits;
  lm->set_router_aux_loss(aux);
  const auto logits = lm->forward(ids, mask);
  auto loss = causal_lm_loss(logits, labels);
  if (aux) {
    const auto stats = lm->router_stats();
    stats->grad_scale = hf_config.router_aux_loss_coef;
    loss = loss + hf_config.router_aux_loss_coef * stats->aux_loss().to(loss.device());
  }
  loss.backward();
  lm->set_router_aux_loss(false);
  const std::string padded_backend = lm->attention_backend_ran();
  bool ok = true;
  std::printf("%s (bf16, padded batch: attention %s)\n", name.c_str(), padded_backend.c_str());
  auto check = [&](const std::string& what, const torch::Tensor& mine, const std::string& key) {
    const auto hf = get(R, key), fp = get(R, "fp32." + key);
    return report(what, {rel(mine, fp), rel(hf, fp), rel(mine, hf)});
  };
  ok &= check("logits", logits.detach(), "logits");
  ok &= check("loss", loss.detach().reshape({1}), "loss");
  Check worst{0, 0, 0};
  std::string worst_name;
  for (const auto& p : lm->named_parameters(true)) {
    const std::string key = "grad." + p.key();
    const auto hf = get(R, key), fp = get(R, "fp32." + key);
    const Check c{rel(p.value().grad(), fp), rel(hf, fp), rel(p.value().grad(), hf)};
    if (!c.ok()) ok &= report("grad " + p.key(), c);
    const double margin = c.odyssey_vs_fp32 - 2.0 * c.hf_vs_fp32;
    if (worst_name.empty() || margin > worst.odyssey_vs_fp32 - 2.0 * worst.hf_vs_fp32) {
      worst = c;
      worst_name = p.key();
    }
  }
  report("grad (closest to the bound) " + worst_name, worst);
  torch::NoGradGuard ng;
  const auto nopad = lm->forward(get(R, "nopad.input_ids").to(cuda, torch::kInt64));
  std::printf("  unpadded batch: attention %s\n", lm->attention_backend_ran().c_str());
  ok &= check("unpadded logits", nopad, "nopad.logits");
  // The unpadded rows packed into one padding-free row (the trainer's layout): varlen flash
  // attention, and for windowed layers without soft-capping flash's local band.
  const auto rows = get(R, "nopad.input_ids").to(cuda, torch::kInt64);
  const std::int64_t n = rows.size(0), len = rows.size(1);
  const auto pos = torch::arange(len, rows.options()).repeat({n}).view({1, n * len});
  const auto cu = torch::arange(0, n * len + 1, len, torch::TensorOptions().dtype(torch::kInt32).device(cuda));
  const auto packed = lm->logits(lm->hidden_states_packed(rows.reshape({1, n * len}), pos, cu, len));
  std::printf("  packed row: attention %s\n", lm->attention_backend_ran().c_str());
  ok &= check("packed-row logits", packed.reshape({n, len, -1}), "nopad.logits");
  return ok;
}

int parity(std::string dir) {
  if (dir.empty()) {
    const std::string python = ODYSSEY_PYTHON[0] ? ODYSSEY_PYTHON : "python3";
    dir = (std::filesystem::temp_directory_path() / "odyssey-gpu-parity").string();
    const std::string cmd = python + " " ODYSSEY_SOURCE_DIR "/tests/reference/make_tiny_models.py " + dir +
                            " --device cuda --dtype bfloat16";
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "model_parity_gpu: %s failed\n", cmd.c_str());
      return 1;
    }
  }
  bool ok = true;
  // Every model make_tiny_models.py writes: the base families and issue 22's (Mistral with a
  // window, Llama with head_dim != hidden / heads, SmolLM, Granite, the RoPE kinds, Gemma-2,
  // Phi-3, Gemma-3, SmolLM3, Ministral, OLMo-2/3 with their fp32-weighted norms, GLM-4), the multimodal wrappers read
  // as their text model (Gemma-3, Mistral-3 untied and tied, LLaVA, Qwen2.5-VL nested, Qwen2-VL flat, Qwen3-VL), a
  // config tying a head its weights store apart, and issue 27's mixture-of-experts models.
  for (const char* n :
       {"qwen2",          "qwen3",         "llama3",        "mistral",     "llama_hd",         "smollm",
        "granite",        "rope_linear",   "rope_dynamic",  "rope_yarn",   "rope_yarn_mscale", "rope_longrope",
        "gemma2",         "phi3",          "gemma3",        "gemma3_mm",   "mistral3_mm",      "mistral3_tied",
        "llava_mm",       "qwen2_5_vl_mm", "qwen2_vl_flat", "qwen3_vl_mm", "tied_own_head",    "qwen3_moe",
        "qwen3_moe_top8", "qwen2_moe",     "mixtral",       "smollm3",     "ministral",        "olmo2",
        "olmo3",          "glm4"})
    ok &= parity_one(dir, n);
  std::printf("bf16 parity: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

// Runs a module piece in forward without saving activations, and again in backward with
// autograd on (PyTorch's reentrant checkpoint). The pieces' parameters get their gradients
// from the inner backward; only the input's gradient is returned.
struct Recompute : torch::autograd::Function<Recompute> {
  using Fn = std::function<torch::Tensor(const torch::Tensor&)>;
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const Fn* fn) {
    ctx->save_for_backward({x});
    ctx->saved_data["fn"] = reinterpret_cast<std::int64_t>(fn);
    return (*fn)(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const Fn* fn = reinterpret_cast<const Fn*>(ctx->saved_data["fn"].toInt());
    torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::AutoGradMode on(true);
    torch::Tensor y = (*fn)(x);
    torch::autograd::backward({y}, {grad[0]});
    return {x.grad(), torch::Tensor()};
  }
};

double gib(std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0); }

AttentionBackend backend_named(const std::string& n) {
  if (n == "cudnn") return AttentionBackend::CuDNN;
  if (n == "flash") return AttentionBackend::Flash;
  if (n == "efficient") return AttentionBackend::Efficient;
  if (n == "math") return AttentionBackend::Math;
  return AttentionBackend::Auto;
}

int bench(std::int64_t seq, std::int64_t layers, const std::vector<std::string>& backends) {
  const torch::Device cuda(torch::kCUDA, 0);
  DecoderConfig c;  // Qwen2.5-7B's config.json
  c.hf.architecture = "Qwen2ForCausalLM";
  c.hf.family = "qwen2";
  c.hf.hidden_size = 3584;
  c.hf.intermediate_size = 18944;
  c.hf.num_hidden_layers = layers;
  c.hf.num_attention_heads = 28;
  c.hf.num_key_value_heads = 4;
  c.hf.head_dim = 128;
  c.hf.vocab_size = 152064;
  c.hf.rms_norm_eps = 1e-6;
  c.hf.tie_word_embeddings = false;
  c.rope.theta = 1000000.0;
  c.hf.qkv_bias = true;
  torch::manual_seed(0);
  CausalLM lm(c, DecoderOptions{torch::kBFloat16, cuda, AttentionBackend::CuDNN, false, {}});
  lm->initialize_random();
  std::int64_t params = 0;
  for (const auto& p : lm->parameters()) params += p.numel();
  const auto ids =
      torch::randint(0, c.hf.vocab_size, {1, seq}, torch::TensorOptions().dtype(torch::kInt64).device(cuda));
  const torch::Tensor inv_freq = rope_inv_freq(c.rope, c.hf.head_dim);
  std::printf("Qwen2.5-7B shape: %lld layers, %.3f B parameters (all trainable), bf16, seq %lld\n",
              static_cast<long long>(layers), static_cast<double>(params) / 1e9, static_cast<long long>(seq));

  // One layer without recompute: what its saved activations cost at this length.
  {
    at::accelerator::synchronizeDevice(0);
    const auto before = at::accelerator::getDeviceStats(0).allocated_bytes[0].current;
    torch::Tensor h = lm->model->embed_tokens(ids).detach().requires_grad_(true);
    LayerContext ctx;
    std::tie(ctx.cos, ctx.sin) =
        rope_cos_sin(inv_freq, torch::arange(seq, ids.options()).unsqueeze(0), torch::kBFloat16);
    ctx.attention = AttentionBackend::CuDNN;
    torch::Tensor y = lm->model->layer_list[0](h, ctx);
    at::accelerator::synchronizeDevice(0);
    const auto after = at::accelerator::getDeviceStats(0).allocated_bytes[0].current;
    std::printf("one layer's forward with autograd keeps %.2f GiB at seq %lld (x %lld layers = %.1f GiB)\n",
                gib(after - before), static_cast<long long>(seq), static_cast<long long>(layers),
                gib(after - before) * static_cast<double>(layers));
  }

  std::atomic<std::int64_t> ran{-1};
  AttentionBackend prefer = AttentionBackend::CuDNN;
  auto step = [&]() {
    LayerContext ctx;
    std::tie(ctx.cos, ctx.sin) =
        rope_cos_sin(inv_freq, torch::arange(seq, ids.options()).unsqueeze(0), torch::kBFloat16);
    ctx.attention = prefer;
    ctx.backend_ran = &ran;
    std::vector<Recompute::Fn> fns;
    for (auto& layer : lm->model->layer_list)
      fns.emplace_back([&ctx, layer](const torch::Tensor& x) mutable { return layer(x, ctx); });
    torch::Tensor h = lm->model->embed_tokens(ids);
    for (const auto& fn : fns) h = Recompute::apply(h, &fn);
    h = lm->model->norm(h).view({seq, -1});
    // HF's loss (bf16 logits, upcast to fp32, shifted targets, mean) in chunks of 4096 tokens,
    // each recomputed in backward, so no [seq, vocab] tensor exists.
    const torch::Tensor targets = torch::constant_pad_nd(ids, {0, 1}, -100).narrow(1, 1, seq).reshape({-1});
    const std::int64_t chunk = 4096;
    torch::Tensor total = torch::zeros({}, h.options().dtype(torch::kFloat32));
    std::vector<Recompute::Fn> loss_fns;
    loss_fns.reserve(static_cast<std::size_t>((seq + chunk - 1) / chunk));
    for (std::int64_t i = 0; i < seq; i += chunk) {
      const std::int64_t n = std::min(chunk, seq - i);
      const torch::Tensor t = targets.narrow(0, i, n);
      loss_fns.emplace_back([&lm, t](const torch::Tensor& x) {
        return torch::nn::functional::cross_entropy(
            at::linear(x, lm->lm_head_weight()).to(torch::kFloat32), t,
            torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum));
      });
      total = total + Recompute::apply(h.narrow(0, i, n), &loss_fns.back());
    }
    const torch::Tensor loss = total / (seq - 1);
    loss.backward();
    return loss.item<double>();
  };

  for (const std::string& b : backends) {
    prefer = backend_named(b);
    lm->zero_grad();
    step();  // warm-up: cuDNN plans, allocator pools
    at::accelerator::synchronizeDevice(0);
    at::accelerator::resetPeakStats(0);
    const int steps = 3;
    double loss = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      lm->zero_grad(false);
      loss = step();
    }
    at::accelerator::synchronizeDevice(0);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
    const auto stats = at::accelerator::getDeviceStats(0);
    // Model FLOPs (no recompute): 6 N T for the matrices, attention 2 s^2 d H per layer
    // forward (causal: half of 4 s^2 d H), times 3.5 for forward + backward (ANCHORS.md).
    const double tokens = static_cast<double>(seq);
    const double flops = 6.0 * static_cast<double>(params) * tokens +
                         3.5 * 2.0 * tokens * tokens * 128.0 * 28.0 * static_cast<double>(layers);
    std::printf("[prefer %s] attention backend that ran: %s\n", b.c_str(), sdp_backend_name(ran.load()).c_str());
    std::printf("  loss %.4f (ln vocab = %.4f)\n", loss, std::log(152064.0));
    std::printf("  forward+backward: %.3f s per step (mean of %d after 1 warm-up), %.0f tokens/s, %.0f model TFLOP/s\n",
                s, steps, tokens / s, flops / s / 1e12);
    std::printf("  peak allocated: %.2f GiB, peak reserved: %.2f GiB\n", gib(stats.allocated_bytes[0].peak),
                gib(stats.reserved_bytes[0].peak));
    std::fflush(stdout);
  }
  return 0;
}

// Attention alone at the 7B shape's heads (28 query heads, 4 KV heads, head dim 128, bf16,
// one causal sequence): forward and forward + backward per backend, with the achieved
// TFLOP/s. Causal attention FLOPs: forward 2·s²·d·H (half of 4·s²·d·H), backward 2.5x the
// forward (its five matrix products against the forward's two), as flash-attention counts.
// "varlen-flash" is the packed-row path ([T, H, D] with cu_seqlens) on the same sequence.
// Outputs and the gradients of Q, K and V of one attention run.
struct AttentionGrads {
  torch::Tensor out, dq, dk, dv;
};
// The attention checks' rule: for out, dq, dk and dv, got's distance to the exact result at most
// twice the comparator's plus 2^-8 (distances relative to the exact result's largest value).
// line(name, got's distance, the comparator's, the bound, pass) prints each.
template <typename Line>
bool within_twice_plus_u(const AttentionGrads& got, const AttentionGrads& comparator, const AttentionGrads& exact,
                         Line line) {
  auto d = [](const torch::Tensor& a, const torch::Tensor& b) {
    return ((a - b).abs().max() / b.abs().max()).item<double>();
  };
  bool ok = true;
  const char* names[] = {"out", "dq", "dk", "dv"};
  const torch::Tensor AttentionGrads::*fields[] = {&AttentionGrads::out, &AttentionGrads::dq, &AttentionGrads::dk,
                                                   &AttentionGrads::dv};
  for (int i = 0; i < 4; ++i) {
    const double e_got = d(got.*fields[i], exact.*fields[i]), e_cmp = d(comparator.*fields[i], exact.*fields[i]);
    const double bound = 2 * e_cmp + std::ldexp(1.0, -8);
    const bool pass = e_got <= bound;
    ok = ok && pass;
    line(names[i], e_got, e_cmp, bound, pass);
  }
  return ok;
}

// The flash band against the explicit window mask on the first rows (at most 8,192: the fp32
// reference's scores are [H, n, n]), window at most half of them: outputs and the gradients of
// Q, K and V. Judged as the parity checks are: distance to the fp32 mask result at most twice
// the bf16 mask path's (SDPA with the mask, the path windowed layers took before) plus 2^-8.
bool window_parity(const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0, const torch::Tensor& g0,
                   std::int64_t window) {
  const std::int64_t n = std::min<std::int64_t>(q0.size(0), 8192), w = std::min(window, n / 2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q0.size(2)));
  const torch::Device dev = q0.device();
  // Two samples (n/3 and the rest): the band must also stop at the sample boundary.
  const torch::Tensor cu = torch::tensor({0, static_cast<int>(n / 3), static_cast<int>(n)},
                                         torch::TensorOptions().dtype(torch::kInt32).device(dev));
  const torch::Tensor keep = window_mask(block_causal_mask(cu, n, dev), n, w, dev);
  const torch::Tensor g = g0.narrow(0, 0, n);
  auto run = [&](torch::ScalarType dt, bool band, AttentionBackend prefer) {
    torch::Tensor q = q0.narrow(0, 0, n).to(dt).detach().requires_grad_(true),
                  k = k0.narrow(0, 0, n).to(dt).detach().requires_grad_(true),
                  v = v0.narrow(0, 0, n).to(dt).detach().requires_grad_(true);
    torch::Tensor out = band ? varlen_causal_attention(q, k, v, cu, n - n / 3, scale, nullptr, w)
                             : masked_attention(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                                                v.transpose(0, 1).unsqueeze(0), keep, scale, 0.0, prefer, nullptr)
                                   .squeeze(0)
                                   .transpose(0, 1);
    out.backward(g.to(dt));
    return AttentionGrads{out.detach().to(torch::kFloat32), q.grad().to(torch::kFloat32), k.grad().to(torch::kFloat32),
                          v.grad().to(torch::kFloat32)};
  };
  const AttentionGrads ref = run(torch::kFloat32, false, AttentionBackend::Math);
  const AttentionGrads mask = run(torch::kBFloat16, false, AttentionBackend::Auto);
  const AttentionGrads band = run(torch::kBFloat16, true, AttentionBackend::Auto);
  return within_twice_plus_u(band, mask, ref, [&](const char* name, double e_band, double e_mask, double, bool pass) {
    std::printf(
        "{\"window_parity\": \"%s\", \"rows\": %lld, \"window\": %lld, \"band_vs_fp32\": %.3e, "
        "\"mask_bf16_vs_fp32\": %.3e, \"ok\": %s}\n",
        name, static_cast<long long>(n), static_cast<long long>(w), e_band, e_mask, pass ? "true" : "false");
  });
}

// A tiled backend (its switches set) against the dense formula in float64 on the first rows (at
// most 2,048; the float64 scores are [H, n, n]), in two samples and with the window (at most half
// the rows), Gemma-2's cap of 50: outputs and the gradients of Q, K and V. Judged as the selftest
// judges the band kernels: distance to float64 at most twice the dense formula's own in bf16
// (kernels::band_attention_reference: fp32 arithmetic on the bf16 inputs, rounded outputs) plus
// 2^-8. What this adds to the selftest: the engine's split (the band kernels' forward with the
// GEMM tiles' backward from their output and log-sum-exp) and the default tanh, through
// model/tiled_attention.h as the decoder calls it.
// What the cuDNN soft-cap path did: off, on, or failed (and why; the band kernels ran instead).
std::string cudnn_state() {
  if (!kernels::cudnn_softcap_enabled()) return kernels::cudnn_softcap_compiled() ? "off" : "not built";
  const std::string why = kernels::cudnn_softcap_failure(), why_window = kernels::cudnn_softcap_window_failure();
  std::string s = !why.empty()          ? "failed: " + why.substr(0, 200)
                  : !why_window.empty() ? "on, windowed rows failed: " + why_window.substr(0, 200)
                                        : "on";
  for (char& c : s)
    if (c == '"' || c == '\\' || c == '\n') c = ' ';
  return s;
}

bool is_tiled(const std::string& b) {
  return b == "tiled" || b == "tiled-gemm" || b == "tiled-band" || b == "tiled-cudnn";
}

bool tiled_parity(const std::string& backend, const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0,
                  const torch::Tensor& g0, std::int64_t window) {
  // tiled-cudnn: one row of 4,096, the only rows that path takes (causal: two levels of cuDNN's
  // rectangles and 1,024-row diagonal blocks; with a window, of 2,048: two blocks of 1,024 back).
  const bool one_row = backend == "tiled-cudnn";
  const std::int64_t n = std::min<std::int64_t>(q0.size(0), one_row ? 4096 : 2048);
  const std::int64_t w = std::min(window, n / 2), split = one_row ? n : n / 3;
  const double scale = 1.0 / std::sqrt(static_cast<double>(q0.size(2))), cap = 50.0;
  const torch::Device dev = q0.device();
  const torch::Tensor cu =
      one_row ? torch::tensor({0, static_cast<int>(n)}, torch::TensorOptions().dtype(torch::kInt32).device(dev))
              : torch::tensor({0, static_cast<int>(split), static_cast<int>(n)},
                              torch::TensorOptions().dtype(torch::kInt32).device(dev));
  std::vector<std::int64_t> first(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t start = i < split ? 0 : split;
    first[static_cast<std::size_t>(i)] = w > 0 ? std::max(start, i - w + 1) : start;
  }
  const torch::Tensor fk = torch::tensor(first, torch::kInt64).to(dev);
  auto run = [&](torch::ScalarType dt, bool tiled) {
    torch::Tensor q = q0.narrow(0, 0, n).to(dt).detach().requires_grad_(true),
                  k = k0.narrow(0, 0, n).to(dt).detach().requires_grad_(true),
                  v = v0.narrow(0, 0, n).to(dt).detach().requires_grad_(true);
    const torch::Tensor out = tiled ? tiled_causal_attention(q, k, v, cu, scale, w, cap)
                                    : kernels::band_attention_reference(q, k, v, fk, scale, cap).first;
    out.backward(g0.narrow(0, 0, n).to(out.scalar_type()));
    return AttentionGrads{out.detach().to(torch::kDouble), q.grad().to(torch::kDouble), k.grad().to(torch::kDouble),
                          v.grad().to(torch::kDouble)};
  };
  const AttentionGrads exact = run(torch::kDouble, false), ref = run(torch::kBFloat16, false),
                       got = run(torch::kBFloat16, true);
  return within_twice_plus_u(
      got, ref, exact, [&](const char* name, double e_got, double e_ref, double bound, bool pass) {
        std::printf(
            "{\"tiled_parity\": \"%s\", \"attention\": \"%s\", \"band_tanh\": \"%s\", \"cudnn\": \"%s\", "
            "\"rows\": %lld, \"window\": %lld, \"got_vs_f64\": %.3e, \"reference_bf16_vs_f64\": %.3e, \"bound\": %.3e, "
            "\"ok\": %s}\n",
            name, backend.c_str(), kernels::band_fast_tanh() ? "approx" : "exact", cudnn_state().c_str(),
            static_cast<long long>(n), static_cast<long long>(w), e_got, e_ref, bound, pass ? "true" : "false");
      });
}

int attention_bench(std::int64_t seq, const std::vector<std::string>& backends, std::int64_t window,
                    const std::vector<std::int64_t>& heads) {
  const torch::Device cuda(torch::kCUDA, 0);
  const std::int64_t hq = heads[0], hkv = heads[1], d = heads[2];
  const auto opts = torch::TensorOptions().dtype(torch::kBFloat16).device(cuda);
  torch::manual_seed(0);
  const torch::Tensor q0 = torch::randn({seq, hq, d}, opts), k0 = torch::randn({seq, hkv, d}, opts),
                      v0 = torch::randn({seq, hkv, d}, opts), g = torch::randn({seq, hq, d}, opts);
  const torch::Tensor cu =
      torch::tensor({0, static_cast<int>(seq)}, torch::TensorOptions().dtype(torch::kInt32).device(cuda));
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const double fwd_flops = 2.0 * static_cast<double>(seq) * static_cast<double>(seq) * static_cast<double>(d * hq);
  for (const std::string& b : backends) {
    std::int64_t ran = -1;
    // tiled: the band kernels where they take the shape (the engine's split: backward only with a
    // window); tiled-band: the band kernels both ways everywhere; tiled-gemm: the GEMM tiles alone.
    if (is_tiled(b)) {
      kernels::set_band_attention(b != "tiled-gemm");
      set_band_backward_everywhere(b == "tiled-band");
      kernels::set_cudnn_softcap(b == "tiled-cudnn");
      kernels::set_cudnn_softcap_windowed(b == "tiled-cudnn");
    }
    auto run = [&](bool backward) {
      torch::Tensor q = q0.detach().requires_grad_(backward), k = k0.detach().requires_grad_(backward),
                    v = v0.detach().requires_grad_(backward);
      torch::Tensor out;
      if (b == "varlen-flash") {
        out = varlen_causal_attention(q, k, v, cu, seq, scale, &ran, window);  // window > 0: flash's local band
      } else if (is_tiled(b)) {  // model/tiled_attention.h with Gemma-2's soft-capping (50)
        out = tiled_causal_attention(q, k, v, cu, scale, window, 50.0);
        ran = static_cast<std::int64_t>(at::SDPBackend::math);
      } else if (b == "window-mask") {  // the explicit-mask path windowed layers took before the band
        const torch::Tensor keep = window_mask(block_causal_mask(cu, seq, cuda), seq, window, cuda);
        out = masked_attention(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                               v.transpose(0, 1).unsqueeze(0), keep, scale, 0.0, AttentionBackend::Auto, &ran)
                  .squeeze(0)
                  .transpose(0, 1);
      } else {
        out = sequence_causal_attention(q, k, v, scale, backend_named(b), &ran);
      }
      if (backward) out.backward(g);
    };
    if (window > 0 && b != "varlen-flash" && b != "window-mask" && !is_tiled(b))
      continue;  // the others ignore the window
    if (window > 0 && b == "varlen-flash" && !window_parity(q0, k0, v0, g, window)) return 1;
    if ((is_tiled(b)) && !tiled_parity(b, q0, k0, v0, g, window)) return 1;
    // With a window the useful work is the band's query-key pairs, w·T - w(w-1)/2, against the
    // causal T²/2 that fwd_flops counts.
    const double w = static_cast<double>(std::min(window, seq));
    const double useful = window > 0 ? (w * static_cast<double>(seq) - w * (w - 1) / 2) /
                                           (static_cast<double>(seq) * static_cast<double>(seq) / 2)
                                     : 1.0;
    for (const bool backward : {false, true}) {
      run(backward);  // warm-up
      at::accelerator::synchronizeDevice(0);
      const auto base = at::accelerator::getDeviceStats(0).allocated_bytes[0].current;
      at::accelerator::resetPeakStats(0);
      const int iters = 5;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) run(backward);
      at::accelerator::synchronizeDevice(0);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      const double peak = gib(at::accelerator::getDeviceStats(0).allocated_bytes[0].peak - base);
      const double flops = (backward ? 3.5 * fwd_flops : fwd_flops) * useful;
      std::printf(
          "{\"attention\": \"%s\", \"ran\": \"%s\", \"heads\": \"%lld/%lld/%lld\", \"seq\": %lld, \"window\": %lld, "
          "\"pass\": \"%s\", \"ms\": %.2f, \"tflops\": %.1f, \"peak_gib_over_inputs\": %.2f}\n",
          b.c_str(),
          b == "varlen-flash"                                      ? "flash (varlen)"
          : b == "tiled-cudnn"                                     ? ("cudnn rectangles, " + cudnn_state()).c_str()
          : b == "tiled" && kernels::band_kernels_take(q0, k0, v0) ? "band kernels"
                                                                   : sdp_backend_name(ran).c_str(),
          static_cast<long long>(hq), static_cast<long long>(hkv), static_cast<long long>(d),
          static_cast<long long>(seq), static_cast<long long>(window), backward ? "forward+backward" : "forward",
          s * 1e3, flops / s / 1e12, peak);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    if (!torch::cuda::is_available()) {
      std::fprintf(stderr, "model_parity_gpu: no CUDA device; this check runs on a GPU machine (ctest label gpu)\n");
      return 77;
    }
    const std::vector<std::string> a(argv + 1, argv + argc);
    const std::string mode = a.empty() ? "all" : a[0];
    std::int64_t seq = 32768, layers = 28, window = 0;
    std::string dir;
    std::vector<std::string> backends{"cudnn"};
    std::vector<std::int64_t> heads{28, 4, 128};  // --heads HQ,HKV,D (attention mode); Qwen2.5-7B's by default
    for (std::size_t i = 1; i < a.size(); ++i) {
      if (a[i] == "--seq" && i + 1 < a.size()) seq = std::stoll(a[++i]);
      else if (a[i] == "--attention" && i + 1 < a.size()) {
        backends.clear();
        std::string v = a[++i];
        for (std::size_t p = 0; p != std::string::npos;) {
          const std::size_t q = v.find(',', p);
          backends.push_back(v.substr(p, q == std::string::npos ? q : q - p));
          p = q == std::string::npos ? q : q + 1;
        }
      } else if (a[i] == "--layers" && i + 1 < a.size()) layers = std::stoll(a[++i]);
      else if (a[i] == "--window" && i + 1 < a.size()) window = std::stoll(a[++i]);
      else if (a[i] == "--heads" && i + 1 < a.size()) {
        heads.clear();
        std::string v = a[++i];
        for (std::size_t p = 0; p != std::string::npos;) {
          const std::size_t q = v.find(',', p);
          heads.push_back(std::stoll(v.substr(p, q == std::string::npos ? q : q - p)));
          p = q == std::string::npos ? q : q + 1;
        }
        if (heads.size() != 3 || heads[1] <= 0 || heads[0] % heads[1] != 0) {
          std::fprintf(stderr, "model_parity_gpu: --heads takes HQ,HKV,D with HQ a multiple of HKV\n");
          return 2;
        }
      } else dir = a[i];
    }
    int rc = 0;
    if (mode == "parity" || mode == "all") rc |= parity(dir);
    if (mode == "bench" || mode == "all") rc |= bench(seq, layers, backends);
    if (mode == "attention") rc |= attention_bench(seq, backends, window, heads);
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_parity_gpu: %s\n", e.what());
    return 1;
  }
}
