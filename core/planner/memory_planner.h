// Memory planner: predicts one GPU's peak memory for a TrainConfig on a model shape, term by
// term (weights, LoRA adapters or full gradients, optimizer states, activations under the
// checkpointing policy and the sequence-parallel split, attention and loss working sets,
// communication buffers, CUDA context and allocator margin), and answers "does it fit",
// "largest max_length that fits" and "smallest sequence_parallel_size that fits".
//
// No LibTorch, no Qt, no I/O on the hot path: the GUI calls it on every keystroke and the
// engine asks it which layers to checkpoint. Every constant and formula is explained in
// docs/memory-planner.md, with the measurements it rests on.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "config/train_config.h"

namespace odyssey {

namespace planner {
inline constexpr std::int64_t kMiB = std::int64_t{1} << 20;
inline constexpr std::int64_t kGiB = std::int64_t{1} << 30;
// gpu_memory_budget_gib (fractions allowed: 32.3 is an anchor's measured peak) in bytes, as
// cap_gpu_memory sizes the allocator's cap from it.
inline std::int64_t budget_bytes(double gib) { return static_cast<std::int64_t>(gib * static_cast<double>(kGiB)); }

// cudaMemGetInfo's total on an H200 (PyTorch 2.11, CUDA 13.0, driver 580): 139.8 GiB.
inline constexpr std::int64_t kH200MemoryBytes = 150'109'880'320;
// Device memory outside the caching allocator once the CUDA context, cuBLAS and the SDPA
// kernels are loaded (measured on an H200, lazy module loading: 734,855,168 bytes).
inline constexpr std::int64_t kCudaContextBytes = 734'855'168;
// A LibTorch CPU process before its first tensor (libraries, thread pools); an estimate.
inline constexpr std::int64_t kCpuRuntimeBytes = 512 * kMiB;
// NCCL 2.28.9 on 2 × H200 (NVLink), outside the caching allocator: a communicator at init,
// its ring/tree connections at the first all-reduce, and p2p buffers per peer at the first
// all-to-all or send/recv. Growth with more peers is assumed linear (not yet measured).
inline constexpr std::int64_t kNcclCommunicatorBytes = 385'941'504;
inline constexpr std::int64_t kNcclCollectiveBytes = 497'025'024;
inline constexpr std::int64_t kNcclP2pPeerBytes = 467'664'896;
// Share of the allocator's live bytes added for fragmentation (block rounding, cached
// blocks of the wrong size). The kernels issue calibrates it against OOM boundaries.
inline constexpr double kFragmentationFraction = 0.05;
// Gradient all-reduce / reduce-scatter bucket (PyTorch DDP's bucket_cap_mb = 25); two are in
// flight while backward overlaps communication.
inline constexpr std::int64_t kGradBucketBytes = 25 * kMiB;
// Tokens per chunk of the fused linear cross-entropy (logits of a chunk exist at a time).
inline constexpr std::int64_t kFusedLossChunkTokens = 2048;
// Tokens per tile of the tiled MLP when mlp_tile_tokens is auto and the job needs it: the
// tile's gate/up/activation (3 × 16384 × 18944 × 2 B = 1.8 GB for the 7B shape) are the working
// set; GEMMs of 16K rows still run near the tensor cores' rate.
inline constexpr std::int64_t kMlpTileTokens = 16384;
// keep_attention auto keeps attention outputs only while the plan stays this share below the
// capacity: it is a speed option and must not risk running out. 0.03 is 2.5 times the largest
// under-prediction of the measured lines the tests re-plan (-1.2% of 90, tst_memory_planner
// keptMarginAboveEveryUnderPrediction), on top of the fragmentation share the capacity already
// leaves; it was 0.08 until one H100 call measured both margins at the Liger anchors' peaks
// (docs/benchmarks.md, 2026-12-05): Gemma-2-9B 16K kept 41 layers instead of 19, +7.9% tokens/s.
inline constexpr double kKeptAttentionMargin = 0.03;
// The MLP offload tier (offload_activations with activation_checkpointing auto): gate and up of
// the first layers go to pinned host memory while the following layers compute. As many
// layers as the host link moves in one forward's compute time: forward time from the layers'
// FLOPs at kOffloadLayerFlopsPerSecond (above every model rate measured on an H200, 404–491
// TFLOP/s, so the window is not overestimated), bytes at kHostLinkBytesPerSecond (a margin
// under the 55 GB/s that 319 MB pinned copies reached each way on an H200 machine,
// docs/benchmarks.md "MLP offload").
inline constexpr double kHostLinkBytesPerSecond = 40e9;
inline constexpr double kOffloadLayerFlopsPerSecond = 500e12;
// The MLP park (checkpointed layers' gate and up on the host) is planned on 4-bit bases, where
// the peak with it leaves this many pairs (gate and up of one layer) under the capacity: the
// caching allocator's room for the pair in flight. Measured on one H100 (docs/benchmarks.md,
// 2026-12-06), each row at an anchor's peak: Llama-3.1-8B QLoRA 16K, 17 parked layers, 5.7%
// faster under 33.59 GiB (1.9 pairs of room) and 1.7% under 15.05 (1.3 pairs); on 16-bit bases
// Qwen2.5-7B LoRA 32K, 15 parked, 0.9% slower under 32.3 GiB (1.8 pairs of room, 7 allocator
// retries), Qwen2.5-1.5B 24K, 6 parked, 6.6% slower under 9.03 GiB (0.45 pairs), and the 7B row
// 6.0% faster with no cap. So 16-bit bases are not parked by the planner (odyssey-bench
// --mlp-park N measures them).
inline constexpr std::int64_t kParkSlackPairs = 1;
// Backward starts bringing an offloaded layer's gate and up back this many layers ahead of its
// MLP's backward (a gradient hook on the output of layer i + lead): one more than the layers
// offloaded, so the copies back have about two layers' backward time each.
inline std::int64_t mlp_offload_lead(std::int64_t offloaded_layers) { return offloaded_layers + 1; }
// Share of the host's RAM that offloading (offload_activations, offload_optimizer) may fill
// with pinned blocks, per node; the rest is for the OS, the process's own allocations, the
// data and the page cache of the model files. Set from the one run that came near it: the 7B
// LoRA step at 524,288 tokens (docs/benchmarks.md) offloaded its 28 layer inputs, 3.5 GiB each
// in the host allocator's power-of-two blocks, 112 GiB pinned on the H200 machine (128 GiB, of
// which `free` shows 125 GiB), and ran: 87.5% of 128. Every stored input is counted on the host
// (its copy lives there until backward takes it back), also the two the plan counts on the GPU.
// Pinning more than the RAM left free fails or pushes the machine into swap.
inline constexpr double kHostOffloadShare = 0.9;
// offload_activations auto turns offload on where the job fits the GPU without it only when
// offload recomputes at least this share fewer forward FLOPs (measured: the copies overlap
// compute, docs/benchmarks.md "MLP offload"; a plan that gains less keeps the host out of it).
inline constexpr double kOffloadRecomputeGain = 0.02;
// Block of blockwise 8-bit optimizer states (one fp32 absmax per block, bitsandbytes).
inline constexpr std::int64_t kQuantBlock = 256;
// A plan whose certain part (weights and one activation per layer) exceeds the capacity by
// this factor is refused by arithmetic alone, before any term is built: such a job is a
// typo (num_hidden_layers 10^9), not a tuning question, and building its plan allocated
// per-layer tables of gigabytes.
inline constexpr double kOutOfReachFactor = 1000.0;
// largest_max_length searches up to this many tokens.
inline constexpr std::int64_t kMaxSearchLength = std::int64_t{1} << 26;
}  // namespace planner

// What the plan models: Odyssey's engine, or what Hugging Face transformers + PEFT allocate
// for the same job (unfused ops, PEFT's fp32 casts of adapter inputs, the model output held
// through backward, bf16 AdamW states for full fine-tuning). The latter is how the planner is
// checked against measured peaks, and what odyssey-bench compares against.
enum class PlannerReference { Odyssey, HfPeft };

struct PlannerOptions {
  std::int64_t gpu_memory_bytes = 0;  // per GPU; 0 = an H200 (planner::kH200MemoryBytes)
  // The host's RAM, 0 = this machine's: the capacity for device cpu, and on GPUs the limit of
  // what offloading parks there (kHostOffloadShare of it, shared by the node's processes).
  std::int64_t host_memory_bytes = 0;
  double reserve_fraction = 0.0;     // share of the capacity kept out of the plan (0..0.9)
  std::string auto_device = "cuda";  // how device: auto is planned: cuda or cpu
  PlannerReference reference = PlannerReference::Odyssey;
  // offload_activations parks kept attention outputs in pinned host memory (AttentionStash::park,
  // since 2026-12-03). false plans the engine before that, which kept them on the GPU: how
  // benchmark lines measured then are re-planned (their records lack kept_attention_on_host).
  bool kept_attention_on_host = true;
  // keep_attention auto's distance below capacity (kKeptAttentionMargin); odyssey-bench
  // --kept-margin measures other values.
  double kept_attention_margin = planner::kKeptAttentionMargin;
  // Checkpointed layers may park their MLP's gate and up on the host (the MLP park, since
  // 2026-12-06; odyssey-bench --mlp-park off measures without).
  bool mlp_park = true;
};

struct MemoryItem {
  std::string name;
  std::string group;  // runtime, model, gradients, optimizer, activations, loss, communication
  std::int64_t bytes = 0;
  std::string detail;   // how the figure is made, for tooltips and the CLI table
  bool at_peak = true;  // false: a working set of another phase, not live at the peak
};

struct MemoryPlan {
  std::vector<MemoryItem> items;  // at_peak items sum to peak_bytes
  std::int64_t peak_bytes = 0;
  std::int64_t capacity_bytes = 0;  // device memory (or host RAM per process) less the reserve
  bool fits = false;
  std::int64_t checkpointed_layers = 0;
  std::int64_t total_layers = 0;
  std::int64_t checkpoint_every = 0;  // 0: the first checkpointed_layers layers; K: 0, K, 2K, …
  // Checkpoint segments: runs of up to this many consecutive checkpointed layers (that keep no
  // attention output) store one input (layers_per_checkpoint; auto: 1 unless only more fits).
  std::int64_t layers_per_checkpoint = 1;
  std::int64_t stored_checkpoints = 0;  // checkpointed inputs stored, on the GPU or the host
  // Checkpointed inputs (kept attention outputs, the MLP offload tier) in pinned host memory:
  // offload_activations true, or auto's choice (on a GPU, where it fits and the GPU alone does
  // not, or where it recomputes at least kOffloadRecomputeGain fewer forward FLOPs).
  bool offload_activations = false;
  std::int64_t mlp_tile_tokens = 0;        // tiled MLP: tokens per tile (0 = untiled)
  std::int64_t attention_kept_layers = 0;  // checkpointed layers keeping their attention output (the last ones)
  std::int64_t mlp_recomputed_layers =
      0;  // layers not checkpointed whose MLP recomputes gate and up (after the offloaded ones)
  std::int64_t mlp_offloaded_layers =
      0;  // layers not checkpointed whose MLP keeps gate and up on the host (the first ones)
  // Checkpointed layers whose MLP parks gate and up on the host (the MLP park): every
  // mlp_park_stride-th checkpointed layer from the first, mlp_parked_layers of them
  std::int64_t mlp_parked_layers = 0;
  std::int64_t mlp_park_stride = 1;
  std::string peak_phase;  // loss, backward, optimizer step
  ParallelLayout layout;
  std::int64_t tokens_per_gpu = 0;       // batch × max_length / sequence_parallel_size
  std::string device;                    // cuda|cpu
  std::int64_t host_bytes = 0;           // per process on the host: offloaded states, activations
  std::int64_t host_capacity_bytes = 0;  // what offloading may park there per process (kHostOffloadShare)
  std::vector<std::string> notes;
  std::string refused;  // why no plan was built (out_of_reach); "" when planned

  // The peak without the runtime group (context, NCCL, fragmentation): what
  // torch.cuda.max_memory_allocated() reports for the same job.
  std::int64_t allocated_bytes() const;
};

MemoryPlan plan_memory(const TrainConfig& c, const HfModelConfig& m, const PlannerOptions& o = {});

// "" when the job is within kOutOfReachFactor of the capacity, else why not: what a lower
// bound of its peak (weights + each layer's stored input + one MLP intermediate, in long
// double, so that no product overflows) comes to against the capacity. plan_memory returns
// a plan with only `refused` (and fits false) set in that case; nothing is allocated.
std::string out_of_reach(const TrainConfig& c, const HfModelConfig& m, const PlannerOptions& o = {});

// Largest max_length (a multiple of the sequence-parallel padding multiple) whose plan fits,
// with activation_checkpointing as configured (auto: the best number of layers); 0 if none.
std::int64_t largest_max_length(const TrainConfig& c, const HfModelConfig& m, const PlannerOptions& o = {});

// Smallest sequence_parallel_size ≤ max_world that validate_config would accept for this
// model (Ulysses degree divides the heads, ring needs packing and flash, max_length a
// multiple of the padding) and whose plan fits; 0 if none. The process count is kept when it
// is a multiple of the candidate, else it becomes the candidate (one data-parallel group).
std::int64_t smallest_sequence_parallel_size(const TrainConfig& c, const HfModelConfig& m, const PlannerOptions& o,
                                             std::int64_t max_world);

// Whether the engine recomputes `layer` (0-based) under this plan. auto and all checkpoint the
// first layers: backward reaches them last, so their recomputation never coincides with the
// stored activations of the layers that are not checkpointed.
bool checkpoints_layer(const MemoryPlan& p, std::int64_t layer);
// Whether `layer` keeps its attention output under this plan (the last attention_kept_layers
// checkpointed layers).
bool keeps_attention(const MemoryPlan& p, std::int64_t layer);

// Whether `layer`'s MLP keeps gate and up in pinned host memory between forward and backward
// (the MLP offload tier, CausalLMImpl::set_mlp_offload_layers): the first mlp_offloaded_layers
// layers that are not checkpointed.
bool offloads_mlp(const MemoryPlan& p, std::int64_t layer);
// Whether checkpointed `layer`'s MLP parks gate and up in pinned host memory for its
// recomputation's backward (the MLP park): every mlp_park_stride-th checkpointed layer from the
// first, mlp_parked_layers of them.
bool parks_mlp(const MemoryPlan& p, std::int64_t layer);
// parks_mlp for every layer at once ([total_layers]): one pass, for callers that ask of each.
std::vector<bool> planned_mlp_park(const MemoryPlan& p);
// Whether `layer`'s MLP keeps none of its intermediates, recomputing them in backward
// (kernels::rms_norm_mlp): the mlp_recomputed_layers layers that are not checkpointed after
// the offloaded ones.
bool recomputes_mlp(const MemoryPlan& p, std::int64_t layer);

// Checkpoint segments (layers_per_checkpoint): which checkpointed layers store their input.
// Runs of consecutive checkpointed layers that keep no attention output are cut into segments
// of up to `segment` layers, from the run's first layer on, the first of each storing the
// input; a layer keeping its attention output stores its own. The engine
// (CausalLMImpl::layers_and_norm), the planner and odyssey-bench's FLOP count group layers by
// this. Entries past a vector's end are false.
std::vector<bool> checkpoint_stores(const std::vector<bool>& checkpointed, const std::vector<bool>& keeps_attention,
                                    std::int64_t segment);

// The MLP park's layers: `count` of the checkpointed layers, every `stride`-th checkpointed
// layer from the first (stride <= 1: the first `count` of them). The one rule the planner's
// evaluation, parks_mlp and the engine's fixed counts (MemoryPolicy) share.
std::vector<bool> mlp_park_layers(const std::vector<bool>& checkpointed, std::int64_t count, std::int64_t stride);

std::string format_plan_table(const MemoryPlan& p);  // human table in GiB
nlohmann::json plan_to_json(const MemoryPlan& p);

// This machine's physical memory (sysconf), read once.
std::int64_t host_memory_bytes();

}  // namespace odyssey
