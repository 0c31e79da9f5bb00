// odyssey-bench: the engine side of the side-by-side benchmark (docs/benchmarks.md). For each
// (shape, mode, seq): a random-initialised model of the shape in bf16 on the GPU, batch 1 of
// random tokens with labels = ids (one padding-free row: varlen flash attention), LoRA
// (all seven projections) or full fine-tuning, activation checkpointing as asked, the
// engine's training step (StepEngine: chunked loss, fused AdamW); W warmup steps, then N
// timed ones. Prints one JSON line per configuration with the keys of tests/bench/hf_bench.py
// ("impl": "odyssey"), so tests/bench/compare.py joins the two.
//
//   odyssey-bench --shape qwen2.5-0.5b,qwen2.5-7b --seq 4096,16384,32768 --mode lora,full
//                 [--steps 5] [--warmup 2] [--lora-r 16] [--lora-alpha 32]
//                 [--checkpointing all|auto|none|N] [--fused on|off] [--offload on|off] [--mlp-tile auto|N]
//                 [--keep-attention auto|all|none] [--mlp-recompute auto|N] [--mlp-offload auto|N]
//                 [--attention cudnn|flash|auto] [--memory-gib G] [--profile FILE] [--quant nf4|fp4]
//                 [--device cuda|cpu] [--dtype bfloat16|float32]
//                 [--layers K] [--vocab-override V] [--out FILE] [--check] [--label NAME]
//                 [--ulysses U] [--dp D] [--a2a-bytes B1,B2,...]   (the last three under torchrun)
//                 [--optimizer adamw|galore|q-galore|zero1|zero2|zero2-offload]
//                 [--galore-rank R] [--galore-gap T]
//                 [--frontier K] [--frontier-at G1,G2,...]
//
// --frontier K sweeps memory budgets instead of running one configuration (docs/benchmarks.md,
// "The speed-memory frontier"): K budgets from 2% above the leanest plan's predicted peak to the
// device's whole memory, plus a budget per --frontier-at G (an anchor's measured allocated peak;
// the budget adds what the plan counts outside the allocator, the CUDA context), each run as
// --memory-gib G --checkpointing auto (the planner choosing for that budget, the allocator capped
// to it). Each line carries "frontier": true, frontier_budget_gib and the label
// "frontier @ G GiB" (--label NAME: "NAME @ G GiB"); tests/bench/compare.py draws the frontier
// (--frontier-plot DIR) and reads a row's figure off it at each HF line's peak.
//
// --optimizer picks the step engine's optimizer (docs/optimizers.md; zero* under torchrun):
// the record carries its state bytes per trainable parameter and the planner's figure.
//
// Under torchrun (RANK / WORLD_SIZE set, e.g. `torchrun --no-python --nproc-per-node 2
// odyssey-bench ...`) every rank takes one GPU and the row is split by sequence parallelism
// over all ranks (Ulysses = gcd(KV heads, world) unless --ulysses U; the rest is ring), as the
// engine does it; with --dp D the ranks form D data-parallel groups of world / D, each on its
// own row of --seq tokens (gradients summed over all ranks, as the engine does); rank 0 prints the record with the global tokens/s, every rank's peak
// memory, the collectives of a step and the share of the step spent in them. Each blocking
// collective also carries transfer_ms: its calls timed on the rank that took least per call,
// i.e. without the time a rank that called first spent waiting for the other (the figure to
// hold against nccl-tests-style back-to-back calls).
//
// --mlp-tile N runs every MLP N tokens at a time (tiled MLP, each tile recomputed in backward);
// auto (the default) tiles when the planner says the job needs it, as the engine does.
// --keep-attention all keeps every checkpointed layer's attention output for backward (its
// recomputation skips the attention forward); auto keeps as many as the planner's budget allows.
// --mlp-recompute N: the first N layers that are not checkpointed keep none of their MLP's
// intermediates (kernels::rms_norm_mlp: gate and up recomputed in backward); auto (the default):
// as many as the planner chooses under --checkpointing auto, none otherwise.
// --mlp-offload N: the first N layers that are not checkpointed keep their MLP's gate and up in
// pinned host memory from forward to backward (the MLP offload tier; MLP recomputation then
// takes the layers after them); auto (the default): as many as the planner chooses under
// --checkpointing auto with --offload on, none otherwise.
//
// --quant nf4|fp4 (LoRA only) gives the shape a 4-bit base (QLoRA, docs/qlora.md): every
// decoder projection is drawn as the random initialization draws it, one at a time, and
// quantized (double quantization), so the 16-bit model never exists.
// --memory-gib G gives the planner G GiB per GPU instead of the device's memory, for the auto
// choices (checkpointing, MLP tiling, kept attention): what fits a budget below the GPU's size.
// The caching allocator is capped to it as gpu_memory_budget_gib caps a run's (G less the CUDA
// context; the record's allocator_cap): a configuration that needs more runs out of memory as
// it would on that card.
// --profile FILE runs one more step under LibTorch's Kineto profiler after the timed ones and
// appends to FILE one JSON line per GPU kernel name (calls, total ms, share of the kernels' time),
// largest first: where a step's device time goes. Its first line also gives the step's idle
// device time (no kernel on any stream between the first kernel and the last) and the longest
// gaps with the kernels around them.
//
// --checkpointing auto asks the memory planner for the fewest layers to recompute on this
// GPU (as the engine's activation_checkpointing: auto does); N recomputes the first N. Every
// record carries the planner's predicted peak for the configuration it ran
// (planned_peak_gib, comparable with peak_gib) and its relative error. --fused off runs the
// reference ops (HF's formulas, the chunked loss recomputed in backward, fp32 adapter
// inputs). --label names the mode in the record ("fast", "lean"; compare.py keeps them apart).
//
// Every line (and every --check line) also says where and when it was measured (provenance.h,
// docs/benchmarks.md "The line format"): commit (stamped at build time, "-dirty" for a tree
// with changes, $ODYSSEY_COMMIT or "unknown" without git), commit_source, time (UTC, when the
// configuration starts), host, gpu, gpu_uuid, and lease (host/boot_id/GPU UUID, or
// $ODYSSEY_LEASE), by which tests/bench/compare.py pairs it with hf_bench.py's lines.
//
// --check first compares, on the device, the loss and gradients of a packed row of three
// samples (varlen attention) with each sample run alone (SDPA): the packed path must not
// let attention cross samples; then a 2-layer LoRA model's loss and gradients with the fused
// kernels against the reference ops, and with checkpoint offload against none (identical);
// on a GPU, the fused loss's two row kernels (one-read cluster, two-pass) on one chunk of
// logits: the same loss and gradient, and each one's time. Exit codes: 0 done, 1 a check
// failed, 2 bad arguments.
#include <ATen/DeviceAccelerator.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>
#if __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#define ODYSSEY_HAVE_CUDA_RUNTIME 1
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <numeric>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/json_dump.h"
#include "config/model_config.h"
#include "dist/mesh.h"
#include "dist/sequence_parallel.h"
#include "model/activation_checkpoint.h"
#include "model/decoder.h"
#include "model/weights.h"
#include "train/memory_policy.h"
#include "engine/runtime_info.h"
#include "planner/flops.h"
#include "planner/memory_planner.h"
#include "train/batch.h"
#include "train/lora.h"
#include "train/step_engine.h"
#include "chat_template_bench.h"
#include "provenance.h"
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
#include "kernels/linear_ce_launch.h"
#endif

namespace fs = std::filesystem;
using namespace odyssey;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

// qwen2.5-7b -> resources/model-shapes/Qwen--Qwen2.5-7B.json (the name after the org, any case).
std::string shape_file(const std::string& shape) {
  if (fs::is_regular_file(shape)) return shape;
  for (const auto& e : fs::directory_iterator(fs::path(ODYSSEY_SOURCE_DIR) / "resources" / "model-shapes")) {
    std::string stem = e.path().stem().string();
    stem = stem.substr(stem.find("--") == std::string::npos ? 0 : stem.find("--") + 2);
    std::string a = stem, b = shape;
    std::transform(a.begin(), a.end(), a.begin(), ::tolower);
    std::transform(b.begin(), b.end(), b.begin(), ::tolower);
    if (a == b) return e.path().string();
  }
  return {};
}

std::string read_file(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double sig(double x, int n = 6) {
  if (x == 0 || !std::isfinite(x)) return x;
  const double m = std::pow(10.0, n - 1 - static_cast<int>(std::floor(std::log10(std::abs(x)))));
  return std::round(x * m) / m;
}

struct Options {
  std::vector<std::string> shapes{"qwen2.5-0.5b"};
  std::vector<std::int64_t> seqs{4096};
  std::vector<std::string> modes{"lora"};
  int steps = 5, warmup = 2;
  std::int64_t lora_r = 16;
  double lora_alpha = 32;
  std::string checkpointing = "all";  // all|none|auto|N
  bool fused = true;
  bool offload = false;
  std::string attention = "cudnn";
  std::string label;
  std::string device = "cuda", dtype = "bfloat16";
  std::int64_t layers = 0, vocab_override = 0;
  std::string out;
  bool check = false;
  int ulysses = 0;  // 0 = gcd(KV heads, world / dp)
  int dp = 1;       // data-parallel groups (under torchrun); each sequence-parallel group takes one row
  std::int64_t mlp_tile = 0;  // --mlp-tile: 0 = auto (the planner's choice), N = N tokens per tile
  std::string keep_attention = "auto";  // --keep-attention auto|all|none
  std::string mlp_recompute = "auto";   // --mlp-recompute auto|N
  std::string mlp_offload = "auto";     // --mlp-offload auto|N
  std::string optimizer = "adamw";  // adamw|galore|q-galore|zero1|zero2|zero2-offload
  std::int64_t galore_rank = 128, galore_gap = 200;
  std::vector<std::int64_t> a2a_bytes;  // --a2a-bytes: the all-to-all alone, back to back
  double memory_gib = 0;  // --memory-gib: the planner's memory per GPU (0 = the device's), the allocator capped to it
  std::string allocator_cap;  // what capping the allocator to memory_gib did (cap_gpu_memory's line)
  std::string profile;    // --profile FILE: per-kernel device time of one extra step
  std::string quant;      // --quant nf4|fp4: a 4-bit base (LoRA)
  int frontier = 0;                  // --frontier K: K budgets from the leanest plan to the device's memory
  std::vector<double> frontier_at;   // --frontier-at G1,G2: allocated peaks to budget for (an anchor's)
};

// The parallel context under torchrun; world 1 otherwise.
struct Parallel {
  dist::DistEnv env;
  c10::intrusive_ptr<c10d::Store> store;
  dist::Mesh mesh = dist::single_process_mesh();
  bench::Provenance provenance;  // this process's machine (rank 0's GPU is the one its lines name)
};

// One step under the Kineto profiler (GPU activity only); appends to `path` one line per kernel
// name with its calls and device time, largest first, under the record's keys. Every rank
// takes the step (the collectives need all of them); `write` says whether this one writes.
void profile_step(const std::string& path, const nlohmann::ordered_json& rec, bool write, const std::function<void()>& step) {
  namespace kp = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  // CPU ops too (with their inputs' shapes): which op launched the small copies and adds.
  const std::set<ActivityType> acts{ActivityType::CPU, ActivityType::CUDA};
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO,
                                                     /*report_input_shapes=*/true);
  kp::prepareProfiler(config, acts);
  kp::enableProfiler(config, acts);
  const auto t0 = std::chrono::steady_clock::now();
  step();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::unique_ptr<kp::ProfilerResult> result = kp::disableProfiler();
  if (!write) return;
  std::map<std::string, std::pair<std::int64_t, double>> by_name;  // calls, ns
  double total = 0;
  struct Span {
    std::uint64_t start, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    auto& [calls, ns] = by_name[e.name()];
    calls += 1;
    ns += static_cast<double>(e.durationNs());
    total += static_cast<double>(e.durationNs());
    spans.push_back({e.startNs(), e.endNs(), e.name()});
  }
  // Idle device time inside the step: the span from the first kernel's start to the last one's
  // end, less the union of all kernels (any stream). The longest gaps name the kernels around
  // them, which tells where the host held the device back (a sync, a slow launch sequence).
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  double idle_ns = 0, span_ns = 0;
  std::vector<std::tuple<double, std::string, std::string>> gaps;  // ns, before, after
  if (!spans.empty()) {
    std::uint64_t reach = spans[0].end;
    std::string last = spans[0].name;
    for (std::size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].start > reach) {
        const double g = static_cast<double>(spans[i].start - reach);
        idle_ns += g;
        gaps.emplace_back(g, last, spans[i].name);
      }
      if (spans[i].end > reach) {
        reach = spans[i].end;
        last = spans[i].name;
      }
    }
    span_ns = static_cast<double>(reach - spans[0].start);
  }
  std::sort(gaps.begin(), gaps.end(), [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
  // Elementwise ops (copies, adds, fills, sums) by the op that called them: the innermost
  // enclosing CPU event of the same thread that is not itself such a helper (an autograd
  // node's backward, a fused op, a module's op), with the first input's shape.
  struct CpuOp {
    std::uint64_t start, end, thread;
    std::string name;
    std::string shape;
  };
  std::vector<CpuOp> cpu;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CPU) continue;
    std::string shape;
    if (e.hasShapes() && !e.shapes().empty()) {
      for (std::int64_t d : e.shapes()[0]) shape += (shape.empty() ? "" : "x") + std::to_string(d);
    }
    cpu.push_back({e.startNs(), e.endNs(), e.startThreadId(), e.name(), shape});
  }
  std::sort(cpu.begin(), cpu.end(), [](const CpuOp& a, const CpuOp& b) { return a.start < b.start; });
  const std::set<std::string> helpers{"aten::copy_",  "aten::to",          "aten::_to_copy", "aten::contiguous",
                                      "aten::clone",  "aten::reshape",     "aten::add",      "aten::add_",
                                      "aten::fill_",  "aten::zero_",       "aten::zeros",    "aten::sum",
                                      "aten::empty",  "aten::empty_like",  "aten::view",     "aten::_unsafe_view",
                                      "aten::copy",   "aten::expand",      "aten::as_strided"};
  const std::set<std::string> counted{"aten::copy_", "aten::add", "aten::add_", "aten::fill_", "aten::sum"};
  std::map<std::string, std::int64_t> callers;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    if (!counted.count(cpu[i].name)) continue;
    std::string parent = "(top level)";
    for (std::size_t j = i; j-- > 0;) {  // the latest-starting enclosing non-helper event
      if (cpu[j].thread != cpu[i].thread || cpu[j].end < cpu[i].end) continue;
      if (helpers.count(cpu[j].name)) continue;
      parent = cpu[j].name;
      break;
    }
    callers[cpu[i].name + " [" + cpu[i].shape + "] in " + parent.substr(0, 100)] += 1;
  }
  std::vector<std::pair<std::string, std::int64_t>> by_caller(callers.begin(), callers.end());
  std::sort(by_caller.begin(), by_caller.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::pair<std::string, std::pair<std::int64_t, double>>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  std::ofstream f(path, std::ios::app);
  nlohmann::ordered_json head;
  for (const char* k : {"label", "shape", "mode", "seq", "commit", "time", "lease"})
    if (rec.contains(k)) head[k] = rec[k];
  nlohmann::ordered_json sum = head;
  sum["profile"] = "step";
  sum["wall_ms"] = sig(wall * 1e3, 5);
  sum["device_ms"] = sig(total * 1e-6, 5);  // kernels and copies on every stream, summed
  sum["kernels"] = static_cast<std::int64_t>(rows.size());
  sum["span_ms"] = sig(span_ns * 1e-6, 5);  // first kernel's start to last one's end
  sum["idle_ms"] = sig(idle_ns * 1e-6, 4);  // no kernel running on any stream, inside the span
  sum["gaps"] = static_cast<std::int64_t>(gaps.size());
  nlohmann::ordered_json longest = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < gaps.size() && i < 12; ++i)
    longest.push_back({{"ms", sig(std::get<0>(gaps[i]) * 1e-6, 3)},
                       {"after", std::get<1>(gaps[i]).substr(0, 90)},
                       {"before", std::get<2>(gaps[i]).substr(0, 90)}});
  sum["longest_gaps"] = longest;
  nlohmann::ordered_json ops = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < by_caller.size() && i < 30; ++i)
    ops.push_back({{"op", by_caller[i].first}, {"calls", by_caller[i].second}});
  sum["elementwise_callers"] = ops;
  f << dump_json(sum) << "\n";
  for (const auto& [name, v] : rows) {
    nlohmann::ordered_json j = head;
    j["kernel"] = name.substr(0, 160);
    j["calls"] = v.first;
    j["ms"] = sig(v.second * 1e-6, 4);
    j["share"] = sig(total > 0 ? v.second / total : 0, 3);
    f << dump_json(j) << "\n";
  }
}

void sync(const torch::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

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

// The packed (varlen) loss and gradients equal those of each sample alone.
bool check_packing(const DecoderConfig& base, const torch::Device& device, torch::Dtype dtype) {
  DecoderConfig c = base;
  c.hf.num_hidden_layers = 2;
  model::DecoderOptions o;
  o.device = device;
  o.dtype = dtype;
  o.attention = model::AttentionBackend::Auto;
  torch::manual_seed(1);
  model::CausalLM lm(c, o);
  lm->initialize_random();
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
  std::printf("{\"check\": \"packed row (3 samples, varlen attention) vs each sample alone (SDPA)\", \"device\": \"%s\", "
              "\"dtype\": \"%s\", \"loss_packed\": %.6f, \"loss_alone\": %.6f, \"loss_rel_err\": %.3g, "
              "\"worst_grad_rel_err\": %.3g, \"worst_grad\": \"%s\", \"attention_backend\": \"%s\", \"pass\": %s, %s}\n",
              device.str().c_str(), half ? "bfloat16" : "float32", lp, la, rel, worst, worst_name.c_str(),
              lm->attention_backend_ran().c_str(), rel <= tol_loss && worst <= tol_grad ? "true" : "false",
              bench::provenance_members(bench::machine_provenance(device)).c_str());
  return rel <= tol_loss && worst <= tol_grad;
}

model::AttentionBackend attention_of(const std::string& a) {
  if (a == "flash") return model::AttentionBackend::Flash;
  if (a == "auto") return model::AttentionBackend::Auto;
  return model::AttentionBackend::CuDNN;
}

// The run's job as a TrainConfig, for the memory planner.
TrainConfig bench_config(const Options& o, const std::string& mode, std::int64_t seq, int world) {
  TrainConfig c;
  c.tuner_type = mode;
  c.lora_rank = o.lora_r;
  c.lora_alpha = o.lora_alpha;
  c.lora_dropout = 0.0;
  c.target_modules = {"all-linear"};
  c.max_length = seq;
  c.per_device_train_batch_size = 1;
  c.torch_dtype = o.dtype;
  c.device = o.device;
  c.fused_kernels = o.fused;
  c.attn_impl = o.attention == "flash" ? "flash_attn" : o.attention == "auto" ? "sdpa" : "cudnn";
  c.activation_checkpointing = o.checkpointing == "auto" || o.checkpointing == "all" || o.checkpointing == "none"
                                   ? o.checkpointing
                                   : "auto";
  c.padding_free = true;
  c.offload_activations = o.offload;
  c.mlp_tile_tokens = o.mlp_tile;
  c.keep_attention = o.keep_attention;
  c.sequence_parallel_size = world / std::max(1, o.dp);
  c.nproc_per_node = world;
  c.ulysses_size = o.ulysses;
  c.use_galore = o.optimizer == "galore" || o.optimizer == "q-galore";
  c.galore_quantization = o.optimizer == "q-galore";
  c.galore_rank = o.galore_rank;
  if (!o.quant.empty()) {
    c.quant_bits = 4;
    c.bnb_4bit_quant_type = o.quant;
  }
  c.galore_update_proj_gap = o.galore_gap;
  c.zero_stage = o.optimizer == "zero1" ? 1 : o.optimizer.starts_with("zero2") ? 2 : 0;
  c.offload_optimizer = o.optimizer == "zero2-offload";
  return c;
}

// The fused kernels against the reference ops, and checkpoint offload against keeping the
// inputs on the GPU, on the same 2-layer model and packed row (LoRA on every projection so
// the adapters' gradients are compared too). Offload moves bytes, not arithmetic: its
// gradients must be bit-identical. Fused vs reference: bf16 rounding differs op by op, so
// the tolerances of check_packing apply.
bool check_fused_and_offload(const DecoderConfig& base, const torch::Device& device, torch::Dtype dtype) {
  DecoderConfig c = base;
  c.hf.num_hidden_layers = 2;
  model::DecoderOptions o;
  o.device = device;
  o.dtype = dtype;
  torch::manual_seed(2);
  model::CausalLM lm(c, o);
  lm->initialize_random();
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
  // The same step again: what the arithmetic itself varies from run to run (0 where every kernel
  // is deterministic; SDPA's backward with an explicit window mask is not). Offload moves bytes,
  // so its gradients may differ from keeping by no more than this.
  const Grads repeat = loss_and_grads(lm, row);
  const double noise = worst_grad(repeat, fused).first;
  lm->set_offload_checkpoints(true);
  const std::int64_t before_off = model::offloaded_bytes_total();
  const Grads off = loss_and_grads(lm, row);
  const std::int64_t off_bytes = model::offloaded_bytes_total() - before_off;
  lm->set_offload_checkpoints(false);
  // Kept attention outputs parked on the host under offload (AttentionStash::park): the same
  // bits as kept on the device, and more bytes moved than the inputs alone.
  lm->set_keep_attention_layers({true, true});
  const Grads kept_att = loss_and_grads(lm, row);
  lm->set_offload_checkpoints(true);
  const std::int64_t before_parked = model::offloaded_bytes_total();
  const Grads parked_att = loss_and_grads(lm, row);
  const std::int64_t parked_bytes = model::offloaded_bytes_total() - before_parked;
  lm->set_offload_checkpoints(false);
  lm->set_keep_attention_layers({});
  // The MLP offload tier on layers that are not checkpointed: the same bits as keeping gate
  // and up on the device.
  // A family whose MLP has no offload tier (Gemma, Phi-3) is reported as such, not run.
  const std::string mlp_gap = lm->mlp_tier_gap();
  lm->set_checkpoint_layers({false, false});
  const Grads kept_mlp = loss_and_grads(lm, row);
  const std::int64_t before_mlp = model::offloaded_bytes_total();
  if (mlp_gap.empty()) lm->set_mlp_offload_layers({true, true}, planner::mlp_offload_lead(2));
  const Grads off_mlp = loss_and_grads(lm, row);
  lm->set_mlp_offload_layers({}, 1);
  const std::int64_t mlp_bytes = model::offloaded_bytes_total() - before_mlp;
  const auto [wf, wf_name] = worst_grad(fused, ref);
  const auto [wo, wo_name] = worst_grad(off, fused);
  const double rel = std::abs(fused.loss - ref.loss) / std::abs(ref.loss);
  const bool half = dtype != torch::kFloat32;
  const double tol_loss = half ? 2e-2 : 1e-5, tol_grad = half ? 5e-2 : 1e-4;
  const bool ok_fused = rel <= tol_loss && wf <= tol_grad;
  const bool ok_off = wo <= noise && (noise > 0.0 || off.loss == fused.loss);
  const auto [wm, wm_name] = worst_grad(off_mlp, kept_mlp);
  // Two layers' gate and up, there and back (4 · I elements per token each way).
  const std::int64_t mlp_expected = !mlp_gap.empty() || !device.is_cuda()
                                        ? 0
                                        : 2 * 2 * 2 * n * c.hf.intermediate_size *
                                              static_cast<std::int64_t>(torch::elementSize(dtype));
  const bool ok_mlp = wm <= noise && (noise > 0.0 || off_mlp.loss == kept_mlp.loss) && mlp_bytes == mlp_expected;
  std::printf("{\"check\": \"fused kernels vs reference ops (2 layers, LoRA, checkpointed)\", \"device\": \"%s\", "
              "\"loss_fused\": %.6f, \"loss_reference\": %.6f, \"loss_rel_err\": %.3g, \"worst_grad_rel_err\": %.3g, "
              "\"worst_grad\": \"%s\", \"pass\": %s, %s}\n",
              device.str().c_str(), fused.loss, ref.loss, rel, wf, wf_name.c_str(), ok_fused ? "true" : "false",
              bench::provenance_members(bench::machine_provenance(device)).c_str());
  std::printf("{\"check\": \"checkpoint offload vs inputs kept on the device\", \"device\": \"%s\", "
              "\"offloaded_bytes\": %lld, \"loss_offload\": %.6f, \"loss_kept\": %.6f, \"worst_grad_abs_diff_rel\": %.3g, "
              "\"worst_grad\": \"%s\", \"repeat_grad_abs_diff_rel\": %.3g, \"pass\": %s, %s}\n",
              device.str().c_str(), static_cast<long long>(model::offloaded_bytes_total()), off.loss, fused.loss, wo,
              wo_name.c_str(), noise, ok_off ? "true" : "false",
              bench::provenance_members(bench::machine_provenance(device)).c_str());
  std::printf("{\"check\": \"MLP offload (gate and up on the host) vs kept on the device\", \"device\": \"%s\", "
              "\"applies\": %s, \"why_not\": \"%s\", \"host_copy_bytes\": %lld, \"expected_bytes\": %lld, "
              "\"loss_offload\": %.6f, \"loss_kept\": %.6f, \"worst_grad_abs_diff_rel\": %.3g, \"worst_grad\": \"%s\", "
              "\"repeat_grad_abs_diff_rel\": %.3g, \"pass\": %s, %s}\n",
              device.str().c_str(), mlp_gap.empty() ? "true" : "false", mlp_gap.c_str(),
              static_cast<long long>(mlp_bytes), static_cast<long long>(mlp_expected), off_mlp.loss, kept_mlp.loss, wm,
              wm_name.c_str(), noise, ok_mlp ? "true" : "false",
              bench::provenance_members(bench::machine_provenance(device)).c_str());
  const auto [wk, wk_name] = worst_grad(parked_att, kept_att);
  const bool ok_parked = wk <= noise && (noise > 0.0 || parked_att.loss == kept_att.loss) &&
                         (!device.is_cuda() || parked_bytes > off_bytes);
  std::printf("{\"check\": \"kept attention parked on the host vs kept on the device\", \"device\": \"%s\", "
              "\"host_copy_bytes\": %lld, \"inputs_only_bytes\": %lld, \"loss_parked\": %.6f, \"loss_kept\": %.6f, "
              "\"worst_grad_abs_diff_rel\": %.3g, \"worst_grad\": \"%s\", \"repeat_grad_abs_diff_rel\": %.3g, "
              "\"pass\": %s, %s}\n",
              device.str().c_str(), static_cast<long long>(parked_bytes), static_cast<long long>(off_bytes),
              parked_att.loss, kept_att.loss, wk, wk_name.c_str(), noise, ok_parked ? "true" : "false",
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
  const int code = dtype == torch::kFloat32 ? kernels::launch::kLinearCeF32
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
      const char* err = kernels::launch::linear_ce_rows(g.data_ptr(), targets.data_ptr<std::int64_t>(),
                                                        r.loss.data_ptr<float>(), rows, vocab, -100, code, true,
                                                        stream, variant);
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
  std::printf("{\"check\": \"fused loss row kernels: one-read cluster vs two-pass\", \"device\": \"%s\", "
              "\"dtype\": \"%s\", \"rows\": %lld, \"vocab\": %lld, \"cluster_ms\": %.4f, \"two_pass_ms\": %.4f, "
              "\"loss_max_rel_diff\": %.3g, \"grad_max_abs_diff\": %.3g, \"grad_elements_differing\": %lld, "
              "\"pass\": %s, %s}\n",
              device.str().c_str(), c10::toString(dtype), static_cast<long long>(rows), static_cast<long long>(vocab),
              cluster.ms, two.ms, loss_rel, grad_diff, static_cast<long long>(differing), ok ? "true" : "false",
              bench::provenance_members(bench::machine_provenance(device)).c_str());
  return ok;
}
#endif

// The budgets (GiB per GPU) of --frontier K: K - 1 evenly spaced from the leanest plan's
// predicted peak (2% above it, rounded up to 0.1 GiB) towards the peak of the plan for the
// whole device, then the device's whole memory (unlimited), and one budget per --frontier-at
// peak (that allocated peak plus what the plan counts outside the allocator);
// ascending, budgets within 0.05 GiB of a smaller one dropped. Empty when the planner refuses
// the job.
std::vector<double> frontier_budgets(const Options& o, const HfModelConfig& hf, const std::string& mode,
                                     std::int64_t seq, int world, double device_gib) {
  TrainConfig tc = bench_config(o, mode, seq, world);
  tc.activation_checkpointing = "auto";
  PlannerOptions tight, whole;
  tight.gpu_memory_bytes = planner::kGiB;  // nothing fits: the plan is the leanest choice
  whole.gpu_memory_bytes = static_cast<std::int64_t>(device_gib * double(planner::kGiB));
  const MemoryPlan lean = plan_memory(tc, hf, tight), fast = plan_memory(tc, hf, whole);
  if (!lean.refused.empty() || !fast.refused.empty()) return {};
  const double lo = std::ceil(static_cast<double>(lean.peak_bytes) * 1.02 / double(planner::kGiB) * 10) / 10;
  const double hi = std::max(lo, static_cast<double>(fast.peak_bytes) / double(planner::kGiB));
  std::vector<double> b;
  const int k = std::max(1, o.frontier);
  for (int i = 0; i + 1 < k; ++i) b.push_back(std::round((lo + (hi - lo) * i / (k - 1)) * 10) / 10);
  b.push_back(device_gib);
  // --frontier-at names an allocated peak (an anchor's torch.cuda.max_memory_allocated); the
  // budget is a card's memory, which also holds what the plan counts outside the allocator
  // (the CUDA context, NCCL, fragmentation): that much more.
  const double outside = static_cast<double>(fast.peak_bytes - fast.allocated_bytes()) / double(planner::kGiB);
  for (const double g : o.frontier_at) b.push_back(std::floor((g + outside) * 10) / 10);
  std::sort(b.begin(), b.end());
  std::vector<double> kept;
  for (double g : b)
    if (g > 0 && (kept.empty() || g - kept.back() >= 0.05)) kept.push_back(g);
  return kept;
}

nlohmann::ordered_json run_one(const Options& o, const std::string& shape, const HfModelConfig& hf,
                               const DecoderConfig& dc, const std::string& mode, std::int64_t seq,
                               const torch::Device& device, torch::Dtype dtype, Parallel& par) {
  nlohmann::ordered_json rec;
  rec["impl"] = "odyssey";
  rec["shape"] = shape;
  rec["mode"] = mode;
  rec["seq"] = seq;
  bench::add_provenance(rec, par.provenance);  // time: when this configuration starts
  rec["layers"] = dc.hf.num_hidden_layers;
  rec["vocab"] = dc.hf.vocab_size;
  rec["batch"] = 1;
  rec["dtype"] = o.dtype;
  if (!o.label.empty()) rec["label"] = o.label;
  rec["fused"] = o.fused;
  rec["offload_activations"] = o.offload;
  // The engine parks kept attention outputs on the host under offload (how the planner tests
  // re-plan this line; lines without the key kept them on the GPU).
  rec["kept_attention_on_host"] = o.offload;
  rec["attention"] = o.attention;
  rec["optimizer"] = "AdamW (fused)";
  rec["steps"] = o.steps;
  rec["warmup"] = o.warmup;
  rec["torch"] = TORCH_VERSION;
#ifdef ODYSSEY_HAVE_CUDA_RUNTIME
  if (device.is_cuda()) rec["device_name"] = at::cuda::getDeviceProperties(device.index())->name;
#endif
  if (mode == "lora") {
    rec["lora_r"] = o.lora_r;
    rec["lora_alpha"] = o.lora_alpha;
    rec["lora_targets"] = "all-linear (7)";
  }
  try {
    model::DecoderOptions mo;
    mo.device = device;
    mo.dtype = dtype;
    mo.attention = attention_of(o.attention);
    mo.fused_kernels = o.fused;
    if (!o.quant.empty()) {
      if (mode != "lora") throw std::invalid_argument("--quant needs --mode lora (a 4-bit base is frozen)");
      mo.quant.bits = 4;
      mo.quant.type = o.quant;
      mo.quant.double_quant = true;
      rec["quant"] = o.quant + " (double quantization)";
    }
    torch::manual_seed(0);
    model::CausalLM lm(dc, mo);
    lm->initialize_random();
    std::int64_t total = 0;
    for (const auto& p : lm->parameters(true)) total += p.numel();
    if (!o.quant.empty()) {
      torch::NoGradGuard ng;
      for (const auto& [name, l] : model::quantized_linears(lm)) {
        const torch::Tensor w = torch::empty({l->out_features, l->in_features}, torch::TensorOptions().dtype(dtype).device(device))
                                    .normal_(0.0, dc.initializer_range);
        l->quant = kernels::quantize_4bit(w, *kernels::parse_quant4_type(o.quant), 64, true);
        total += l->quant->numel();
      }
    }
    if (mode == "lora") {
      train::LoraSettings ls;
      ls.rank = o.lora_r;
      ls.alpha = o.lora_alpha;
      ls.target_modules = train::lora_module_names();
      train::apply_lora(lm, ls);
    }
    // The planner's view of this job: which layers auto recomputes, and the predicted peak
    // for the layers actually recomputed.
    TrainConfig tc = bench_config(o, mode, seq, par.mesh.world);
    PlannerOptions po;
    if (device.is_cuda()) po.gpu_memory_bytes = static_cast<std::int64_t>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
    if (o.memory_gib > 0) {
      po.gpu_memory_bytes = static_cast<std::int64_t>(o.memory_gib * double(1 << 30));
      rec["memory_budget_gib"] = o.memory_gib;
      if (!o.allocator_cap.empty()) rec["allocator_cap"] = o.allocator_cap;
    }
    // The trainer's memory policy (train/memory_policy.h) for this job, with the counts the
    // flags fix: --checkpointing N, --mlp-offload N, --mlp-recompute N.
    train::LayerCounts fixed;
    if (o.checkpointing == "all") fixed.checkpoint_first = dc.hf.num_hidden_layers;
    else if (o.checkpointing == "none") fixed.checkpoint_first = 0;
    else if (o.checkpointing != "auto") fixed.checkpoint_first = std::stoll(o.checkpointing);
    if (o.mlp_offload != "auto") fixed.mlp_offload_first = std::stoll(o.mlp_offload);
    if (o.mlp_recompute != "auto") fixed.mlp_recompute_first = std::stoll(o.mlp_recompute);
    const train::MemoryPolicy policy = train::memory_policy(tc, hf, po, fixed);
    train::apply_memory_policy(lm, policy);
    rec["mlp_tile_tokens"] = policy.mlp_tile;
    rec["attention_kept_layers"] = policy.count(policy.keep_attention);
    rec["mlp_recomputed_layers"] = policy.count(policy.mlp_recompute);
    rec["mlp_offloaded_layers"] = policy.count(policy.mlp_offload);
    rec["checkpointing"] = o.checkpointing;
    rec["checkpointed_layers"] = policy.count(policy.checkpoint);
    // A count the planner would not choose: no prediction.
    if (policy.plan_matches())
      rec["planned_peak_gib"] = sig(static_cast<double>(policy.plan->allocated_bytes()) / double(1 << 30), 4);
    train::StepOptions so;
    so.adamw.lr = 1e-5;
    so.schedule.type = "constant";
    so.schedule.base_lr = 1e-5;
    so.schedule.total_steps = o.warmup + o.steps;
    so.max_grad_norm = 1.0;
    train::set_memory_optimizer(so, tc);
    dist::Mesh& mesh = par.mesh;
    train::StepEngine engine(lm, so, mesh.distributed() ? mesh.world_group.get() : nullptr);
    rec["trainable_params"] = engine.trainable_params();
    rec["optimizer"] = engine.optimizer().name();
    if (tc.use_galore) rec["galore_rank"] = tc.galore_rank;
    rec["total_params"] = total;
    // One row per data-parallel group (the same draws on every rank; a group takes its own).
    const torch::Tensor ids =
        torch::randint(0, dc.hf.vocab_size, {mesh.dp, seq}, torch::kInt64).narrow(0, mesh.dp_rank, 1);
    train::PackedRow whole = train::make_packed_row(ids, ids, torch::arange(seq, torch::kInt64).view({1, -1})).to(device);
    if (mesh.sp > 1) whole = dist::shard_row(whole, mesh.ulysses_group.get(), mesh.ring_group.get(), 0);
    if (mesh.distributed()) {
      rec["world"] = mesh.world;
      rec["dp"] = mesh.dp;
      rec["ulysses"] = mesh.ulysses;
      rec["ring"] = mesh.ring;
      rec["transport"] = device.is_cuda() ? "nccl" : "store";
    }
    const std::vector<train::PackedRow> rows{whole};
    nlohmann::ordered_json warm_ms = nlohmann::ordered_json::array();
    for (int i = 0; i < o.warmup; ++i) {
      const auto tw = std::chrono::steady_clock::now();
      engine.step(rows);
      sync(device);
      warm_ms.push_back(sig(std::chrono::duration<double>(std::chrono::steady_clock::now() - tw).count() * 1e3, 5));
    }
    rec["warmup_step_ms"] = warm_ms;  // the first includes GaLore's SVDs
    sync(device);
    if (device.is_cuda())  // the warmup's peak: with GaLore, a step that refreshes the projections
      rec["warmup_peak_gib"] = sig(static_cast<double>(at::accelerator::getDeviceStats(device.index()).allocated_bytes[0].peak) /
                                       double(1 << 30), 4);
    if (device.is_cuda()) at::accelerator::resetPeakStats(device.index());
    std::vector<double> times;
    double loss = 0;
    std::vector<run::CollectiveStat> coll;
    std::vector<double> coll_transfer;  // per stat of coll: its blocking calls' time on the rank that took least
    double comm_s = 0;
    nlohmann::ordered_json losses = nlohmann::ordered_json::array();
    const std::int64_t offloaded_before = model::offloaded_bytes_total();
    for (int i = 0; i < o.steps; ++i) {
      sync(device);
      if (mesh.distributed()) mesh.world_group->barrier();
      mesh.take_stats(nullptr);  // the barrier is not the step's
      const auto t0 = std::chrono::steady_clock::now();
      loss = engine.step(rows).loss;
      losses.push_back(sig(loss, 7));
      sync(device);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      double c = 0;
      coll = mesh.take_stats(&c, mesh.distributed() ? &coll_transfer : nullptr);
      comm_s += c;
    }
    // Bytes a timed step moved to and from pinned host memory (both directions).
    rec["host_copies_gib_per_step"] = sig(static_cast<double>(model::offloaded_bytes_total() - offloaded_before) /
                                              std::max(1, o.steps) / double(1 << 30), 4);
    double mean = 0;
    for (double t : times) mean += t / static_cast<double>(times.size());
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    planner::FlopsOptions fo;
    fo.lora = mode == "lora";
    fo.lora_rank = o.lora_r;
    fo.checkpointed_layers = policy.count(policy.checkpoint);
    fo.lm_head_recomputed = !o.fused && seq * dc.hf.vocab_size > (std::int64_t{1} << 26);  // FLCE: never
    const planner::StepFlops f = planner::training_step_flops(hf, seq, fo);
    rec["attention_backend_ran"] = lm->attention_backend_ran();
    rec["alloc_conf"] = std::getenv("PYTORCH_CUDA_ALLOC_CONF") ? std::getenv("PYTORCH_CUDA_ALLOC_CONF") : "";
    if (mesh.distributed()) {
      // The last timed step's collectives, and the mean share of a step spent waiting on them.
      nlohmann::ordered_json cj = nlohmann::ordered_json::array();
      for (std::size_t i = 0; i < coll.size(); ++i) {
        const auto& c = coll[i];
        nlohmann::ordered_json j{{"op", c.op}, {"group", c.group}, {"calls", c.calls}, {"bytes", c.bytes},
                                 {"time_ms", sig(c.time_s * 1e3, 4)}, {"bus_gb_per_s", sig(c.bus_bandwidth_gb_per_s, 4)},
                                 {"bytes_per_call", c.calls ? c.bytes / c.calls : 0}};
        // The same calls timed on the rank that took least per call: the transfer without the
        // wait for the later rank (Mesh::take_stats); bus bandwidth scaled from time_ms's.
        const double tr = i < coll_transfer.size() ? coll_transfer[i] : 0;
        if (tr > 0) {
          j["transfer_ms"] = sig(tr * 1e3, 4);
          j["transfer_bus_gb_per_s"] = sig(c.bus_bandwidth_gb_per_s * c.time_s / tr, 4);
        }
        cj.push_back(j);
      }
      rec["collectives"] = cj;
      rec["comm_share"] = sig(comm_s / std::accumulate(times.begin(), times.end(), 0.0), 4);
      rec["tokens_per_s_per_gpu"] = sig(static_cast<double>(seq * mesh.dp) / mean / mesh.world);
    }
    rec["tokens_per_s"] = sig(static_cast<double>(seq * mesh.dp) / mean);  // every data-parallel group's row
    rec["step_ms"] = sig(mean * 1e3, 6);
    rec["step_ms_min"] = sig(sorted.front() * 1e3, 6);
    rec["step_ms_median"] = sig(sorted[sorted.size() / 2] * 1e3, 6);
    rec["loss"] = sig(loss, 5);
    rec["losses"] = losses;
    rec["model_tflops_per_step"] = sig(f.model * mesh.dp / 1e12);  // every data-parallel group's row
    rec["hardware_tflops_per_step"] = sig(f.hardware * mesh.dp / 1e12);
    rec["model_tflops_per_s"] = sig(f.model * mesh.dp / mean / 1e12);
    // Per GPU: the rows' FLOPs (one per data-parallel group) are shared by the world's GPUs.
    rec["mfu"] = sig(planner::model_flops_utilization(f.model * mesh.dp / mesh.world, mean), 4);
    rec["hfu"] = sig(planner::model_flops_utilization(f.hardware * mesh.dp / mesh.world, mean), 4);
    rec["peak_tflops"] = planner::kH200PeakBf16Flops / 1e12;
    {
      // Optimizer state this rank holds, per trainable parameter (ZeRO: of the whole model).
      const auto& opt = engine.optimizer();
      const double per = static_cast<double>(std::max<std::int64_t>(1, engine.trainable_params()));
      rec["optimizer_state_gib"] = sig(static_cast<double>(opt.state_bytes()) / double(1 << 30), 4);
      rec["optimizer_host_gib"] = sig(static_cast<double>(opt.host_state_bytes()) / double(1 << 30), 4);
      rec["optimizer_bytes_per_param"] = sig(static_cast<double>(opt.state_bytes()) / per, 4);
      std::int64_t theory = 0;
      for (const auto& it : policy.plan ? policy.plan->items : std::vector<MemoryItem>{})
        if (it.group == "optimizer" && it.at_peak) theory += it.bytes;
      rec["planned_optimizer_gib"] = sig(static_cast<double>(theory) / double(1 << 30), 4);
    }
    if (device.is_cuda()) {
      const auto s = at::accelerator::getDeviceStats(device.index());
      rec["peak_gib"] = sig(static_cast<double>(s.allocated_bytes[0].peak) / double(1 << 30), 4);
      rec["reserved_gib"] = sig(static_cast<double>(s.reserved_bytes[0].peak) / double(1 << 30), 4);
      if (rec.contains("planned_peak_gib")) {
        const double planned = rec["planned_peak_gib"].get<double>(), measured = rec["peak_gib"].get<double>();
        rec["planner_error"] = sig((planned - measured) / measured, 3);
      }
      if (mesh.distributed()) {
        torch::Tensor peaks = torch::tensor({static_cast<double>(s.allocated_bytes[0].peak)}, torch::kFloat64).to(device);
        peaks = mesh.world_group->all_gather(peaks).cpu();
        nlohmann::ordered_json pj = nlohmann::ordered_json::array();
        for (std::int64_t r = 0; r < peaks.size(0); ++r) pj.push_back(sig(peaks[r].item<double>() / double(1 << 30), 4));
        rec["peak_gib_per_rank"] = pj;
      }
    }
    if (!o.profile.empty()) profile_step(o.profile, rec, mesh.rank == 0, [&] {
      engine.step(rows);
      sync(device);
    });
  } catch (const train::MemoryPolicyRefused& e) {
    rec["error"] = e.what();
  } catch (const c10::OutOfMemoryError& e) {
    rec["oom"] = true;
    std::string m = e.what_without_backtrace();
    rec["error"] = m.substr(0, std::min<std::size_t>(m.find('\n'), 300));
    if (device.is_cuda())
      rec["peak_gib_at_oom"] =
          sig(static_cast<double>(at::accelerator::getDeviceStats(device.index()).allocated_bytes[0].peak) / double(1 << 30), 4);
  }
  if (device.is_cuda()) at::accelerator::emptyCache();
  return rec;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--chat-template") {
    try {
      return bench::chat_template_bench(argc, argv);
    } catch (const std::exception& e) {
      std::cerr << "odyssey-bench --chat-template: " << e.what() << '\n';
      return 2;
    }
  }
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "odyssey-bench: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--shape") o.shapes = split(next());
      else if (a == "--seq") {
        o.seqs.clear();
        for (const auto& s : split(next())) o.seqs.push_back(std::stoll(s));
      } else if (a == "--mode") o.modes = split(next());
      else if (a == "--steps") o.steps = std::stoi(next());
      else if (a == "--warmup") o.warmup = std::stoi(next());
      else if (a == "--lora-r") o.lora_r = std::stoll(next());
      else if (a == "--lora-alpha") o.lora_alpha = std::stod(next());
      else if (a == "--checkpointing") o.checkpointing = next();
      else if (a == "--fused") o.fused = next() != "off";
      else if (a == "--offload") o.offload = next() != "off";
      else if (a == "--attention") o.attention = next();
      else if (a == "--label") o.label = next();
      else if (a == "--device") o.device = next();
      else if (a == "--dtype") o.dtype = next();
      else if (a == "--layers") o.layers = std::stoll(next());
      else if (a == "--vocab-override") o.vocab_override = std::stoll(next());
      else if (a == "--out") o.out = next();
      else if (a == "--check") o.check = true;
      else if (a == "--ulysses") o.ulysses = std::stoi(next());
      else if (a == "--dp") o.dp = std::stoi(next());
      else if (a == "--keep-attention") o.keep_attention = next();
      else if (a == "--mlp-recompute") {
        o.mlp_recompute = next();
        if (o.mlp_recompute != "auto") (void)std::stoll(o.mlp_recompute);  // "not a number" below
      }
      else if (a == "--mlp-offload") {
        o.mlp_offload = next();
        if (o.mlp_offload != "auto") (void)std::stoll(o.mlp_offload);
      }
      else if (a == "--mlp-tile") {
        const std::string v = next();
        o.mlp_tile = v == "auto" ? 0 : std::stoll(v);
      }
      else if (a == "--optimizer") o.optimizer = next();
      else if (a == "--galore-rank") o.galore_rank = std::stoll(next());
      else if (a == "--galore-gap") o.galore_gap = std::stoll(next());
      else if (a == "--memory-gib") o.memory_gib = std::stod(next());
      else if (a == "--quant") {
        o.quant = next();
        if (o.quant != "nf4" && o.quant != "fp4") throw std::invalid_argument("--quant takes nf4 or fp4");
      }
      else if (a == "--profile") o.profile = next();
      else if (a == "--frontier") {
        o.frontier = std::stoi(next());
        if (o.frontier < 1) throw std::invalid_argument("--frontier");
      }
      else if (a == "--frontier-at") {
        for (const auto& g : split(next())) o.frontier_at.push_back(std::stod(g));
      }
      else if (a == "--a2a-bytes") {
        for (const auto& b : split(next())) o.a2a_bytes.push_back(std::stoll(b));
      }
      else {
        std::cerr << "odyssey-bench: unknown argument " << a << " (see the comment at the top of app/odyssey_bench/main.cpp)\n";
        return 2;
      }
    } catch (const std::exception&) {
      std::cerr << "odyssey-bench: " << a << ": not a number\n";
      return 2;
    }
  }
  const bool count = !o.checkpointing.empty() &&
                     std::all_of(o.checkpointing.begin(), o.checkpointing.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  if (o.checkpointing != "all" && o.checkpointing != "none" && o.checkpointing != "auto" && !count) {
    std::cerr << "odyssey-bench: --checkpointing: expected all, none, auto or a number of layers\n";
    return 2;
  }
  for (const auto& [flag, v] : {std::pair<const char*, const std::string&>{"--mlp-recompute", o.mlp_recompute},
                                 std::pair<const char*, const std::string&>{"--mlp-offload", o.mlp_offload}})
    if (v != "auto" && (v.empty() || !std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))) {
      std::cerr << "odyssey-bench: " << flag << ": expected auto or a number of layers\n";
      return 2;
    }
  if (o.attention != "cudnn" && o.attention != "flash" && o.attention != "auto") {
    std::cerr << "odyssey-bench: --attention: expected cudnn, flash or auto\n";
    return 2;
  }
  configure_cuda_allocator();
  if (o.device == "cuda" && !torch::cuda::is_available()) {
    std::cerr << "odyssey-bench: no CUDA device is visible (use --device cpu for a smoke test)\n";
    return 77;
  }
  Parallel par;
  std::string env_error;
  par.env = dist::read_dist_env(&env_error);
  if (!env_error.empty()) {
    std::cerr << "odyssey-bench: " << env_error << '\n';
    return 2;
  }
  if (o.optimizer.starts_with("zero") && par.env.world < 2) {  // as validate refuses zero_stage on one process
    std::cerr << "odyssey-bench: --optimizer " << o.optimizer
              << ": ZeRO shards over processes; run under torchrun with 2 or more (this is 1)\n";
    return 2;
  }
  if (par.env.local_world > 1)  // ranks of one host share its cores (ZeRO offload's CPU update)
    torch::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / par.env.local_world));
  const torch::Device device = o.device == "cuda" ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(par.env.local_rank))
                                                  : torch::Device(torch::kCPU);
#ifdef ODYSSEY_HAVE_CUDA_RUNTIME
  if (device.is_cuda()) c10::cuda::set_device(device.index());
#endif
  // --memory-gib is a card's budget: the allocator capped as gpu_memory_budget_gib caps a run's.
  if (device.is_cuda() && o.memory_gib > 0) {
    o.allocator_cap = cap_gpu_memory(o.memory_gib, device.index());
    std::cerr << "odyssey-bench: " << o.allocator_cap << '\n';
  }
  par.provenance = bench::machine_provenance(device);
  if (par.env.world > 1) par.store = dist::connect_store(par.env, std::chrono::milliseconds(std::chrono::minutes(5)));
  const torch::Dtype dtype = o.dtype == "float32" ? torch::kFloat32 : torch::kBFloat16;
  int rc = 0;
  std::ofstream out;
  if (!o.out.empty()) out.open(o.out, std::ios::app);
  for (const auto& shape : o.shapes) {
    const std::string file = shape_file(shape);
    if (file.empty()) {
      std::cerr << "odyssey-bench: --shape " << shape << ": no such file in resources/model-shapes\n";
      return 2;
    }
    const std::string text = read_file(file);
    auto hf = parse_model_config(text, file);
    auto dc = parse_decoder_config(text, file);
    if (!hf.ok() || !dc.ok()) {
      std::cerr << format_all(hf.diagnostics) << format_all(dc.diagnostics);
      return 2;
    }
    if (o.layers > 0) hf.value.num_hidden_layers = dc.value.hf.num_hidden_layers = o.layers;
    if (o.vocab_override > 0) hf.value.vocab_size = dc.value.hf.vocab_size = o.vocab_override;
    if (o.check && par.env.rank == 0 && !check_packing(dc.value, device, dtype)) rc = 1;
    if (o.check && par.env.rank == 0 && !check_fused_and_offload(dc.value, device, dtype)) rc = 1;
#if defined(ODYSSEY_HAVE_CUDA_KERNELS) && defined(ODYSSEY_HAVE_CUDA_RUNTIME)
    // One chunk of the planner's size at this shape's vocabulary.
    if (o.check && par.env.rank == 0 && device.is_cuda() &&
        !check_loss_rows(device, dtype, planner::kFusedLossChunkTokens, dc.value.hf.vocab_size))
      rc = 1;
#endif
    if (par.env.world > 1) {
      const int kv = static_cast<int>(hf.value.num_key_value_heads);
      ParallelLayout layout;
      if (o.dp < 1 || par.env.world % o.dp != 0) {
        std::fprintf(stderr, "odyssey-bench: --dp %d must divide the world size %d\n", o.dp, par.env.world);
        return 2;
      }
      layout.world_size = par.env.world;
      layout.dp = o.dp;
      layout.sp = par.env.world / o.dp;
      layout.ulysses = o.ulysses > 0 ? o.ulysses : std::gcd(kv, static_cast<int>(layout.sp));
      layout.ring = layout.sp / layout.ulysses;
      par.mesh = dist::build_mesh(par.env, layout, device.is_cuda() ? dist::Transport::Nccl : dist::Transport::Store,
                                  par.store, device, std::chrono::milliseconds(std::chrono::minutes(10)));
    }
    if (!o.a2a_bytes.empty() && par.mesh.distributed()) {
      // The engine's all-to-all (dist::Group over c10d NCCL) alone, as tests/bench/a2a_bench.py
      // times PyTorch's: 5 warm-up calls, then 20 back to back, host-timed to the last one.
      dist::Group& g = *par.mesh.world_group;
      for (const std::int64_t bytes : o.a2a_bytes) {
        const std::int64_t elems = bytes / 2 / g.size() * g.size();
        const torch::Tensor x = torch::randn({g.size(), elems / g.size()}, torch::TensorOptions().dtype(torch::kBFloat16).device(device));
        for (int i = 0; i < 5; ++i) (void)g.all_to_all(x);
        sync(device);
        g.barrier();
        g.reset_stats();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 20; ++i) (void)g.all_to_all(x);
        sync(device);
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 20;
        const auto st = g.stats()[static_cast<int>(dist::Op::AllToAll)];
        const double n = g.size();
        nlohmann::ordered_json r;
        r["impl"] = "odyssey";
        r["op"] = "all_to_all (dist::Group, NCCL)";
        bench::add_provenance(r, par.provenance);
        r["world"] = g.size();
        r["bytes"] = elems * 2;
        r["time_ms"] = sig(dt * 1e3, 4);
        r["bus_gb_per_s"] = sig(static_cast<double>(elems * 2) / dt / 1e9 * (n - 1) / n, 4);
        r["event_time_ms"] = sig(st.seconds / static_cast<double>(st.calls) * 1e3, 4);
        r["event_bus_gb_per_s"] = sig(static_cast<double>(st.bytes) / st.seconds / 1e9 * (n - 1) / n, 4);
        if (par.env.rank == 0) {
          std::cout << dump_json(r) << '\n' << std::flush;
          if (out) out << dump_json(r) << '\n' << std::flush;
        }
      }
      continue;
    }
    for (const auto& mode : o.modes)
      for (const auto seq : o.seqs) {
        if (o.frontier > 0) {
          // The frontier: one row per budget, each with the allocator capped to it and the
          // planner choosing for it (--checkpointing auto), as a run with gpu_memory_budget_gib.
#ifdef ODYSSEY_HAVE_CUDA_RUNTIME
          const double device_gib = device.is_cuda() ? static_cast<double>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem) /
                                                           double(planner::kGiB)
                                                     : static_cast<double>(planner::kH200MemoryBytes) / double(planner::kGiB);
#else
          const double device_gib = static_cast<double>(planner::kH200MemoryBytes) / double(planner::kGiB);
#endif
          const auto budgets = frontier_budgets(o, hf.value, mode, seq, par.mesh.world, device_gib);
          if (budgets.empty()) std::cerr << "odyssey-bench: the planner refuses " << shape << " " << mode << " " << seq << '\n';
          for (const double g : budgets) {
            Options p = o;
            p.checkpointing = "auto";
            p.memory_gib = g;
            char name[64];
            std::snprintf(name, sizeof name, " @ %.1f GiB", g);
            p.label = (o.label.empty() ? std::string("frontier") : o.label) + name;
            if (device.is_cuda()) p.allocator_cap = cap_gpu_memory(g, device.index());
            auto rec = run_one(p, shape, hf.value, dc.value, mode, seq, device, dtype, par);
            rec["frontier"] = true;
            rec["frontier_budget_gib"] = g;
            rec["frontier_device"] = g >= device_gib;  // the device's whole memory: no cap
            if (par.env.rank != 0) continue;
            std::cout << dump_json(rec) << '\n' << std::flush;
            if (out) out << dump_json(rec) << '\n' << std::flush;
          }
          continue;
        }
        const auto rec = run_one(o, shape, hf.value, dc.value, mode, seq, device, dtype, par);
        if (par.env.rank != 0) continue;
        std::cout << dump_json(rec) << '\n' << std::flush;
        if (out) out << dump_json(rec) << '\n' << std::flush;
      }
  }
  return rc;
}
