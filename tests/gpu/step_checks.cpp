// The engine's step checks that odyssey-bench ran under --check (issue 29: correctness checks
// are tests, not benchmark flags), on a 2-layer model of a bundled shape:
//   - a packed row of three samples (varlen attention) against each sample alone (SDPA): the
//     packed path must not let attention cross samples;
//   - the fused kernels against the reference ops (LoRA on every projection, checkpointed);
//     checkpoint offload, the MLP offload tier and kept attention parked on the host against
//     keeping on the device: bit for bit where the kernels are deterministic (offload moves
//     bytes, not arithmetic), else within twice what three runs of the same step vary by;
//   - on a GPU with Odyssey's kernels, the fused loss's two row kernels (one-read cluster,
//     two-pass) on one chunk of logits: the same loss and gradient, and each one's time.
// One JSON line per check with where and when it ran (the provenance of odyssey-bench's lines).
//
//   step_checks [--device cpu|cuda] [--dtype bfloat16|float32] [--shape S[,S...]] [--vocab-override V]
//
// ctest runs it twice: step_checks_cpu (float32 on the CPU, the Qwen2.5-0.5B shape with a
// 512-token vocabulary: every CI run) and step_checks_gpu (label gpu: bf16 on the GPU, full
// vocabularies; exit 77 where no GPU is visible). Exit codes: 0 pass, 1 a check failed, 2 bad
// arguments, 77 no GPU for --device cuda.
#include <torch/torch.h>
#if __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#define ODYSSEY_HAVE_CUDA_RUNTIME 1
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench.h"
#include "config/model_config.h"
#include "model/decoder.h"
#include "model/weights.h"
#include "planner/memory_planner.h"
#include "provenance.h"
#include "train/batch.h"
#include "train/lora.h"
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
#include "kernels/linear_ce_launch.h"
#endif

using namespace odyssey;

namespace {

// Loss and every gradient of a 2-layer model, for the model-level checks.
struct Grads {
  double loss = 0;
  std::map<std::string, torch::Tensor> g;
};
Grads grads_of(model::CausalLM& lm, double loss) {
  Grads out;
  out.loss = loss;
  for (auto& p : lm->named_parameters(true))
    if (p.value().grad().defined()) out.g[p.key()] = p.value().grad().to(torch::kFloat32).clone();
  return out;
}
Grads loss_and_grads(model::CausalLM& lm, const train::PackedRow& row) {  // on one packed row
  lm->zero_grad();
  const torch::Tensor loss = train::row_loss_sum(lm, row);
  loss.backward();
  return grads_of(lm, loss.item<double>());
}

// Worst relative gradient difference (max |a − b| / max |b| per tensor) and its tensor.
std::pair<double, std::string> worst_grad(const Grads& a, const Grads& b) {
  double worst = 0;
  std::string name;
  for (const auto& [k, gb] : b.g) {
    const auto it = a.g.find(k);
    const double scale = gb.abs().max().item<double>();
    const double e = it == a.g.end() ? INFINITY : scale > 0 ? (it->second - gb).abs().max().item<double>() / scale : 0;
    if (e > worst) worst = e, name = k;
  }
  return {worst, name};
}

// The checks' model: the shape's first two layers, random weights drawn after seeding.
DecoderConfig two_layers(const DecoderConfig& base) {
  DecoderConfig c = base;
  c.hf.num_hidden_layers = 2;
  return c;
}
model::CausalLM random_model(const DecoderConfig& c, const torch::Device& device, torch::Dtype dtype,
                             std::uint64_t seed, model::AttentionBackend attention) {
  model::DecoderOptions o;
  o.device = device;
  o.dtype = dtype;
  o.attention = attention;
  torch::manual_seed(seed);
  model::CausalLM lm(c, o);
  lm->initialize_random();
  return lm;
}

// The packed (varlen) loss and gradients equal those of each sample alone.
bool check_packing(const DecoderConfig& base, const torch::Device& device, torch::Dtype dtype) {
  const DecoderConfig c = two_layers(base);
  model::CausalLM lm = random_model(c, device, dtype, 1, model::AttentionBackend::Auto);
  const std::vector<std::int64_t> lens{300, 17, 700};
  std::vector<torch::Tensor> ids, pos, labels;
  for (auto n : lens) {
    ids.push_back(torch::randint(0, c.hf.vocab_size, {n}, torch::kInt64));
    pos.push_back(torch::arange(n, torch::kInt64));
    torch::Tensor l = ids.back().clone();
    l[0] = -100;
    labels.push_back(l);
  }
  auto row = train::make_packed_row(torch::cat(ids).view({1, -1}), torch::cat(labels).view({1, -1}),
                                    torch::cat(pos).view({1, -1}))
                 .to(device);
  const Grads packed = loss_and_grads(lm, row);
  lm->zero_grad();
  torch::Tensor alone = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  for (std::size_t i = 0; i < lens.size(); ++i) {
    const torch::Tensor logits = lm->forward(ids[i].view({1, -1}).to(device));  // SDPA, is_causal
    const torch::Tensor t = torch::constant_pad_nd(labels[i], {0, 1}, -100).narrow(0, 1, lens[i]).to(device);
    const torch::Tensor l = torch::nn::functional::cross_entropy(
        logits[0].to(torch::kFloat32), t,
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum));
    l.backward();
    alone = alone + l.detach();
  }
  const double lp = packed.loss, la = alone.item<double>();
  const auto [worst, worst_name] = worst_grad(packed, grads_of(lm, la));
  const double rel = std::abs(lp - la) / std::abs(la);
  const bool half = dtype != torch::kFloat32;
  const double tol_loss = half ? 2e-2 : 1e-5, tol_grad = half ? 5e-2 : 1e-4;
  std::printf(
      "{\"check\": \"packed row (3 samples, varlen attention) vs each sample alone (SDPA)\", \"device\": \"%s\", "
      "\"dtype\": \"%s\", \"loss_packed\": %.6f, \"loss_alone\": %.6f, \"loss_rel_err\": %.3g, "
      "\"worst_grad_rel_err\": %.3g, \"worst_grad\": \"%s\", \"attention_backend\": \"%s\", \"pass\": %s, %s}\n",
      device.str().c_str(), half ? "bfloat16" : "float32", lp, la, rel, worst, worst_name.c_str(),
      lm->attention_backend_ran().c_str(), rel <= tol_loss && worst <= tol_grad ? "true" : "false",
      bench::provenance_members(bench::machine_provenance(device)).c_str());
  return rel <= tol_loss && worst <= tol_grad;
}

// The fused kernels against the reference ops, and checkpoint offload against keeping the
// inputs on the GPU, on the same 2-layer model and packed row (LoRA on every projection so
// the adapters' gradients are compared too). Offload moves bytes, not arithmetic: its
// gradients must be bit-identical. Fused vs reference: bf16 rounding differs op by op, so
// the tolerances of check_packing apply.
bool check_fused_and_offload(const DecoderConfig& base, const torch::Device& device, torch::Dtype dtype) {
  const DecoderConfig c = two_layers(base);
  model::CausalLM lm = random_model(c, device, dtype, 2, model::DecoderOptions{}.attention);
  train::LoraSettings ls;
  ls.rank = 8;
  ls.alpha = 16;
  ls.target_modules = train::lora_module_names();
  train::apply_lora(lm, ls);
  {
    torch::NoGradGuard ng;  // non-zero B so adapters carry signal both ways
    for (auto& p : lm->named_parameters(true))
      if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.02);
  }
  const std::int64_t n = 1500;
  const torch::Tensor ids = torch::randint(0, c.hf.vocab_size, {1, n}, torch::kInt64);
  const auto row = train::make_packed_row(ids, ids, torch::arange(n, torch::kInt64).view({1, -1})).to(device);
  lm->set_checkpoint_layers({true, true});
  lm->set_fused_kernels(false);
  const Grads ref = loss_and_grads(lm, row);
  lm->set_fused_kernels(true);
  const Grads fused = loss_and_grads(lm, row);
  // The same step twice more: what the arithmetic itself varies from run to run (0 where every
  // kernel is deterministic; flash's backward accumulates dQ with atomics, and SDPA's backward
  // with an explicit window mask is not deterministic either). One repeat is a thin bound: on
  // Gemma-3-12B's two layers a third run differed from the first by 0.00588 where the repeat had
  // differed by 0.00585. So `noise` is the largest difference among three runs of the step, and a
  // run that only moves bytes (offload, parking) may differ from keeping by twice that.
  const Grads repeat = loss_and_grads(lm, row);
  const Grads repeat2 = loss_and_grads(lm, row);
  const double noise =
      std::max({worst_grad(repeat, fused).first, worst_grad(repeat2, fused).first, worst_grad(repeat2, repeat).first});
  const double bound = 2.0 * noise;
  lm->set_offload_checkpoints(true);
  const std::int64_t before_off = kernels::offloaded_bytes_total();
  const Grads off = loss_and_grads(lm, row);
  const std::int64_t off_bytes = kernels::offloaded_bytes_total() - before_off;
  lm->set_offload_checkpoints(false);
  // Kept attention outputs parked on the host under offload (AttentionStash::park): the same
  // bits as kept on the device, and more bytes moved than the inputs alone.
  lm->set_keep_attention_layers({true, true});
  const Grads kept_att = loss_and_grads(lm, row);
  lm->set_offload_checkpoints(true);
  const std::int64_t before_parked = kernels::offloaded_bytes_total();
  const Grads parked_att = loss_and_grads(lm, row);
  const std::int64_t parked_bytes = kernels::offloaded_bytes_total() - before_parked;
  lm->set_offload_checkpoints(false);
  lm->set_keep_attention_layers({});
  // The MLP offload tier on layers that are not checkpointed: the same bits as keeping gate
  // and up on the device.
  // A family whose MLP has no offload tier (Gemma, Phi-3) is reported as such, not run.
  const std::string mlp_gap = lm->mlp_tier_gap();
  lm->set_checkpoint_layers({false, false});
  const Grads kept_mlp = loss_and_grads(lm, row);
  const std::int64_t before_mlp = kernels::offloaded_bytes_total();
  if (mlp_gap.empty()) lm->set_mlp_offload_layers({true, true}, planner::mlp_offload_lead(2));
  const Grads off_mlp = loss_and_grads(lm, row);
  lm->set_mlp_offload_layers({}, 1);
  const std::int64_t mlp_bytes = kernels::offloaded_bytes_total() - before_mlp;
  const auto [wf, wf_name] = worst_grad(fused, ref);
  const auto [wo, wo_name] = worst_grad(off, fused);
  const double rel = std::abs(fused.loss - ref.loss) / std::abs(ref.loss);
  const bool half = dtype != torch::kFloat32;
  const double tol_loss = half ? 2e-2 : 1e-5, tol_grad = half ? 5e-2 : 1e-4;
  const bool ok_fused = rel <= tol_loss && wf <= tol_grad;
  const bool ok_off = wo <= bound && (noise > 0.0 || off.loss == fused.loss);
  const auto [wm, wm_name] = worst_grad(off_mlp, kept_mlp);
  // Two layers' gate and up, there and back (4 · I elements per token each way).
  const std::int64_t mlp_expected =
      !mlp_gap.empty() || !device.is_cuda()
          ? 0
          : 2 * 2 * 2 * n * c.hf.intermediate_size * static_cast<std::int64_t>(torch::elementSize(dtype));
  const bool ok_mlp = wm <= bound && (noise > 0.0 || off_mlp.loss == kept_mlp.loss) && mlp_bytes == mlp_expected;
  std::printf(
      "{\"check\": \"fused kernels vs reference ops (2 layers, LoRA, checkpointed)\", \"device\": \"%s\", "
      "\"loss_fused\": %.6f, \"loss_reference\": %.6f, \"loss_rel_err\": %.3g, \"worst_grad_rel_err\": %.3g, "
      "\"worst_grad\": \"%s\", \"pass\": %s, %s}\n",
      device.str().c_str(), fused.loss, ref.loss, rel, wf, wf_name.c_str(), ok_fused ? "true" : "false",
      bench::provenance_members(bench::machine_provenance(device)).c_str());
  std::printf(
      "{\"check\": \"checkpoint offload vs inputs kept on the device\", \"device\": \"%s\", "
      "\"offloaded_bytes\": %lld, \"loss_offload\": %.6f, \"loss_kept\": %.6f, \"worst_grad_abs_diff_rel\": %.3g, "
      "\"worst_grad\": \"%s\", \"repeat_grad_abs_diff_rel\": %.3g, \"pass\": %s, %s}\n",
      device.str().c_str(), static_cast<long long>(kernels::offloaded_bytes_total()), off.loss, fused.loss, wo,
      wo_name.c_str(), noise, ok_off ? "true" : "false",
      bench::provenance_members(bench::machine_provenance(device)).c_str());
  std::printf(
      "{\"check\": \"MLP offload (gate and up on the host) vs kept on the device\", \"device\": \"%s\", "
      "\"applies\": %s, \"why_not\": \"%s\", \"host_copy_bytes\": %lld, \"expected_bytes\": %lld, "
      "\"loss_offload\": %.6f, \"loss_kept\": %.6f, \"worst_grad_abs_diff_rel\": %.3g, \"worst_grad\": \"%s\", "
      "\"repeat_grad_abs_diff_rel\": %.3g, \"pass\": %s, %s}\n",
      device.str().c_str(), mlp_gap.empty() ? "true" : "false", mlp_gap.c_str(), static_cast<long long>(mlp_bytes),
      static_cast<long long>(mlp_expected), off_mlp.loss, kept_mlp.loss, wm, wm_name.c_str(), noise,
      ok_mlp ? "true" : "false", bench::provenance_members(bench::machine_provenance(device)).c_str());
  const auto [wk, wk_name] = worst_grad(parked_att, kept_att);
  // Every family keeps on one GPU (planner::attention_keepable: soft-capped layers through the
  // tiles, windows on flash's band), so the check always applies ("applies" stays in the line
  // for readers of earlier lines, where Gemma-2 kept nothing). Kept against recomputed (fused)
  // is reported beside: the same kernels with and without the stash.
  const auto [wr, wr_name] = worst_grad(kept_att, fused);
  const bool ok_parked = wk <= bound && (noise > 0.0 || parked_att.loss == kept_att.loss) &&
                         (!device.is_cuda() || parked_bytes > off_bytes);
  std::printf(
      "{\"check\": \"kept attention parked on the host vs kept on the device\", \"device\": \"%s\", "
      "\"applies\": true, \"host_copy_bytes\": %lld, \"inputs_only_bytes\": %lld, \"loss_parked\": %.6f, "
      "\"loss_kept\": %.6f, \"loss_recomputed\": %.6f, \"worst_grad_abs_diff_rel\": %.3g, \"worst_grad\": \"%s\", "
      "\"kept_vs_recomputed_grad_rel\": %.3g, \"repeat_grad_abs_diff_rel\": %.3g, \"pass\": %s, %s}\n",
      device.str().c_str(), static_cast<long long>(parked_bytes), static_cast<long long>(off_bytes), parked_att.loss,
      kept_att.loss, fused.loss, wk, wk_name.c_str(), wr, noise, ok_parked ? "true" : "false",
      bench::provenance_members(bench::machine_provenance(device)).c_str());
  return ok_fused && ok_off && ok_mlp && ok_parked;
}

#if defined(ODYSSEY_HAVE_CUDA_KERNELS) && defined(ODYSSEY_HAVE_CUDA_RUNTIME)
// The fused loss's row step on one chunk of logits [rows, vocab] in `dtype` (kernels/
// linear_ce.cu): the one-read cluster kernel against the two-pass kernel, which must give the
// same loss (fp32 sums in another order: 1e-5 relative) and gradient (within one unit in the
// last place of the dtype near 1), and the mean time of each over 20 launches.
bool check_loss_rows(const torch::Device& device, torch::Dtype dtype, std::int64_t rows, std::int64_t vocab) {
  const auto o = torch::TensorOptions().device(device);
  torch::manual_seed(3);
  const torch::Tensor logits = (3.0 * torch::randn({rows, vocab}, o)).to(dtype);
  torch::Tensor targets = torch::randint(0, vocab, {rows}, o.dtype(torch::kInt64));
  targets.narrow(0, 0, rows / 8).fill_(-100);
  const int code = dtype == torch::kFloat32    ? kernels::launch::kLinearCeF32
                   : dtype == torch::kBFloat16 ? kernels::launch::kLinearCeBf16
                                               : kernels::launch::kLinearCeF16;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(device.index()).stream();
  struct Run {
    torch::Tensor grad, loss;
    double ms = 0;
  };
  auto run = [&](int variant) {
    Run r;
    r.grad = logits.clone();
    r.loss = torch::empty({rows}, o.dtype(torch::kFloat32));
    auto once = [&](torch::Tensor& g) {
      const char* err =
          kernels::launch::linear_ce_rows(g.data_ptr(), targets.data_ptr<std::int64_t>(), r.loss.data_ptr<float>(),
                                          rows, vocab, -100, code, true, stream, variant);
      if (err != nullptr) throw std::runtime_error(std::string("linear_ce_rows: ") + err);
    };
    once(r.grad);
    torch::Tensor scratch = logits.clone();
    constexpr int kReps = 20;
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    start.record();
    for (int i = 0; i < kReps; ++i) once(scratch);  // in place: later launches see gradients, same work
    stop.record();
    stop.synchronize();
    r.ms = static_cast<double>(start.elapsed_time(stop)) / kReps;
    return r;
  };
  const Run cluster = run(kernels::launch::kLinearCeAuto), two = run(kernels::launch::kLinearCeTwoPass);
  const double loss_rel = ((cluster.loss - two.loss).abs().max() / two.loss.abs().max()).item<double>();
  const torch::Tensor diff = (cluster.grad.to(torch::kFloat32) - two.grad.to(torch::kFloat32)).abs();
  const double grad_diff = diff.max().item<double>();
  const auto differing = diff.gt(0).sum().item<std::int64_t>();
  const double ulp = dtype == torch::kBFloat16 ? 1.0 / 128 : dtype == torch::kHalf ? 1.0 / 1024 : 1e-6;
  const bool ok = loss_rel <= 1e-5 && grad_diff <= ulp;
  std::printf(
      "{\"check\": \"fused loss row kernels: one-read cluster vs two-pass\", \"device\": \"%s\", "
      "\"dtype\": \"%s\", \"rows\": %lld, \"vocab\": %lld, \"cluster_ms\": %.4f, \"two_pass_ms\": %.4f, "
      "\"loss_max_rel_diff\": %.3g, \"grad_max_abs_diff\": %.3g, \"grad_elements_differing\": %lld, "
      "\"pass\": %s, %s}\n",
      device.str().c_str(), c10::toString(dtype), static_cast<long long>(rows), static_cast<long long>(vocab),
      cluster.ms, two.ms, loss_rel, grad_diff, static_cast<long long>(differing), ok ? "true" : "false",
      bench::provenance_members(bench::machine_provenance(device)).c_str());
  return ok;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cuda", dtype_name = "bfloat16";
  std::vector<std::string> shapes{"qwen2.5-0.5b"};
  std::int64_t vocab_override = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "step_checks: " << a << " needs a value\n";
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--device") device_name = v;
    else if (a == "--dtype") dtype_name = v;
    else if (a == "--vocab-override") vocab_override = std::stoll(v);
    else if (a == "--shape") shapes = bench::split(v);
    else {
      std::cerr << "step_checks: unknown argument " << a << "\n";
      return 2;
    }
  }
  if (device_name == "cuda" && !torch::cuda::is_available()) {
    std::cerr << "step_checks: no CUDA device is visible; skipped\n";
    return 77;
  }
  const torch::Device device = device_name == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const torch::Dtype dtype = dtype_name == "float32" ? torch::kFloat32 : torch::kBFloat16;
  int rc = 0;
  for (const auto& shape : shapes) {
    const std::string file = bench::shape_file(shape);
    if (file.empty()) {
      std::cerr << "step_checks: --shape " << shape << ": no such file in resources/model-shapes\n";
      return 2;
    }
    auto dc = parse_decoder_config(bench::read_file(file), file);
    if (!dc.ok()) {
      std::cerr << format_all(dc.diagnostics);
      return 2;
    }
    if (vocab_override > 0) dc.value.hf.vocab_size = vocab_override;
    if (!check_packing(dc.value, device, dtype)) rc = 1;
    if (!check_fused_and_offload(dc.value, device, dtype)) rc = 1;
#if defined(ODYSSEY_HAVE_CUDA_KERNELS) && defined(ODYSSEY_HAVE_CUDA_RUNTIME)
    // One chunk of the planner's size at this shape's vocabulary.
    if (device.is_cuda() && !check_loss_rows(device, dtype, planner::kFusedLossChunkTokens, dc.value.hf.vocab_size))
      rc = 1;
#endif
  }
  return rc;
}
