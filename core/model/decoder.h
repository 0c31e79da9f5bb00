// The decoder-only causal LM of Qwen2/Qwen2.5, Qwen3, Llama-3 (and SmolLM), Mistral, Granite,
// Gemma-2, Gemma-3 (text) and Phi-3 in LibTorch: one model with the switches of
// HfModelConfig (config/model_config.h), written to compute what transformers 5.17's
// *ForCausalLM compute, op for op (RMSNorm in fp32 then cast, RoPE angles in fp32, SwiGLU or
// GeGLU, SDPA attention or, with soft-capping, the eager formula), with module names that
// make named_parameters() give Hugging Face's tensor names:
//
//   model.embed_tokens.weight
//   model.layers.N.input_layernorm.weight, model.layers.N.post_attention_layernorm.weight
//   model.layers.N.{pre,post}_feedforward_layernorm.weight  (sandwich norms: Gemma; OLMo: post only)
//   model.layers.N.self_attn.{q,k,v,o}_proj.{weight,bias}   (bias per family)
//   model.layers.N.self_attn.qkv_proj.weight                (Phi-3, instead of q/k/v)
//   model.layers.N.self_attn.{q,k}_norm.weight              (Qwen3, Gemma-3)
//   model.layers.N.mlp.{gate,up,down}_proj.{weight,bias}    (bias: Llama's mlp_bias)
//   model.layers.N.mlp.gate_up_proj.weight                  (Phi-3, instead of gate/up)
//   model.layers.N.mlp.gate.weight                          (MoE layers: the router, [E, hidden])
//   model.layers.N.mlp.experts.{gate_up_proj,down_proj}     (MoE: [E, 2 x I, hidden], [E, hidden, I])
//   model.layers.N.mlp.shared_expert.{gate,up,down}_proj.weight, mlp.shared_expert_gate.weight
//                                                           (Qwen2-MoE)
//   model.norm.weight
//   lm_head.weight                                          (absent when tied)
//
// Padding: HF computes position_ids as arange(S) for every row when none are given, also
// with an attention_mask (Qwen2Model.forward in 5.17); so does forward() here. The mask
// only hides padded keys (attention.h). Parity is tested against HF on a padded batch
// (tests/core/tst_decoder_parity.cpp).
//
// Parameters are created on the device and in the dtype of DecoderOptions; load them with
// weights.h or initialize_random().
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/linear.h"
#include "kernels/offload.h"
#include "kernels/rmsnorm.h"
#include "model/attention.h"
#include "model/decoder_config.h"
#include "model/moe.h"

namespace odyssey::model {

class TilePlans;  // model/tiled_attention.h

struct DecoderOptions {
  torch::Dtype dtype = torch::kFloat32;
  torch::Device device = torch::kCPU;
  AttentionBackend attention = AttentionBackend::CuDNN;  // preferred on CUDA; CPU: ATen's choice
  // The fused ops of kernels/ (RMSNorm with the residual add, RoPE in place, SwiGLU) in
  // padding-free rows, and LoRA adapters computed in the activations' dtype (fp32 master
  // weights and gradients, autocast's rule) instead of on an fp32 copy of every input.
  // CUDA tensors run the CUDA kernels; others the same fused math in ATen ops. Off: the
  // Hugging Face formulas op for op (the parity tests' reference path).
  bool fused_kernels = false;
  // 4-bit base weights asked for (preset `quant_bits: 4`): the loader quantizes every
  // projection QuantSettings::quantizes names as it reads it. A pre-quantized checkpoint's
  // config.json settings take precedence (weights.h).
  QuantSettings quant;
};

// Where a projection's input came from in the fused path: n = rms_norm(input) * weight. The
// projection then keeps the norm's input (which the norm keeps anyway) instead of n, and
// recomputes n in backward (kernels::rms_norm_linear).
struct NormSource {
  torch::Tensor input, weight;
  double eps = 0.0;
  // One recomputation of n for all its projections (kernels::NormShare).
  c10::intrusive_ptr<kernels::NormShare> share = c10::make_intrusive<kernels::NormShare>();
};

// y = x W^T + b (F.linear). Parameters "weight" [out, in] and "bias" [out] when present.
// With a LoRA adapter (PEFT's layout and names): sub-modules "lora_A" (weight [r, in]) and
// "lora_B" (weight [out, r]), y += scaling * B(A(dropout(x))).
class LinearImpl : public torch::nn::Module {
 public:
  // quantized: a 4-bit base (QLoRA): no "weight" parameter is created; the loader sets `quant`.
  LinearImpl(std::int64_t in, std::int64_t out, bool bias, const torch::TensorOptions& o, bool quantized = false);
  torch::Tensor forward(const torch::Tensor& x);
  // forward(n) for n the output of `src`'s norm (null: plain forward). With the fused kernels
  // n is not kept for backward (kernels::rms_norm_linear).
  torch::Tensor forward_normed(const torch::Tensor& n, const NormSource* src);
  // The fused path's view of this projection (weight, bias, adapter pair and scaling) for one
  // forward call: in training with lora_dropout > 0 it draws that call's dropout seed
  // (kernels::LoraDropout), so each call of a forward takes it once, in the projections' order.
  kernels::LinearWeights fused_weights() const;
  // Whether the fused projections (kernels::swiglu_down, rms_norm_linear) compute this layer
  // as forward() would: the fused path (adapter dropout included: they redraw its mask).
  // A 4-bit base takes them too: they dequantize its weight for each product (kernels/linear.h).
  bool fused_projection() const { return lora_in_input_dtype; }

  // Adds lora_A (Kaiming-uniform with a = sqrt(5), nn.Linear's and PEFT's default, from the
  // default generator) and lora_B (zeros), both fp32 on the weight's device. scaling = alpha / r, or alpha / sqrt(r)
  // (rsLoRA).
  void add_lora(std::int64_t rank, double scaling, double dropout);
  bool has_lora() const { return lora_A != nullptr; }
  // W += scaling * B A (in fp32, cast back), then the adapter is removed. A 4-bit base is
  // dequantized first (with or without an adapter) and becomes a 16-bit "weight" parameter in
  // the model's dtype.
  void merge_lora();
  // The base weight in `dtype`: the parameter cast, or the 4-bit weight dequantized.
  torch::Tensor base_weight(torch::ScalarType dtype) const;
  // Without autograd: adds the adapter's update (as forward() computes it, without dropout) in
  // place to y [N, out] (any strides with a contiguous last dimension, e.g. this projection's
  // columns of a packed output) for x [N, in]. Nothing without an adapter.
  void add_adapter_(torch::Tensor y, const torch::Tensor& x) const;

  torch::Tensor weight, bias;
  bool quantized = false;
  torch::ScalarType dtype = torch::kFloat32;        // the model's (the options it was built with)
  c10::intrusive_ptr<kernels::Quant4Weight> quant;  // quantized: the 4-bit weight (set by the loader)
  std::shared_ptr<LinearImpl> lora_A, lora_B;
  double lora_scaling = 0.0;
  double lora_dropout = 0.0;
  bool lora_in_input_dtype = false;  // DecoderOptions::fused_kernels
  std::int64_t in_features = 0, out_features = 0;
};
TORCH_MODULE(Linear);

// Projections that read the same input (q/k/v, gate/up) with their weights (and biases) as rows
// of one tensor (CausalLMImpl::pack_projections): without autograd, one product for all of them,
// each part's adapter then added onto its columns. weight undefined: not packed.
struct PackedProjections {
  torch::Tensor weight, bias;
  std::vector<LinearImpl*> parts;
  // Packs `of` (none 4-bit, all with a bias or none, one input width, dtype and device); false,
  // and nothing changed, when they cannot be.
  bool pack(const std::vector<LinearImpl*>& of);
  // The parts' outputs side by side [..., sum out] by the one product, or undefined where this
  // call must take them one by one: not packed, autograd on, adapter dropout while training,
  // or a part's weight no longer its rows (replaced since packing).
  torch::Tensor forward(const torch::Tensor& x, bool training) const;
};

// HF's *RMSNorm: x in fp32, x * rsqrt(mean(x^2) + eps), cast back, times weight. With
// plus_one (Gemma): times (1 + weight) in fp32, then cast back; the fused kernels do not
// cover it (this norm then runs the reference formula).
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(std::int64_t dim, double eps, const torch::TensorOptions& o, bool plus_one = false,
              bool weight_fp32 = false);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
  bool fused = false;
  bool plus_one = false;     // (1 + w) in fp32, then the cast (Gemma)
  bool weight_fp32 = false;  // w times the fp32 normalized input, then the cast (OLMo)
};
TORCH_MODULE(RMSNorm);

class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(std::int64_t vocab, std::int64_t dim, std::optional<std::int64_t> padding_idx,
                const torch::TensorOptions& o);
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;
  std::optional<std::int64_t> padding_idx;  // its row gets no gradient (nn.Embedding)
};
TORCH_MODULE(Embedding);

// The keys and values of the tokens seen so far, for generation (model/generate.h): per layer
// [B, Hkv, slots, head_dim] in the model's dtype and on its device, RoPE applied. Slot j of
// row b holds a real token when key_mask[b, j] (prompts of different lengths are left-padded:
// their padding slots are false and no query attends to them). A full layer keeps every slot
// (slots = capacity). A sliding-window layer whose window is shorter than the capacity keeps
// only `window` slots, a ring: slot j lives at j % window, and a new token overwrites the key
// that just left every later query's window (docs/inference.md).
struct KvCache {
  std::vector<torch::Tensor> k, v;
  torch::Tensor key_mask;   // [B, capacity] bool, for every slot (full and ring layers)
  std::int64_t length = 0;  // slots filled (the same for every row)
  bool padded = false;      // some filled slot is padding
  std::int64_t window = 0;  // the ring layers' size; 0 when every layer keeps every slot
  std::int64_t batch() const { return key_mask.size(0); }
  std::int64_t capacity() const { return key_mask.size(1); }
  bool ring(std::size_t layer) const { return window > 0 && k[layer].size(2) == window; }
  // Device bytes of the keys and values.
  std::int64_t bytes() const;
};

// What every layer of one forward shares.

struct LayerContext {
  torch::Tensor cos, sin;              // [P, S, rotary_dim] in the activations' dtype
  torch::Tensor cos_local, sin_local;  // sliding-window layers' own RoPE (Gemma-3), else undefined
  torch::Tensor keep;                  // [B, 1, S, S] bool, or undefined (plain causal)
  // Sliding-window layers: keep AND key at most window - 1 behind the query ([B or 1, 1, S, S];
  // padding-free rows: within the sample). Undefined when no layer has a window.
  torch::Tensor keep_window;
  torch::Tensor cu_seqlens;                               // padding-free row (B = 1): sample boundaries, int32 [n+1]
  std::shared_ptr<TilePlans> tile_plans;                  // that row's tiled-attention plans (tiled_attention.h)
  std::int64_t max_seqlen = 0;                            // longest sample of the row
  std::shared_ptr<AttentionOverride> attention_override;  // sequence parallelism, else null
  AttentionBackend attention = AttentionBackend::CuDNN;
  std::atomic<std::int64_t>* backend_ran = nullptr;
  std::shared_ptr<AttentionStash> stash;  // this layer keeps its attention output, else null
  // This layer's MLP keeps gate and up in this chain between forward and backward (the MLP
  // offload tier, CausalLMImpl::set_mlp_offload_layers), else null.
  std::shared_ptr<kernels::OffloadChain> mlp_offload;
  // This checkpointed layer's MLP parks gate and up in its forward and its recomputation's
  // backward takes them back instead of recomputing them (the MLP park,
  // CausalLMImpl::set_mlp_offload_layers on a checkpointed layer), else null.
  c10::intrusive_ptr<kernels::ParkedPair> mlp_park;
  // The MoE layers record their routing here when the load-balancing loss is computed
  // (CausalLMImpl::set_router_aux_loss), else null.
  c10::intrusive_ptr<RouterStats> router_stats;
  // Incremental forward (CausalLMImpl::hidden_states_cached): the new tokens' keys and values go
  // to slots cache_start.. of the cache and attention reads slots 0 .. cache_start + S - 1. keep
  // and keep_window are then [B, 1, S, cache_start + S] (undefined keep: no padding, and either
  // cache_start = 0, plain causal, or S = 1, every slot).
  KvCache* cache = nullptr;
  std::int64_t cache_start = 0;
  // A static decode step (CausalLMImpl::decode_step): the one new token goes to the slot this
  // int64 [1] tensor holds, and attention reads every slot of the cache through keep (and
  // keep_window) [B, 1, 1, capacity]: the same shapes and addresses at every step.
  torch::Tensor cache_slot;
  // Ring layers (KvCache::window) once the cache is longer than the window; else undefined.
  // Static step: ring_slot int64 [1] (cache_slot % window) and keep_ring [B, 1, 1, window].
  // Incremental forward of S tokens: attention reads the ring followed by the S new keys
  // through keep_ring [B, 1, S, window + S] (undefined for S = 1 without padding: every ring
  // slot), and the last min(S, window) new keys go to the ring positions ring_write holds.
  torch::Tensor ring_slot, keep_ring, ring_write;
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const DecoderConfig& c, const torch::TensorOptions& o, std::int64_t layer = 0);
  // src: the norm x came from (fused path), or null.
  torch::Tensor forward(const torch::Tensor& x, const LayerContext& ctx, const NormSource* src = nullptr);
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  Linear qkv_proj{nullptr};                  // Phi-3: q, k and v in one projection
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // Qwen3, Gemma-3 (one head's width); OLMo-2/3 (all heads')
  bool qk_norm_whole = false;                // the norms span all heads: applied before the split
  std::int64_t heads, kv_heads, head_dim;
  double scale;
  double softcap = 0.0;           // attn_logit_softcapping (Gemma-2), 0: off
  bool sliding = false;           // this layer attends through the sliding window
  std::int64_t window = 0;        // its size (HfModelConfig::sliding_window) when sliding
  bool local_rope = false;        // this layer rotates with LayerContext::cos_local (Gemma-3)
  bool rope = true;               // false: a NoPE layer (SmolLM3) leaves q and k unrotated
  bool rope_interleaved = false;  // RoPE on pairs (0, 1), (2, 3), ... (GLM-4)
  bool fused = false;
  std::int64_t layer_index = 0;  // its slot in KvCache::k / v
  // Decode steps on CUDA attend through kernels::decode_attention where it applies, else SDPA
  // over the cache (CausalLMImpl::set_decode_kernel). Off until the kernel has passed its
  // GPU check (odyssey-train selftest's decode_attention rows) and been measured.
  bool decode_kernel = false;
  // q, k and v as one product without autograd (CausalLMImpl::pack_projections).
  PackedProjections packed;

 private:
  torch::Tensor forward_cached(const torch::Tensor& x, const LayerContext& ctx, const NormSource* src);
  // q, k, v [B, S, H, D] (k, v with KV heads) from x.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> project(const torch::Tensor& x, const NormSource* src);
  // q_norm / k_norm on project()'s q and k (nothing without QK-norm).
  void normalize_qk(torch::Tensor& q, torch::Tensor& k);
};
TORCH_MODULE(Attention);

class MlpImpl : public torch::nn::Module {
 public:
  // intermediate: the width (-1: intermediate_size); prefix: the module's Hugging Face name
  // ("": model.layers.<layer>.mlp), for which projections are 4-bit.
  MlpImpl(const DecoderConfig& c, const torch::TensorOptions& o, std::int64_t layer = 0, std::int64_t intermediate = -1,
          const std::string& prefix = {});
  bool gelu = false;             // GeGLU with tanh-approximated GELU (gelu_pytorch_tanh): not fused
  Linear gate_up_proj{nullptr};  // Phi-3: gate and up in one projection (gate first)
  // With tile_tokens > 0 and more tokens than that (tiled MLP, docs/training.md): the tokens
  // run through the MLP a tile at a time; under autograd each tile is checkpointed, so its
  // gate/up/activation exist only while that tile computes or recomputes in backward.
  // src: the norm x came from (fused path; used when the MLP is not tiled), or null. Given
  // only where the caller adds the output to the residual and reads it nowhere else, so a
  // checkpointed layer's recomputation may leave it uncomputed (rms_norm_mlp's skip_output).
  // offload: where the fused, untiled MLP keeps gate and up for backward (kernels::swiglu_down's
  // offload), or null: on the device. Not used when the MLP recomputes them (recompute).
  // park: a checkpointed layer's (LayerContext::mlp_park): the fused, untiled MLP with src
  // parks gate and up there in the checkpoint's forward, and its recomputation (rms_norm_mlp
  // with skip_output) takes them back in backward instead of recomputing them.
  torch::Tensor forward(const torch::Tensor& x, const NormSource* src = nullptr,
                        const std::shared_ptr<kernels::OffloadChain>& offload = nullptr,
                        const c10::intrusive_ptr<kernels::ParkedPair>& park = {});
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  bool fused = false;
  std::int64_t tile_tokens = 0;
  // Fused path, untiled, with src and no LoRA dropout: keep none of gate, up and the
  // activation for backward, which recomputes them (kernels::rms_norm_mlp; the memory planner's
  // MLP recomputation, CausalLMImpl::set_mlp_recompute_layers).
  bool recompute = false;
  // In a checkpointed layer's recomputation, skip the forward GEMMs (rms_norm_mlp's
  // skip_output; CausalLMImpl::set_rerun_skips_mlp). Off: the re-run computes the MLP as its
  // forward did (kept for measuring the difference: odyssey-bench --rerun-mlp full).
  bool skip_in_rerun = true;
  // gate and up as one product without autograd (CausalLMImpl::pack_projections).
  PackedProjections packed;

 private:
  torch::Tensor compute(const torch::Tensor& x, const NormSource* src,
                        const std::shared_ptr<kernels::OffloadChain>& offload = nullptr,
                        const c10::intrusive_ptr<kernels::ParkedPair>& park = {});
};
TORCH_MODULE(Mlp);

// A mixture-of-experts MLP (docs/moe.md): the router ("gate", weight [E, hidden]) picks the
// top-k experts of each token from softmax(x Wᵀ) in fp32 (renormalized when norm_topk_prob);
// the tokens are sorted by expert and every expert's SwiGLU runs as two grouped GEMMs
// (kernels/grouped_gemm.h) on the stacked weights "experts.gate_up_proj" [E, 2I, hidden]
// (gate rows first) and "experts.down_proj" [E, hidden, I], transformers 5's layout; the
// outputs go back to their tokens weighted by the routing probabilities. No token is ever
// dropped (no capacity factor). Qwen2-MoE adds a shared expert gated by
// sigmoid(shared_expert_gate(x)).
class RouterImpl : public torch::nn::Module {
 public:
  RouterImpl(std::int64_t experts, std::int64_t hidden, const torch::TensorOptions& o);
  torch::Tensor weight;
};
TORCH_MODULE(Router);

// LoRA on one stacked expert parameter [E, out, in] in PEFT's representation (its
// ParamWrapper for `target_parameters`, PEFT 0.21): lora_A [r·E, in] holds expert e's A in
// rows e·r .. e·r + r - 1; lora_B [out, r·E] holds expert e's B in columns e, e + E, e + 2E, ...
// (PEFT reshapes it to [out, r, E]); W_e += scaling · B_e A_e. fp32 like the other adapters.
class ExpertLoraImpl : public torch::nn::Module {
 public:
  ExpertLoraImpl(std::int64_t experts, std::int64_t out, std::int64_t in, std::int64_t rank, double scaling,
                 const torch::Device& device);
  // A as [E, r, in] and scale · B as [E, out, r] in `dtype` (differentiable).
  torch::Tensor a3(torch::ScalarType dtype) const;
  torch::Tensor b3(torch::ScalarType dtype, double scale = 1.0) const;
  torch::Tensor lora_A, lora_B;
  std::int64_t experts = 0, rank = 0;
  double scaling = 0.0;
};
TORCH_MODULE(ExpertLora);

class ExpertsImpl : public torch::nn::Module {
 public:
  // quantized: 4-bit experts (a QLoRA base, docs/moe.md): no parameters are created; the loader
  // sets gate_up_quant and down_quant, one bitsandbytes-layout 4-bit weight per stacked parameter.
  ExpertsImpl(std::int64_t experts, std::int64_t hidden, std::int64_t intermediate, const torch::TensorOptions& o,
              bool quantized = false);
  // x [T, hidden] sorted by expert, ends int32 [E] (kernels::grouped_linear): [T, hidden].
  // Under expert parallelism E is this rank's share of the experts (keep_experts).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& ends);
  torch::Tensor gate_up_proj, down_proj;  // undefined when quantized
  bool fused = false;  // the fused SwiGLU kernel between the two GEMMs; adapters in the activations' dtype
  bool quantized = false;
  c10::intrusive_ptr<kernels::Quant4Weight> gate_up_quant, down_quant;  // quantized: [E, 2I, hidden], [E, hidden, I]
  torch::ScalarType dtype = torch::kFloat32;                            // the model's
  std::int64_t num_experts = 0, hidden = 0, intermediate = 0;           // E (this rank's), hidden, I
  // The shape of "gate_up_proj" or "down_proj" ([E, 2I, hidden] or [E, hidden, I]), quantized or not.
  std::vector<std::int64_t> shape_of(const std::string& parameter) const;
  // LoRA on "gate_up_proj" or "down_proj" (PEFT's target_parameters), Kaiming-uniform A and zero
  // B as PEFT initializes them; sub-modules "gate_up_proj_lora" / "down_proj_lora".
  void add_lora(const std::string& parameter, std::int64_t rank, double scaling);
  // W_e += scaling · B_e A_e (in fp32), adapters removed. 4-bit experts are dequantized first
  // (with or without adapters) and become 16-bit parameters in the model's dtype, as PEFT's
  // merge on a bitsandbytes base does.
  void merge_lora();
  void remove_lora();  // adapters removed, not merged
  // Keeps experts first .. first + count - 1 (weights and adapters; adapters only when
  // `adapters_only`), the rest freed: a rank's share under expert parallelism. 4-bit experts
  // keep their share's packed bytes with an fp32 absmax per block (kernels::slice_4bit): the
  // values the whole stack dequantizes to, bit for bit.
  void keep_experts(std::int64_t first, std::int64_t count, bool adapters_only = false);
  // The inverse for saving: every rank's share gathered over `group` (a collective), whole
  // again; adapters only when `adapters_only`.
  void gather_experts(ExpertGroup& group, bool adapters_only);
  ExpertLora gate_up_lora{nullptr}, down_lora{nullptr};

 private:
  torch::Tensor project(const torch::Tensor& x, const torch::Tensor& w,
                        const c10::intrusive_ptr<kernels::Quant4Weight>& q, const ExpertLora& lora,
                        const torch::Tensor& ends);
};
TORCH_MODULE(Experts);

class MoeImpl : public torch::nn::Module {
 public:
  MoeImpl(const DecoderConfig& c, const torch::TensorOptions& o, std::int64_t layer);
  // x [..., hidden]; stats: record the routing for the load-balancing loss (null: not).
  torch::Tensor forward(const torch::Tensor& x, const c10::intrusive_ptr<RouterStats>& stats = {});
  Router gate{nullptr};
  Experts experts{nullptr};
  Mlp shared_expert{nullptr};  // Qwen2-MoE, else null
  Linear shared_expert_gate{nullptr};
  std::int64_t num_experts = 0, top_k = 0, layer_index = 0;
  bool norm_topk_prob = false;
  bool weights_in_fp32 = false;  // Mixtral keeps the routing weights in fp32 (Qwen: the activations' dtype)
  double jitter = 0.0;           // Mixtral's router_jitter_noise (training only)
  // Expert parallelism (docs/moe.md): this rank holds experts ep->rank() · E / ep->size() ...
  // only; the sorted rows travel to their experts' ranks and back. Null: all experts here.
  // Set through CausalLMImpl::split_experts.
  std::shared_ptr<ExpertGroup> ep;

 private:
  // Expert parallelism: the experts on rows sorted by (global) expert, `counts` per expert.
  torch::Tensor run_experts(const torch::Tensor& sorted, const torch::Tensor& counts);
};
TORCH_MODULE(Moe);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const DecoderConfig& c, const torch::TensorOptions& o, std::int64_t layer = 0);
  torch::Tensor forward(const torch::Tensor& x, const LayerContext& ctx);
  // The fused layer (fused only) on the input x + residual (residual undefined: x alone),
  // its output left as the pair {h, m} whose sum h + m is forward()'s output: the next fused
  // layer adds them in its input norm's kernel (add_rms_norm), so the residual add and, in
  // backward, the sum of the residual's two gradients run inside the norm's kernels.
  std::pair<torch::Tensor, torch::Tensor> forward_split(const torch::Tensor& x, const torch::Tensor& residual,
                                                        const LayerContext& ctx);
  Attention self_attn{nullptr};
  Mlp mlp{nullptr};  // a dense layer's MLP, else null
  Moe moe{nullptr};  // a mixture-of-experts layer's (registered as "mlp" too), else null
  // The norms around the two branches, registered under the family's names (block_norm_names):
  // Llama input_layernorm / post_attention_layernorm as attention_in / mlp_in; Gemma adds
  // post_attention_layernorm / post_feedforward_layernorm on the outputs (its MLP input is then
  // pre_feedforward_layernorm); OLMo has the output norms only. Null where the block has none.
  RMSNorm attention_in{nullptr}, attention_out{nullptr}, mlp_in{nullptr}, mlp_out{nullptr};
  double residual_multiplier = 1.0;  // Granite: residual + branch * m
  bool fused = false;                // the residual add fused into the MLP's input norm
  // Whether the fused layer (add_rms_norm pairs) computes this family's block: not with norms
  // on the branches' outputs, (1 + w) or fp32-weighted norms, or a residual multiplier.
  bool fusable = true;

 private:
  // The MLP (dense or MoE) of x; src, and ctx's mlp_offload and mlp_park with src: the dense
  // fused path's (MlpImpl::forward).
  torch::Tensor feed_forward(const torch::Tensor& x, const LayerContext& ctx, const NormSource* src = nullptr);
};
TORCH_MODULE(DecoderLayer);

// HF's "model": embeddings, the layers and the final norm.
class DecoderBodyImpl : public torch::nn::Module {
 public:
  DecoderBodyImpl(const DecoderConfig& c, const torch::TensorOptions& o);
  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
  std::vector<DecoderLayer> layer_list;  // the same modules, typed
};
TORCH_MODULE(DecoderBody);

// What a family does to lm_head's output: Granite divides by logits_scaling, Gemma-2 caps
// with tanh(logits / c) * c. Identity by default.
struct LogitTransform {
  double divide = 1.0;
  double softcap = 0.0;
  bool identity() const { return divide == 1.0 && softcap == 0.0; }
  torch::Tensor apply(torch::Tensor logits) const;
};

class CausalLMImpl : public torch::nn::Module {
 public:
  CausalLMImpl(DecoderConfig config, DecoderOptions options);

  // Final hidden states [B, S, hidden] after model.norm. attention_mask [B, S] (1 = token,
  // 0 = padding) and position_ids [B or 1, S] are optional (see the file comment).
  torch::Tensor hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                              const torch::Tensor& position_ids = {});
  // Logits [B, S, vocab] in the model's dtype (logits() of hidden_states).
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                        const torch::Tensor& position_ids = {});

  // A cache for `batch` rows of up to `capacity` tokens (KvCache), zero-filled, empty. With
  // `ring`, sliding-window layers whose window is shorter than `capacity` keep only the window.
  KvCache allocate_cache(std::int64_t batch, std::int64_t capacity, bool ring = true) const;
  // Incremental forward for generation: input_ids [B, S] at position_ids [B, S] (attention_mask
  // [B, S]: 1 = token, 0 = left padding; undefined: all tokens) are appended to `cache` (at
  // slots cache.length ..) and each attends to the real slots up to its own (and within its
  // layer's window). Returns their final hidden states [B, S, hidden]; the logits of a full
  // forward over the same tokens are logits() of them. Runs without autograd.
  torch::Tensor hidden_states_cached(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                     const torch::Tensor& attention_mask, KvCache& cache);

  // One decode step whose shapes and tensor addresses do not change from step to step, so it
  // can be captured once in a CUDA graph and replayed (model/generate.h): input_ids and
  // position_ids [B, 1], `slot` an int64 [1] tensor on the device holding the cache slot of this
  // token (cache.length is not read or moved; the caller tracks it). Attention reads the whole
  // cache through its key_mask (slots not yet written are false). Not for RoPE kinds whose
  // frequencies depend on the length (dynamic, longrope): rope_depends_on_length.
  torch::Tensor decode_step(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                            const torch::Tensor& slot, KvCache& cache);
  // Whether decode_step applies to this model (RoPE frequencies fixed).
  bool static_decode_supported() const;

  // Final hidden states [1, T, hidden] of a padding-free row of several samples:
  // position_ids [1, T] restart at 0 per sample, cu_seqlens int32 [n+1] are the sample
  // boundaries; attention never crosses them (attention.h, varlen_causal_attention).
  torch::Tensor hidden_states_packed(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                     const torch::Tensor& cu_seqlens, std::int64_t max_seqlen,
                                     std::shared_ptr<AttentionOverride> attention = nullptr);

  // Layers whose activations are not kept for backward but recomputed (activation
  // checkpointing); applies when autograd records. Size num_hidden_layers, or empty: none.
  void set_checkpoint_layers(std::vector<bool> layers) { checkpoint_layers_ = std::move(layers); }
  const std::vector<bool>& checkpoint_layers() const { return checkpoint_layers_; }
  // Keep the checkpointed layers' inputs in pinned host memory between forward and
  // backward (offload_activations; activation_checkpoint.h). CUDA only; no effect on CPU.
  void set_offload_checkpoints(bool on) { offload_checkpoints_ = on; }
  bool offload_checkpoints() const { return offload_checkpoints_; }
  // Checkpoint segments (layers_per_checkpoint; checkpointed_segment): runs of up to n
  // consecutive checkpointed layers, counted from the first of each run, keep one stored input
  // between them, and backward rebuilds the others. Layers keeping their attention output stay
  // segments of one. 1 (the default): every checkpointed layer keeps its own input.
  void set_layers_per_checkpoint(std::int64_t n) { layers_per_checkpoint_ = std::max<std::int64_t>(1, n); }
  std::int64_t layers_per_checkpoint() const { return layers_per_checkpoint_; }
  // Tiled MLP in every layer (MlpImpl::tile_tokens); 0 = off.
  void set_mlp_tile_tokens(std::int64_t tokens);
  std::int64_t mlp_tile_tokens() const { return mlp_tile_tokens_; }
  // Layers whose MLP keeps none of its intermediates for backward but recomputes them there
  // from the norm's input (MlpImpl::recompute): two GEMMs more per layer instead of a whole
  // layer's recomputation. Meant for layers that are not checkpointed. Size num_hidden_layers,
  // or empty: none.
  void set_mlp_recompute_layers(const std::vector<bool>& layers);
  // Layers whose MLP keeps gate and up in pinned host memory between forward and backward
  // (the MLP offload tier; kernels/offload.h): the copies run on a side stream while the
  // following layers compute, and backward starts bringing layer i's pair back when it reaches
  // layer min(i + lead, last) (a hook on that layer's output), `lead` layers ahead of its use.
  // Fused path, untiled, grad mode; a layer that recomputes its MLP ignores it. On a
  // checkpointed layer (the first of its segment) the flag parks its MLP instead (the MLP
  // park, LayerContext::mlp_park): the checkpoint's forward sends gate and up to the host, the
  // layer's recomputation takes them back for its MLP backward instead of recomputing the two
  // projections, and backward starts bringing them when it reaches layer min(i' + 1, last), i'
  // the segment's last layer. CPU tensors stay where they are (the same code path runs). Size
  // num_hidden_layers, or empty: none.
  void set_mlp_offload_layers(const std::vector<bool>& layers, std::int64_t lead);
  // Why this model's MLP can take neither the MLP offload tier nor MLP recomputation ("" when
  // it can): both are the fused SwiGLU MLP (separate gate and up) inside a fused block, so
  // Gemma's GeGLU and sandwich norms, Phi-3's gate_up_proj and the reference ops have neither.
  // The two setters refuse a layer flagged on such a model.
  std::string mlp_tier_gap() const;
  // Checkpointed layers that keep their attention output for backward (AttentionStash):
  // their recomputation skips the attention forward. Padding-free rows without sequence
  // parallelism; other layers and rows recompute attention with the layer.
  void set_keep_attention_layers(std::vector<bool> layers) { keep_attention_layers_ = std::move(layers); }
  const std::vector<bool>& keep_attention_layers() const { return keep_attention_layers_; }

  // The load-balancing loss of MoE models (moe.h, docs/moe.md). On: every forward records the
  // routing of its MoE layers in a new RouterStats, router_stats(); its aux_loss() is
  // transformers' aux_loss (padding excluded), and a grad_scale set on it before backward
  // trains the routers with grad_scale · aux (transformers: router_aux_loss_coef). Off (the
  // default), or a dense model: nothing is recorded and router_stats() is null.
  void set_router_aux_loss(bool on) { router_aux_loss_ = on; }
  bool router_aux_loss() const { return router_aux_loss_; }
  const c10::intrusive_ptr<RouterStats>& router_stats() const { return router_stats_; }
  // Sequence parallelism: sums a [2E + 1] statistic over the ranks of one row
  // (RouterStats::sum_over_row) of `ranks` ranks, so the aux loss is the whole row's. Empty:
  // this rank's rows.
  void set_router_stats_sum(std::function<void(torch::Tensor&)> sum, int ranks) {
    router_stats_sum_ = std::move(sum);
    router_stats_ranks_ = router_stats_sum_ ? ranks : 1;
  }
  // Expert parallelism (docs/moe.md): every MoE layer keeps its share of the experts
  // (group->rank() · E / size ...; weights and expert adapters, taken from the whole set this
  // model holds now) and routes rows to the other shares through `group`. E must divide by the
  // group's size. Once per model, before the optimizer takes the parameters.
  void split_experts(const std::shared_ptr<ExpertGroup>& group);
  // Expert parallelism, for saving: true gathers every rank's share (a collective over the
  // group; only the expert adapters when `adapters_only`, what a LoRA checkpoint writes), false
  // keeps this rank's share again (local). Between the two the model must not run.
  void set_experts_whole(bool whole, bool adapters_only);

  // Switches every module between the fused ops and the reference formulas (see
  // DecoderOptions::fused_kernels); adapters added later follow the setting.
  void set_fused_kernels(bool on);
  bool fused_kernels() const { return options_.fused_kernels; }
  // Whether checkpointed layers' recomputations skip their fused MLP's forward GEMMs
  // (MlpImpl::skip_in_rerun; on by default, the gradients identical either way).
  void set_rerun_skips_mlp(bool on);
  // For generation (docs/inference.md, "Speed"): every layer's q/k/v and gate/up weights (and
  // biases) become rows of one tensor per layer, the projections' parameters views of it, so
  // a step without autograd runs one product for each group (adapters added onto their
  // columns). 16-bit or fp32 bases only (4-bit ones are left as they are); merge_lora writes
  // into the packed rows, and a projection whose weight is replaced later (set_data, Module::to)
  // is computed on its own again. Not for training under
  // ZeRO or a flat-buffer optimizer (the parameters move to the packed storage). Returns the
  // number of groups packed.
  std::int64_t pack_projections();
  // Decode steps' attention through kernels::decode_attention where it applies (off by
  // default, AttentionImpl::decode_kernel says why; odyssey-bench --decode-kernel on).
  void set_decode_kernel(bool on);

  // lm_head.weight, or model.embed_tokens.weight when tied.
  torch::Tensor lm_head_weight() const;
  // lm_head of final hidden states, then the family's logit transform (logit_transform()).
  torch::Tensor logits(const torch::Tensor& hidden) const;
  const LogitTransform& logit_transform() const { return logit_transform_; }
  // The embeddings of input_ids with the family's scaling (Gemma: sqrt(hidden) in their dtype,
  // Granite: embedding_multiplier).
  torch::Tensor embed(const torch::Tensor& input_ids);
  // HF's _init_weights: linear and embedding weights ~ N(0, initializer_range), biases 0,
  // the padding row 0, norms 1. Uses the default generator of the parameters' device.
  void initialize_random();

  // The SDPA backend of the last attention call ("cudnn", "flash", ...; "none" before any).
  std::string attention_backend_ran() const;

  const DecoderConfig& config() const { return config_; }
  const DecoderOptions& options() const { return options_; }

  DecoderBody model{nullptr};
  Linear lm_head{nullptr};  // null when tie_word_embeddings

 private:
  LayerContext context(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                       const torch::Tensor& position_ids, torch::ScalarType dtype);
  // Every decoder layer, then the final norm. Runs of fused layers that are not checkpointed
  // hand each other their output as forward_split's pair.
  torch::Tensor layers_and_norm(torch::Tensor h, const LayerContext& ctx);
  std::vector<bool> checkpoint_layers_;
  bool offload_checkpoints_ = false;
  std::int64_t layers_per_checkpoint_ = 1;
  std::int64_t mlp_tile_tokens_ = 0;
  std::vector<bool> mlp_offload_layers_;
  std::int64_t mlp_offload_lead_ = 1;
  std::vector<bool> keep_attention_layers_;
  bool router_aux_loss_ = false;
  c10::intrusive_ptr<RouterStats> router_stats_;
  std::function<void(torch::Tensor&)> router_stats_sum_;
  int router_stats_ranks_ = 1;
  // A new RouterStats for this forward's rows (row_weight from attention_mask), when recording.
  void start_router_stats(LayerContext& ctx, const torch::Tensor& attention_mask, std::int64_t rows);
  DecoderConfig config_;
  DecoderOptions options_;
  torch::Tensor inv_freq_;        // fp32, not a parameter (HF: non-persistent buffer)
  torch::Tensor inv_freq_local_;  // Gemma-3's sliding layers, else undefined
  LogitTransform logit_transform_;
  // The inverse frequencies for these positions (dynamic and longrope RoPE depend on the length).
  torch::Tensor inv_freq_for(const RopeParams& rope, const torch::Tensor& fixed,
                             const torch::Tensor& position_ids) const;
  std::atomic<std::int64_t> backend_ran_{-1};
};
TORCH_MODULE(CausalLM);

// HF's ForCausalLMLoss: logits in fp32, labels shifted left by one with -100 appended,
// cross-entropy averaged over labels != -100. logits [B, S, V], labels [B, S].
torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels);

// The same targets without materializing [B, S, V] logits: per-token negative
// log-likelihood [B, S] in fp32 (0 where the shifted label is -100), computed from final
// hidden states `chunk_tokens` rows at a time. For scoring under NoGradGuard; under
// autograd each chunk's logits stay alive for backward.
torch::Tensor causal_lm_token_nll(const torch::Tensor& hidden, const torch::Tensor& lm_weight,
                                  const torch::Tensor& labels, std::int64_t chunk_tokens = 4096,
                                  const LogitTransform& transform = {});

}  // namespace odyssey::model
