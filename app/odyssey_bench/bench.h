#pragma once
// odyssey-bench's parts (what the program does: the comment at the top of main.cpp;
// docs/benchmarks.md): options.cpp reads the command line and turns a row into the planner's
// TrainConfig, row.cpp runs one configuration (and chooses a frontier's budgets), profile.cpp
// times one step's kernels, main.cpp loops over shapes, modes and lengths. The correctness
// checks that were its --check are tests now (tests/gpu/step_checks.cpp).
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "config/train_config.h"
#include "dist/mesh.h"
#include "model/decoder.h"
#include "provenance.h"

namespace odyssey::bench {

std::vector<std::string> split(const std::string& s);  // "a,b" -> {"a", "b"}
// qwen2.5-7b -> resources/model-shapes/Qwen--Qwen2.5-7B.json; "" when there is none.
std::string shape_file(const std::string& shape);
std::string read_file(const std::string& p);
double sig(double x, int n = 6);  // x to n significant digits

struct Options {
  std::vector<std::string> shapes{"qwen2.5-0.5b"};
  std::vector<std::int64_t> seqs{4096};
  std::vector<std::string> modes{"lora"};
  int steps = 5, warmup = 2;
  std::int64_t lora_r = 16;
  double lora_alpha = 32;
  double lora_dropout = 0.0;  // --lora-dropout P: 0 in every benchmark row unless asked (ms-swift's default is 0.05)
  std::string checkpointing = "all";  // all|none|auto|N
  bool fused = true;
  std::string offload = "off";  // --offload on|off|auto (auto: the memory planner chooses)
  std::string attention = "cudnn";
  std::string label;
  std::string device = "cuda", dtype = "bfloat16";
  std::int64_t layers = 0, vocab_override = 0;
  std::string out;
  int ulysses = 0;            // 0 = gcd(KV heads, world / dp)
  int dp = 1;                 // data-parallel groups (under torchrun); each sequence-parallel group takes one row
  std::int64_t mlp_tile = 0;  // --mlp-tile: 0 = auto (the planner's choice), N = N tokens per tile
  std::string keep_attention = "auto";     // --keep-attention auto|all|none
  std::int64_t layers_per_checkpoint = 0;  // --layers-per-checkpoint auto|N
  std::string mlp_recompute = "auto";      // --mlp-recompute auto|N
  std::string mlp_offload = "auto";        // --mlp-offload auto|N
  std::string mlp_park = "auto";           // --mlp-park auto|N (0: the planner parks none either)
  std::int64_t mlp_park_stride = 1;        // --mlp-park-stride S: with --mlp-park N, every S-th checkpointed layer
  std::string optimizer = "adamw";         // adamw|adamw-fp32|galore|q-galore|zero1|zero2|zero2-offload
  std::int64_t galore_rank = 128, galore_gap = 200;
  std::vector<std::int64_t> a2a_bytes;  // --a2a-bytes: the all-to-all alone, back to back
  std::string rerun_mlp = "skip";       // --rerun-mlp: checkpointed layers' recomputation skips the MLP's GEMMs, or not
  std::string cudnn_gqa = "on";         // --cudnn-gqa: cuDNN attention takes grouped K/V heads as they are, or repeated
  std::string band_attention = "on";  // --band-attention: soft-capped/windowed tiles through the band kernels, or GEMMs
  std::string band_backward = "windowed";  // --band-backward windowed|all: which layers' backward the band kernels run
  // --cudnn-softcap on|off|global: soft-capped rows through cuDNN (global: causal rows only, windowed
  // ones on the band kernels; empty: the engine's default, on)
  std::string cudnn_softcap;
  std::string band_tanh;    // --band-tanh approx|exact: the band kernels' soft-cap tanh (empty: the engine's default)
  double kept_margin = -1;  // --kept-margin: keep_attention auto's margin below capacity (< 0: the planner's)
  double memory_gib = 0;    // --memory-gib: the planner's memory per GPU (0 = the device's), the allocator capped to it
  std::string allocator_cap;         // what capping the allocator to memory_gib did (cap_gpu_memory's line)
  std::string profile;               // --profile FILE: per-kernel device time of one extra step
  std::string quant;                 // --quant nf4|fp4: a 4-bit base (LoRA)
  std::vector<std::string> targets;  // --targets q_proj,k_proj,...: LoRA's target_modules (empty: all-linear)
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

// Reads the command line into `o`: -1 when it is good, else the exit code (2: bad arguments).
int parse_options(int argc, char** argv, Options& o);
// The row's job as a TrainConfig, for the memory planner and the memory policy.
TrainConfig bench_config(const Options& o, const std::string& mode, std::int64_t seq, int world);
model::AttentionBackend attention_of(const std::string& a);  // --attention
void sync(const torch::Device& d);

// One step under the Kineto profiler, appended to `path` (profile.cpp).
void profile_step(const std::string& path, const nlohmann::ordered_json& rec, bool write,
                  const std::function<void()>& step);

// The budgets of --frontier (row.cpp).
std::vector<double> frontier_budgets(const Options& o, const HfModelConfig& hf, const std::string& mode,
                                     std::int64_t seq, int world, double device_gib);
// One configuration: its record (tokens/s, peak, the plan, ...; "oom" or "error" when it failed).
nlohmann::ordered_json run_one(const Options& o, const std::string& shape, const HfModelConfig& hf,
                               const DecoderConfig& dc, const std::string& mode, std::int64_t seq,
                               const torch::Device& device, torch::Dtype dtype, Parallel& par);

}  // namespace odyssey::bench
