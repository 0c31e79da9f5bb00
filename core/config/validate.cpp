#include "config/validate.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/regular_file.h"
#include "config/hf_checkpoint.h"
#include "common/text.h"
#include "data/dataset.h"
#include "data/tokenize.h"
#include "model/decoder_config.h"
#include "model/weights_check.h"
#include "tokenizer/tokenizer.h"

namespace odyssey {
namespace fs = std::filesystem;
namespace {

// One dataset file as `run` reads it (read_dataset_file): its diagnostics and how many records
// it holds, kept while the file's size and modification time stay the same: the window
// re-checks the whole configuration after each edit, and a large dataset is read once, not
// once per keystroke.
struct ParsedDataset {
  Diagnostics diagnostics;
  std::int64_t records = 0;  // non-blank lines of a .jsonl, elements of a .json array
};

ParsedDataset parse_dataset(const std::string& path, double max_bad_sample_ratio) {
  static std::mutex mutex;
  static std::map<std::string, ParsedDataset> cache;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  const auto mtime = fs::last_write_time(path, ec).time_since_epoch().count();
  const std::string id = path + '\n' + std::to_string(size) + '\n' + std::to_string(mtime) + '\n' +
                         text::format_double(max_bad_sample_ratio);
  {
    std::lock_guard lock(mutex);
    if (auto it = cache.find(id); !ec && it != cache.end()) return it->second;
  }
  data::LoadOptions o;
  o.max_bad_sample_ratio = max_bad_sample_ratio;
  auto r = data::read_dataset_file(path, o);
  ParsedDataset out{std::move(r.diagnostics), r.value.report.lines};
  std::lock_guard lock(mutex);
  if (cache.size() >= 64) cache.clear();
  if (!ec) cache[id] = out;
  return out;
}

class Checker {
 public:
  Checker(const LoadedConfig& cfg, Diagnostics* out) : cfg_(cfg), out_(out) {}

  // An error about `key`, located where the key was set (or the file, for a default).
  void error(const std::string& key, std::string msg) { add(Severity::Error, key, std::move(msg)); }
  void warning(const std::string& key, std::string msg) { add(Severity::Warning, key, std::move(msg)); }
  void add(Severity s, const std::string& key, std::string msg) {
    Diagnostic d;
    d.severity = s;
    d.key = key;
    auto it = cfg_.origin.keys.find(key);
    if (it != cfg_.origin.keys.end()) {
      d.file = it->second.file;
      d.line = it->second.line;
      d.column = it->second.column;
    } else {
      d.file = cfg_.origin.file;
      msg += " (" + key + " is at its default here)";
    }
    d.message = std::move(msg);
    out_->push_back(std::move(d));
  }

 private:
  const LoadedConfig& cfg_;
  Diagnostics* out_;
};

std::string n(std::int64_t v) { return std::to_string(v); }

bool path_exists(const std::string& p, const std::string& base, std::string* resolved) {
  std::error_code ec;
  fs::path fp(p);
  if (p == "~" || text::starts_with(p, "~/"))  // as the dataset loader reads it
    fp = data::resolve_dataset_path(p, base);
  std::vector<fs::path> tries;
  if (fp.is_absolute()) tries.push_back(fp);
  else {
    if (!base.empty()) tries.push_back(fs::path(base) / fp);
    tries.push_back(fs::current_path(ec) / fp);
  }
  for (const auto& t : tries)
    if (fs::exists(t, ec)) {
      if (resolved) *resolved = fs::weakly_canonical(t, ec).string();
      return true;
    }
  return false;
}

std::string where_relative(const std::string& base) {
  return base.empty() ? "relative paths resolve against the current directory"
                      : "relative paths resolve against " + base + ", then the current directory";
}

}  // namespace

std::string ulysses_heads_problem(std::int64_t q_heads, std::int64_t kv_heads, std::int64_t ulysses) {
  const auto n = [](std::int64_t v) { return std::to_string(v); };
  if (ulysses <= 1) return "";
  std::string why;
  if (q_heads % ulysses != 0)
    why = "the Ulysses degree " + n(ulysses) + " does not divide the model's " + n(q_heads) +
          " attention heads; choose a degree that divides it and let ring attention take the rest";
  if (kv_heads % ulysses != 0 && ulysses % kv_heads != 0)
    why += (why.empty() ? "the Ulysses degree " + n(ulysses) + " and" : std::string("; also, it and")) +
           " the model's " + n(kv_heads) +
           " KV heads neither divide one another; KV heads can be split or replicated only when one divides the other";
  return why;
}

Diagnostics validate_config(const LoadedConfig& lc, const HfModelConfig* m) {
  Diagnostics out;
  Checker ck(lc, &out);
  const TrainConfig& c = lc.config;

  if (c.model.empty()) ck.error("model", "no model given; expected a Hugging Face model directory or hub id");
  if (c.dataset.empty()) ck.error("dataset", "no training data given; expected one or more JSON/JSONL files");

  // -- tuner-specific settings
  // A setting that does not apply is an error only when it differs from its default: a
  // complete saved preset (every key written) of a full fine-tune stays valid, while a
  // LoRA rank the user set and that would be silently ignored is reported.
  static const TrainConfig defaults;
  auto differs = [&](const char* k) {
    const FieldSpec* f = find_field(k);
    return lc.origin.is_set(k) && f && field_value_text(c, *f) != field_value_text(defaults, *f);
  };
  const bool lora = uses_lora(c);
  if (!lora) {
    for (const char* k :
         {"lora_rank", "lora_alpha", "lora_dropout", "use_rslora", "target_modules", "target_parameters"})
      if (differs(k)) ck.error(k, "is a LoRA setting but tuner_type is full; remove it or set tuner_type: lora");
  }
  if (c.use_galore && lora)
    ck.error("use_galore", "GaLore projects full-weight gradients; it needs tuner_type: full (found lora)");
  if (!c.use_galore) {
    for (const char* k :
         {"galore_quantization", "galore_rank", "galore_update_proj_gap", "galore_scale", "galore_target_modules"})
      if (differs(k)) ck.error(k, "is a GaLore setting but use_galore is false; set use_galore: true or remove it");
  }
  for (const auto& t : c.target_modules)
    if (t == "all-linear" && c.target_modules.size() > 1)
      ck.error("target_modules", "all-linear already names every projection; list either all-linear or modules");
  if (c.target_modules.empty() && lora)
    ck.error("target_modules", "empty; LoRA needs at least one module (or all-linear)");
  if (!c.adapters.empty()) {
    if (c.adapters.size() > 1)
      ck.error("adapters", "found " + n(static_cast<std::int64_t>(c.adapters.size())) +
                               " adapters; Odyssey starts from one (merge the others into the base first: "
                               "odyssey-train export ADAPTER --merge --output DIR, then model: DIR)");
    if (!lora) ck.error("adapters", "an adapter continues LoRA training, so it needs tuner_type: lora (found full)");
    if (!c.resume_from_checkpoint.empty())
      ck.error("adapters",
               "given with resume_from_checkpoint, whose checkpoint holds the adapter that resumes; "
               "give one of the two");
  }
  if (c.report_to.size() > 1 && std::count(c.report_to.begin(), c.report_to.end(), "none") > 0)
    ck.error("report_to",
             "none means no reports besides events.jsonl, so it stands alone; found " + text::join(c.report_to, ", "));

  // -- 4-bit base weights (QLoRA, docs/qlora.md)
  if (c.quant_bits != 0 && c.quant_bits != 4)
    ck.error("quant_bits", c.quant_bits == 8 ? "found 8: 8-bit bases are not supported; use 4 (QLoRA: NF4 or FP4) "
                                               "or 0 (16-bit)"
                                             : "found " + n(c.quant_bits) + "; expected 0 (16-bit base) or 4 (QLoRA)");
  if (c.quant_bits == 4 && !lora)
    ck.error("quant_bits",
             "a 4-bit base is frozen, so it needs tuner_type: lora (found full); full fine-tuning "
             "trains 16-bit weights (quant_bits: 0)");
  if (c.quant_bits == 0) {
    for (const char* k : {"quant_method", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "bnb_4bit_compute_dtype"})
      if (differs(k)) ck.error(k, "is a 4-bit setting but quant_bits is 0; set quant_bits: 4 or remove it");
  }
  if (c.bnb_4bit_compute_dtype != "auto" && c.torch_dtype != "auto" && c.bnb_4bit_compute_dtype != c.torch_dtype)
    ck.error("bnb_4bit_compute_dtype", "found " + c.bnb_4bit_compute_dtype + " with torch_dtype " + c.torch_dtype +
                                           "; Odyssey dequantizes the 4-bit weights to the run's dtype: leave it auto "
                                           "or make the two equal");

  // -- optimizer memory
  if (c.offload_optimizer && c.zero_stage == 0)
    ck.error("offload_optimizer",
             "optimizer offload is part of ZeRO; set zero_stage: 2 (on one GPU too: ZeRO-Offload keeps the "
             "optimizer state in host memory and updates it on the CPU)");
  if (c.use_galore && c.zero_stage > 0)
    ck.error("zero_stage", "ZeRO sharding with GaLore is not supported; use one or the other");
  if (c.optimizer_dtype != "auto") {
    if (lora)
      ck.warning("optimizer_dtype", "found " + c.optimizer_dtype +
                                        " with tuner_type lora; LoRA adapters train in fp32 whatever it says "
                                        "(as PEFT keeps them): it applies to full fine-tuning");
    else if (c.optimizer_dtype == "bf16" && c.zero_stage > 0)
      ck.error("optimizer_dtype", "found bf16 with zero_stage " + n(c.zero_stage) +
                                      "; ZeRO keeps fp32 master weights and moments (DeepSpeed's layout): use "
                                      "optimizer_dtype: auto or fp32, or zero_stage: 0");
    else if (c.optimizer_dtype == "fp32" && c.use_galore)
      ck.error("optimizer_dtype",
               "found fp32 with use_galore; GaLore keeps its projected moments in the "
               "weights' dtype and has no fp32 master weights: use optimizer_dtype: auto");
    else if (c.optimizer_dtype == "bf16" && c.torch_dtype == "float32")
      ck.warning("optimizer_dtype",
                 "found bf16 with torch_dtype float32; the optimizer works in the weights' "
                 "dtype, float32 here");
  }

  // -- steps
  if (c.max_steps < 0 && c.num_train_epochs <= 0)
    ck.error("num_train_epochs", "found 0 with max_steps none; the run would train nothing");
  if (c.max_steps == 0) ck.error("max_steps", "found 0; expected a positive number of steps, or none");
  if (c.warmup_steps > 0 && c.max_steps > 0 && c.warmup_steps >= c.max_steps)
    ck.error("warmup_steps", "found " + n(c.warmup_steps) + ", which is not below max_steps " + n(c.max_steps));
  if (c.warmup_ratio >= 1.0) ck.error("warmup_ratio", "found 1.0; warmup would take the whole run");
  if (c.learning_rate <= 0) ck.error("learning_rate", "found 0; expected a positive learning rate");

  // -- validation data
  if (!c.val_dataset.empty() && c.split_dataset_ratio > 0)
    ck.warning("split_dataset_ratio", "val_dataset is given, so no training data is held out");
  if (lc.origin.is_set("eval_steps") && c.eval_steps > 0 && c.val_dataset.empty() && c.split_dataset_ratio <= 0)
    ck.warning("eval_steps",
               "there is no validation data (val_dataset or split_dataset_ratio), so nothing is evaluated");

  // -- devices and processes
  const std::int64_t nproc = resolved_nproc_per_node(c);
  if (c.device == "cpu") {
    if (!c.gpu_ids.empty()) ck.error("gpu_ids", "device is cpu; GPU ids apply only to cuda");
    if (c.attn_impl == "flash_attn" || c.attn_impl == "cudnn")
      ck.error("attn_impl", "found " + c.attn_impl + " with device cpu; on CPU use auto, sdpa or eager");
    if (c.torch_dtype == "float16")
      ck.error("torch_dtype", "float16 training on CPU is not supported; use float32 or bfloat16");
    if (c.offload_optimizer) ck.error("offload_optimizer", "device is cpu; there is nothing to offload to");
    if (c.offload_activations == "true")
      ck.error("offload_activations", "device is cpu; there is nothing to offload to");
  }
  if (!c.gpu_ids.empty()) {
    std::vector<std::int64_t> ids = c.gpu_ids;
    std::sort(ids.begin(), ids.end());
    if (std::adjacent_find(ids.begin(), ids.end()) != ids.end())
      ck.error("gpu_ids", "a GPU id is listed twice; each GPU runs one process");
    if (c.nproc_per_node > 0 && c.nproc_per_node != static_cast<std::int64_t>(c.gpu_ids.size()))
      ck.error("nproc_per_node", "found " + n(c.nproc_per_node) + " but gpu_ids lists " +
                                     n(static_cast<std::int64_t>(c.gpu_ids.size())) +
                                     " GPUs; one process runs per listed GPU (use auto)");
  }

  // -- checkpoint segments (docs/training.md, "Checkpoint segments")
  if (c.layers_per_checkpoint > 1) {
    CheckpointPolicy policy;
    parse_checkpoint_policy(c.activation_checkpointing, &policy);
    if (c.keep_attention == "all")
      ck.error("layers_per_checkpoint",
               "found " + n(c.layers_per_checkpoint) +
                   " with keep_attention: all; a layer keeping its attention output is a checkpoint of its own, so "
                   "use keep_attention: auto or none, or layers_per_checkpoint: 1");
    if (policy.kind == CheckpointPolicy::None || (policy.kind == CheckpointPolicy::EveryK && policy.every > 1))
      ck.warning("layers_per_checkpoint", "found " + n(c.layers_per_checkpoint) +
                                              " with activation_checkpointing: " + c.activation_checkpointing +
                                              ", which checkpoints no two consecutive layers: it has no effect");
    if (m && m->num_hidden_layers > 0 && c.layers_per_checkpoint > m->num_hidden_layers)
      ck.error("layers_per_checkpoint", "found " + n(c.layers_per_checkpoint) + ", more than the model's " +
                                            n(m->num_hidden_layers) + " layers (num_hidden_layers in config.json)");
  }

  // -- sequence parallelism
  const std::int64_t sp = c.sequence_parallel_size;
  const std::int64_t world = c.nnodes * nproc;
  if (world % sp != 0)
    ck.error("sequence_parallel_size", "found " + n(sp) + " with " + n(world) +
                                           " processes; the process count must be a multiple of it (data parallel = "
                                           "processes / sequence_parallel_size)");
  if (c.ulysses_size > 0 && sp % c.ulysses_size != 0)
    ck.error("ulysses_size", "found " + n(c.ulysses_size) + ", which does not divide sequence_parallel_size " + n(sp));
  if (c.ulysses_size > sp)
    ck.error("ulysses_size", "found " + n(c.ulysses_size) + ", larger than sequence_parallel_size " + n(sp));
  const ParallelLayout p = parallel_layout(c, m ? m->num_key_value_heads : 0);
  // -- mixture of experts (docs/moe.md)
  if (!c.target_parameters.empty()) {
    if (uses_lora(c) && c.lora_dropout > 0)
      ck.error("target_parameters",
               "found with lora_dropout " + text::format_double(c.lora_dropout) +
                   "; adapters on parameters take no dropout (PEFT refuses it too): set lora_dropout: 0");
    for (const auto& t : c.target_parameters)
      if (!t.ends_with("gate_up_proj") && !t.ends_with("down_proj"))
        ck.error("target_parameters",
                 "found " + text::quoted(t) +
                     ", expected a stacked expert parameter: mlp.experts.gate_up_proj or "
                     "mlp.experts.down_proj (or a longer suffix of model.layers.N.mlp.experts.<name>)");
    if (m && !m->is_moe())
      ck.error("target_parameters", "found, but " + m->architecture +
                                        " has no mixture-of-experts layers; its linear layers take target_modules");
  }
  if (m && !m->is_moe() && c.router_aux_loss_coef > 0)
    ck.warning("router_aux_loss_coef", "found " + text::format_double(c.router_aux_loss_coef) + ", but " +
                                           m->architecture + " has no routers; it changes nothing");
  if (c.freeze_router && c.tuner_type == "lora")
    ck.warning("freeze_router", "found with tuner_type lora, which never trains the routers; it changes nothing");
  else if (c.freeze_router && m && !m->is_moe())
    ck.warning("freeze_router", "found, but " + m->architecture + " has no routers; it changes nothing");

  const std::int64_t ep = c.expert_parallel_size;
  if (ep > 1) {
    if (sp % ep != 0)
      ck.error("expert_parallel_size", "found " + n(ep) + ", which does not divide sequence_parallel_size " + n(sp) +
                                           " (the experts are split within a sequence-parallel group)");
    if (c.zero_stage > 0 || c.use_galore)
      ck.error("expert_parallel_size",
               std::string("found ") + n(ep) + " with " +
                   (c.zero_stage > 0 ? "zero_stage " + n(c.zero_stage) : std::string("use_galore")) +
                   "; expert parallelism runs with plain AdamW for now (zero_stage 0, use_galore false)");
    if (!c.resume_from_checkpoint.empty())
      ck.error("expert_parallel_size", "found " + n(ep) +
                                           " with resume_from_checkpoint; resuming a run whose experts are "
                                           "split over ranks is not supported yet");
    if (m && !m->is_moe())
      ck.error("expert_parallel_size",
               "found " + n(ep) + ", but " + m->architecture + " has no mixture-of-experts layers; use 1");
    else if (m && m->num_experts % ep != 0)
      ck.error("expert_parallel_size", "found " + n(ep) + ", which does not divide the model's " + n(m->num_experts) +
                                           " experts (num_experts)");
    else if (m && c.quant_bits == 4 && (m->hidden_size * m->moe_intermediate_size) % 64 != 0)
      // A rank keeps whole 4-bit blocks of its experts (kernels::slice_4bit): an expert's
      // down_proj (hidden × moe_intermediate_size values; gate_up_proj twice that) must be whole
      // blocks of 64.
      ck.error("expert_parallel_size",
               "found " + n(ep) + " with quant_bits 4, but an expert of " + m->architecture + " holds " +
                   n(m->hidden_size * m->moe_intermediate_size) +
                   " values (hidden_size x moe_intermediate_size), not whole 4-bit blocks of 64, so its 4-bit "
                   "experts cannot be split over ranks: use expert_parallel_size 1 or a 16-bit base");
  }
  if (m) {
    if (const std::string why = ulysses_heads_problem(m->num_attention_heads, m->num_key_value_heads, p.ulysses);
        !why.empty())
      ck.error(c.ulysses_size > 0 ? "ulysses_size" : "sequence_parallel_size",
               why + " (ulysses_size 0, auto, uses gcd(KV heads, sequence_parallel_size) = " +
                   n(std::gcd(m->num_key_value_heads, sp)) + ")");
    if (c.tuner_type == "lora") {  // PEFT's rule: at least one targeted module must exist in the model
      const std::vector<std::string> own = linear_module_names(*m);
      bool any = false;
      for (const auto& t : c.target_modules)
        any = any || t == "all-linear" || t == "all_linear" || std::find(own.begin(), own.end(), t) != own.end();
      if (!any && !c.target_modules.empty())
        ck.error("target_modules", "none of " + text::join(c.target_modules, ", ") + " is a module of " +
                                       m->architecture + "; its linear modules are " + text::join(own, ", ") +
                                       " (or all-linear)");
    }
    // Windowed and soft-capped layers under ring attention take the reference ring (exact,
    // dist/sequence_parallel.h, ring_attention): fp32 scores of one block at a time instead of
    // the fused kernels, so say so where Ulysses alone could run them on fused kernels.
    const bool capped = m->attn_logit_softcapping > 0;
    const bool windowed = m->sliding_window > 0 && m->sliding_window < c.max_length;
    if (p.ring > 1 && (capped || windowed))
      ck.warning(
          "sequence_parallel_size",
          "found " + n(sp) + " with a ring degree of " + n(p.ring) + "; " + m->architecture + "'s " +
              (capped ? "soft-capped (attn_logit_softcapping " + text::format_double(m->attn_logit_softcapping) + ")"
                      : "sliding-window (sliding_window " + n(m->sliding_window) + ")") +
              " layers then run the reference ring attention (fp32 scores of one ring block of [heads, tokens / " +
              n(sp) + ", tokens / " + n(sp) + "] at a time) instead of the fused kernels; Ulysses alone " +
              "(ulysses_size = sequence_parallel_size, heads permitting) keeps them on the fused path");
    if (m->max_position_embeddings > 0 && c.max_length > m->max_position_embeddings)
      ck.warning("max_length", "found " + n(c.max_length) + ", beyond the model's max_position_embeddings " +
                                   n(m->max_position_embeddings) +
                                   "; quality past the trained length is not guaranteed");
  }
  if (p.ring > 1) {
    if (!c.packing && !c.padding_free)
      ck.error("sequence_parallel_size", "splits into Ulysses " + n(p.ulysses) + " x ring " + n(p.ring) +
                                             "; ring attention needs packing: true or padding_free: true");
    if (c.attn_impl == "eager" || c.attn_impl == "sdpa" || c.attn_impl == "cudnn")
      ck.error("attn_impl", "found " + c.attn_impl + "; ring attention (ring degree " + n(p.ring) +
                                ") runs on flash attention: use auto or flash_attn");
  }
  if (sp > 1) {
    const std::int64_t mult = sequence_pad_multiple(p);
    if (c.max_length % mult != 0) {
      const std::int64_t lo = c.max_length / mult * mult, hi = lo + mult;
      ck.error("max_length",
               "found " + n(c.max_length) + ", not a multiple of " + n(mult) +
                   (p.ring > 1 ? " (Ulysses " + n(p.ulysses) + " x 2 zigzag chunks x ring " + n(p.ring) + ")"
                               : " (sequence_parallel_size)") +
                   "; every packed sequence is split evenly across GPUs: use " + (lo > 0 ? n(lo) + " or " : "") +
                   n(hi));
    }
    if (c.device == "cpu" && c.attn_impl == "flash_attn") ck.error("attn_impl", "flash_attn needs CUDA");
  }
  // ZeRO shards over every rank (dp × sp), as DeepSpeed-Ulysses does: one process has no one
  // to share its optimizer state with, but can still move it to host memory (ZeRO-Offload).
  if (c.zero_stage > 0 && world == 1 && !c.offload_optimizer)
    ck.error("zero_stage", "found " + n(c.zero_stage) +
                               " with one process; ZeRO shards optimizer state over the "
                               "data- and sequence-parallel ranks (nproc_per_node x nnodes = 1 here): use more GPUs, "
                               "zero_stage: 0, or offload_optimizer: true to keep the optimizer state in host memory");
  // fp32 master weights without ZeRO run as ZeRO-2 over a group of one (optimizer_zero_stage);
  // over several ranks the same state is better sharded, which the user asks for by name.
  if (c.optimizer_dtype == "fp32" && !lora && c.zero_stage == 0 && !c.use_galore && world > 1)
    ck.error("optimizer_dtype",
             "found fp32 with zero_stage 0 over " + n(world) +
                 " processes; fp32 master weights over several ranks are sharded: set zero_stage: 1 or 2 "
                 "(each rank keeps 1/" +
                 n(world) + " of them), or optimizer_dtype: bf16");
  if (c.use_galore && m && m->hidden_size > 0) {
    // The projection's rank cannot exceed the smaller side of any weight it targets.
    const std::int64_t h = m->hidden_size,
                       hd = m->head_dim > 0 ? m->head_dim : h / std::max<std::int64_t>(1, m->num_attention_heads);
    const std::vector<std::pair<std::string, std::int64_t>> sides{
        {"q_proj", std::min(h, m->num_attention_heads * hd)}, {"k_proj", std::min(h, m->num_key_value_heads * hd)},
        {"v_proj", std::min(h, m->num_key_value_heads * hd)}, {"o_proj", std::min(h, m->num_attention_heads * hd)},
        {"gate_proj", std::min(h, m->intermediate_size)},     {"up_proj", std::min(h, m->intermediate_size)},
        {"down_proj", std::min(h, m->intermediate_size)}};
    const bool all = std::find(c.galore_target_modules.begin(), c.galore_target_modules.end(), "all-linear") !=
                     c.galore_target_modules.end();
    for (const auto& [mod, side] : sides) {
      const bool targeted = all || std::find(c.galore_target_modules.begin(), c.galore_target_modules.end(), mod) !=
                                       c.galore_target_modules.end();
      if (targeted && side > 0 && c.galore_rank > side) {
        ck.error("galore_rank", "found " + n(c.galore_rank) + ", larger than the smaller side of the model's " + mod +
                                    " weights (" + n(side) + "); use at most " + n(side) + " or leave " + mod +
                                    " out of galore_target_modules");
        break;
      }
    }
  }
  return out;
}

CheckedConfig check_config(LoadedConfig cfg, bool check_files) {
  CheckedConfig r;
  r.loaded = std::move(cfg);
  const TrainConfig& c = r.loaded.config;
  const ConfigOrigin& o = r.loaded.origin;
  Diagnostics d;
  Checker ck(r.loaded, &d);
  if (!c.model.empty()) {
    r.location = locate_model(c.model, o.base_dir, c.model_revision);
    if (r.location.source == ModelLocation::NotFound) {
      const std::string msg = !r.location.problem.empty()
                                  ? "found " + text::quoted(c.model) + ": " + r.location.problem
                                  : "found " + text::quoted(c.model) + ": no directory with config.json there (" +
                                        where_relative(o.base_dir) + "), and not in the Hugging Face cache (" +
                                        hf_hub_cache_dir().string() + ") or the ModelScope cache (" +
                                        modelscope_cache_dir().string() + ")";
      if (check_files) ck.error("model", msg);
      else ck.warning("model", msg + "; head and memory checks were skipped");
    } else {
      if (!c.model_revision.empty() && r.location.source == ModelLocation::Directory) {
        // A run's config.yaml records the snapshot it trained and its commit: that pair agrees.
        const fs::path dir(r.location.path);
        if (dir.parent_path().filename() != "snapshots" ||
            !text::starts_with(dir.filename().string(), c.model_revision))
          ck.error("model_revision", "found " + text::quoted(c.model_revision) + " with model " +
                                         text::quoted(c.model) +
                                         ", a directory; a revision selects a snapshot of a hub id (org/name) in the "
                                         "Hugging Face cache: drop it, or give the hub id");
      }
      auto mc = load_located_model_config(r.location);
      if (mc.ok()) r.model = mc.value;
      for (auto& x : mc.diagnostics) d.push_back(x);
      // What `run` reads before its first step: the weights' headers against config.json
      // (no tensor data), and the tokenizer's ids against vocab_size. Anything that is not
      // a regular file (a FIFO would block the load for ever) is refused here.
      if (check_files && mc.ok() && r.location.source != ModelLocation::BundledShape) {
        const std::string config_file = (fs::path(r.location.path) / "config.json").string();
        auto w = check_model_weights(*r.model, config_file, r.location.path);
        d.insert(d.end(), w.begin(), w.end());
        // A quantized checkpoint: bitsandbytes 4-bit trains as QLoRA; other methods are refused
        // as the loader refuses them.
        std::string config_text, why;
        if (read_regular_file(config_file, std::uint64_t{64} << 20, &config_text, &why)) {
          auto q = parse_quantization_config(config_text, config_file);
          d.insert(d.end(), q.diagnostics.begin(), q.diagnostics.end());
          if (q.ok() && q.value.prequantized && !uses_lora(c))
            ck.error("tuner_type", "found full with model " + text::quoted(c.model) +
                                       ", a bitsandbytes 4-bit checkpoint (" + config_file +
                                       ": quantization_config): its weights are frozen 4-bit codes; use tuner_type: "
                                       "lora (QLoRA) or the model's 16-bit original");
        }
        const std::string tok_file = (fs::path(r.location.path) / "tokenizer.json").string();
        if (regular_file_problem(tok_file) == "no such file") {
          ck.error("model", "found " + text::quoted(c.model) + ": " + r.location.path +
                                " has no tokenizer.json; training reads the model's tokenizer from it (copy it from "
                                "the model's hub repository)");
        } else {
          auto tok = Tokenizer::load(tok_file);
          for (auto& x : tok.diagnostics)
            if (x.severity == Severity::Error) d.push_back(x);
          if (tok.ok()) {
            auto v = tok.value.check_vocab(r.model->vocab_size, config_file);
            d.insert(d.end(), v.begin(), v.end());
            // The chat template as `run` resolves it: what run refuses, validate refuses.
            std::string template_file;
            if (!c.template_file.empty() && c.template_name == "auto")  // else reported above
              path_exists(c.template_file, o.base_dir, &template_file);
            auto t = data::template_for(c.template_name, tok.value, r.model->family, template_file);
            for (auto& x : t.diagnostics) {
              if (x.file.empty()) ck.add(x.severity, x.key.empty() ? "template" : x.key, x.message);
              else d.push_back(x);
            }
          }
        }
      }
      if (r.location.source == ModelLocation::BundledShape) {
        const std::string msg =
            "found " + text::quoted(c.model) +
            " in neither the Hugging Face nor the ModelScope cache; checked against Odyssey's bundled shape of it";
        if (check_files) ck.error("model", msg + ", but training needs the weights on disk");
        else
          d.push_back({Severity::Note, o.keys.count("model") ? o.keys.at("model").file : o.file,
                       o.keys.count("model") ? o.keys.at("model").line : 0, 0, "model", msg});
      }
    }
  }
  if (!c.template_file.empty()) {
    std::string resolved;
    if (c.template_name != "auto")
      ck.error("template_file", "found with template: " + c.template_name +
                                    "; a template file replaces the model's template, so template must be auto");
    if (!path_exists(c.template_file, o.base_dir, &resolved)) {
      const std::string msg =
          "found " + text::quoted(c.template_file) + ": no such file (" + where_relative(o.base_dir) + ")";
      if (check_files) ck.error("template_file", msg);
      else ck.warning("template_file", msg);
    } else if (const std::string why = regular_file_problem(resolved); !why.empty()) {
      ck.error("template_file", "found " + text::quoted(c.template_file) + ": " + why + "; expected a Jinja file");
    }
  }
  if (!c.resume_from_checkpoint.empty()) {
    // What `run` would find there, knowable without loading anything: a checkpoint of Odyssey
    // (odyssey_state.json; trainer_state.json with micro_batches before it), not a Hugging
    // Face Trainer's (trainer_state.json alone, transformers' schema).
    std::string dir;
    if (!path_exists(c.resume_from_checkpoint, o.base_dir, &dir)) {
      const std::string msg = "found " + text::quoted(c.resume_from_checkpoint) + ": no such directory (" +
                              where_relative(o.base_dir) + ")";
      if (check_files) ck.error("resume_from_checkpoint", msg);
      else ck.warning("resume_from_checkpoint", msg);
    } else if (std::error_code ec; !fs::is_directory(dir, ec)) {
      ck.error("resume_from_checkpoint",
               "found " + text::quoted(c.resume_from_checkpoint) +
                   ": not a directory; expected a checkpoint directory (checkpoints/checkpoint-<step>)");
    } else if (!fs::exists(fs::path(dir) / "odyssey_state.json", ec)) {
      const std::string state = (fs::path(dir) / "trainer_state.json").string();
      std::string text, why;
      nlohmann::json j;
      if (read_regular_file(state, std::uint64_t{64} << 20, &text, &why))
        j = nlohmann::json::parse(text, nullptr, false);
      if (const auto hf = hf_trainer_checkpoint_problem(j, dir)) {
        ck.error("resume_from_checkpoint", state + " " + *hf);
      } else if (!j.is_object()) {
        ck.error("resume_from_checkpoint",
                 "found " + text::quoted(c.resume_from_checkpoint) +
                     ": no odyssey_state.json (nor an older Odyssey trainer_state.json) in " + dir +
                     "; expected a checkpoint directory of Odyssey (checkpoints/checkpoint-<step>)");
      }
    }
  }
  // The adapter to start from: a PEFT LoRA directory whose shape is this preset's.
  for (const auto& adapter : c.adapters) {
    std::string dir;
    if (!path_exists(adapter, o.base_dir, &dir)) {
      const std::string msg =
          "found " + text::quoted(adapter) + ": no such directory (" + where_relative(o.base_dir) + ")";
      if (check_files) ck.error("adapters", msg);
      else ck.warning("adapters", msg);
      continue;
    }
    const std::string cfg_file = (fs::path(dir) / "adapter_config.json").string();
    std::string text, why;
    if (!read_regular_file(cfg_file, std::uint64_t{1} << 20, &text, &why)) {
      ck.error("adapters", cfg_file + " cannot be read (" + why +
                               "); expected a PEFT adapter directory "
                               "(adapter_config.json, adapter_model.safetensors)");
      continue;
    }
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object()) {
      ck.error("adapters", cfg_file + " is not a JSON object");
      continue;
    }
    auto num = [&](const char* k) -> std::optional<double> {
      const auto it = j.find(k);
      return it != j.end() && it->is_number() ? std::optional<double>(it->get<double>()) : std::nullopt;
    };
    if (const auto t = j.find("peft_type"); t != j.end() && t->is_string() && t->get<std::string>() != "LORA")
      ck.error("adapters", cfg_file + ": peft_type is " + t->get<std::string>() + "; Odyssey continues LoRA adapters");
    if (const auto dora = j.find("use_dora"); dora != j.end() && dora->is_boolean() && dora->get<bool>())
      ck.error("adapters", cfg_file + ": use_dora is true; DoRA adapters are not supported");
    std::vector<std::string> differ;
    if (const auto rank = num("r"); rank && *rank != static_cast<double>(c.lora_rank))
      differ.push_back("lora_rank: " + n(static_cast<std::int64_t>(*rank)) + " (the preset has " + n(c.lora_rank) +
                       ")");
    if (const auto a = num("lora_alpha"); a && *a != c.lora_alpha)
      differ.push_back("lora_alpha: " + (std::ostringstream() << *a).str() + " (the preset has " +
                       (std::ostringstream() << c.lora_alpha).str() + ")");
    if (const auto rs = j.find("use_rslora"); rs != j.end() && rs->is_boolean() && rs->get<bool>() != c.use_rslora)
      differ.push_back(std::string("use_rslora: ") + (rs->get<bool>() ? "true" : "false"));
    if (!differ.empty())
      ck.error("adapters", cfg_file + " was trained with other LoRA settings; set " + text::join(differ, ", ") +
                               " to continue it (target_modules are checked against the model when the run starts)");
    if (std::error_code ec; !fs::is_regular_file(fs::path(dir) / "adapter_model.safetensors", ec))
      ck.error("adapters", (fs::path(dir) / "adapter_model.safetensors").string() +
                               ": no such file; expected the "
                               "adapter's weights beside adapter_config.json");
  }
  for (const auto* list : {&c.dataset, &c.val_dataset}) {
    const std::string key = list == &c.dataset ? "dataset" : "val_dataset";
    for (const auto& spec : *list) {
      DatasetSpec ds;
      if (!parse_dataset_spec(spec, &ds, nullptr)) continue;  // reported at load
      std::string resolved;
      if (!path_exists(ds.path, o.base_dir, &resolved)) {
        const std::string msg =
            "found " + text::quoted(ds.path) + ": no such file (" + where_relative(o.base_dir) + ")";
        if (check_files) ck.error(key, msg);
        else ck.warning(key, msg);
        continue;
      }
      // A stat only, so also without --check-files: a FIFO or device is never a dataset.
      if (const std::string why = regular_file_problem(resolved); !why.empty()) {
        ck.error(key, "found " + text::quoted(ds.path) + ": " + why + "; expected a .jsonl or .json file");
        continue;
      }
      if (!check_files) continue;
      // Every record parsed as `run` parses it: an unknown format, no valid sample, or more
      // malformed records than max_bad_sample_ratio allows fail here, not after the model loads.
      const ParsedDataset parsed = parse_dataset(resolved, c.max_bad_sample_ratio);
      d.insert(d.end(), parsed.diagnostics.begin(), parsed.diagnostics.end());
      if (has_errors(parsed.diagnostics)) continue;
      // path#N against the records the file holds.
      if (const std::string why = sample_request_problem(ds.samples, parsed.records); !why.empty())
        ck.error(key, "found " + text::quoted(spec) + ": " + why + " (" + resolved + " holds " +
                          std::to_string(parsed.records) + " records)");
    }
  }
  auto v = validate_config(r.loaded, r.model ? &*r.model : nullptr);
  r.diagnostics = std::move(d);
  r.diagnostics.insert(r.diagnostics.end(), v.begin(), v.end());
  return r;
}

std::optional<std::string> hf_trainer_checkpoint_problem(const nlohmann::json& state, const std::string& dir) {
  if (!state.is_object() || !state.contains("global_step") || state.contains("micro_batches")) return std::nullopt;
  return "is a Hugging Face Trainer checkpoint's state (no odyssey_state.json): Odyssey resumes only its own "
         "checkpoints, whose optimizer state, data position and random state it wrote; to train on from these "
         "weights, set model: to a merged model directory (odyssey-train export " +
         dir + " --merge --output DIR for an adapter)";
}

TrainConfig resolve_paths(const LoadedConfig& lc, const ModelLocation& loc) {
  TrainConfig c = lc.config;
  // A hub id becomes the snapshot it resolved to, and its commit: what a run records is what
  // it trained, even after the cache's refs/main moves on.
  if (loc.source == ModelLocation::Directory || loc.source == ModelLocation::HuggingFaceCache ||
      loc.source == ModelLocation::ModelScopeCache)
    c.model = loc.path;
  if (loc.source == ModelLocation::HuggingFaceCache) c.model_revision = loc.revision;
  for (auto* list : {&c.dataset, &c.val_dataset})
    for (auto& spec : *list) {
      DatasetSpec ds;
      if (!parse_dataset_spec(spec, &ds, nullptr)) continue;
      std::string abs;
      if (path_exists(ds.path, lc.origin.base_dir, &abs))
        spec = abs + (ds.samples > 0 ? "#" + std::to_string(ds.samples) : "");
    }
  for (auto* path : {&c.resume_from_checkpoint, &c.template_file}) {
    std::string abs;
    if (!path->empty() && path_exists(*path, lc.origin.base_dir, &abs)) *path = abs;
  }
  for (auto& path : c.adapters) {
    std::string abs;
    if (path_exists(path, lc.origin.base_dir, &abs)) path = abs;
  }
  return c;
}

}  // namespace odyssey
