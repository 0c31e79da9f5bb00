#include "config/train_config.h"

#include <array>
#include <numeric>

#include "common/text.h"

namespace odyssey {
namespace {

using TC = TrainConfig;
using SV = std::string_view;
constexpr double kInf = std::numeric_limits<double>::infinity();

constexpr std::array<SV, 6> kTemplates{"auto", "chatml", "qwen2_5", "qwen3", "llama3", "llama3_1"};
constexpr std::array<SV, 4> kDtypes{"auto", "bfloat16", "float16", "float32"};
constexpr std::array<SV, 1> kQuantMethods{"bnb"};
constexpr std::array<SV, 2> kQuantTypes{"nf4", "fp4"};
constexpr std::array<SV, 4> kTruncation{"delete", "left", "right", "raise"};
constexpr std::array<SV, 2> kTuners{"lora", "full"};
constexpr std::array<SV, 3> kSchedulers{"cosine", "linear", "constant"};
constexpr std::array<SV, 5> kAttn{"auto", "flash_attn", "cudnn", "sdpa", "eager"};
constexpr std::array<SV, 3> kKeepAttention{"auto", "all", "none"};
constexpr std::array<SV, 3> kOffloadActivations{"auto", "true", "false"};
constexpr std::array<SV, 3> kOptimizerDtypes{"auto", "bf16", "fp32"};
constexpr std::array<SV, 2> kReportTo{"tensorboard", "none"};
constexpr std::array<SV, 3> kDevices{"auto", "cuda", "cpu"};
// Module names as PEFT matches them; Phi-3's fused qkv_proj and gate_up_proj are whole modules.
constexpr std::array<SV, 10> kModules{"all-linear", "q_proj",  "k_proj",    "v_proj",   "o_proj",
                                      "gate_proj",  "up_proj", "down_proj", "qkv_proj", "gate_up_proj"};
constexpr std::array<SV, 8> kGroups{"preset", "model", "data", "tuner", "optim", "memory", "parallel", "output"};

const std::array kFields = std::to_array<FieldSpec>({
    {"description", "preset", &TC::description, "Free text shown beside the preset in the GUI's preset list.", ""},

    // model
    {"model", "model", &TC::model,
     "Local Hugging Face model directory (config.json, safetensors, tokenizer.json), or a "
     "hub id already present in the Hugging Face or ModelScope cache (org/name, or "
     "org/name@revision).",
     "model"},
    {"model_revision", "model", &TC::model_revision,
     "For a hub id: the branch, tag or commit hash (7+ characters) of the Hugging Face cache's "
     "snapshot to train; empty means main. A run records the commit it used here.",
     "model_revision"},
    {"template", "model", &TC::template_name,
     "Chat template: auto renders the model's own chat_template through the Jinja engine (its "
     "family's built-in one when it has none); chatml, qwen2_5, qwen3, llama3, llama3_1 force a built-in renderer.",
     "template", -kInf, kInf, kTemplates},
    {"template_file", "model", &TC::template_file,
     "A Jinja chat template file rendered in place of the model's own (needs template: auto); "
     "empty uses the model's.",
     ""},
    {"system", "model", &TC::system, "Default system prompt added to samples that carry none.", "system"},
    {"torch_dtype", "model", &TC::torch_dtype,
     "Compute dtype of weights and activations: auto = bfloat16 on GPU, float32 on CPU.", "torch_dtype", -kInf, kInf,
     kDtypes},
    {"quant_bits", "model", &TC::quant_bits,
     "Base weights: 0 keeps them 16-bit; 4 stores every decoder projection in 4 bits (QLoRA, "
     "bitsandbytes' format; LoRA only). A bitsandbytes 4-bit checkpoint is read as it is.",
     "quant_bits", 0, 8},
    {"quant_method", "model", &TC::quant_method, "How the base is quantized: bnb (bitsandbytes' NF4/FP4 layout).",
     "quant_method", -kInf, kInf, kQuantMethods},
    {"bnb_4bit_quant_type", "model", &TC::bnb_4bit_quant_type,
     "4-bit code: nf4 (NormalFloat, the QLoRA default) or fp4.", "bnb_4bit_quant_type", -kInf, kInf, kQuantTypes},
    {"bnb_4bit_use_double_quant", "model", &TC::bnb_4bit_use_double_quant,
     "Quantize the per-block scales again (8 bits in blocks of 256): about 0.37 bits less per weight.",
     "bnb_4bit_use_double_quant"},
    {"bnb_4bit_compute_dtype", "model", &TC::bnb_4bit_compute_dtype,
     "dtype the 4-bit weights are dequantized to for each product: auto = torch_dtype (the only "
     "one Odyssey computes in).",
     "bnb_4bit_compute_dtype", -kInf, kInf, kDtypes},

    // data
    {"dataset", "data", &TC::dataset,
     "Training files (JSON/JSONL in alpaca, sharegpt or messages format); 'path#N' takes N "
     "samples chosen with the seed.",
     "dataset"},
    {"val_dataset", "data", &TC::val_dataset, "Validation files, same forms as dataset.", "val_dataset"},
    {"split_dataset_ratio", "data", &TC::split_dataset_ratio,
     "Share of the training data held out for validation when val_dataset is empty.", "split_dataset_ratio", 0.0, 0.5},
    {"max_length", "data", &TC::max_length,
     "Longest tokenized sample (and packed bin) in tokens; with sequence parallelism each GPU "
     "holds max_length / sequence_parallel_size of it.",
     "max_length", 16, 16777216},
    {"truncation_strategy", "data", &TC::truncation_strategy,
     "What to do with samples longer than max_length: delete them, cut tokens from the "
     "left or the right (the count is reported), or raise: fail naming the first one.",
     "truncation_strategy", -kInf, kInf, kTruncation},
    {"packing", "data", &TC::packing, "Pack several samples into each max_length bin; attention never crosses samples.",
     "packing"},
    {"padding_free", "data", &TC::padding_free,
     "Concatenate a batch's samples without padding (variable-length attention).", "padding_free"},
    {"max_bad_sample_ratio", "data", &TC::max_bad_sample_ratio,
     "Largest share of malformed samples tolerated; more fails the run with the list.", "", 0.0, 1.0},

    // tuner
    {"tuner_type", "tuner", &TC::tuner_type,
     "lora trains low-rank adapters on frozen weights; full trains every weight.", "tuner_type", -kInf, kInf, kTuners},
    {"lora_rank", "tuner", &TC::lora_rank, "LoRA rank r of each adapter.", "lora_rank", 1, 4096},
    {"lora_alpha", "tuner", &TC::lora_alpha,
     "LoRA scaling numerator: the update is scaled by alpha / r (alpha / sqrt(r) with rsLoRA).", "lora_alpha", 0.0,
     1e6},
    {"lora_dropout", "tuner", &TC::lora_dropout,
     "Dropout on the LoRA input (PEFT's: each element kept with probability 1 − p, scaled by 1/(1 − p)). With "
     "`fused_kernels` the mask is redrawn in backward instead of kept: nothing stored beyond dropout 0's, one block "
     "of up to 2^26 masked elements while a projection runs (docs/kernels.md).",
     "lora_dropout", 0.0, 0.99},
    {"use_rslora", "tuner", &TC::use_rslora, "Rank-stabilised LoRA: scale by alpha / sqrt(r).", "use_rslora"},
    {"target_modules", "tuner", &TC::target_modules,
     "Linear layers that get adapters: all-linear, or any of q_proj k_proj v_proj o_proj "
     "gate_proj up_proj down_proj (Phi-3: qkv_proj o_proj gate_up_proj down_proj).",
     "target_modules", -kInf, kInf, kModules},
    {"target_parameters", "tuner", &TC::target_parameters,
     "Mixture-of-experts models: stacked expert parameters that get one LoRA adapter per expert "
     "(PEFT's target_parameters), e.g. mlp.experts.gate_up_proj mlp.experts.down_proj. Qwen3-MoE's "
     "gate_proj, up_proj and down_proj in target_modules already mean its experts.",
     "target_parameters"},
    {"router_aux_loss_coef", "tuner", &TC::router_aux_loss_coef,
     "Mixture-of-experts models: weight of the router load-balancing loss added to the loss; "
     "0 = as the model's config.json says (its output_router_logits and coefficient).",
     "router_aux_loss_coef", 0.0, 1000.0},
    {"freeze_router", "tuner", &TC::freeze_router,
     "Mixture-of-experts full fine-tuning: the routers (mlp.gate) stay as they are. LoRA never "
     "trains them.",
     ""},
    {"adapters", "tuner", &TC::adapters,
     "A PEFT LoRA adapter directory to start training from (its rank, alpha and targets must "
     "match the tuner settings); empty starts a new adapter.",
     "adapters"},

    // optim
    {"learning_rate", "optim", &TC::learning_rate, "Peak learning rate.", "learning_rate", 0.0, 10.0},
    {"lr_scheduler_type", "optim", &TC::lr_scheduler_type, "Learning-rate schedule after warmup.", "lr_scheduler_type",
     -kInf, kInf, kSchedulers},
    {"warmup_ratio", "optim", &TC::warmup_ratio,
     "Share of the total steps spent warming the learning rate up linearly.", "warmup_ratio", 0.0, 1.0},
    {"warmup_steps", "optim", &TC::warmup_steps, "Warmup steps; when > 0 it takes precedence over warmup_ratio.",
     "warmup_steps", 0, 1e9},
    {"weight_decay", "optim", &TC::weight_decay, "AdamW decoupled weight decay.", "weight_decay", 0.0, 10.0},
    {"max_grad_norm", "optim", &TC::max_grad_norm, "Clip the global gradient norm to this value (0 = no clipping).",
     "max_grad_norm", 0.0, 1e6},
    {"adam_beta1", "optim", &TC::adam_beta1, "AdamW beta1.", "adam_beta1", 0.0, 0.9999999},
    {"adam_beta2", "optim", &TC::adam_beta2, "AdamW beta2.", "adam_beta2", 0.0, 0.9999999},
    {"adam_epsilon", "optim", &TC::adam_epsilon, "AdamW epsilon.", "adam_epsilon", 0.0, 1.0},
    {"num_train_epochs", "optim", &TC::num_train_epochs,
     "Passes over the training data (ignored when max_steps is set).", "num_train_epochs", 0.0, 1e6},
    {"max_steps",
     "optim",
     &TC::max_steps,
     "Optimizer steps to run; 'none' runs num_train_epochs.",
     "max_steps",
     -1,
     1e12,
     {},
     "none"},
    {"per_device_train_batch_size", "optim", &TC::per_device_train_batch_size,
     "Sequences (or packed bins) per GPU per micro-step.", "per_device_train_batch_size", 1, 4096},
    {"gradient_accumulation_steps", "optim", &TC::gradient_accumulation_steps,
     "Micro-steps accumulated into one optimizer step.", "gradient_accumulation_steps", 1, 1e6},
    {"seed", "optim", &TC::seed, "Seed for sampling, shuffling, dropout and initialisation.", "seed", 0, 4294967295.0},

    // memory: optimizer state, activations, kernels
    {"use_galore", "memory", &TC::use_galore,
     "GaLore: project gradients of 2-D weights to a low rank and run Adam there (full "
     "fine-tuning only).",
     "use_galore"},
    {"galore_quantization", "memory", &TC::galore_quantization,
     "Q-GaLore: int4 projections and 8-bit optimizer states (needs use_galore).", "galore_quantization"},
    {"galore_rank", "memory", &TC::galore_rank, "Rank of GaLore's gradient projection.", "galore_rank", 1, 65536},
    {"galore_update_proj_gap", "memory", &TC::galore_update_proj_gap,
     "Steps between recomputing GaLore's projection (an SVD of the gradient).", "galore_update_proj_gap", 1, 1e9},
    {"galore_scale", "memory", &TC::galore_scale, "Scale applied to GaLore's projected-back update.", "galore_scale",
     0.0, 1e3},
    {"galore_target_modules", "memory", &TC::galore_target_modules,
     "Weights optimised with GaLore; the rest use AdamW.", "galore_target_modules", -kInf, kInf, kModules},
    {"zero_stage", "memory", &TC::zero_stage,
     "ZeRO stage over every rank (data x sequence parallel, as DeepSpeed-Ulysses): 0 off, 1 "
     "fp32 master weights and optimizer states sharded, 2 also gradients (ms-swift: "
     "--deepspeed zero2).",
     "", 0, 2},
    {"offload_optimizer", "memory", &TC::offload_optimizer,
     "Keep optimizer states and the update on the CPU (pinned, overlapped with compute); "
     "needs zero_stage >= 1 (ms-swift: --deepspeed zero2_offload).",
     ""},
    {"optimizer_dtype", "memory", &TC::optimizer_dtype,
     "Full fine-tuning of 16-bit weights: fp32 keeps fp32 master weights, moments and gradients "
     "(16 bytes per parameter besides the weights; updates smaller than the weights' rounding "
     "step still add up); bf16 updates the weights in their own dtype (6 bytes: gradients and "
     "moments, as transformers' Trainer trains a bf16 model); auto is fp32 under ZeRO, else bf16.",
     "", -kInf, kInf, kOptimizerDtypes},
    {"attn_impl", "memory", &TC::attn_impl,
     "Attention kernel: auto chooses the fastest available (cuDNN or flash on H200, varlen "
     "flash for packed batches), eager is the slow reference.",
     "attn_impl", -kInf, kInf, kAttn},
    {"fused_kernels", "memory", &TC::fused_kernels,
     "Odyssey's fused CUDA kernels: RMSNorm+residual, RoPE, SwiGLU and chunked linear "
     "cross-entropy (ms-swift: --use_liger_kernel).",
     "use_liger_kernel"},
    {"activation_checkpointing", "memory", &TC::activation_checkpointing,
     "Recompute activations in backward: auto (as many layers as the memory budget needs), "
     "all, none, or every:K (every K-th layer).",
     "gradient_checkpointing"},
    {"offload_activations", "memory", &TC::offload_activations,
     "Move checkpointed activations to pinned CPU memory, overlapped with compute: true, false, "
     "or auto (on GPUs, on where the memory planner finds that it fits the budget where keeping "
     "them on the GPU does not, or recomputes less, within the host memory it may pin).",
     "", -kInf, kInf, kOffloadActivations},
    {"mlp_tile_tokens",
     "memory",
     &TC::mlp_tile_tokens,
     "Tiled MLP: run each layer's MLP this many tokens at a time, recomputing each tile in "
     "backward, so its intermediate activations never exist for the whole sequence; auto "
     "tiles only when the memory planner needs it for the job to fit.",
     "",
     0,
     1e9,
     {},
     "auto"},
    {"keep_attention", "memory", &TC::keep_attention,
     "Checkpointed layers keep their attention output (and its log-sum-exp) for backward, so "
     "recomputing the layer skips the attention forward: all, none, or auto (as many layers as "
     "the memory budget allows, on GPUs; with activation_checkpointing auto the two are chosen "
     "together). Padding-free rows, also under Ulysses and ring attention.",
     "", -kInf, kInf, kKeepAttention},
    {"layers_per_checkpoint",
     "memory",
     &TC::layers_per_checkpoint,
     "Checkpointed layers store one input per this many consecutive layers; backward rebuilds "
     "the others with one more forward of those layers. Stored activations shrink N-fold "
     "(on the GPU, or in host memory with offload_activations); auto is 1 unless the job fits "
     "only with more.",
     "",
     0,
     1e6,
     {},
     "auto"},
    {"gpu_memory_budget_gib",
     "memory",
     &TC::gpu_memory_budget_gib,
     "GiB of each GPU the run may use, fractions allowed (32.3): the memory planner's auto choices "
     "fit this budget and the CUDA allocator refuses to go past it (out of memory); auto = the "
     "GPU's whole memory.",
     "",
     1,
     65536,
     {},
     "auto"},

    // parallel
    {"sequence_parallel_size", "parallel", &TC::sequence_parallel_size,
     "GPUs that share one sequence: Ulysses all-to-all over heads, ring attention for the "
     "rest.",
     "sequence_parallel_size", 1, 4096},
    {"ulysses_size",
     "parallel",
     &TC::ulysses_size,
     "Ulysses degree within sequence_parallel_size; auto = gcd(KV heads, "
     "sequence_parallel_size), the remainder is ring attention.",
     "",
     0,
     4096,
     {},
     "auto"},
    {"expert_parallel_size", "parallel", &TC::expert_parallel_size,
     "Mixture-of-experts models: consecutive ranks of a sequence-parallel group that split the "
     "experts, each holding num_experts / expert_parallel_size of them; tokens travel to their "
     "experts by all-to-all. Divides sequence_parallel_size and num_experts.",
     "", 1, 4096},
    {"device", "parallel", &TC::device, "auto trains on the GPUs when there are any, else on the CPU.", "", -kInf, kInf,
     kDevices},
    {"gpu_ids", "parallel", &TC::gpu_ids, "GPUs to use, as CUDA_VISIBLE_DEVICES numbers them; empty = all visible.", "",
     0, 1023},
    {"nproc_per_node",
     "parallel",
     &TC::nproc_per_node,
     "Processes (GPUs) per machine; auto = number of gpu_ids, or 1.",
     "",
     0,
     1024,
     {},
     "auto"},
    {"nnodes", "parallel", &TC::nnodes, "Machines taking part.", "", 1, 4096},

    // output
    {"logging_steps", "output", &TC::logging_steps, "Write a step event every N steps.", "logging_steps", 1, 1e9},
    {"report_to", "output", &TC::report_to,
     "Where metrics go besides events.jsonl: tensorboard (event files in the run's tensorboard/) "
     "or none.",
     "report_to", -kInf, kInf, kReportTo},
    {"eval_steps",
     "output",
     &TC::eval_steps,
     "Evaluate every N steps; auto evaluates when a checkpoint is saved.",
     "eval_steps",
     0,
     1e9,
     {},
     "auto"},
    {"save_steps", "output", &TC::save_steps, "Save a checkpoint every N steps.", "save_steps", 1, 1e9},
    {"save_total_limit", "output", &TC::save_total_limit, "Checkpoints kept; older ones are deleted (0 keeps all).",
     "save_total_limit", 0, 1e6},
    {"output_dir", "output", &TC::output_dir, "Where run directories are created (relative to the current directory).",
     "output_dir"},
    {"resume_from_checkpoint", "output", &TC::resume_from_checkpoint,
     "A checkpoint directory to continue from (model or adapter, optimizer, schedule, data "
     "position); the run writes a new run directory.",
     "resume_from_checkpoint"},
});

std::int64_t gcd64(std::int64_t a, std::int64_t b) { return std::gcd(a, b); }

}  // namespace

std::span<const FieldSpec> train_config_fields() { return kFields; }

const FieldSpec* find_field(std::string_view key) {
  for (const auto& f : kFields)
    if (f.key == key) return &f;
  return nullptr;
}

std::vector<std::string> field_keys() {
  std::vector<std::string> out;
  for (const auto& f : kFields) out.emplace_back(f.key);
  return out;
}

std::span<const std::string_view> field_groups() { return kGroups; }

std::int64_t resolved_nproc_per_node(const TrainConfig& c) {
  if (c.nproc_per_node > 0) return c.nproc_per_node;
  if (!c.gpu_ids.empty()) return static_cast<std::int64_t>(c.gpu_ids.size());
  return 1;
}

ParallelLayout parallel_layout(const TrainConfig& c, std::int64_t kv_heads) {
  ParallelLayout p;
  p.world_size = std::max<std::int64_t>(1, c.nnodes) * resolved_nproc_per_node(c);
  p.sp = std::max<std::int64_t>(1, c.sequence_parallel_size);
  if (c.ulysses_size > 0) p.ulysses = c.ulysses_size;
  else if (kv_heads > 0) p.ulysses = gcd64(kv_heads, p.sp);
  else p.ulysses = p.sp;
  p.ring = p.ulysses > 0 && p.sp % p.ulysses == 0 ? p.sp / p.ulysses : 1;
  p.dp = p.world_size % p.sp == 0 ? p.world_size / p.sp : 1;
  p.ep = std::max<std::int64_t>(1, c.expert_parallel_size);
  return p;
}

std::int64_t sequence_pad_multiple(const ParallelLayout& p) { return p.ring > 1 ? p.ulysses * 2 * p.ring : p.sp; }

bool parse_checkpoint_policy(std::string_view s, CheckpointPolicy* out) {
  CheckpointPolicy p;
  if (s == "auto") p.kind = CheckpointPolicy::Auto;
  else if (s == "all" || s == "true") p.kind = CheckpointPolicy::All;
  else if (s == "none" || s == "false") p.kind = CheckpointPolicy::None;
  else if (text::starts_with(s, "every:")) {
    auto k = text::parse_int(s.substr(6));
    if (!k || *k < 1 || *k > 4096) return false;
    p.kind = CheckpointPolicy::EveryK;
    p.every = *k;
  } else {
    return false;
  }
  if (out) *out = p;
  return true;
}

bool parse_dataset_spec(std::string_view s, DatasetSpec* out, std::string* error) {
  DatasetSpec d;
  auto hash = s.rfind('#');
  std::string_view path = s;
  if (hash != std::string_view::npos) {
    auto n = text::parse_int(s.substr(hash + 1));
    if (!n || *n < 1) {
      if (error)
        *error = "the part after '#' must be a positive sample count, found " + text::quoted(s.substr(hash + 1));
      return false;
    }
    if (*n > kMaxDatasetSamples) {
      if (error)
        *error = "#" + std::to_string(*n) + " asks for more than " + std::to_string(kMaxDatasetSamples) +
                 " samples, the most one dataset argument may select (each is held in memory)";
      return false;
    }
    d.samples = *n;
    path = s.substr(0, hash);
  }
  if (text::trim(path).empty()) {
    if (error) *error = "empty dataset path";
    return false;
  }
  d.path = std::string(path);
  if (out) *out = d;
  return true;
}

std::string sample_request_problem(std::int64_t requested, std::int64_t available) {
  if (requested < 0 || available <= 0) return {};
  if (requested > kMaxDatasetSamples)
    return "#" + std::to_string(requested) + " asks for more than " + std::to_string(kMaxDatasetSamples) +
           " samples, the most one dataset argument may select";
  if (requested / available > kMaxUpsampleFactor ||
      (requested / available == kMaxUpsampleFactor && requested % available != 0))
    return "#" + std::to_string(requested) + " would use each of the file's " + std::to_string(available) +
           " records more than " + std::to_string(kMaxUpsampleFactor) + " times; ask for at most " +
           std::to_string(kMaxUpsampleFactor * available) + " (or use more data)";
  return {};
}

bool uses_lora(const TrainConfig& c) { return c.tuner_type == "lora"; }

bool fp32_master_weights(const TrainConfig& c, bool weights_16bit) {
  if (uses_lora(c) || !weights_16bit) return false;
  if (c.optimizer_dtype == "fp32") return true;
  if (c.optimizer_dtype == "bf16") return false;
  return c.zero_stage > 0;
}

std::int64_t optimizer_zero_stage(const TrainConfig& c, bool weights_16bit) {
  if (c.zero_stage == 0 && c.optimizer_dtype == "fp32" && fp32_master_weights(c, weights_16bit)) return 2;
  return c.zero_stage;
}

}  // namespace odyssey
