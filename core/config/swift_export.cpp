// export_swift_command: a TrainConfig as the equivalent `swift sft` command.
#include "config/swift_bridge.h"

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "common/text.h"

namespace odyssey {
namespace {

using SV = std::string_view;

std::vector<std::string> raw_values(const TrainConfig& c, const FieldSpec& f) {
  return std::visit(
      [&](auto m) -> std::vector<std::string> {
        using M = std::remove_cvref_t<decltype(c.*m)>;
        const auto& v = c.*m;
        if constexpr (std::is_same_v<M, bool>) return {v ? "true" : "false"};
        else if constexpr (std::is_same_v<M, std::int64_t>) return {std::to_string(v)};
        else if constexpr (std::is_same_v<M, double>) return {text::format_double(v)};
        else if constexpr (std::is_same_v<M, std::string>) return {v};
        else if constexpr (std::is_same_v<M, std::vector<std::string>>) return v;
        else {
          std::vector<std::string> out;
          for (auto i : v) out.push_back(std::to_string(i));
          return out;
        }
      },
      f.member);
}

}  // namespace

std::string export_swift_command(const TrainConfig& c) {
  static const TrainConfig defaults;
  const TrainConfig base = swift_import_baseline();
  TrainConfig galore = base;  // ms-swift's GaLore defaults
  galore.galore_update_proj_gap = 50;
  galore.galore_scale = 1.0;
  std::vector<std::string> env, args, only;
  auto emit = [&](SV name, const std::vector<std::string>& vals) {
    std::string a = "--" + std::string(name);
    if (vals.size() == 1 && !vals[0].empty() && vals[0][0] == '-' && !text::parse_double(vals[0]))
      a += "=" + text::shell_quote(vals[0]);  // argparse would take a leading '-' for an option
    else
      for (const auto& v : vals) a += " " + text::shell_quote(v);
    args.push_back(std::move(a));
  };
  auto odyssey_only = [&](const FieldSpec& f) { only.push_back(std::string(f.key) + "=" + field_value_text(c, f)); };
  static const std::set<SV> always{"model",
                                   "tuner_type",
                                   "max_length",
                                   "learning_rate",
                                   "num_train_epochs",
                                   "per_device_train_batch_size",
                                   "gradient_accumulation_steps",
                                   "output_dir"};
  const bool lora = uses_lora(c);
  for (const auto& f : train_config_fields()) {
    const SV key = f.key;
    const bool differs = field_value_text(c, f) != field_value_text(base, f);
    if (key == "dataset" || key == "val_dataset") {
      if (!raw_values(c, f).empty()) emit(f.swift_name, raw_values(c, f));
    } else if (key == "system") {
      std::string s;
      for (char ch : c.system) s += ch == '\n' ? std::string("\\n") : std::string(1, ch);
      if (differs) emit(f.swift_name, {s});
    } else if (key == "lora_alpha") {
      if (!(lora || differs)) continue;
      if (c.lora_alpha == std::floor(c.lora_alpha) && std::abs(c.lora_alpha) < 1e15)
        emit(f.swift_name, {std::to_string(static_cast<std::int64_t>(c.lora_alpha))});
      else odyssey_only(f);  // ms-swift's lora_alpha is an integer
    } else if (key == "lr_scheduler_type" && c.lr_scheduler_type == "constant") {
      emit(f.swift_name, {c.warmup_ratio > 0 || c.warmup_steps > 0 ? "constant_with_warmup" : "constant"});
    } else if (text::starts_with(key, "galore_")) {
      if (c.use_galore && field_value_text(c, f) != field_value_text(galore, f) &&
          !(key == "galore_target_modules" && c.galore_target_modules == std::vector<std::string>{"all-linear"}))
        emit(f.swift_name, raw_values(c, f));
    } else if (key == "zero_stage") {
      if (c.zero_stage == 2) emit("deepspeed", {c.offload_optimizer ? "zero2_offload" : "zero2"});
      else if (c.zero_stage == 1) emit("deepspeed", {"zero1"});
      // fp32 master weights without ZeRO (one process, validate's rule): what DeepSpeed ZeRO-2
      // does on one process, which shards nothing (import maps it back).
      else if (c.optimizer_dtype == "fp32" && !lora && !c.use_galore) emit("deepspeed", {"zero2"});
      if (c.offload_optimizer && c.zero_stage < 2) odyssey_only(*find_field("offload_optimizer"));
    } else if (key == "optimizer_dtype") {
      // Written with zero_stage above; bf16 without ZeRO is ms-swift's own training without
      // DeepSpeed, and with LoRA the key changes nothing.
    } else if (key == "attn_impl") {
      // ms-swift's packing and padding-free need flash attention (it refuses them otherwise);
      // Odyssey's auto picks its flash kernel on a GPU too.
      if (c.packing || c.padding_free) {
        emit(f.swift_name, {"flash_attn"});
        if (c.attn_impl != "auto" && c.attn_impl != "flash_attn") odyssey_only(f);
      } else if (c.attn_impl == "cudnn") {
        emit(f.swift_name, {"sdpa"}), odyssey_only(f);
      } else if (differs) {
        emit(f.swift_name, {c.attn_impl});
      }
    } else if (key == "fused_kernels") {
      // Liger's kernels are Odyssey's fused ones on a GPU; Liger (Triton) has no CPU path, and
      // without the argument both sides fuse what they can (import's default).
      if (!c.fused_kernels) emit(f.swift_name, {"false"});
      else if (c.device != "cpu") emit(f.swift_name, {"true"});
    } else if (key == "activation_checkpointing") {
      CheckpointPolicy p;
      parse_checkpoint_policy(c.activation_checkpointing, &p);
      if (p.kind != CheckpointPolicy::Auto) emit(f.swift_name, {p.kind == CheckpointPolicy::None ? "false" : "true"});
      if (p.kind == CheckpointPolicy::EveryK) odyssey_only(f);
    } else if (key == "device") {
      if (c.device == "cpu") env.push_back("CUDA_VISIBLE_DEVICES=''");
      else if (c.device != "auto") odyssey_only(f);
    } else if (key == "gpu_ids") {
      std::vector<std::string> ids = raw_values(c, f);
      if (c.device == "cpu" && !ids.empty()) odyssey_only(f);
      else if (!ids.empty()) env.push_back("CUDA_VISIBLE_DEVICES=" + text::shell_quote(text::join(ids, ",")));
    } else if (key == "nproc_per_node") {
      if (c.nproc_per_node != 0 || c.gpu_ids.size() > 1)
        env.insert(env.begin(), "NPROC_PER_NODE=" + std::to_string(resolved_nproc_per_node(c)));
    } else if (key == "nnodes") {
      if (c.nnodes > 1) env.push_back("NNODES=" + std::to_string(c.nnodes));
    } else if (f.swift_name.empty()) {  // offload_optimizer is written with zero_stage above
      if (key != "offload_optimizer" && field_value_text(c, f) != field_value_text(defaults, f)) odyssey_only(f);
    } else if (differs || always.count(key) || (lora && (key == "lora_rank" || key == "target_modules")) ||
               (key == "quant_method" && c.quant_bits == 4)) {  // ms-swift has no default method
      emit(f.swift_name, raw_values(c, f));
    }
  }
  if (c.sequence_parallel_size > 1 && c.fused_kernels) env.push_back("CELOSS_PARALLEL_SIZE=2048");

  std::string out;
  if (c.nnodes > 1) out += "# On each machine also set NODE_RANK (0 to NNODES-1), MASTER_ADDR and MASTER_PORT.\n";
  for (const auto& e : env) out += e + " \\\n";
  out += "swift sft";
  for (const auto& a : args) out += " \\\n    " + a;
  out += "\n";
  if (!only.empty()) out += "# Odyssey-only settings not expressible in swift: " + text::join(only, ", ") + "\n";
  return out;
}

}  // namespace odyssey
