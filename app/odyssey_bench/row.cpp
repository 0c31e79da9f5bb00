#include "bench.h"

#include <ATen/DeviceAccelerator.h>
#if __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAContext.h>
#define ODYSSEY_HAVE_CUDA_RUNTIME 1
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "dist/sequence_parallel.h"
#include "engine/runtime_info.h"
#include "kernels/band_attention.h"
#include "kernels/cudnn_attention.h"
#include "kernels/quant4.h"
#include "model/activation_checkpoint.h"
#include "model/tiled_attention.h"
#include "model/weights.h"
#include "planner/flops.h"
#include "planner/memory_planner.h"
#include "provenance.h"
#include "train/batch.h"
#include "train/lora.h"
#include "train/memory_policy.h"
#include "train/step_engine.h"

namespace odyssey::bench {

void sync(const torch::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

model::AttentionBackend attention_of(const std::string& a) {
  if (a == "flash") return model::AttentionBackend::Flash;
  if (a == "auto") return model::AttentionBackend::Auto;
  return model::AttentionBackend::CuDNN;
}

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

namespace {

// What a row is (its keys before anything runs; time: when this configuration starts).
nlohmann::ordered_json row_header(const Options& o, const std::string& shape, const DecoderConfig& dc,
                                  const std::string& mode, std::int64_t seq, const torch::Device& device,
                                  const Parallel& par) {
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
  // What ran (--offload auto: the planner's choice, set again below); the engine parks kept
  // attention outputs on the host under offload (how the planner tests re-plan this line; lines
  // without the key kept them on the GPU).
  rec["offload_activations"] = o.offload == "on";
  rec["kept_attention_on_host"] = o.offload == "on";
  if (o.offload == "auto") rec["offload_choice"] = "auto";
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
    rec["lora_dropout"] = o.lora_dropout;
    std::string targets = "all-linear (7)";
    if (!o.targets.empty()) {
      targets.clear();
      for (const auto& t : o.targets) targets += (targets.empty() ? "" : ",") + t;
    }
    rec["lora_targets"] = targets;
  }
  return rec;
}

// The row's model: random weights of the shape (a 4-bit base drawn one projection at a time
// under --quant), LoRA on every projection for mode lora. *total counts every parameter.
model::CausalLM build_model(const Options& o, const DecoderConfig& dc, const std::string& mode,
                            const torch::Device& device, torch::Dtype dtype, nlohmann::ordered_json& rec,
                            std::int64_t* total_out) {
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
      const torch::Tensor w =
          torch::empty({l->out_features, l->in_features}, torch::TensorOptions().dtype(dtype).device(device))
              .normal_(0.0, dc.initializer_range);
      l->quant = kernels::quantize_4bit(w, *kernels::parse_quant4_type(o.quant), 64, true);
      total += l->quant->numel();
    }
    for (const auto& [name, e] : model::quantized_experts(lm))  // one stacked parameter at a time
      for (auto* q : {&e->gate_up_quant, &e->down_quant}) {
        const torch::Tensor w = torch::empty(e->shape_of(q == &e->gate_up_quant ? "gate_up_proj" : "down_proj"),
                                             torch::TensorOptions().dtype(dtype).device(device))
                                    .normal_(0.0, dc.initializer_range);
        *q = kernels::quantize_4bit(w, *kernels::parse_quant4_type(o.quant), 64, true);
        total += (*q)->numel();
      }
  }
  if (mode == "lora") {
    train::LoraSettings ls;
    ls.rank = o.lora_r;
    ls.alpha = o.lora_alpha;
    ls.dropout = o.lora_dropout;
    ls.target_modules = o.targets.empty() ? train::lora_module_names() : o.targets;
    train::apply_lora(lm, ls);
  }
  *total_out = total;
  return lm;
}

}  // namespace

nlohmann::ordered_json run_one(const Options& o, const std::string& shape, const HfModelConfig& hf,
                               const DecoderConfig& dc, const std::string& mode, std::int64_t seq,
                               const torch::Device& device, torch::Dtype dtype, Parallel& par) {
  nlohmann::ordered_json rec = row_header(o, shape, dc, mode, seq, device, par);
  try {
    std::int64_t total = 0;
    model::CausalLM lm = build_model(o, dc, mode, device, dtype, rec, &total);
    // The planner's view of this job: which layers auto recomputes, and the predicted peak
    // for the layers actually recomputed.
    TrainConfig tc = bench_config(o, mode, seq, par.mesh.world);
    PlannerOptions po;
    po.gpu_memory_bytes = gpu_memory_bytes(device.is_cuda() ? device.index() : -1);  // 0 on the CPU: an H200
    if (o.mlp_park == "0") po.mlp_park = false;
    if (o.kept_margin >= 0) {
      po.kept_attention_margin = o.kept_margin;
      rec["kept_attention_margin"] = o.kept_margin;
    }
    if (o.memory_gib > 0) {
      po.gpu_memory_bytes = static_cast<std::int64_t>(o.memory_gib * double(1 << 30));
      rec["memory_budget_gib"] = o.memory_gib;
      if (!o.allocator_cap.empty()) rec["allocator_cap"] = o.allocator_cap;
    }
    // The trainer's memory policy (train/memory_policy.h) for this job, with the counts the
    // flags fix: --checkpointing N, --mlp-offload N, --mlp-recompute N, --mlp-park N.
    train::LayerCounts fixed;
    if (o.checkpointing == "all") fixed.checkpoint_first = dc.hf.num_hidden_layers;
    else if (o.checkpointing == "none") fixed.checkpoint_first = 0;
    else if (o.checkpointing != "auto") fixed.checkpoint_first = std::stoll(o.checkpointing);
    if (o.mlp_offload != "auto") fixed.mlp_offload_first = std::stoll(o.mlp_offload);
    if (o.mlp_recompute != "auto") fixed.mlp_recompute_first = std::stoll(o.mlp_recompute);
    if (o.mlp_park != "auto") fixed.mlp_park_first = std::stoll(o.mlp_park);
    fixed.mlp_park_stride = o.mlp_park_stride;
    const train::MemoryPolicy policy = train::memory_policy(tc, hf, po, fixed);
    train::apply_memory_policy(lm, policy);
    lm->set_rerun_skips_mlp(o.rerun_mlp == "skip");
    rec["rerun_mlp"] = o.rerun_mlp;
    model::set_cudnn_gqa(o.cudnn_gqa == "on");
    rec["cudnn_gqa"] = o.cudnn_gqa;
    kernels::set_band_attention(o.band_attention == "on");
    rec["band_attention"] = o.band_attention;
    model::set_band_backward_everywhere(o.band_backward == "all");
    rec["band_backward"] = o.band_backward;
    if (!o.cudnn_softcap.empty()) {
      kernels::set_cudnn_softcap(o.cudnn_softcap != "off");
      kernels::set_cudnn_softcap_windowed(o.cudnn_softcap == "on");
    }
    rec["cudnn_softcap"] = !kernels::cudnn_softcap_enabled()            ? "off"
                           : !kernels::cudnn_softcap_windowed_enabled() ? "global"
                                                                        : "on";
    if (!o.band_tanh.empty()) kernels::set_band_fast_tanh(o.band_tanh == "approx");
    rec["band_tanh"] = kernels::band_fast_tanh() ? "approx" : "exact";
    rec["offload_activations"] = policy.offload_checkpoints;
    rec["kept_attention_on_host"] = policy.offload_checkpoints;
    rec["mlp_tile_tokens"] = policy.mlp_tile;
    rec["attention_kept_layers"] = policy.count(policy.keep_attention);
    rec["mlp_recomputed_layers"] = policy.count(policy.mlp_recompute);
    rec["mlp_offloaded_layers"] = policy.count(policy.mlp_offload);
    rec["mlp_parked_layers"] = policy.count(policy.mlp_park);
    // Which checkpointed layers parked: every S-th from the first (a fixed count's stride, or the
    // plan's; the tests re-plan a line with it).
    if (policy.count(policy.mlp_park) > 0)
      rec["mlp_park_stride"] = fixed.mlp_park_first >= 0 ? o.mlp_park_stride
                               : policy.plan             ? policy.plan->mlp_park_stride
                                                         : std::int64_t{1};
    rec["checkpointing"] = o.checkpointing;
    rec["checkpointed_layers"] = policy.count(policy.checkpoint);
    rec["layers_per_checkpoint"] = policy.layers_per_checkpoint;
    // A count the planner would not choose: no prediction.
    if (policy.plan_matches())
      rec["planned_peak_gib"] = sig(static_cast<double>(policy.plan->allocated_bytes()) / double(1 << 30), 4);
    train::StepOptions so;
    so.adamw.lr = 1e-5;
    so.schedule.type = "constant";
    so.schedule.base_lr = 1e-5;
    so.schedule.total_steps = o.warmup + o.steps;
    so.max_grad_norm = 1.0;
    train::set_memory_optimizer(so, tc, dtype != torch::kFloat32);
    dist::Mesh& mesh = par.mesh;
    train::StepEngine engine(lm, so, train::step_group(mesh, so.zero.stage));
    rec["trainable_params"] = engine.trainable_params();
    rec["optimizer"] = engine.optimizer().name();
    if (tc.use_galore) rec["galore_rank"] = tc.galore_rank;
    rec["total_params"] = total;
    // One row per data-parallel group (the same draws on every rank; a group takes its own).
    const torch::Tensor ids =
        torch::randint(0, dc.hf.vocab_size, {mesh.dp, seq}, torch::kInt64).narrow(0, mesh.dp_rank, 1);
    train::PackedRow whole =
        train::make_packed_row(ids, ids, torch::arange(seq, torch::kInt64).view({1, -1})).to(device);
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
      rec["warmup_peak_gib"] =
          sig(static_cast<double>(at::accelerator::getDeviceStats(device.index()).allocated_bytes[0].peak) /
                  double(1 << 30),
              4);
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
    rec["host_copies_gib_per_step"] = sig(
        static_cast<double>(model::offloaded_bytes_total() - offloaded_before) / std::max(1, o.steps) / double(1 << 30),
        4);
    double mean = 0;
    for (double t : times) mean += t / static_cast<double>(times.size());
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    planner::FlopsOptions fo;
    fo.lora = mode == "lora";
    fo.lora_rank = o.lora_r;
    fo.checkpointed_layers = policy.count(policy.checkpoint) + policy.rebuilt_layers();    // forwards recomputed
    fo.lm_head_recomputed = !o.fused && seq * dc.hf.vocab_size > (std::int64_t{1} << 26);  // FLCE: never
    const planner::StepFlops f = planner::training_step_flops(hf, seq, fo);
    rec["attention_backend_ran"] = lm->attention_backend_ran();
    if (o.cudnn_gqa == "on" && !model::cudnn_gqa()) rec["cudnn_gqa"] = "refused";  // stderr says why
    if (kernels::cudnn_softcap_enabled() && !kernels::cudnn_softcap_failure().empty())
      rec["cudnn_softcap"] = "failed: " + kernels::cudnn_softcap_failure();
    else if (kernels::cudnn_softcap_enabled() && !kernels::cudnn_softcap_window_failure().empty())
      rec["cudnn_softcap"] = "on, windowed rows failed: " + kernels::cudnn_softcap_window_failure();
    rec["alloc_conf"] = std::getenv("PYTORCH_CUDA_ALLOC_CONF") ? std::getenv("PYTORCH_CUDA_ALLOC_CONF") : "";
    if (mesh.distributed()) {
      // The last timed step's collectives, and the mean share of a step spent waiting on them.
      nlohmann::ordered_json cj = nlohmann::ordered_json::array();
      for (std::size_t i = 0; i < coll.size(); ++i) {
        const auto& c = coll[i];
        nlohmann::ordered_json j{{"op", c.op},
                                 {"group", c.group},
                                 {"calls", c.calls},
                                 {"bytes", c.bytes},
                                 {"time_ms", sig(c.time_s * 1e3, 4)},
                                 {"bus_gb_per_s", sig(c.bus_bandwidth_gb_per_s, 4)},
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
      // The caching allocator's retries (it freed its cache and synchronized to find room: a
      // budget's cap reached) and whole-device synchronizations over the run.
      rec["alloc_retries"] = s.num_alloc_retries;
      rec["alloc_sync_all_streams"] = s.num_sync_all_streams;
      if (rec.contains("planned_peak_gib")) {
        const double planned = rec["planned_peak_gib"].get<double>(), measured = rec["peak_gib"].get<double>();
        rec["planner_error"] = sig((planned - measured) / measured, 3);
      }
      if (mesh.distributed()) {
        torch::Tensor peaks =
            torch::tensor({static_cast<double>(s.allocated_bytes[0].peak)}, torch::kFloat64).to(device);
        peaks = mesh.world_group->all_gather(peaks).cpu();
        nlohmann::ordered_json pj = nlohmann::ordered_json::array();
        for (std::int64_t r = 0; r < peaks.size(0); ++r)
          pj.push_back(sig(peaks[r].item<double>() / double(1 << 30), 4));
        rec["peak_gib_per_rank"] = pj;
      }
    }
    if (!o.profile.empty())
      profile_step(o.profile, rec, mesh.rank == 0, [&] {
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
          sig(static_cast<double>(at::accelerator::getDeviceStats(device.index()).allocated_bytes[0].peak) /
                  double(1 << 30),
              4);
  }
  if (device.is_cuda()) at::accelerator::emptyCache();
  return rec;
}

}  // namespace odyssey::bench
