// TrainConfig: the one configuration type shared by the GUI, the engine, presets and the
// ms-swift bridge. Field names follow ms-swift's argument names where one exists; the
// field table (train_config_fields) is the single description of every key: its type,
// default, allowed values, help text and ms-swift name. YAML, --set, the GUI's tooltips
// and the bridge all read it.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace odyssey {

struct TrainConfig {
  // -- what this preset is
  std::string description;

  // -- model
  std::string model;                   // HF directory, or a hub id found in the HF/ModelScope caches
  std::string model_revision;          // hub id: branch, tag or commit in the HF cache (empty: main)
  std::string template_name = "auto";  // key "template": auto|chatml|llama3
  std::string template_file;           // a Jinja chat template used in place of the model's
  std::string system;                  // default system prompt
  std::string torch_dtype = "auto";    // auto|bfloat16|float16|float32
  // 4-bit base weights (QLoRA, docs/qlora.md), under ms-swift's names
  std::int64_t quant_bits = 0;              // 0: 16-bit base; 4: NF4/FP4 in bitsandbytes' layout
  std::string quant_method = "bnb";         // bnb (bitsandbytes' format) only
  std::string bnb_4bit_quant_type = "nf4";  // nf4|fp4
  bool bnb_4bit_use_double_quant = true;
  std::string bnb_4bit_compute_dtype = "auto";  // auto (= torch_dtype)|bfloat16|float16|float32

  // -- data
  std::vector<std::string> dataset;  // each "path" or "path#N" (N samples, seeded)
  std::vector<std::string> val_dataset;
  double split_dataset_ratio = 0.0;
  std::int64_t max_length = 2048;
  std::string truncation_strategy = "delete";  // delete|left|right|raise
  bool packing = false;
  bool padding_free = false;
  double max_bad_sample_ratio = 0.01;  // share of malformed samples tolerated before failing

  // -- tuner
  std::string tuner_type = "lora";  // lora|full
  std::int64_t lora_rank = 8;
  double lora_alpha = 32.0;
  double lora_dropout = 0.05;
  bool use_rslora = false;
  std::vector<std::string> target_modules = {"all-linear"};
  // Mixture-of-experts models (docs/moe.md): stacked expert parameters with per-expert LoRA
  // (PEFT's target_parameters), the load-balancing loss's weight (> 0 turns it on; 0 = as
  // config.json's output_router_logits says, ms-swift's rule) and frozen routers in full
  // fine-tuning.
  std::vector<std::string> target_parameters;
  double router_aux_loss_coef = 0.0;
  bool freeze_router = false;
  std::vector<std::string> adapters;  // a PEFT LoRA adapter directory to start from (ms-swift --adapters)

  // -- optimisation
  double learning_rate = 1e-4;
  std::string lr_scheduler_type = "cosine";  // cosine|linear|constant
  double warmup_ratio = 0.0;
  std::int64_t warmup_steps = 0;
  double weight_decay = 0.1;
  double max_grad_norm = 1.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_epsilon = 1e-8;
  double num_train_epochs = 1.0;
  std::int64_t max_steps = -1;  // -1: run num_train_epochs
  std::int64_t per_device_train_batch_size = 1;
  std::int64_t gradient_accumulation_steps = 1;
  std::int64_t seed = 42;

  // -- optimizer memory
  bool use_galore = false;
  bool galore_quantization = false;  // Q-GaLore
  std::int64_t galore_rank = 128;
  std::int64_t galore_update_proj_gap = 200;
  double galore_scale = 0.25;
  std::vector<std::string> galore_target_modules = {"all-linear"};
  std::int64_t zero_stage = 0;  // 0|1|2
  bool offload_optimizer = false;
  // auto|bf16|fp32: fp32 master weights and moments for a full fine-tune of 16-bit weights
  // (optimizer_zero_stage below); bf16 updates the weights in their own dtype
  std::string optimizer_dtype = "auto";

  // -- kernels and memory policy
  std::string attn_impl = "auto";  // auto|flash_attn|cudnn|sdpa|eager
  bool fused_kernels = true;
  std::string activation_checkpointing = "auto";  // auto|all|none|every:K
  // auto|true|false: checkpointed inputs (and kept attention outputs, MLP offload tier) in pinned
  // host memory; auto lets the memory planner turn it on where it fits or recomputes less
  std::string offload_activations = "auto";
  std::int64_t mlp_tile_tokens = 0;        // 0 = auto: tiled MLP only when the job needs it to fit
  std::string keep_attention = "auto";     // auto|all|none: checkpointed layers keep their attention output
  std::int64_t layers_per_checkpoint = 0;  // 0 = auto; N: runs of N checkpointed layers keep one input
  double gpu_memory_budget_gib =
      0;  // 0 = auto: the GPU's memory; else a cap per GPU in GiB, fractions allowed (planner and allocator)

  // -- parallelism and devices
  std::int64_t sequence_parallel_size = 1;
  std::int64_t ulysses_size = 0;          // 0 = auto: gcd(num_key_value_heads, sequence_parallel_size)
  std::int64_t expert_parallel_size = 1;  // MoE: ranks of a sequence-parallel group that split the experts
  std::string device = "auto";            // auto|cuda|cpu
  std::vector<std::int64_t> gpu_ids;      // empty = every visible GPU (or CPU when none)
  std::int64_t nproc_per_node = 0;        // 0 = auto: len(gpu_ids), or 1
  std::int64_t nnodes = 1;

  // -- logging and output
  std::int64_t logging_steps = 5;
  std::vector<std::string> report_to = {"tensorboard"};  // tensorboard | none (ms-swift's name)
  std::int64_t eval_steps = 0;                           // 0 = evaluate at save_steps
  std::int64_t save_steps = 500;
  std::int64_t save_total_limit = 2;
  std::string output_dir = "output";
  std::string resume_from_checkpoint;  // checkpoint directory to continue from

  bool operator==(const TrainConfig&) const = default;
};

// ---- the field table ------------------------------------------------------------------

using FieldMember =
    std::variant<bool TrainConfig::*, std::int64_t TrainConfig::*, double TrainConfig::*, std::string TrainConfig::*,
                 std::vector<std::string> TrainConfig::*, std::vector<std::int64_t> TrainConfig::*>;

struct FieldSpec {
  std::string_view key;
  std::string_view group;  // model, data, tuner, optim, memory, kernels, parallel, output
  FieldMember member;
  std::string_view help;        // one sentence for tooltips and --help
  std::string_view swift_name;  // ms-swift's argument, "" when ms-swift has none
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  std::span<const std::string_view> choices = {};  // for enumerated strings
  std::string_view special = {};                   // a number written as a word: "auto" for 0, "none" for -1
};

std::span<const FieldSpec> train_config_fields();
const FieldSpec* find_field(std::string_view key);
std::vector<std::string> field_keys();

// Order in which groups are written and shown.
std::span<const std::string_view> field_groups();

// ---- derived quantities every consumer agrees on ----------------------------------------

struct ParallelLayout {
  std::int64_t world_size = 1;  // nnodes × nproc_per_node
  std::int64_t dp = 1;          // data-parallel degree
  std::int64_t sp = 1;          // sequence-parallel degree = ulysses × ring
  std::int64_t ulysses = 1;
  std::int64_t ring = 1;
  // Expert parallelism of MoE layers (docs/moe.md): each block of `ep` consecutive ranks of a
  // sequence-parallel group splits the experts; ep divides sp.
  std::int64_t ep = 1;
};

// Resolved process count per node: nproc_per_node, else len(gpu_ids), else 1.
std::int64_t resolved_nproc_per_node(const TrainConfig& c);

// The mesh for a model with `num_key_value_heads` KV heads (0 when unknown: ulysses = sp).
// ulysses = explicit ulysses_size, else gcd(kv_heads, sp) as ms-swift does.
ParallelLayout parallel_layout(const TrainConfig& c, std::int64_t num_key_value_heads);

// The multiple every packed sequence is padded to: sp, times 2 under zigzag ring.
std::int64_t sequence_pad_multiple(const ParallelLayout& p);

// Activation checkpointing policy parsed from its string.
struct CheckpointPolicy {
  enum Kind { Auto, All, None, EveryK } kind = Auto;
  std::int64_t every = 1;
};
bool parse_checkpoint_policy(std::string_view s, CheckpointPolicy* out);

// A dataset argument "path#N" split into its parts (samples = -1 when no #N).
struct DatasetSpec {
  std::string path;
  std::int64_t samples = -1;
};
// Bounds on path#N. Each selected sample is a copy held in memory and tokenized: #2000000
// of a small file took 2.5 GB, #10^12 ended in std::bad_alloc at step 1. N is capped
// outright when the spec is parsed, and against the file's record count when it is read
// (validate --check-files, and every load): more than kMaxUpsampleFactor uses of each
// record is refused (ms-swift repeats a file to reach N; nobody means 100 copies).
inline constexpr std::int64_t kMaxDatasetSamples = 10'000'000;
inline constexpr std::int64_t kMaxUpsampleFactor = 100;
// "" when `requested` samples may be drawn from a file of `available` valid records, else why
// not (names the request, the file's count and the limit).
std::string sample_request_problem(std::int64_t requested, std::int64_t available);
bool parse_dataset_spec(std::string_view s, DatasetSpec* out, std::string* error);

bool uses_lora(const TrainConfig& c);

// optimizer_dtype (docs/optimizers.md): does the optimizer keep fp32 master weights and fp32
// moments for the trained weights? Only a full fine-tune of 16-bit weights has a choice
// (LoRA adapters and fp32 weights are fp32 already). auto: under ZeRO only (DeepSpeed's
// layout); without ZeRO the update runs in the weights' dtype, as torch.optim.AdamW on a
// bf16 model does (transformers' Trainer, ms-swift without DeepSpeed). fp32: always. bf16:
// never (validate refuses it with ZeRO).
bool fp32_master_weights(const TrainConfig& c, bool weights_16bit);
// The ZeRO stage the optimizer runs: zero_stage, or 2 where fp32 master weights are asked for
// without ZeRO (validate allows that on one process only: ZeroAdamW over a group of one shards
// nothing and accumulates the gradients in fp32 as backward hands them over).
std::int64_t optimizer_zero_stage(const TrainConfig& c, bool weights_16bit);

}  // namespace odyssey
