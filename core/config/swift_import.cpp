// Mapping ms-swift arguments, YAML keys and environment variables into a TrainConfig.
#include "config/swift_bridge.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/text.h"
#include "config/swift_bridge_internal.h"

namespace odyssey {
namespace swift_detail {
namespace {

using SV = std::string_view;

// ms-swift `sft` arguments (docs/source_en/Instruction/Command-line-parameters.md, base,
// model, data, template, quantization, trainer, tuner and training sections, plus common HF
// TrainingArguments) that Odyssey does not map. Knowing them keeps "did you mean" for real
// typos: --per_device_eval_batch_size is not a misspelt --per_device_train_batch_size.
constexpr SV kKnownSwiftArgs =
    "acc_strategy adalora_beta1 adalora_beta2 adalora_delta adalora_init_r adalora_orth_reg_weight "
    "adalora_target_r adalora_tfinal adalora_tinit adapters add_non_thinking_prefix add_version "
    "agent_template aligner_lr average_tokens_across_devices bf16 "
    "bnb_4bit_quant_storage boft_block_num "
    "boft_block_size boft_dropout cached_dataset cached_val_dataset callbacks check_model columns "
    "create_checkpoint_symlink custom_dataset_info data_seed dataloader_num_workers "
    "dataloader_persistent_workers dataloader_pin_memory dataloader_prefetch_factor dataset_num_proc "
    "dataset_shuffle ddp_backend ddp_find_unused_parameters ddp_timeout deepspeed_autotp_size "
    "device_map disable_auto_column_mapping disable_ignore_empty_think download_mode "
    "early_stop_interval enable_channel_loss enable_dft_loss enable_npu_model_patch enable_thinking "
    "eval_dataset eval_dataset_args eval_generation_config eval_limit eval_metric eval_on_start "
    "eval_strategy eval_use_evalscope experts_impl external_plugins fourier_n_frequency "
    "fourier_scaling fp16 freeze_aligner freeze_llm freeze_parameters freeze_parameters_ratio "
    "freeze_parameters_regex freeze_vit fsdp full_determinism galore_cos_threshold galore_gamma_proj "
    "galore_optim_per_parameter galore_proj_bits galore_proj_group_size galore_proj_quant "
    "galore_proj_type galore_queue_size galore_with_embedding gradient_checkpointing_kwargs "
    "greater_is_better group_by_length hqq_axis hub_model_id hub_private_repo hub_token "
    "ignore_args_error ignore_data_skip init_strategy init_weights interleave_prob "
    "is_binary_loss_scale lazy_tokenize lisa_activated_layers lisa_step_interval "
    "llamapro_num_groups llamapro_num_new_blocks load_args load_data_args load_from_cache_file "
    "local_repo_path logging_dir logging_first_step logging_strategy lora_bias lora_dtype "
    "lora_ga_batch_size lora_ga_direction lora_ga_iters lora_ga_max_length lora_ga_scale "
    "lora_ga_stable_gamma lorap_lr_ratio loss_scale loss_type lr_scheduler_kwargs max_epochs "
    "max_memory max_model_len max_new_tokens max_pixels max_shard_size metric_for_best_model "
    "model_author model_kwargs model_name model_type modules_to_save mrl_dims "
    "neftune_noise_alpha new_special_tokens norm_bbox num_labels optim optim_args optimizer "
    "packing_length packing_num_proc packing_strategy padding_side per_device_eval_batch_size "
    "predict_with_generate preserve_thinking problem_type push_to_hub "
    "reft_args reft_intervention_type reft_layers reft_rank remove_unused_columns report_to "
    "response_prefix resume_from_checkpoint resume_only_model rope_scaling "
    "run_name safe_serialization save_on_each_node save_only_model save_strategy "
    "shuffle_buffer_size stopping_strategy streaming strict swanlab_exp_name swanlab_mode "
    "swanlab_notification_method swanlab_project swanlab_secret swanlab_token swanlab_webhook_url "
    "swanlab_workspace target_regex task_type temperature template_backend "
    "tf32 torch_compile train_dataloader_shuffle trainable_parameters trainable_parameters_regex "
    "tuner_backend use_chat_template use_dora use_flash_ckpt use_hf use_logits_to_keep "
    "val_dataset_shuffle vera_d_initial vera_dropout vera_projection_prng_key vera_rank "
    "vit_gradient_checkpointing vit_lr zero_hpz_partition_size eval_batch_size";

// ms-swift arguments that change what is trained or how the loss is computed, with the
// values that mean "off" (ms-swift's defaults). Any other value is an import error: Odyssey
// would train something else than the command asks for (docs/swift-bridge.md).
struct NotHonoured {
  SV name;
  SV off;
  SV why;
};
constexpr NotHonoured kNotHonoured[] = {
    {"use_dora", "false", "DoRA (weight-decomposed LoRA) is not implemented"},
    {"loss_scale", "default",
     "Odyssey trains every assistant turn (ms-swift's 'default', with its ignore_empty_think "
     "for thinking templates); other loss scales are not implemented"},
    {"disable_ignore_empty_think", "false", "Odyssey never trains an empty think block, as ms-swift's default"},
    {"lora_bias", "none", "LoRA bias terms are not trained by Odyssey"},
    {"lora_dtype", "", "Odyssey keeps LoRA weights in its own precision"},
    {"init_weights", "true",
     "Odyssey initialises LoRA as PEFT's default (Kaiming A, zero B); PiSSA/OLoRA/LoftQ/Gaussian are not implemented"},
    {"modules_to_save", "", "extra fully trained modules beside LoRA are not implemented"},
    {"freeze_parameters", "", "partial freezing is not implemented"},
    {"freeze_parameters_regex", "", "partial freezing is not implemented"},
    {"freeze_parameters_ratio", "0", "partial freezing is not implemented"},
    {"trainable_parameters", "", "partial freezing is not implemented"},
    {"trainable_parameters_regex", "", "partial freezing is not implemented"},
    {"target_regex", "", "LoRA targets are chosen by module name (target_modules)"},
    {"freeze_llm", "false", "Odyssey trains the language model"},
    {"neftune_noise_alpha", "0", "NEFTune embedding noise is not implemented"},
    {"loss_type", "", "Odyssey trains with the token-mean cross-entropy"},
    {"enable_dft_loss", "false", "DFT loss is not implemented"},
    {"enable_channel_loss", "false", "per-channel loss is not implemented"},
    {"optim", "adamw_torch", "Odyssey's optimizer is AdamW (or GaLore AdamW with use_galore)"},
    {"optimizer", "", "ms-swift's plugin optimizers are not implemented"},
    {"lorap_lr_ratio", "", "LoRA+ learning-rate ratios are not implemented"},
    {"lisa_activated_layers", "0", "LISA layer sampling is not implemented"},
    {"rope_scaling", "", "RoPE scaling comes from the model's config.json"},
    {"new_special_tokens", "", "adding tokens to the vocabulary is not implemented"},
    {"task_type", "causal_lm", "Odyssey trains causal language models"},
    {"resume_only_model", "false", "Odyssey resumes the optimizer and data position with the weights"},
    {"lr_scheduler_kwargs", "", "Odyssey's schedules take no extra arguments"},
};

bool means_off(std::vector<std::string> values, SV off) {
  if (values.empty()) return off != "false";  // a bare flag turns a boolean on; a bare list is empty
  for (const auto& v0 : values) {
    std::string v = text::trim(v0);
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    const bool off_value = v == "none" || v.empty() || v == "[]" || v == "{}" || v == off ||
                           (off == "false" && (v == "0" || v == "no")) || (off == "true" && (v == "1" || v == "yes")) ||
                           (off == "0" && (v == "0.0" || v == "0.")) ||
                           (off == "adamw_torch" && (v == "adamw_torch_fused" || v == "adamw_hf")) ||
                           (off == "default" && (v == "ignore_empty_think" || v == "default+ignore_empty_think"));
    if (!off_value) return false;
  }
  return true;
}

// HF/ms-swift learning-rate schedules: Odyssey's name for each, or why it has none.
struct Schedule {
  SV swift, odyssey, why;
};
constexpr Schedule kSchedules[] = {
    {"linear", "linear", ""},
    {"cosine", "cosine", ""},
    {"constant", "constant", ""},
    {"constant_with_warmup", "constant", ""},
    {"cosine_with_restarts", "cosine", ""},  // one cycle (no lr_scheduler_kwargs) is the cosine
    {"polynomial", "", "it decays to lr_end (1e-7 by default) with a power; Odyssey's linear decays to 0"},
    {"cosine_with_min_lr", "", "Odyssey's cosine decays to 0 and has no minimum learning rate"},
    {"cosine_warmup_with_min_lr", "", "Odyssey's cosine decays to 0 and has no minimum learning rate"},
    {"warmup_stable_decay", "", "a warmup-stable-decay schedule is not implemented"},
    {"inverse_sqrt", "", "an inverse-square-root schedule is not implemented"},
    {"reduce_lr_on_plateau", "", "Odyssey's schedules do not depend on the eval loss"},
};

// Older spellings (ms-swift 2.x and 3.x) of arguments that map.
struct Alias {
  SV swift, key;
};
constexpr Alias kAliases[] = {
    {"train_type", "tuner_type"},
    {"sft_type", "tuner_type"},
    {"model_id_or_path", "model"},
    {"custom_train_dataset_path", "dataset"},
    {"custom_val_dataset_path", "val_dataset"},
    {"dtype", "torch_dtype"},
    {"batch_size", "per_device_train_batch_size"},
    {"lora_target_modules", "target_modules"},
    {"lora_dropout_p", "lora_dropout"},
    {"use_flash_attn", "attn_impl"},
};
constexpr SV kSpecialArgs[] = {"deepspeed"};

bool is_secret(SV name) {
  std::string l(name);
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  for (SV s : {"token", "secret", "password", "api_key", "apikey", "credential"})
    if (l.find(s) != std::string::npos) return true;
  return false;
}

// A double-quoted YAML scalar, so set_field_from_text reads exactly the text given.
std::string yq(SV s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\', out += static_cast<char>(ch);
    else if (ch < 0x20 || ch == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x", out += hex[ch >> 4], out += hex[ch & 15];
    } else out += static_cast<char>(ch);
  }
  return out + "\"";
}

const FieldSpec* field_by_swift_name(SV name) {
  for (const auto& f : train_config_fields())
    if (!f.swift_name.empty() && f.swift_name == name) return &f;
  return nullptr;
}

std::string show_arg(const Arg& a) {
  std::string s = "--" + a.name;
  for (const auto& v : a.shown) s += " " + (is_secret(a.name) ? std::string("<hidden>") : text::shell_quote(v));
  return s;
}

}  // namespace

bool Importer::set(const std::string& key, const std::string& yaml, int line, const std::string& from) {
  SourcePos at{file_, lines_ ? line : 0, 0};
  auto d = set_field_from_text(out_.config, key, yaml, at);
  for (auto& x : d)
    if (from != "--" + key) x.message = "from " + from + ": " + x.message;
  d_.insert(d_.end(), d.begin(), d.end());
  if (has_errors(d)) return false;
  out_.origin.keys[key] = at;
  return true;
}

bool Importer::set_values(const FieldSpec& f, const Arg& a, std::vector<std::string> values) {
  const std::string key(f.key), from = "--" + a.name;
  const auto kind = f.member.index();  // 0 bool, 4/5 lists
  if (kind == 4 || kind == 5) {
    std::vector<std::string> q;
    for (const auto& v : values) q.push_back(yq(v));
    return set(key, "[" + text::join(q, ", ") + "]", a.line, from);
  }
  if (values.empty() && kind == 0) values.push_back("true");  // a bare flag
  if (values.size() != 1) {
    error(a.line, key,
          from + " takes one value, found " +
              (values.empty() ? std::string("none") : std::to_string(values.size()) + ": " + show_arg(a)));
    return false;
  }
  return set(key, yq(values[0]), a.line, from);
}

void Importer::env(const std::string& name, const std::string& value, const std::string& shown, int line,
                   bool needs_shell) {
  const std::string item =
      name + "=" + (is_secret(name) ? std::string("<hidden>") : text::shell_quote(shown)) + where(line);
  if (env_defers_ && env_names_.count(name))
    return notes_.push_back(item + " in " + file_ + "'s ENV not imported: the script sets " + name +
                            ", which ms-swift keeps over the config file's");
  env_names_.insert(name);
  if (needs_shell) return needs_shell_.push_back(item);
  if (name == "NPROC_PER_NODE") {
    if (set("nproc_per_node", yq(value), line, name)) nproc_env_ = out_.config.nproc_per_node;
  } else if (name == "CUDA_VISIBLE_DEVICES") {
    if (text::trim(value).empty() || text::trim(value) == "-1") {
      set("device", "cpu", line, name);
      set("gpu_ids", "[]", line, name);
      notes_.push_back("CUDA_VISIBLE_DEVICES=" + text::shell_quote(value) + " hides every GPU: device cpu");
    } else {
      set("gpu_ids", yq(value), line, name);
    }
  } else if (name == "NNODES") {
    set("nnodes", yq(value), line, name);
  } else if (name == "NODE_RANK" || name == "MASTER_ADDR" || name == "MASTER_PORT") {
    launcher_.push_back(item);
  } else if (name == "CELOSS_PARALLEL_SIZE") {
    celoss_ = item;
  } else {
    unsupported_.push_back(item);
  }
}

void Importer::deepspeed(const Arg& a) {
  const std::string v = a.values.size() == 1 ? a.values[0] : std::string();
  const std::map<std::string, std::pair<int, bool>> known{{"zero0", {0, false}}, {"zero1", {1, false}},
                                                          {"zero2", {2, false}}, {"zero2_offload", {2, true}},
                                                          {"zero3", {2, false}}, {"zero3_offload", {2, true}}};
  auto it = known.find(v);
  if (it == known.end())
    return not_honoured_.push_back(show_arg(a) + where(a.line) +
                                   " (a DeepSpeed config file: Odyssey cannot tell its stage; use --deepspeed zero2, "
                                   "zero2_offload, zero1 or zero0)");
  if (text::starts_with(v, "zero3"))
    return not_honoured_.push_back(show_arg(a) + where(a.line) +
                                   " (ZeRO-3 shards the parameters, which Odyssey does not; --deepspeed " +
                                   (it->second.second ? "zero2_offload" : "zero2") +
                                   " shards optimizer states and gradients and keeps the whole model on every GPU)");
  deepspeed_line_ = a.line;
  set("zero_stage", std::to_string(it->second.first), a.line, "--deepspeed");
  set("offload_optimizer", it->second.second ? "true" : "false", a.line, "--deepspeed");
}

bool Importer::cannot_honour(const Arg& a, const std::string& name) {
  for (const auto& n : kNotHonoured)
    if (n.name == name) {
      if (!means_off(a.values, n.off))
        not_honoured_.push_back(show_arg(a) + where(a.line) + " (" + std::string(n.why) + ")");
      return true;
    }
  if (name == "lr_scheduler_type" && a.values.size() == 1) {
    for (const auto& sch : kSchedules)
      if (sch.swift == a.values[0]) {
        if (!sch.odyssey.empty()) return false;  // maps (below)
        not_honoured_.push_back(show_arg(a) + where(a.line) + " (" + std::string(sch.why) +
                                "; Odyssey runs linear, cosine, cosine_with_restarts (one cycle), constant and "
                                "constant_with_warmup)");
        return true;
      }
  }
  return false;
}

void Importer::arg(const Arg& a) {
  if (auto [it, fresh] = seen_.emplace(a.name, a.line); !fresh)
    add(Severity::Warning, a.line, "",
        "--" + a.name + " is given twice" +
            (lines_ ? " (lines " + std::to_string(it->second) + " and " + std::to_string(a.line) + ")"
                    : std::string()) +
            "; the last value counts, as in ms-swift");
  if (a.needs_shell) return needs_shell_.push_back(show_arg(a) + where(a.line));
  std::string name = a.name;
  for (const auto& al : kAliases)
    if (name == al.swift) name = std::string(find_field(al.key)->swift_name);
  const bool maps = field_by_swift_name(name) || name == "deepspeed";
  if (maps && a.values.size() == 1 && a.values[0] == "None") return;  // ms-swift's own default
  std::vector<std::string> v = a.values;
  if (v.empty() && name == "gradient_checkpointing") v = {"true"};  // a bare flag
  auto one = [&]() -> std::string { return v.size() == 1 ? v[0] : std::string(); };

  if (name == "deepspeed") return deepspeed(a);
  if (cannot_honour(a, name)) return;
  if (name == "tuner_type" && v.size() == 1 && one() != "lora" && one() != "full")
    return error(a.line, "tuner_type",
                 "--" + a.name + " " + text::quoted(one()) +
                     ": Odyssey trains lora or full; ms-swift's other tuners are not supported");
  if (a.name == "use_flash_attn") {  // ms-swift 2.x
    auto b = text::parse_bool(one());
    if (b && !*b) return;
    v = {"flash_attn"};
  }
  const std::string x = one();  // ms-swift's spellings of single values, normalised
  if (name == "lr_scheduler_type") hf_constant_ = x == "constant";
  if (name == "attn_impl" && x == "flash_attention_2") v = {"flash_attn"};
  if (name == "attn_impl" && (x == "flash_attention_3" || x == "flash_attention_4")) {
    v = {"flash_attn"};
    notes_.push_back("--attn_impl " + x + " imported as flash_attn: Odyssey picks its flash kernel for the GPU");
  }
  if (name == "torch_dtype" && (x == "bf16" || x == "fp16" || x == "fp32" || x == "AUTO"))
    v = {x == "bf16" ? "bfloat16" : x == "fp16" ? "float16" : x == "fp32" ? "float32" : "auto"};
  if (name == "template" && v.size() == 1 && x != "auto" && x != "chatml" && x != "llama3") {
    if (!text::starts_with(x, "qwen") && !text::starts_with(x, "llama3"))
      return unsupported_.push_back(show_arg(a) + where(a.line) + " (template stays auto)");
    notes_.push_back("--template " + x + " imported as auto: Odyssey picks the template from the model family");
    v = {"auto"};
  }
  if (name == "report_to") {  // a reporting target changes nothing trained: keep what Odyssey writes, list the rest
    std::vector<std::string> kept, other;
    for (const auto& r : v) {
      if (r == "tensorboard" || r == "all") kept.push_back("tensorboard");
      else if (r == "none" || r == "None") continue;
      else other.push_back(r);
    }
    if (!other.empty())
      unsupported_.push_back("--report_to " + text::join(other, " ") + where(a.line) +
                             " (Odyssey reports to tensorboard)");
    v = kept.empty() ? std::vector<std::string>{"none"} : std::vector<std::string>{"tensorboard"};
  }
  if (name == "lr_scheduler_type" && x == "constant_with_warmup") v = {"constant"};
  if (name == "lr_scheduler_type" && x == "cosine_with_restarts") {
    v = {"cosine"};
    notes_.push_back(
        "--lr_scheduler_type cosine_with_restarts imported as cosine: with one cycle (no "
        "lr_scheduler_kwargs) they are the same schedule");
  }
  if (name == "target_modules" || name == "galore_target_modules")
    for (auto& m : v)
      if (m == "ALL" || m == "all") m = "all-linear";
  if (name == "system" && v.size() == 1) {
    std::string r;  // ms-swift turns a written \n into a newline
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (x[i] == '\\' && i + 1 < x.size() && x[i + 1] == 'n') r += '\n', ++i;
      else r += x[i];
    }
    if (x.ends_with(".txt"))
      add(Severity::Warning, a.line, "system",
          "--system " + text::quoted(x) +
              " names a file that ms-swift would read; Odyssey imports the text as written");
    v = {r};
  }
  if (const FieldSpec* f = field_by_swift_name(name)) {
    set_values(*f, a, std::move(v));
    return;
  }
  std::vector<std::string> known;
  for (const auto& f : train_config_fields())
    if (!f.swift_name.empty()) known.emplace_back(f.swift_name);
  for (SV s : kSpecialArgs) known.emplace_back(s);
  for (const auto& al : kAliases) known.emplace_back(al.swift);
  const std::string all = " " + std::string(kKnownSwiftArgs) + " ";
  if (all.find(" " + name + " ") == std::string::npos)
    if (auto near = text::closest(name, known)) {
      add(Severity::Warning, a.line, "",
          show_arg(a) + ": unknown ms-swift argument, not imported; did you mean --" + *near + "?");
      return;
    }
  unsupported_.push_back(show_arg(a) + where(a.line));
}

Result<LoadedConfig> Importer::finish() {
  TrainConfig& c = out_.config;
  auto given = [&](const char* key) { return out_.origin.is_set(key); };
  std::vector<std::string> defaults;
  if (nproc_env_ && given("gpu_ids") && static_cast<std::size_t>(*nproc_env_) == c.gpu_ids.size())
    c.nproc_per_node = 0;  // auto: one process per listed GPU, the same thing
  if (!nproc_env_ && c.gpu_ids.size() > 1) {
    c.nproc_per_node = 1;
    notes_.push_back(
        "no NPROC_PER_NODE: ms-swift runs one process that spreads the model over the listed GPUs; "
        "imported as nproc_per_node 1 (set it to auto for data parallelism)");
  }
  if (deepspeed_line_ && c.zero_stage > 0 && std::max<std::int64_t>(1, c.nnodes) * resolved_nproc_per_node(c) == 1) {
    if (c.offload_optimizer) {
      // DeepSpeed's ZeRO-Offload on one process: the optimizer state in host memory, as here.
      notes_.push_back("--deepspeed" + where(deepspeed_line_) +
                       " with one process: ZeRO-Offload, the optimizer state kept in host memory and updated on "
                       "the CPU (zero_stage " +
                       std::to_string(c.zero_stage) + ", offload_optimizer true)");
    } else {
      // DeepSpeed on one process has nothing to shard over, but still trains a bf16 full
      // fine-tune with fp32 master weights, gradients and moments: optimizer_dtype fp32
      // (docs/optimizers.md). LoRA adapters are fp32 either way.
      const bool masters = c.tuner_type == "full" && !c.use_galore;
      if (masters) c.optimizer_dtype = "fp32";
      notes_.push_back("--deepspeed" + where(deepspeed_line_) +
                       " with one process: nothing to shard over, imported as zero_stage 0" +
                       (masters ? std::string(" with optimizer_dtype fp32 (DeepSpeed's fp32 master weights, "
                                              "gradients and moments)")
                                : std::string()));
      c.zero_stage = 0;
    }
  }
  if (c.device == "cpu" && c.attn_impl == "flash_attn") {
    // ms-swift's packing and padding-free insist on flash_attn; there is no flash kernel on the CPU.
    c.attn_impl = "auto";
    notes_.push_back(
        "--attn_impl flash_attn with every GPU hidden: imported as attn_impl auto (no flash kernel on the CPU)");
  }
  if (!given("learning_rate") && c.tuner_type == "full") {
    c.learning_rate = 1e-5;
    defaults.push_back("learning_rate 1e-05 (full tuning)");
  }
  if (!given("gradient_accumulation_steps")) {
    const double world = static_cast<double>(std::max<std::int64_t>(1, c.nnodes) * resolved_nproc_per_node(c));
    c.gradient_accumulation_steps = std::max<std::int64_t>(
        1, static_cast<std::int64_t>(std::ceil(16.0 / static_cast<double>(c.per_device_train_batch_size) / world)));
    defaults.push_back("gradient_accumulation_steps " + std::to_string(c.gradient_accumulation_steps) +
                       " (a total batch of at least 16)");
  }
  if (c.use_galore) {
    if (!given("galore_update_proj_gap")) c.galore_update_proj_gap = 50;
    if (!given("galore_scale")) c.galore_scale = 1.0;
  }
  if (!given("num_train_epochs") && !given("max_steps")) defaults.push_back("num_train_epochs 3");
  if (!given("save_total_limit")) defaults.push_back("save_total_limit 0 (keep every checkpoint)");
  if (hf_constant_ && (c.warmup_ratio > 0 || c.warmup_steps > 0)) {
    c.warmup_ratio = 0;
    c.warmup_steps = 0;
    notes_.push_back(
        "--lr_scheduler_type constant ignores warmup in ms-swift (transformers); imported with no "
        "warmup (use constant_with_warmup for a warmup)");
  }
  if (!given("max_length"))
    add(Severity::Warning, 0, "max_length",
        "not set: ms-swift would use the model's maximum length; Odyssey uses " + std::to_string(c.max_length) +
            " (set max_length)");
  if (!celoss_.empty()) {
    if (c.fused_kernels)
      notes_.push_back(celoss_ + " not imported: Odyssey's fused_kernels compute the loss in chunks");
    else unsupported_.push_back(celoss_ + " (chunked loss comes with fused_kernels)");
  }
  if (!defaults.empty())
    add(Severity::Note, 0, "", "ms-swift's defaults for what the command leaves out: " + text::join(defaults, ", "));
  for (const auto& n : notes_) add(Severity::Note, 0, "", n);
  if (!launcher_.empty())
    add(Severity::Note, 0, "",
        "launcher-only settings, not imported (Odyssey's launcher sets them on each machine): " +
            text::join(launcher_, ", "));
  if (!needs_shell_.empty())
    add(Severity::Warning, 0, "",
        "values that need a shell to compute (Odyssey runs nothing), not imported: " + text::join(needs_shell_, ", "));
  if (!unsupported_.empty())
    add(Severity::Warning, 0, "", "not supported by Odyssey, not imported: " + text::join(unsupported_, ", "));
  if (!not_honoured_.empty())
    add(Severity::Error, 0, "",
        "ms-swift arguments whose meaning Odyssey cannot honour (the run would train something else than the command "
        "asks for): " +
            text::join(not_honoured_, "; ") + ". Remove them, or change them to what Odyssey does, and import again");
  Result<LoadedConfig> r;
  r.value = std::move(out_);
  r.diagnostics = std::move(d_);
  return r;
}

}  // namespace swift_detail

TrainConfig swift_import_baseline() {
  TrainConfig c;
  c.num_train_epochs = 3.0;  // ms-swift (transformers) default
  c.save_total_limit = 0;    // None: keep every checkpoint
  return c;
}

// ---- YAML ---------------------------------------------------------------------------------

Result<LoadedConfig> import_swift_yaml(std::string_view yaml, const std::string& file) {
  swift_detail::Importer im(file, true);
  if (!swift_detail::feed_swift_yaml(im, yaml)) return im.abort();
  auto r = im.finish();
  r.value.origin.file = file;
  return r;
}

bool swift_detail::feed_swift_yaml(Importer& im, std::string_view yaml) {
  auto fail = [&](int line, std::string msg) {
    im.error(line, "", std::move(msg));
    return false;
  };
  if (static_cast<std::int64_t>(yaml.size()) > kMaxPresetBytes)
    return fail(0, "the file is " + std::to_string(yaml.size()) + " bytes; an ms-swift config is at most " +
                       std::to_string(kMaxPresetBytes));
  if (text::trim(yaml).empty()) return fail(0, "the file is empty; expected ms-swift arguments such as 'model:'");
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return fail(e.mark.is_null() ? 0 : e.mark.line + 1, "invalid YAML: " + e.msg);
  }
  if (!root.IsMap()) return fail(0, "expected a mapping of ms-swift arguments such as 'model:' and 'dataset:'");
  auto line_of = [](const YAML::Node& n) { return n.Mark().is_null() ? 0 : n.Mark().line + 1; };
  for (const auto& kv : root) {
    const int line = line_of(kv.first);
    if (!kv.first.IsScalar()) {
      im.error(line, "", "a key that is not a name; expected ms-swift argument names");
      continue;
    }
    const std::string key = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (key == "ENV") {
      if (!v.IsMap()) {
        im.error(line, "", "ENV: expected a mapping of environment variables");
        continue;
      }
      for (const auto& e : v)
        if (e.first.IsScalar() && e.second.IsScalar())
          im.env(e.first.Scalar(), e.second.Scalar(), e.second.Scalar(), line_of(e.first), false);
        else im.error(line_of(e.first), "", "ENV: expected NAME: value pairs");
      continue;
    }
    swift_detail::Arg a;
    a.name = key;
    std::replace(a.name.begin(), a.name.end(), '-', '_');
    a.line = line;
    if (v.IsNull()) a.values = {"None"};
    else if (v.IsScalar()) a.values = {v.Scalar()};
    else if (v.IsSequence()) {
      bool ok = true;
      for (const auto& item : v) {
        ok = ok && item.IsScalar();
        if (ok) a.values.push_back(item.Scalar());
      }
      if (!ok) {
        im.error(line, "", key + ": expected a list of plain values");
        continue;
      }
    } else {
      a.values = {"<a mapping>"};  // JSON-valued arguments (model_kwargs …): none map
    }
    a.shown = a.values;
    im.arg(a);
  }
  return true;
}

}  // namespace odyssey
