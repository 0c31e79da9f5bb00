#include "planner/memory_planner.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "planner/kept_attention.h"
#include "planner/memory_terms.h"

namespace odyssey {

namespace {

using i64 = std::int64_t;
using planner_detail::Eval;
using planner_detail::Terms;

// "12.34 GiB", or MiB/KiB for small amounts.
std::string gib(i64 bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b >= 0.01 * static_cast<double>(planner::kGiB))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / static_cast<double>(planner::kGiB));
  else if (b >= 0.1 * static_cast<double>(planner::kMiB))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / static_cast<double>(planner::kMiB));
  else std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  return buf;
}
std::string millions(i64 n) {
  char buf[32];
  if (n >= 1'000'000'000) std::snprintf(buf, sizeof buf, "%.2f B", static_cast<double>(n) / 1e9);
  else if (n >= 1'000'000) std::snprintf(buf, sizeof buf, "%.1f M", static_cast<double>(n) / 1e6);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}
std::string num(i64 v) { return std::to_string(v); }
std::string text_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

CheckpointPolicy policy_of(const TrainConfig& c, bool* ok) {
  CheckpointPolicy p;
  *ok = parse_checkpoint_policy(c.activation_checkpointing, &p);
  if (!*ok) p = CheckpointPolicy{};
  return p;
}

i64 planned_peak(const Terms& t, const CheckpointPolicy& pol) {
  i64 every = 0;
  const i64 ck = planner_detail::choose_checkpointing(t, pol, &every);
  return planner_detail::evaluate(t, ck, every).peak;
}

// The job's terms with the MLP tiled as configured: mlp_tile_tokens N > 0 tiles at N; auto (0)
// tiles on GPUs only when the untiled job does not fit: at planner::kMlpTileTokens, or, when
// that does not fit either, at the largest of its halves (down to kMlpTileTokensMin)
// that fits, else the one with the lowest peak, and only if tiling lowers it (the engine
// follows the plan: core/train/trainer.cpp).
// The smallest tile auto tries: GEMMs of 2K rows on a 4K-8K-wide model still keep the tensor
// cores mostly busy, and below it the tile's gate/up are no longer what bounds the peak.
constexpr i64 kMlpTileTokensMin = 2048;

Terms terms_of(const TrainConfig& c, const HfModelConfig& m, const PlannerOptions& o, const CheckpointPolicy& pol) {
  Terms t = planner_detail::compute_terms(c, m, o);
  if (!t.valid) return t;
  if (c.mlp_tile_tokens > 0) {
    planner_detail::tile_mlp(t, c.mlp_tile_tokens);
    return t;
  }
  if (!t.cuda) return t;
  const i64 untiled = planned_peak(t, pol);
  if (untiled <= t.capacity) return t;
  Terms best = t;
  i64 best_peak = untiled;
  for (i64 tile = planner::kMlpTileTokens; tile >= kMlpTileTokensMin; tile /= 2) {
    Terms tiled = t;
    planner_detail::tile_mlp(tiled, tile);
    if (tiled.mlp_tile == 0) continue;  // the job has no more tokens than one tile
    const i64 peak = planned_peak(tiled, pol);
    if (peak < best_peak) best = tiled, best_peak = peak;
    if (peak <= t.capacity) break;
  }
  return best;
}

// Within the GPU's capacity, and what goes to the host within what it may take.
bool fits_both(const Terms& t, const Eval& e) {
  return e.peak <= t.capacity && t.host_optimizer + e.host_acts <= t.host_capacity;
}

// The layers' choice for `t0`. On a GPU, when it does not fit: if only the host is short, the
// most kept attention outputs (keep_attention auto) that fit; else, with layers_per_checkpoint
// auto, the fewest layers per stored input that fit, over every layer (or the chosen ones when
// only the host was short), keeping no attention output.
struct Chosen {
  Terms t;
  planner_detail::LayerChoice lc;
  Eval e;
};
Chosen choose(const Terms& t0, const CheckpointPolicy& pol, const TrainConfig& c) {
  Chosen r{t0, planner_detail::choose_layers(t0, pol, c.keep_attention), {}};
  r.e = planner_detail::evaluate(r.t, r.lc.checkpointed, r.lc.every, r.lc.kept, r.lc.mlp, r.lc.offload, r.lc.park);
  if (c.layers_per_checkpoint > 0 || !t0.cuda || fits_both(r.t, r.e) || c.keep_attention == "all" || r.lc.every > 1)
    return r;
  const bool gpu_fits = r.e.peak <= t0.capacity;
  // Only the host is short: fewer kept attention outputs (parked there with offload) first.
  if (gpu_fits && c.keep_attention == "auto")
    for (i64 k = r.lc.kept - 1; k >= 0; --k) {
      const Eval e = planner_detail::evaluate(r.t, r.lc.checkpointed, r.lc.every, k, r.lc.mlp, r.lc.offload, r.lc.park);
      if (fits_both(r.t, e)) {
        r.lc.kept = k;
        r.e = e;
        return r;
      }
    }
  const i64 n = pol.kind == CheckpointPolicy::Auto && !gpu_fits ? t0.layers : r.lc.checkpointed;
  const i64 mlp = gpu_fits ? r.lc.mlp : 0, offload = gpu_fits ? r.lc.offload : 0;
  if (n < 2) return r;
  // Segments trade stored inputs (⌈n / N⌉ of them) for rebuilt ones (N − 1 while a segment's
  // backward runs): on the GPU the fewest bytes are at N = 2 with offload (two stored inputs
  // there at most) and around √n without. When those N all leave the GPU short, the search
  // stops there (largest_max_length probes many lengths that fit with no N).
  {
    const auto root = static_cast<i64>(std::sqrt(static_cast<double>(n)));
    bool any = false;
    for (const i64 seg : t0.offload_acts ? std::vector<i64>{2} : std::vector<i64>{root - 1, root, root + 1, root + 2}) {
      if (seg < 2 || seg > n || any) continue;
      Terms t = t0;
      t.segment = seg;
      any = planner_detail::evaluate(t, n, 0, 0, mlp, offload).peak <= t.capacity;
    }
    if (!any) return r;
  }
  for (i64 seg = 2; seg <= n; ++seg) {
    Terms t = t0;
    t.segment = seg;
    const Eval e = planner_detail::evaluate(t, n, 0, 0, mlp, offload);
    if (fits_both(t, e)) return {t, {n, 0, 0, e.mlp_layers, e.offload_layers}, e};
  }
  return r;
}

// Forward FLOPs recomputed a step: checkpointed layers (less the attention of kept ones), MLP
// recomputation, and the layers a checkpoint segment runs again.
double recomputed_flops(const Chosen& ch) {
  const i64 rebuilt = ch.lc.checkpointed - std::min(ch.lc.checkpointed, ch.e.stored_segments);
  return planner_detail::recompute_flops(ch.t, ch.lc.checkpointed, ch.e.kept_layers, ch.e.mlp_layers,
                                         ch.e.park_layers) +
         static_cast<double>(rebuilt) * (ch.t.recompute_linear_flops + ch.t.recompute_attention_flops);
}

// Whether offloading (`with`) is the better plan than keeping everything on the GPU (`without`):
// it fits where the GPU alone does not, or fits too and recomputes less by kOffloadRecomputeGain.
bool offload_wins(const Chosen& without, const Chosen& with) {
  if (!fits_both(with.t, with.e)) return false;
  return !fits_both(without.t, without.e) ||
         recomputed_flops(with) < (1.0 - planner::kOffloadRecomputeGain) * recomputed_flops(without);
}

// The job as planned: offload_activations auto resolved (on GPUs planned both ways, offload_wins
// deciding; off on CPUs), with its terms and layer choice. `c` is left as given; the config the
// plan is for comes back in `planned`; when auto chose offload, `gpu_only` (if given) gets the
// plan without it.
Chosen choose_job(const TrainConfig& c, const HfModelConfig& m, const PlannerOptions& o, const CheckpointPolicy& pol,
                  TrainConfig* planned, bool* auto_on, Chosen* gpu_only = nullptr) {
  *planned = c;
  *auto_on = false;
  const bool auto_offload = c.offload_activations == "auto";
  if (auto_offload) planned->offload_activations = "false";
  const Terms t0 = terms_of(*planned, m, o, pol);
  if (!t0.valid) return {t0, {}, {}};
  Chosen ch = choose(t0, pol, *planned);
  if (!auto_offload || !t0.cuda) return ch;
  // Nothing to gain: it fits and recomputes nothing.
  if (fits_both(ch.t, ch.e) && recomputed_flops(ch) <= 0.0) return ch;
  TrainConfig with = *planned;
  with.offload_activations = "true";
  const Terms tw = terms_of(with, m, o, pol);
  Chosen cw = choose(tw, pol, with);
  if (!offload_wins(ch, cw)) return ch;
  *planned = with;
  *auto_on = true;
  if (gpu_only != nullptr) *gpu_only = ch;
  return cw;
}

bool plan_fits(const TrainConfig& c, const HfModelConfig& m, const PlannerOptions& o, const CheckpointPolicy& pol) {
  if (!out_of_reach(c, m, o).empty()) return false;
  // Under auto the job fits when either way fits (choose_job then takes the one that fits):
  // offload first, the leaner on the GPU, so most probes of a length search stop there. On a
  // CPU the two are the same plan (nothing is offloaded there).
  TrainConfig x = c;
  const bool auto_offload = c.offload_activations == "auto";
  if (auto_offload) x.offload_activations = "true";
  const Terms t = terms_of(x, m, o, pol);
  if (!t.valid) return false;
  const Chosen ch = choose(t, pol, x);
  if (fits_both(ch.t, ch.e)) return true;
  if (!auto_offload || !t.cuda) return false;
  x.offload_activations = "false";
  const Chosen off = choose(terms_of(x, m, o, pol), pol, x);
  return fits_both(off.t, off.e);
}

class ItemBuilder {
 public:
  explicit ItemBuilder(MemoryPlan* p) : p_(p) {}
  void add(const char* name, const char* group, i64 bytes, std::string detail, bool at_peak = true) {
    if (bytes <= 0) return;
    p_->items.push_back({name, group, bytes, std::move(detail), at_peak});
  }

 private:
  MemoryPlan* p_;
};

void add_items(MemoryPlan& plan, const Terms& t, const Eval& e, const TrainConfig& c) {
  ItemBuilder ib(&plan);
  const int ph = e.phase;
  const std::string dtype = t.act_b == 4 ? "fp32" : (c.torch_dtype == "float16" ? "fp16" : "bf16");
  const i64 dp = std::max<i64>(1, t.layout.dp);
  const std::string shard = t.zero_stage >= 1 && dp > 1 ? ", ZeRO-" + num(t.zero_stage) + " shard of " + num(dp) : "";

  // runtime
  ib.add(t.cuda ? "CUDA context" : "process runtime", "runtime", t.runtime,
         t.cuda ? "context + cuBLAS + attention kernels, outside the allocator (measured, H200)"
                : "LibTorch CPU libraries and thread pools (estimate)");
  ib.add("NCCL buffers", "runtime", t.nccl,
         "communicators and their channel/p2p buffers, outside the allocator (measured on 2 × H200)");
  ib.add("allocator fragmentation", "runtime", e.fragmentation,
         "5% of the " + gib(e.phase_bytes[ph]) + " the caching allocator holds at the peak");

  // model
  ib.add("weights", "model", t.weights,
         c.quant_bits == 4
             ? millions(t.params) + " parameters: the decoder projections" + (t.experts_4bit ? " and experts" : "") +
                   " in 4 bits (" + c.bnb_4bit_quant_type +
                   (c.bnb_4bit_use_double_quant ? ", double quantization" : "") +
                   ") with the largest one's dequantization working set, the rest × " + num(t.act_b) + " B (" + dtype +
                   ", frozen)"
             : millions(t.params) + " parameters × " + num(t.act_b) + " B (" + dtype + (t.lora ? ", frozen)" : ")"));
  ib.add("LoRA adapters", "model", t.adapters,
         millions(t.trainable) + " parameters × 4 B (fp32, r=" + num(c.lora_rank) + ")");

  // gradients
  const i64 grads_all = t.grads_layers + t.grads_other;
  const i64 grads_now = ph == 0 ? (t.grads_persistent ? grads_all : 0) : ph == 1 ? e.bwd_grads : grads_all;
  const bool pure_grads = t.hf ? !t.lora : (!t.lora && t.zero_stage == 0);  // in the weights' dtype
  const std::string gdetail = std::string(pure_grads ? num(t.act_b) + " B" : "fp32") + " per trained parameter" +
                              (t.zero_stage >= 2 && dp > 1 ? ", ZeRO-2 shard of " + num(dp) : "") +
                              (t.galore_per_layer ? ", except GaLore-targeted weights (projected per layer)" : "");
  ib.add("gradients", "gradients", grads_now,
         gdetail + (grads_now < grads_all ? " (" + gib(grads_now) + " of " + gib(grads_all) + " exist at this moment)"
                                          : std::string()));
  if (grads_now < grads_all) ib.add("gradients", "gradients", grads_all, gdetail + " (all, after backward)", false);
  const i64 galore_now = ph == 0 ? (t.grads_persistent ? t.galore_accum : 0) : ph == 1 ? e.bwd_galore : t.galore_accum;
  const std::string galore_detail =
      "fp32 r × max(in, out) per targeted matrix, held from backward to the update" +
      (c.gradient_accumulation_steps > 1
           ? " and accumulated over " + num(c.gradient_accumulation_steps) + " micro-steps"
           : std::string());
  ib.add("GaLore projected gradients", "gradients", galore_now,
         galore_detail + (galore_now < t.galore_accum ? " (" + gib(galore_now) + " at this moment)" : std::string()));
  if (galore_now < t.galore_accum)
    ib.add("GaLore projected gradients", "gradients", t.galore_accum, galore_detail + " (all, after backward)", false);
  ib.add("gradient buckets", "communication", t.grad_buckets, "2 × 25 MiB all-reduce buckets in flight", ph != 0);

  // optimizer
  ib.add("master weights", "optimizer", t.master, "fp32 copy of the bf16 weights" + shard);
  ib.add("AdamW states", "optimizer", t.adam,
         std::string(pure_grads ? "m, v in the parameter dtype" : "m, v fp32 (8 B per parameter)") + shard);
  ib.add("GaLore projections", "optimizer", t.galore_proj,
         std::string(c.galore_quantization ? "int4" : "fp32") +
             " r × min(in, out) per targeted matrix, r=" + num(c.galore_rank));
  ib.add("GaLore states", "optimizer", t.galore_states,
         std::string(c.galore_quantization ? "8-bit blockwise" : "fp32") + " m, v of r × max(in, out)");
  ib.add("optimizer step temporaries", "optimizer", t.step_tmp, "foreach AdamW: a copy of the second moments", ph == 2);

  // activations
  const bool acts_at_peak = ph != 2;
  ib.add("tokens, positions, rotary tables", "activations", t.misc, num(t.tokens) + " tokens", acts_at_peak);
  const std::string per_layer = gib(t.layer_full) + " per layer (" + num(t.per_token_layer) + " B per token)";
  std::string mlp_detail = e.mlp_layers > 0 ? "; " + num(e.mlp_layers) + " of them " + gib(t.mlp_recompute_saved) +
                                                  " less, their MLP's gate and up recomputed in backward"
                                            : std::string();
  if (e.offload_layers > 0)
    mlp_detail += "; " + num(e.offload_layers) + " of them " + gib(t.mlp_offload_saved) +
                  " less while their MLP's gate and up are on the host";
  const std::string recompute_detail =
      "one checkpointed layer's activations, rebuilt in backward" +
      (e.bwd_parked > 0 ? "; the parked gate and up of the layer below it, " + gib(e.bwd_parked) + ", prefetched"
                        : std::string());
  if (ph == 1) {
    ib.add("checkpointed layer inputs", "activations", e.bwd_inputs,
           t.segment > 1 ? "stored inputs below the layer in backward, and its segment's inputs rebuilt below it"
                         : "inputs of the checkpointed layers below the one in backward");
    ib.add("stored layer activations", "activations", e.bwd_full, per_layer + mlp_detail);
    ib.add("recomputed layer", "activations", e.bwd_recompute, recompute_detail);
    ib.add("kept attention outputs", "activations", e.bwd_kept,
           "attention outputs of the kept layers below the one in backward (" + gib(t.attn_kept) + " each)");
  } else {
    ib.add("checkpointed layer inputs", "activations", e.stored_inputs,
           num(e.stored_segments) + " inputs × " + gib(t.layer_in) +
               (e.stored_segments < plan.checkpointed_layers
                    ? " (" + num(plan.checkpointed_layers) + " layers, up to " + num(t.segment) + " per stored input)"
                    : std::string()) +
               (t.offload_acts ? " (at most 2 on the GPU, the rest offloaded)" : ""),
           acts_at_peak);
    ib.add("stored layer activations", "activations", e.stored_full, per_layer + mlp_detail, acts_at_peak);
    ib.add("recomputed layer", "activations", plan.checkpointed_layers > 0 ? t.layer_full : 0,
           "one checkpointed layer's activations, rebuilt in backward", false);
    ib.add("kept attention outputs", "activations", e.stored_kept,
           num(plan.attention_kept_layers) + " layers × " + gib(t.attn_kept) +
               " (output and log-sum-exp; their recomputation skips the attention forward)",
           acts_at_peak);
  }
  const std::int64_t bwd_attn = e.kept_layers > 0 ? t.bwd_attn_kept : t.bwd_attn;
  const bool attn_side = bwd_attn + t.a2a + t.ring > t.bwd_mlp;
  ib.add("layer backward working set", "activations", attn_side ? bwd_attn : t.bwd_mlp,
         attn_side ? (e.kept_layers > 0 && t.bwd_attn_kept > t.bwd_attn
                          ? "attention backward from a kept output: dq/dk/dv, K/V repeated to the query heads"
                          : "attention backward: dq/dk/dv, fp32 dq accumulator")
         : t.mlp_tile > 0
             ? "MLP backward of one " + num(t.mlp_tile) + "-token tile: its gate, up, act and their gradients"
             : std::string("MLP backward: gradients of gate, up, act"),
         ph == 1);
  ib.add("Ulysses all-to-all staging", "communication", t.a2a,
         "permuted send copy + receive buffer of q/k/v (and their gradients)", ph == 1 && attn_side);
  ib.add("ring attention buffers", "communication", t.ring,
         "double-buffered K/V, fp32 dK/dV riding the ring, fp32 dq accumulator", ph == 1 && attn_side);
  ib.add("per-layer transient gradients", "gradients", t.layer_grads_tmp,
         t.galore_per_layer ? "one layer's gradients, GaLore update and projection refresh"
                            : "one layer's " + dtype + " gradients before fp32 accumulation",
         ph == 1);

  // loss
  ib.add("loss working set", "loss", t.loss,
         t.fused_loss ? "fused linear cross-entropy: " + num(t.loss_chunk) + "-token chunk of logits (" +
                            (t.cuda ? dtype + ", its gradient written over it" : dtype + " + fp32 softmax") +
                            "), gradient of the hidden states, final norm"
         : t.hf ? std::string("full logits: fp32 log-softmax, its gradient and the logits' gradient "
                              "(12 B per logit) + the model output's logits held through backward, final norm")
                : "reference ops: " + num(t.loss_chunk) +
                      "-token chunks of logits recomputed in backward (12 B per logit of one chunk), final norm",
         ph == 0);
}

void add_notes(MemoryPlan& plan, const Terms& t, const TrainConfig& c, const PlannerOptions& o, bool policy_ok) {
  auto& n = plan.notes;
  if (t.hf) n.push_back("modelled as Hugging Face transformers + PEFT (unfused ops, fp32 adapter inputs, output held)");
  if (c.device == "auto")
    n.push_back(std::string("device auto planned as ") + (t.cuda ? "cuda" : "cpu") +
                (o.auto_device == "cpu" ? "" : " (the engine uses the CPU when it finds no GPU)"));
  if (!t.cuda)
    n.push_back("capacity is the host's RAM (" +
                gib(o.host_memory_bytes > 0 ? o.host_memory_bytes : host_memory_bytes()) + ") shared by " +
                num(t.procs_per_node) + " process(es)");
  if (t.cuda && c.gpu_memory_budget_gib > 0)
    n.push_back("capacity: gpu_memory_budget_gib " + text_double(c.gpu_memory_budget_gib) + " caps the GPU at " +
                gib(plan.capacity_bytes));
  if (!policy_ok)
    n.push_back("activation_checkpointing " + c.activation_checkpointing + " is not a policy; planned as auto");
  const std::string ck = num(plan.checkpointed_layers) + " of " + num(plan.total_layers) + " layers checkpointed";
  if (c.activation_checkpointing == "auto" || !policy_ok)
    n.push_back(!plan.fits
                    ? std::string("activation_checkpointing auto: does not fit even with every layer checkpointed") +
                          (t.cuda && c.layers_per_checkpoint == 0 ? " (nor with checkpoint segments)" : "")
                : plan.attention_kept_layers > 0 && c.keep_attention == "auto"
                    ? "activation_checkpointing auto: " + ck +
                          " (the least recomputation that fits: a layer keeping its attention output recomputes "
                          "only its projections)"
                    : "activation_checkpointing auto: " + ck + " (the fewest that fit)");
  if (t.dropout_per_layer > 0)
    n.push_back("lora_dropout " + text_double(c.lora_dropout) + " keeps a dropped copy of each adapter's input (" +
                gib(t.dropout_per_layer) + " per stored layer); lora_dropout 0 shares the projection's input" +
                (t.hf ? "" : ", and fused_kernels true keeps no copy with or without dropout"));
  if (c.zero_stage > 0 && t.layout.world_size <= 1)
    n.push_back(
        "ZeRO with one process shards nothing" +
        std::string(c.offload_optimizer ? "; it only moves the optimizer state to host memory (ZeRO-Offload)" : ""));
  // Full fine-tuning in the weights' 16-bit dtype (optimizer_dtype auto without ZeRO): say what
  // that loses and what fp32 masters would cost (master 4 + fp32 m, v 8 + fp32 gradients 4,
  // against bf16 gradients and moments 6: 10 B per trained parameter more).
  if (!t.hf && !t.lora && t.act_b < 4 && t.zero_stage == 0 && !c.use_galore && c.optimizer_dtype == "auto")
    n.push_back("optimizer_dtype auto: AdamW updates the " + std::string(c.torch_dtype == "float16" ? "fp16" : "bf16") +
                " weights in place, as transformers' Trainer does, so updates below a weight's rounding step are "
                "lost; optimizer_dtype: fp32 keeps fp32 master weights, moments and gradients (" +
                gib(10 * t.trainable) + " more)");
  if (plan.host_bytes > plan.host_capacity_bytes)
    n.push_back("host memory: what is offloaded (" + gib(plan.host_bytes) + " per process) exceeds the " +
                gib(plan.host_capacity_bytes) + " the host can pin (" +
                num(std::lround(planner::kHostOffloadShare * 100)) + "% of its RAM, shared by " +
                num(t.procs_per_node) + " process(es))" +
                (c.layers_per_checkpoint == 1 ? "; layers_per_checkpoint auto stores fewer inputs" : ""));
  if (plan.layers_per_checkpoint > 1 && plan.checkpointed_layers > 1)
    n.push_back("checkpoint segments: up to " + num(plan.layers_per_checkpoint) +
                " consecutive checkpointed layers share one stored input (" + num(plan.stored_checkpoints) +
                " stored for " + num(plan.checkpointed_layers) + " layers); backward rebuilds the others" +
                (c.layers_per_checkpoint == 0 ? " (layers_per_checkpoint auto: only this fits)" : "") +
                ", one more forward of " + num(plan.checkpointed_layers - plan.stored_checkpoints) + " layers a step");
  // A LoRA job that does not fit: its AdamW moments can leave the GPU (ZeRO-Offload, also on
  // one process); the gradients stay, in fp32, as they are already.
  if (!plan.fits && t.cuda && t.lora && c.zero_stage == 0 && !c.use_galore && t.adam > 0)
    n.push_back("zero_stage: 2 with offload_optimizer: true keeps the AdamW moments (" + gib(t.adam) +
                ") in host memory and updates them on the CPU (ZeRO-Offload; on one GPU too)");
  if (t.galore_per_layer)
    n.push_back("GaLore projects each weight's gradient to rank " + num(c.galore_rank) +
                " as backward produces it; the update follows backward (clipping needs the global norm)");
  if (c.attn_impl == "eager") n.push_back("eager attention stores s² attention probabilities per layer");
  if (plan.attention_kept_layers > 0)
    n.push_back("keep_attention " + c.keep_attention + ": " + num(plan.attention_kept_layers) + " of " +
                num(plan.checkpointed_layers) + " checkpointed layers keep their attention output");
  if (plan.mlp_recomputed_layers > 0)
    n.push_back("MLP recomputation: " + num(plan.mlp_recomputed_layers) +
                " layers that are not checkpointed keep none of "
                "their MLP's intermediates (" +
                gib(t.mlp_recompute_saved) +
                " each), recomputing gate and up in backward: two projections instead of a whole layer");
  if (plan.mlp_offloaded_layers > 0)
    n.push_back("MLP offload: " + num(plan.mlp_offloaded_layers) +
                " layers that are not checkpointed keep their MLP's "
                "gate and up (" +
                gib(t.mlp_offload_saved) + " each) in pinned host memory from forward until backward is " +
                num(planner::mlp_offload_lead(plan.mlp_offloaded_layers)) + " layers above them; at most " +
                num(t.mlp_offload_max) + " layers, what the host link moves in one forward");
  if (plan.mlp_parked_layers > 0)
    n.push_back("MLP park: " +
                (plan.mlp_park_stride > 1 ? num(plan.mlp_parked_layers) + " checkpointed layers, one in every " +
                                                num(plan.mlp_park_stride) + " from the first (each pair has " +
                                                num(plan.mlp_park_stride) + " layers' forward on the host link), "
                                          : "the first " + num(plan.mlp_parked_layers) + " checkpointed layers ") +
                "send their MLP's gate and up (" + gib(t.mlp_offload_saved) +
                " each) to pinned host memory in forward and take them back in backward instead of recomputing two "
                "projections; each comes back while the layer above it is in backward; at most " +
                num(t.mlp_offload_max) + " layers with the MLP offload tier, what the host link moves in one forward");
  if (t.mlp_tile > 0)
    n.push_back("tiled MLP: " + num(t.mlp_tile) + " tokens per tile" +
                (c.mlp_tile_tokens > 0 ? std::string() : " (mlp_tile_tokens auto: the job does not fit untiled)"));
}

}  // namespace

std::int64_t MemoryPlan::allocated_bytes() const {
  i64 s = 0;
  for (const auto& it : items)
    if (it.at_peak && it.group != "runtime") s += it.bytes;
  return s;
}

std::string out_of_reach(const TrainConfig& c, const HfModelConfig& m, const PlannerOptions& o) {
  using ld = long double;
  const ld h = static_cast<ld>(m.hidden_size), L = static_cast<ld>(m.num_hidden_layers);
  const ld heads = static_cast<ld>(m.num_attention_heads);
  const ld kv = static_cast<ld>(m.num_key_value_heads > 0 ? m.num_key_value_heads : m.num_attention_heads);
  const ld d = m.head_dim > 0 ? static_cast<ld>(m.head_dim) : (heads > 0 ? h / heads : 0);
  const ld V = static_cast<ld>(m.vocab_size), I = static_cast<ld>(m.intermediate_size);
  if (h <= 0 || L <= 0 || V <= 0) return {};  // an unknown shape: plan_memory says so
  const ld params = L * (2 * h * heads * d + 2 * h * kv * d + 3 * h * I) + V * h * (m.tie_word_embeddings ? 1 : 2);
  const bool cuda = c.device == "cuda" || (c.device != "cpu" && o.auto_device != "cpu");
  const ld b = c.torch_dtype == "float32" || (c.torch_dtype == "auto" && !cuda) ? 4 : 2;
  const ld sp = static_cast<ld>(std::max<i64>(1, c.sequence_parallel_size));
  const ld tokens = static_cast<ld>(std::max<i64>(1, c.per_device_train_batch_size)) *
                    static_cast<ld>(std::max<i64>(1, c.max_length)) / sp;
  const ld weights = params * b, acts = tokens * b * (L * h + I);
  i64 device_mem = cuda ? (o.gpu_memory_bytes > 0 ? o.gpu_memory_bytes : planner::kH200MemoryBytes)
                        : (o.host_memory_bytes > 0 ? o.host_memory_bytes : host_memory_bytes()) /
                              std::max<i64>(1, resolved_nproc_per_node(c));
  if (cuda && c.gpu_memory_budget_gib > 0)
    device_mem = std::min(device_mem, planner::budget_bytes(c.gpu_memory_budget_gib));
  const ld capacity = static_cast<ld>(std::max<i64>(1, device_mem));
  // 2^62: past it the planner's 64-bit sums could overflow, whatever the capacity.
  const ld limit = std::min<ld>(capacity * planner::kOutOfReachFactor, std::ldexp(1.0L, 62));
  if (weights + acts <= limit) return {};
  auto g = [](ld bytes) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.4Lg GiB", bytes / static_cast<ld>(planner::kGiB));
    return std::string(buf);
  };
  return "the job needs at least " + g(weights + acts) + " per " + (cuda ? "GPU" : "process") + " (weights " +
         g(weights) + " for " + std::to_string(m.num_hidden_layers) + " layers of hidden_size " +
         std::to_string(m.hidden_size) + ", intermediate_size " + std::to_string(m.intermediate_size) +
         ", vocab_size " + std::to_string(m.vocab_size) + "; activations " + g(acts) + " for " +
         std::to_string(static_cast<i64>(tokens)) + " tokens), more than " +
         std::to_string(static_cast<i64>(planner::kOutOfReachFactor)) + " times the " + g(capacity) +
         " available: check config.json's sizes and max_length x per_device_train_batch_size";
}

MemoryPlan plan_memory(const TrainConfig& c, const HfModelConfig& m, const PlannerOptions& o) {
  MemoryPlan plan;
  plan.refused = out_of_reach(c, m, o);
  if (!plan.refused.empty()) {
    plan.total_layers = m.num_hidden_layers;
    plan.notes.push_back("not planned: " + plan.refused);
    return plan;
  }
  bool policy_ok = true;
  const CheckpointPolicy pol = policy_of(c, &policy_ok);
  TrainConfig pc;  // c with offload_activations auto resolved
  bool auto_on = false;
  Chosen cn;  // auto chose offload: the plan without it
  const Chosen ch = choose_job(c, m, o, pol, &pc, &auto_on, &cn);
  const Terms& t = ch.t;
  plan.device = t.cuda ? "cuda" : "cpu";
  plan.layout = t.valid ? t.layout : parallel_layout(c, m.num_key_value_heads);
  plan.total_layers = m.num_hidden_layers;
  if (!t.valid) {
    plan.notes.push_back("the model's shape is unknown (hidden_size, layers, heads or vocab_size missing)");
    return plan;
  }
  if (c.fused_kernels)
    for (const std::string& op : fused_kernel_gaps(m)) plan.notes.push_back("fused kernels fall back for " + op);
  plan.mlp_tile_tokens = t.mlp_tile;
  plan.offload_activations = t.offload_acts;
  const planner_detail::LayerChoice& lc = ch.lc;
  const Eval& e = ch.e;
  plan.checkpointed_layers = lc.checkpointed;
  plan.checkpoint_every = lc.every;
  plan.layers_per_checkpoint = t.segment;
  plan.stored_checkpoints = e.stored_segments;
  plan.attention_kept_layers = e.kept_layers;
  plan.mlp_recomputed_layers = e.mlp_layers;
  plan.mlp_offloaded_layers = e.offload_layers;
  plan.mlp_parked_layers = e.park_layers;
  plan.mlp_park_stride = e.park_layers > 0 ? e.park_stride : 1;
  plan.tokens_per_gpu = t.tokens;
  plan.capacity_bytes = t.capacity;
  plan.peak_bytes = e.peak;
  plan.fits = fits_both(t, e);
  static const char* const kPhases[] = {"loss", "backward", "optimizer step"};
  plan.peak_phase = kPhases[e.phase];
  plan.host_bytes = t.host_optimizer + e.host_acts;
  plan.host_capacity_bytes = t.host_capacity;
  add_items(plan, t, e, pc);
  add_notes(plan, t, pc, o, policy_ok);
  if (auto_on)
    plan.notes.push_back(std::string("offload_activations auto: on, since it ") +
                         (fits_both(cn.t, cn.e) ? "recomputes less" : "fits where the GPU alone does not") + ": " +
                         num(lc.checkpointed) + " layers checkpointed, " + num(e.kept_layers) +
                         " of them keeping attention (without offload " + num(cn.lc.checkpointed) + " and " +
                         num(cn.e.kept_layers) + (fits_both(cn.t, cn.e) ? "" : ", not fitting") + "), " +
                         gib(plan.host_bytes) + " in host memory; the copies overlap compute");
  // What offload_activations would change, when it is set to false and the plan recomputes or
  // does not fit: the same job planned with it (its host memory checked as any plan's).
  if (t.cuda && c.offload_activations == "false" && c.activation_checkpointing == "auto" &&
      (!plan.fits || lc.checkpointed > 0)) {
    TrainConfig with = pc;
    with.offload_activations = "true";
    const Chosen cw = choose(terms_of(with, m, o, pol), pol, with);
    if (offload_wins(ch, cw))
      plan.notes.push_back(std::string("offload_activations: true would ") + (plan.fits ? "recompute less" : "fit") +
                           ": " + num(cw.lc.checkpointed) + " layers checkpointed, " + num(cw.e.kept_layers) +
                           " of them keeping attention (now " + num(lc.checkpointed) + " and " + num(e.kept_layers) +
                           "), " + gib(cw.e.peak) + " on the GPU and " + gib(cw.t.host_optimizer + cw.e.host_acts) +
                           " in host memory; the copies overlap compute");
  }
  return plan;
}

std::int64_t largest_max_length(const TrainConfig& c, const HfModelConfig& m, const PlannerOptions& o) {
  bool ok = true;
  const CheckpointPolicy pol = policy_of(c, &ok);
  const i64 mult = std::max<i64>(1, sequence_pad_multiple(parallel_layout(c, m.num_key_value_heads)));
  const i64 nmax = planner::kMaxSearchLength / mult;
  TrainConfig cc = c;
  auto fits = [&](i64 n) {
    cc.max_length = n * mult;
    return plan_fits(cc, m, o, pol);
  };
  if (nmax < 1 || !fits(1)) return 0;
  i64 lo = 1, hi = 2;  // fits(lo); !fits(hi) or hi past the range
  while (true) {
    if (hi > nmax) {
      hi = nmax + 1;
      break;
    }
    if (!fits(hi)) break;
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const i64 mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo * mult;
}

std::int64_t smallest_sequence_parallel_size(const TrainConfig& c, const HfModelConfig& m, const PlannerOptions& o,
                                             std::int64_t max_world) {
  const i64 heads = m.num_attention_heads;
  const i64 kv = m.num_key_value_heads > 0 ? m.num_key_value_heads : heads;
  if (heads <= 0) return 0;
  bool ok = true;
  const CheckpointPolicy pol = policy_of(c, &ok);
  const i64 world = std::max<i64>(1, c.nnodes) * resolved_nproc_per_node(c);
  TrainConfig cc = c;
  for (i64 sp = 1; sp <= max_world; ++sp) {
    cc.sequence_parallel_size = sp;
    cc.ulysses_size = c.ulysses_size > 0 && sp % c.ulysses_size == 0 ? c.ulysses_size : 0;
    cc.expert_parallel_size = sp % c.expert_parallel_size == 0 ? c.expert_parallel_size : 1;  // it divides sp
    if (world % sp == 0 && world >= sp) {
      cc.nnodes = c.nnodes, cc.nproc_per_node = c.nproc_per_node, cc.gpu_ids = c.gpu_ids;
    } else {
      cc.nnodes = 1, cc.nproc_per_node = sp, cc.gpu_ids.clear();
    }
    const ParallelLayout p = parallel_layout(cc, kv);
    if (heads % p.ulysses != 0 || (kv % p.ulysses != 0 && p.ulysses % kv != 0)) continue;
    if (p.ring > 1 && ((!c.packing && !c.padding_free) || (c.attn_impl != "auto" && c.attn_impl != "flash_attn")))
      continue;
    if (c.max_length % sequence_pad_multiple(p) != 0) continue;
    if (plan_fits(cc, m, o, pol)) return sp;
  }
  return 0;
}

bool attention_keepable(const TrainConfig& c, const HfModelConfig& m, bool cuda) {
  // Soft-capped layers keep through tiled attention on any device and dtype; under sequence
  // parallelism they take the override's masked path, which keeps nothing.
  if (m.attn_logit_softcapping > 0) return c.sequence_parallel_size <= 1;
  const bool windowed = m.sliding_window > 0 && m.sliding_window < c.max_length;
  if (!windowed) return true;
  const bool half = c.torch_dtype == "bfloat16" || c.torch_dtype == "float16" || (c.torch_dtype == "auto" && cuda);
  return c.sequence_parallel_size <= 1 && c.attn_impl != "eager" && (!cuda || (half && m.head_dim <= 256));
}

bool keeps_attention(const MemoryPlan& p, std::int64_t layer) {
  if (!checkpoints_layer(p, layer)) return false;
  std::int64_t above = 0;  // checkpointed layers above this one
  for (std::int64_t j = layer + 1; j < p.total_layers; ++j) above += checkpoints_layer(p, j) ? 1 : 0;
  return above < p.attention_kept_layers;
}

namespace {
// Layers under `layer` that are not checkpointed, or -1 when `layer` is checkpointed or out of range.
std::int64_t free_layers_below(const MemoryPlan& p, std::int64_t layer) {
  if (layer < 0 || layer >= p.total_layers || checkpoints_layer(p, layer)) return -1;
  std::int64_t below = 0;
  for (std::int64_t j = 0; j < layer; ++j) below += checkpoints_layer(p, j) ? 0 : 1;
  return below;
}
}  // namespace

bool offloads_mlp(const MemoryPlan& p, std::int64_t layer) {
  const std::int64_t below = free_layers_below(p, layer);
  return below >= 0 && below < p.mlp_offloaded_layers;
}

std::vector<bool> planned_mlp_park(const MemoryPlan& p) {
  const auto n = static_cast<std::size_t>(std::max<std::int64_t>(0, p.total_layers));
  if (p.mlp_parked_layers <= 0) return std::vector<bool>(n, false);
  std::vector<bool> checkpointed(n);
  for (std::size_t j = 0; j < n; ++j) checkpointed[j] = checkpoints_layer(p, static_cast<std::int64_t>(j));
  return mlp_park_layers(checkpointed, p.mlp_parked_layers, p.mlp_park_stride);
}

bool parks_mlp(const MemoryPlan& p, std::int64_t layer) {
  if (layer < 0 || layer >= p.total_layers || p.mlp_parked_layers <= 0) return false;
  return planned_mlp_park(p)[static_cast<std::size_t>(layer)];
}

std::vector<bool> mlp_park_layers(const std::vector<bool>& checkpointed, std::int64_t count, std::int64_t stride) {
  std::vector<bool> parked(checkpointed.size(), false);
  const std::int64_t every = std::max<std::int64_t>(1, stride);
  for (std::size_t j = 0, seen = 0; j < checkpointed.size() && count > 0; ++j)
    if (checkpointed[j] && static_cast<std::int64_t>(seen++) % every == 0) parked[j] = true, --count;
  return parked;
}

bool recomputes_mlp(const MemoryPlan& p, std::int64_t layer) {
  const std::int64_t below = free_layers_below(p, layer);
  return below >= p.mlp_offloaded_layers && below < p.mlp_offloaded_layers + p.mlp_recomputed_layers;
}

std::vector<bool> checkpoint_stores(const std::vector<bool>& checkpointed, const std::vector<bool>& keeps_attention,
                                    std::int64_t segment) {
  std::vector<bool> stores(checkpointed.size(), false);
  auto keeps = [&](std::size_t j) { return j < keeps_attention.size() && keeps_attention[j]; };
  i64 run = 0;  // place in the current segment of the layer before, 0 = none open
  for (std::size_t j = 0; j < checkpointed.size(); ++j) {
    if (!checkpointed[j]) {
      run = 0;
      continue;
    }
    const bool single = keeps(j) || segment <= 1;
    if (single || run == 0 || run >= segment) {
      stores[j] = true;
      run = single ? 0 : 1;
    } else {
      ++run;
    }
  }
  return stores;
}

bool checkpoints_layer(const MemoryPlan& p, std::int64_t layer) {
  if (layer < 0 || layer >= p.total_layers) return false;
  if (p.checkpoint_every > 0) return layer % p.checkpoint_every == 0;
  return layer < p.checkpointed_layers;
}

std::int64_t host_memory_bytes() {
  static const i64 bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? static_cast<i64>(pages) * static_cast<i64>(size) : i64{0};
  }();
  return bytes;
}

}  // namespace odyssey
