// Internal to the planner: the per-GPU byte terms of one configuration, and their sum over
// the three phases of a training step for a given set of checkpointed layers. Numbers only
// (no strings), so the searches can evaluate hundreds of plans within a millisecond.
// docs/memory-planner.md derives every formula.
#pragma once

#include <cstdint>
#include <string>

#include "config/model_config.h"
#include "planner/memory_planner.h"

namespace odyssey::planner_detail {

struct Terms {
  bool valid = false;
  bool cuda = true;
  bool hf = false;  // PlannerReference::HfPeft
  bool lora = true;
  // The ZeRO stage the optimizer runs (optimizer_zero_stage: 2 for optimizer_dtype fp32 without
  // ZeRO on one process); the HF reference's is zero_stage.
  std::int64_t zero_stage = 0;
  bool experts_4bit = false;  // a MoE model on a 4-bit base: its experts are 4-bit too
  bool moe = false;           // mixture-of-experts layers, which the MLP tiling does not cover
  // LoRA on the experts: the ranks of a MoE layer's gate_up and down adapters together (the
  // first MoE layer's; 0 when the experts are not adapted).
  std::int64_t expert_adapter_rank = 0;
  bool fused = true;      // fused kernels in effect (CUDA, Odyssey, fused_kernels: true)
  bool mlp_fused = true;  // the MLP's SwiGLU kernels too (not Phi-3's gate_up_proj, not GeGLU)
  std::int64_t layers = 0;
  std::int64_t capacity = 0;
  double kept_margin = planner::kKeptAttentionMargin;  // PlannerOptions::kept_attention_margin
  std::int64_t act_b = 2;                              // bytes of an activation / weight element
  ParallelLayout layout;
  std::int64_t tokens = 0;  // per GPU per micro-step
  std::int64_t procs_per_node = 1;

  // outside the caching allocator
  std::int64_t runtime = 0;
  std::int64_t nccl = 0;

  // held for the whole step (GPU part)
  std::int64_t weights = 0;
  std::int64_t adapters = 0;
  std::int64_t master = 0;
  std::int64_t adam = 0;
  std::int64_t galore_proj = 0;
  std::int64_t galore_states = 0;
  std::int64_t galore_accum = 0;    // rank-r accumulated gradients (gradient accumulation)
  std::int64_t host_optimizer = 0;  // offloaded states (and ZeRO-2 gradient shard)

  // gradients: created in backward unless accumulated across micro-steps
  std::int64_t grads_layers = 0;  // all blocks together
  std::int64_t grads_other = 0;   // embeddings, lm_head, final norm
  std::int64_t grads_embed = 0;   // the part of grads_other an untied embedding adds, at the end of backward
  bool grads_persistent = false;
  std::int64_t grads_unsharded = 0;
  std::int64_t grad_buckets = 0;

  // activations
  std::int64_t per_token_layer = 0;  // bytes one layer saves per token (without eager's s²)
  std::int64_t layer_full = 0;       // one layer's saved activations on this GPU
  std::int64_t layer_in = 0;         // a checkpointed layer's saved input
  std::int64_t layer_in_host = 0;    // its pinned host block (the host allocator rounds to a power of two)
  // Checkpoint segments (layers_per_checkpoint): runs of up to `segment` consecutive
  // checkpointed layers that keep no attention output store one input; 1 = every layer its own.
  std::int64_t segment = 1;
  std::int64_t host_capacity = 0;    // what offloading may park in host memory, per process
  std::int64_t recompute_extra = 0;  // what the checkpoint still holds while its layer recomputes
  std::int64_t dropout_per_layer = 0;
  // The fused engine's LoRA dropout (kernels::LoraDropout): bytes per element of its mask
  // blocks (0: no such dropout) and the MLP's largest adapter input (the down projection's).
  std::int64_t dropout_element_bytes = 0, dropout_mlp_in = 0;
  bool offload_acts = false;
  bool kept_on_host = false;  // offload_acts with PlannerOptions::kept_attention_on_host: kept outputs parked
  std::int64_t misc = 0;      // token ids, labels, positions, rotary tables
  // the MLP's share, for the tiled MLP (tile_mlp)
  std::int64_t mlp_per_token = 0;    // what the MLP saves per token (part of per_token_layer)
  std::int64_t mlp_input_extra = 0;  // the MLP input per token, kept whole by the tiles when the MLP did not save it
  std::int64_t bwd_mlp_h = 0,
               bwd_mlp_i = 0;     // MLP backward working set per token: hidden-sized and intermediate-sized parts
  std::int64_t mlp_tile = 0;      // tokens per tile; 0 = untiled
  std::int64_t hidden_bytes = 0;  // one hidden-sized vector of a token in the compute dtype (b · h)
  std::int64_t attn_kept = 0;     // one layer's kept attention output + log-sum-exp (keep_attention); 0 = n/a
  // What a layer that is not checkpointed stops storing when its MLP recomputes its
  // intermediates in backward (kernels::rms_norm_mlp: gate and up); 0 = n/a (unfused, tiled
  // MLP).
  std::int64_t mlp_recompute_saved = 0;
  double recompute_mlp_flops = 0;  // its cost: the gate and up projections, forward FLOPs
  // The same bytes kept in pinned host memory instead (offload_activations, fused swiglu_down
  // path): 0 = n/a. mlp_offload_host: their pinned blocks (the host allocator rounds each of
  // gate and up to a power of two); mlp_offload_max: the most layers the host link moves in
  // one forward's compute time (memory_planner.h, kHostLinkBytesPerSecond).
  std::int64_t mlp_offload_saved = 0, mlp_offload_host = 0, mlp_offload_max = 0;
  bool mlp_park = true;    // PlannerOptions::mlp_park: choose_layers may park checkpointed layers' MLPs
  bool base_4bit = false;  // quant_bits 4 (the park is planned on 4-bit bases only)
  // What the host link moves in one forward's compute time (the window of mlp_offload_max): the
  // offload chains' bytes in forward, the MLP park's included, stay within it.
  double link_forward_bytes = 0;
  // What recomputing one checkpointed layer costs, in forward FLOPs on this GPU: its
  // projections, and its attention (which a layer keeping its attention output skips).
  double recompute_linear_flops = 0, recompute_attention_flops = 0;
  double recompute_down_flops = 0;  // the down projection's forward: in recompute_linear_flops unless skipped

  // working sets
  std::int64_t loss = 0;
  std::int64_t bwd_mlp = 0;
  std::int64_t bwd_attn = 0;
  std::int64_t bwd_attn_kept = 0;  // the same for a layer that kept its attention output (LseAttention)
  std::int64_t a2a = 0;
  std::int64_t ring = 0;
  std::int64_t layer_grads_tmp = 0;  // one layer's transient gradients (and GaLore's per-layer update)
  std::int64_t step_tmp = 0;

  // for details
  std::int64_t params = 0;
  std::int64_t trainable = 0;
  std::int64_t galore_targeted = 0;
  bool galore_per_layer = false;
  std::int64_t loss_chunk = 0;
  // The fused linear cross-entropy: a fused block whose logits the family does not scale or
  // cap (train/batch.cpp takes the chunked reference loss for Granite's and Gemma-2's).
  bool fused_loss = false;
};

Terms compute_terms(const TrainConfig& c, const HfModelConfig& m, const PlannerOptions& o);

// The MLP run `tile` tokens at a time, each tile checkpointed (MlpImpl::tile_tokens): a layer
// keeps the MLP's input instead of its intermediates, and the MLP's backward works on one
// tile (its intermediates rebuilt, their gradients) plus full-length hidden-sized gradients.
// No effect when the GPU holds no more than `tile` tokens.
void tile_mlp(Terms& t, std::int64_t tile);

// What the fused LoRA dropout holds while a projection of `in` input features runs over
// `tokens` rows: one block of masked rows (the masked input, or the adapter's input gradient
// before it is masked in: kernels::lora_dropout_block_rows, 2^26 elements at most); 0 without it.
std::int64_t dropout_blocks(const Terms& t, std::int64_t tokens, std::int64_t in);

struct Eval {
  std::int64_t peak = 0;                    // with fragmentation and runtime
  int phase = 0;                            // 0 loss, 1 backward, 2 optimizer step
  std::int64_t phase_bytes[3] = {0, 0, 0};  // allocator bytes of each phase
  std::int64_t fragmentation = 0;           // at the peak phase
  // activations at the loss phase (end of forward) and at the backward peak
  std::int64_t stored_inputs = 0, stored_full = 0;
  std::int64_t stored_segments = 0;  // checkpointed inputs stored (fewer than the checkpointed layers with segments)
  std::int64_t bwd_inputs = 0, bwd_full = 0, bwd_recompute = 0, bwd_grads = 0;
  std::int64_t bwd_galore = 0;  // GaLore rank-r gradients of the layers above the peak
  std::int64_t host_acts = 0;
  std::int64_t kept_layers = 0, stored_kept = 0, bwd_kept = 0;  // kept attention outputs
  std::int64_t mlp_layers = 0;                                  // layers whose MLP recomputes its intermediates
  std::int64_t offload_layers = 0;                              // layers whose MLP keeps gate and up on the host
  std::int64_t park_layers = 0;  // checkpointed layers whose MLP parks gate and up on the host (the MLP park)
  std::int64_t park_stride = 1;  // every park_stride-th checkpointed layer from the first parks
  std::int64_t bwd_parked = 0;   // at the backward peak: the parked pair prefetched for the layer below
};

// checkpointed layers: every == 0 → layers [0, ckpt); every == K → layers 0, K, 2K, ….
// kept: the last `kept` checkpointed layers keep their attention output (t.attn_kept each)
// from forward until their backward. mlp: the first `mlp` layers that are not checkpointed
// recompute their MLP's intermediates (t.mlp_recompute_saved less each while stored; the
// lowest ones, whose savings last through most of backward). offload: the first `offload`
// layers that are not checkpointed keep gate and up on the host (t.mlp_offload_saved less
// each, from forward until backward reaches layer i + mlp_offload_lead(offload)); the `mlp`
// recomputing layers are the next ones. park: `park` checkpointed layers park their MLP's gate
// and up on the host, every park_stride-th from the first (0: park_stride(t), the planner's;
// 1: the first ones) (the MLP park; t.mlp_offload_saved > 0, without segments or every:K), their
// recomputation taking them back instead of recomputing them: t.mlp_offload_host
// each on the host, and parked layer i's pair on the GPU from the start of layer i + 1's backward
// on (prefetched there), on top of that layer's own. The tier's cap (t.mlp_offload_max) counts
// offloaded and parked layers together, and parked layers fit the host link's bytes in one
// forward (t.link_forward_bytes) with every other offloaded byte of that forward.
Eval evaluate(const Terms& t, std::int64_t ckpt, std::int64_t every, std::int64_t kept = 0, std::int64_t mlp = 0,
              std::int64_t offload = 0, std::int64_t park = 0, std::int64_t park_stride = 0);

// The MLP park's stride: besides what every checkpointed layer sends to the host in forward (its
// input, its kept attention output under offload), a parked layer sends its gate and up. An
// offload chain holds only its newest entries' GPU sources, so where a layer's copies outlast
// the forward of the layers after it the compute stream waits for them (the park then saved
// nothing on the 8B QLoRA row, docs/memory-planner.md). Parking every S-th checkpointed layer
// gives each pair S layers' forward of link time: the smallest such S at the link's bytes per
// layer (t.link_forward_bytes / layers); 0 when the link cannot carry even the other offloads.
std::int64_t park_stride(const Terms& t);

// How many checkpointed layers keep their attention output: keep_attention all = every one,
// none = 0, auto = as many as keep the plan within capacity.
std::int64_t choose_kept_attention(const Terms& t, const std::string& keep, std::int64_t ckpt, std::int64_t every);
std::int64_t fragmentation_of(std::int64_t allocator_bytes);

// The checkpointed-layer count for the configured policy; for auto the fewest first layers
// whose plan fits (all when none does). `every` receives K for every:K, else 0.
std::int64_t choose_checkpointing(const Terms& t, const CheckpointPolicy& p, std::int64_t* every);

// Checkpointed layers and kept attention outputs together (what the engine runs). With
// activation_checkpointing auto a layer that keeps its attention output recomputes only its
// projections, so more checkpointed layers keeping attention can be cheaper than fewer that
// recompute everything: auto + keep auto takes, of the plans within the kept-attention line
// (kKeptAttentionMargin below capacity) and the fewest-layers plan, the one recomputing the
// fewest FLOPs; auto + keep all takes the fewest layers that fit with every one keeping.
// Where the MLP can recompute its intermediates (t.mlp_recompute_saved), auto also weighs
// layers doing only that (two projections recomputed, not the whole layer): the plan that fits
// with the fewest recomputed FLOPs, over checkpointed layers, kept attention and MLP layers.
// Otherwise choose_checkpointing, then choose_kept_attention.
// With the MLP offload tier (t.mlp_offload_saved, up to t.mlp_offload_max layers), offloaded
// layers cost no FLOPs: for each (checkpointed, kept) pair the fewest offloaded layers that
// fit, else all it may and the fewest MLP layers recomputing on top. Then, on any policy and
// without changing that choice, on a 4-bit base, as many checkpointed layers park their MLP as
// the caps allow (the tier's, the host link's in one forward, the host's memory) with the plan's
// peak within its line and planner::kParkSlackPairs pairs under the capacity: parking saves each
// parked layer's gate and up recomputation (docs/memory-planner.md, "The MLP park").
struct LayerChoice {
  std::int64_t checkpointed = 0, every = 0, kept = 0, mlp = 0, offload = 0, park = 0;
};
LayerChoice choose_layers(const Terms& t, const CheckpointPolicy& p, const std::string& keep);
// Forward FLOPs that checkpointing `ckpt` layers (`kept` of them keeping attention, `park` of
// them parking their MLP) and `mlp` MLP recomputations recompute.
double recompute_flops(const Terms& t, std::int64_t ckpt, std::int64_t kept, std::int64_t mlp = 0,
                       std::int64_t park = 0);

}  // namespace odyssey::planner_detail
