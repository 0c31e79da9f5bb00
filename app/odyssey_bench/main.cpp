// odyssey-bench: the engine side of the side-by-side benchmark (docs/benchmarks.md). For each
// (shape, mode, seq): a random-initialised model of the shape in bf16 on the GPU, batch 1 of
// random tokens with labels = ids (one padding-free row: varlen flash attention), LoRA
// (all seven projections) or full fine-tuning, activation checkpointing as asked, the
// engine's training step (StepEngine: chunked loss, fused AdamW); W warmup steps, then N
// timed ones. Prints one JSON line per configuration with the keys of tests/bench/hf_bench.py
// ("impl": "odyssey"), so tests/bench/compare.py joins the two.
//
//   odyssey-bench --shape qwen2.5-0.5b,qwen2.5-7b --seq 4096,16384,32768 --mode lora,full
//                 [--steps 5] [--warmup 2] [--lora-r 16] [--lora-alpha 32] [--lora-dropout 0]
//                 [--checkpointing all|auto|none|N] [--fused on|off] [--offload on|off|auto] [--mlp-tile auto|N]
//                 [--keep-attention auto|all|none] [--mlp-recompute auto|N] [--mlp-offload auto|N]
//                 [--mlp-park auto|N] [--mlp-park-stride S]
//                 [--layers-per-checkpoint auto|N]
//                 [--attention cudnn|flash|auto] [--memory-gib G] [--profile FILE] [--quant nf4|fp4]
//                 [--targets q_proj,k_proj,...]
//                 [--device cuda|cpu] [--dtype bfloat16|float32]
//                 [--layers K] [--vocab-override V] [--out FILE] [--label NAME]
//                 [--ulysses U] [--dp D] [--a2a-bytes B1,B2,...]   (the last three under torchrun)
//                 [--optimizer adamw|adamw-fp32|galore|q-galore|zero1|zero2|zero2-offload]
//                 [--galore-rank R] [--galore-gap T]
//                 [--frontier K] [--frontier-at G1,G2,...] [--kept-margin F] [--rerun-mlp skip|full]
//                 [--cudnn-gqa on|off] [--band-attention on|off]
//                 [--band-backward windowed|all] [--band-tanh approx|exact] [--cudnn-softcap on|off|global]
//
// --kept-margin F: keep_attention auto keeps attention outputs only while the plan stays F of
// the capacity below it (default the planner's kKeptAttentionMargin, 0.03); for measuring
// whether a smaller margin is safe and faster at a budget.
// --cudnn-gqa off: cuDNN attention gets K/V repeated to the query heads (and dK/dV summed back)
// instead of the grouped heads as they are (on, the engine's default): for measuring the difference.
// --band-attention off: soft-capped and windowed tiled attention (model/tiled_attention.h) runs
// its GEMM tiles alone, without the fused band kernels (kernels/band_attention.h: the forward of
// every such layer, the backward of windowed ones; on, the engine's default): for measuring the
// difference.
// --band-backward all: the band kernels run the backward of every soft-capped or windowed layer,
// not only the windowed ones (the engine's default): for measuring the two.
// --cudnn-softcap on|off|global: soft-capped layers of one sample (a causal row of a length
// kernels::softcap_diagonal_block cuts, or a windowed row softcap_window_block cuts) run cuDNN's
// attention on full rectangles and the band kernels on the diagonal's blocks
// (kernels/cudnn_attention.h); global: the causal rows only; default the engine's (on, unless
// ODYSSEY_CUDNN_SOFTCAP=0 or ODYSSEY_CUDNN_SOFTCAP_WINDOWED=0). The record says "failed: why"
// when cuDNN refused the graphs and the band kernels ran instead.
// --band-tanh approx|exact: the band kernels' soft-cap tanh by tanh.approx.f32 or by tanhf and a
// division (kernels/band_attention.h, set_band_fast_tanh); default the engine's (approx).
// --rerun-mlp full: checkpointed layers' recomputations run their fused MLP as forward did
// (down projection included) instead of skipping its GEMMs (skip, the default and the
// engine's; docs/training.md): for measuring what the skip saves.
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
// --optimizer picks the step engine's optimizer (docs/optimizers.md; zero1/zero2 under torchrun, zero2-offload also on
// one GPU; adamw-fp32 one process with fp32 master weights, optimizer_dtype: fp32): the record carries its state
// bytes per trainable parameter and the planner's figure.
//
// Under torchrun (RANK / WORLD_SIZE set, e.g. `torchrun --no-python --nproc-per-node 2
// odyssey-bench ...`) every rank takes one GPU and the row is split by sequence parallelism
// over all ranks (Ulysses = gcd(KV heads, world) unless --ulysses U; the rest is ring), as the
// engine does it; with --dp D the ranks form D data-parallel groups of world / D, each on its
// own row of --seq tokens (gradients summed over all ranks, as the engine does); rank 0 prints the record with the
// global tokens/s, every rank's peak memory, the collectives of a step and the share of the step spent in them. Each
// blocking collective also carries transfer_ms: its calls timed on the rank that took least per call, i.e. without the
// time a rank that called first spent waiting for the other (the figure to hold against nccl-tests-style back-to-back
// calls).
//
// --offload on keeps checkpointed inputs (and kept attention outputs, the MLP offload tier) in
// pinned host memory; auto lets the planner choose, as offload_activations: auto does (the
// record's offload_activations says what ran); off (the default) keeps them on the GPU.
// --mlp-tile N runs every MLP N tokens at a time (tiled MLP, each tile recomputed in backward);
// auto (the default) tiles when the planner says the job needs it, as the engine does.
// --keep-attention all keeps every checkpointed layer's attention output for backward (its
// recomputation skips the attention forward); auto keeps as many as the planner's budget allows.
// --layers-per-checkpoint N: runs of N consecutive checkpointed layers store one input (checkpoint
// segments, docs/training.md); auto (the default): 1 unless the planner finds only more fits.
// --mlp-recompute N: the first N layers that are not checkpointed keep none of their MLP's
// intermediates (kernels::rms_norm_mlp: gate and up recomputed in backward); auto (the default):
// as many as the planner chooses under --checkpointing auto, none otherwise.
// --mlp-offload N: the first N layers that are not checkpointed keep their MLP's gate and up in
// pinned host memory from forward to backward (the MLP offload tier; MLP recomputation then
// takes the layers after them); auto (the default): as many as the planner chooses under
// --checkpointing auto with --offload on, none otherwise.
// --mlp-park N: the first N checkpointed layers park their MLP's gate and up in pinned host
// memory for backward instead of recomputing them (the MLP park; needs offload); 0: none, and
// the planner plans none (so the line has its prediction); auto (the default): the planner's.
// --mlp-park-stride S (with --mlp-park N): every S-th checkpointed layer from the first parks,
// until N do, so each parked layer's copies have S layers' forward to drain on the host link.
//
// --quant nf4|fp4 (LoRA only) gives the shape a 4-bit base (QLoRA, docs/qlora.md): every
// decoder projection (and a MoE layer's stacked experts) is drawn as the random initialization
// draws it, one at a time, and quantized (double quantization), so the 16-bit model never exists.
// --targets: LoRA's target_modules (all-linear when not given; on Qwen3-MoE the MLP names mean
// the experts).
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
// Every line also says where and when it was measured (provenance.h,
// docs/benchmarks.md "The line format"): commit (stamped at build time, "-dirty" for a tree
// with changes, $ODYSSEY_COMMIT or "unknown" without git), commit_source, time (UTC, when the
// configuration starts), host, gpu, gpu_uuid, and lease (host/boot_id/GPU UUID, or
// $ODYSSEY_LEASE), by which tests/bench/compare.py pairs it with hf_bench.py's lines.
//
// The correctness checks of what it times (packed rows, fused against reference ops, every
// offload tier against keeping on the device, the fused loss's row kernels) are a test,
// tests/gpu/step_checks.cpp (ctest step_checks_cpu, and step_checks_gpu under the label gpu).
// Exit codes: 0 done, 2 bad arguments, 77 no CUDA device for --device cuda.
//
// --decode (first argument) times generation instead: decode_bench.cpp says how.
//
// The parts: bench.h (options.cpp, row.cpp, profile.cpp, common.cpp), decode_bench.cpp, this file's main.
#include <torch/torch.h>
#if __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAContext.h>
#define ODYSSEY_HAVE_CUDA_RUNTIME 1
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <numeric>
#include <thread>

#include "bench.h"
#include "chat_template_bench.h"
#include "decode_bench.h"
#include "common/json_dump.h"
#include "config/model_config.h"
#include "dist/mesh.h"
#include "engine/runtime_info.h"
#include "planner/memory_planner.h"
#include "provenance.h"

using namespace odyssey;
using namespace odyssey::bench;

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--decode") {
    try {
      return bench::decode_bench(argc, argv);
    } catch (const std::exception& e) {
      std::cerr << "odyssey-bench --decode: " << e.what() << '\n';
      return 2;
    }
  }
  if (argc > 1 && std::string(argv[1]) == "--chat-template") {
    try {
      return bench::chat_template_bench(argc, argv);
    } catch (const std::exception& e) {
      std::cerr << "odyssey-bench --chat-template: " << e.what() << '\n';
      return 2;
    }
  }
  Options o;
  if (const int rc = parse_options(argc, argv, o); rc >= 0) return rc;
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
  // As validate: ZeRO on one process only with offload (ZeRO-Offload on one GPU).
  if (o.optimizer == "adamw-fp32" && par.env.world > 1) {
    std::cerr << "odyssey-bench: --optimizer adamw-fp32 runs on one process; over " << par.env.world
              << " use zero1 or zero2 (fp32 master weights sharded)\n";
    return 2;
  }
  if (o.optimizer.starts_with("zero") && o.optimizer != "zero2-offload" && par.env.world < 2) {
    std::cerr << "odyssey-bench: --optimizer " << o.optimizer
              << ": ZeRO shards over processes; run under torchrun with 2 or more (this is 1), or use "
                 "zero2-offload\n";
    return 2;
  }
  if (par.env.local_world > 1)  // ranks of one host share its cores (ZeRO offload's CPU update)
    torch::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / par.env.local_world));
  const torch::Device device = o.device == "cuda"
                                   ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(par.env.local_rank))
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
        const torch::Tensor x =
            torch::randn({g.size(), elems / g.size()}, torch::TensorOptions().dtype(torch::kBFloat16).device(device));
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
          const std::int64_t total = gpu_memory_bytes(device.is_cuda() ? device.index() : -1);
          const double device_gib =
              static_cast<double>(total > 0 ? total : planner::kH200MemoryBytes) / double(planner::kGiB);
          const auto budgets = frontier_budgets(o, hf.value, mode, seq, par.mesh.world, device_gib);
          if (budgets.empty())
            std::cerr << "odyssey-bench: the planner refuses " << shape << " " << mode << " " << seq << '\n';
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
