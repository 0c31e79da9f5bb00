#include "planner/memory_terms.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <vector>
#include <array>

#include "model/attention_tiles.h"
#include "planner/kept_attention.h"

namespace odyssey::planner_detail {
namespace {

using i64 = std::int64_t;
using namespace planner;

i64 ceil_div(i64 a, i64 b) { return b <= 1 ? a : (a + b - 1) / b; }

// The projections of a block, in the order of TrainConfig's module names. A model has either
// q/k/v and gate/up or (Phi-3) the fused qkv_proj and gate_up_proj; the others have no size.
enum Module { Q, K, V, O, Gate, Up, Down, QKV, GateUp, kModules };
constexpr std::array<const char*, kModules> kModuleNames = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "qkv_proj", "gate_up_proj"};

unsigned module_mask(const std::vector<std::string>& names) {
  unsigned mask = 0;
  for (const auto& n : names) {
    if (n == "all-linear") return (1u << kModules) - 1;
    for (std::size_t k = 0; k < kModules; ++k)
      if (n == kModuleNames[k]) mask |= 1u << k;
  }
  return mask;
}

struct Shape {
  i64 h, i, L, H, Hkv, d, V, q, kv;
  i64 in[kModules], out[kModules];
};

Shape shape_of(const HfModelConfig& m) {
  Shape s{};
  s.h = m.hidden_size;
  s.i = m.intermediate_size;
  // Mixture of experts: a token's MLP activations are those of its k experts (and the shared
  // expert), the width of a dense MLP of the same size per token (docs/moe.md, "Memory").
  if (m.is_moe() && m.hidden_size > 0)
    s.i = static_cast<i64>(m.activated_mlp_parameters() / (3.0 * static_cast<double>(m.hidden_size)));
  s.L = m.num_hidden_layers;
  s.H = m.num_attention_heads;
  s.Hkv = m.num_key_value_heads > 0 ? m.num_key_value_heads : m.num_attention_heads;
  s.d = m.head_dim > 0 ? m.head_dim : (s.H > 0 ? s.h / s.H : 0);
  s.V = m.vocab_size;
  s.q = s.H * s.d;
  s.kv = s.Hkv * s.d;
  const i64 in[kModules] = {s.h, s.h, s.h, s.q, s.h, s.h, s.i, 0, 0};
  const i64 out[kModules] = {s.q, s.kv, s.kv, s.h, s.i, s.i, s.h, 0, 0};
  std::copy(in, in + kModules, s.in);
  std::copy(out, out + kModules, s.out);
  if (m.is_moe()) {  // LoRA's MLP targets: the shared expert's projections only (the experts are not Linear modules)
    const i64 se = m.shared_expert_intermediate_size;
    s.in[Gate] = s.in[Up] = se > 0 ? s.h : 0;
    s.out[Gate] = s.out[Up] = s.in[Down] = se;
    s.out[Down] = se > 0 ? s.h : 0;
  }
  if (m.fused_qkv) {  // Phi-3: one projection, as PEFT targets it
    for (Module k : {Q, K, V}) s.in[k] = s.out[k] = 0;
    s.in[QKV] = s.h;
    s.out[QKV] = s.q + 2 * s.kv;
  }
  if (m.fused_gate_up) {  // Phi-3, GLM-4
    for (Module k : {Gate, Up}) s.in[k] = s.out[k] = 0;
    s.in[GateUp] = s.h;
    s.out[GateUp] = 2 * s.i;
  }
  return s;
}

// Bytes an RMSNorm over `dim` saves per token. Fused: its input and the fp32 1/rms. Unfused
// (composed ops): the fp32 upcast that pow and mul keep, the 1/rms, and the normalised tensor
// before the weight when the weight trains.
i64 norm_bytes(i64 dim, i64 b, bool fused, bool weight_trains) {
  if (fused) return b * dim + 4;
  return 4 * dim + 4 + (weight_trains ? b * dim : 0);
}

// The line the speed options (kept attention, the MLP park) keep the plan under: the planner's
// error margin below the capacity (memory_planner.h, kKeptAttentionMargin).
i64 speed_line(const Terms& t) { return static_cast<i64>((1.0 - t.kept_margin) * static_cast<double>(t.capacity)); }

}  // namespace

i64 fragmentation_of(i64 allocator_bytes) {
  return static_cast<i64>(static_cast<double>(allocator_bytes) * kFragmentationFraction);
}

Terms compute_terms(const TrainConfig& c, const HfModelConfig& m, const PlannerOptions& o) {
  Terms t;
  const Shape s = shape_of(m);
  if (s.h <= 0 || s.i <= 0 || s.L <= 0 || s.H <= 0 || s.d <= 0 || s.V <= 0) return t;
  t.valid = true;
  t.layers = s.L;
  t.hf = o.reference == PlannerReference::HfPeft;
  t.cuda = c.device == "cuda" || (c.device != "cpu" && o.auto_device != "cpu");
  const i64 b = c.torch_dtype == "float32" || (c.torch_dtype == "auto" && !t.cuda) ? 4 : 2;
  t.act_b = b;
  t.lora = uses_lora(c);
  t.moe = m.is_moe();
  // The fused ops run on CUDA and, as ATen ops, elsewhere. A family whose block they do not
  // cover ((1 + w) norms, fp32-weighted norms, norms on the branches' outputs, a residual
  // multiplier: model::DecoderLayer::fusable) runs
  // the reference layer and is planned as such. Within a fused block, the MLP's SwiGLU kernels
  // need silu and separate gate and up: Phi-3's gate_up_proj and GeGLU take the reference
  // formula there (model::CausalLM::mlp_tier_gap), with the fused norms and projections around it.
  const bool block_fusable =
      !m.norm_plus_one && !m.norm_weight_fp32 && !m.output_norms() && m.residual_multiplier == 1.0;
  t.fused = c.fused_kernels && !t.hf && block_fusable;
  // The SwiGLU kernel (saves gate and up) runs wherever the block is fused and the MLP is
  // SwiGLU with separate gate and up; so do the MLP's tiers (rms_norm_mlp recomputation,
  // swiglu_down and its offload), on 16-bit and 4-bit bases alike (docs/qlora.md).
  // MoE models: the experts' SwiGLU runs between two grouped GEMMs (no MLP tiers there).
  const bool swiglu_kernel = t.fused && m.hidden_act == "silu" && !m.fused_gate_up && !m.is_moe();
  t.mlp_fused = swiglu_kernel;
  t.layout = parallel_layout(c, s.Hkv);
  const ParallelLayout& p = t.layout;
  const i64 u = std::max<i64>(1, p.ulysses), sp = std::max<i64>(1, p.sp);
  const i64 batch = std::max<i64>(1, c.per_device_train_batch_size);
  const i64 seq = std::max<i64>(1, c.max_length);
  t.tokens = ceil_div(batch * seq, sp);
  const i64 T = t.tokens;
  t.procs_per_node = std::max<i64>(1, resolved_nproc_per_node(c));

  // -- capacity and what lives outside the caching allocator
  const double keep = 1.0 - std::clamp(o.reserve_fraction, 0.0, 0.9);
  i64 device_mem = t.cuda ? (o.gpu_memory_bytes > 0 ? o.gpu_memory_bytes : kH200MemoryBytes)
                          : (o.host_memory_bytes > 0 ? o.host_memory_bytes : host_memory_bytes()) / t.procs_per_node;
  // gpu_memory_budget_gib caps a GPU's memory (the engine caps its allocator the same way).
  if (t.cuda && c.gpu_memory_budget_gib > 0)
    device_mem = std::min(device_mem, planner::budget_bytes(c.gpu_memory_budget_gib));
  t.capacity = static_cast<i64>(static_cast<double>(device_mem) * keep);
  t.kept_margin = std::clamp(o.kept_attention_margin, 0.0, 0.5);
  t.host_capacity =
      static_cast<i64>(static_cast<double>(o.host_memory_bytes > 0 ? o.host_memory_bytes : host_memory_bytes()) *
                       planner::kHostOffloadShare / static_cast<double>(t.procs_per_node));
  t.runtime = t.cuda ? kCudaContextBytes : kCpuRuntimeBytes;
  if (t.cuda && !t.hf && p.world_size > 1) {
    t.nccl = kNcclCommunicatorBytes + kNcclCollectiveBytes;  // world: gradient all-reduce
    if (u > 1) t.nccl += kNcclCommunicatorBytes + (u - 1) * kNcclP2pPeerBytes;
    if (p.ring > 1) t.nccl += kNcclCommunicatorBytes + std::min<i64>(p.ring - 1, 2) * kNcclP2pPeerBytes;
  }

  // -- parameters, gradients, optimizer
  // Expert parallelism: this rank holds 1 / ep of every MoE layer's experts (docs/moe.md);
  // its weights, gradients and optimizer state count only those.
  const i64 ep = m.is_moe() && m.num_experts % std::max<i64>(1, p.ep) == 0 ? std::max<i64>(1, p.ep) : 1;
  const i64 experts_all = m.is_moe() ? 3 * m.num_experts * s.h * m.moe_intermediate_size * m.moe_layer_count() : 0;
  const i64 P = m.parameter_count() - (experts_all - experts_all / ep);
  const i64 embed = s.V * s.h, head = m.tie_word_embeddings ? 0 : s.V * s.h;
  const i64 per_layer = (P - embed - head - s.h) / s.L;
  t.params = P;  // this rank's
  t.weights = P * b;
  t.base_4bit = c.quant_bits == 4;
  if (c.quant_bits == 4) {
    // A 4-bit base (docs/qlora.md): every decoder projection at half a byte a value plus its
    // constants (an 8-bit absmax per 64 values and an fp32 one per 256 of those, or an fp32
    // absmax per 64). The dequantization working set of the largest projection exists while
    // any projection computes, so it is counted here: on a GPU the dequantized weight in the
    // compute dtype (quant4.cu writes it directly); elsewhere the reference dequantizer's
    // int64 codes, fp32 values and scaled fp32 weight, then that copy.
    // MoE models: the experts are 4-bit too (docs/moe.md), each stacked parameter of a layer
    // one weight; its dequantized copy is the largest working set ([E, 2I, hidden]).
    i64 per_layer_q = 0, largest = 0;
    for (std::size_t k = 0; k < kModules; ++k) {
      per_layer_q += s.in[k] * s.out[k];
      largest = std::max(largest, s.in[k] * s.out[k]);
    }
    i64 qn = per_layer_q * s.L;
    if (m.is_moe()) {
      t.experts_4bit = true;
      qn += experts_all / ep;
      largest = std::max(largest, 2 * (m.num_experts / ep) * m.moe_intermediate_size * s.h);
    }
    // Under expert parallelism a rank's share of the experts keeps an fp32 absmax per block
    // (kernels::slice_4bit), double quantization or not.
    const i64 q_fp32_absmax = c.bnb_4bit_use_double_quant ? (ep > 1 ? experts_all / ep : 0) : qn;
    const i64 q_nested = qn - q_fp32_absmax;
    const i64 consts = ceil_div(q_nested, 64) + 4 * ceil_div(q_nested, 64 * 256) + 4 * ceil_div(q_fp32_absmax, 64);
    t.weights = (P - qn) * b + ceil_div(qn, 2) + consts + largest * (t.cuda ? b : 8 + 4 + 4 + b);
  }
  // ZeRO shards over every rank (dp × sp), as DeepSpeed-Ulysses does (docs/optimizers.md).
  t.zero_stage = t.hf ? c.zero_stage : optimizer_zero_stage(c, b != 4);
  const i64 zero_stage = t.zero_stage;
  const i64 shards = std::max<i64>(1, p.world_size);
  const i64 gas = std::max<i64>(1, c.gradient_accumulation_steps);
  t.grads_persistent = gas > 1;
  const unsigned lmask = t.lora ? module_mask(c.target_modules) : (1u << kModules) - 1;
  const i64 r = std::max<i64>(1, c.lora_rank);
  if (t.lora) {
    // Adapters are fp32 (their own master copy); their grads fp32; AdamW m and v fp32.
    i64 per_block = 0;
    for (std::size_t k = 0; k < kModules; ++k)
      if (lmask & (1u << k)) per_block += r * (s.in[k] + s.out[k]);
    t.trainable = per_block * s.L;
    // Expert adapters (docs/moe.md, "LoRA"), as train::apply_lora places them: where the MLP
    // names mean the experts (HfModelConfig::mlp_names_mean_experts), gate_proj + up_proj adapt
    // the stacked gate_up_proj at rank 2r and down_proj the stacked down_proj at r; otherwise a
    // target_parameters entry naming a layer's stacked parameter (PEFT's rule: the whole name or
    // a "."-separated suffix of it) adapts it at r. Per expert, lora_A [rank, in] and lora_B
    // [out, rank].
    if (m.is_moe()) {
      const i64 e = m.num_experts, im = m.moe_intermediate_size;
      const bool named = m.mlp_names_mean_experts();
      const bool gu_named = named && (lmask & (1u << Gate)) && (lmask & (1u << Up));
      const bool down_named = named && (lmask & (1u << Down));
      auto targets_parameter = [&](i64 layer, const std::string& param) {
        const std::string name = "model.layers." + std::to_string(layer) + ".mlp.experts." + param;
        return std::any_of(c.target_parameters.begin(), c.target_parameters.end(), [&](const std::string& x) {
          return name == x || (name.size() > x.size() && name.ends_with(x) && name[name.size() - x.size() - 1] == '.');
        });
      };
      i64 expert_adapters = 0;
      for (i64 layer = 0; layer < m.num_hidden_layers; ++layer) {
        if (!m.moe_layer(layer)) continue;
        const i64 gu_rank = gu_named ? 2 * r : targets_parameter(layer, "gate_up_proj") ? r : 0;
        const i64 down_rank = down_named || targets_parameter(layer, "down_proj") ? r : 0;
        expert_adapters += gu_rank * e * (s.h + 2 * im) + down_rank * e * (im + s.h);
        if (t.expert_adapter_rank == 0) t.expert_adapter_rank = gu_rank + down_rank;  // the first MoE layer's
      }
      t.trainable += expert_adapters / ep;
    }
    t.adapters = 4 * t.trainable;
    t.grads_layers = 4 * t.trainable;
    t.adam = 8 * t.trainable;
    // Odyssey's AdamW is the fused in-place kernel (at::_fused_adamw_): no temporaries. HF's
    // foreach AdamW allocates a copy of the states (sqrt of v) during the step.
    t.step_tmp = t.hf ? 4 * t.trainable : 0;
  } else {
    // Without ZeRO the engine trains full fine-tunes as HF does, "pure" in the parameters'
    // dtype: gradients and AdamW states in that dtype, no master copy (measured on an H200:
    // docs/memory-planner.md); GaLore's untargeted parameters too, as galore-torch does. ZeRO
    // keeps fp32 master weights, moments and gradient shards (docs/optimizers.md), and so does
    // optimizer_dtype fp32 on one process (ZeRO-2 over a group of one).
    const bool pure = t.hf || zero_stage == 0;
    const i64 gb = pure ? b : 4;
    const unsigned gmask = c.use_galore ? module_mask(c.galore_target_modules) : 0u;
    i64 targeted_block = 0, largest_target = 0, largest_in = 0, largest_out = 0;
    for (std::size_t k = 0; k < kModules; ++k)
      if (gmask & (1u << k)) {
        const i64 mn = s.in[k] * s.out[k];
        targeted_block += mn;
        const i64 rk = std::min({c.galore_rank, s.in[k], s.out[k]});
        const i64 big = std::max(s.in[k], s.out[k]), small = std::min(s.in[k], s.out[k]);
        // m and v of shape r × max(in, out); the projection r × min(in, out); the rank-r
        // gradient of the step, held from the hook to the update (clipping needs the norm).
        const i64 states = 2 * rk * big, proj = rk * small;
        t.galore_accum += 4 * rk * big * s.L;
        if (c.galore_quantization) {
          t.galore_states += (states + 4 * ceil_div(states, kQuantBlock)) * s.L;         // int8 + absmax
          t.galore_proj += (ceil_div(proj, 2) + 8 * ceil_div(proj, kQuantBlock)) * s.L;  // int4 + lo, scale
        } else {
          t.galore_states += 4 * states * s.L;
          t.galore_proj += 4 * proj * s.L;
        }
        if (mn > largest_target) largest_target = mn, largest_in = s.in[k], largest_out = s.out[k];
      }
    t.galore_targeted = targeted_block * s.L;
    // A backward hook projects each targeted gradient as soon as it exists and frees it: the
    // full gradients of targeted weights are never all held.
    t.galore_per_layer = c.use_galore;
    const i64 untargeted = P - t.galore_targeted;
    t.trainable = P;
    t.grads_layers = (per_layer * s.L - (t.galore_per_layer ? t.galore_targeted : 0)) * gb;
    t.grads_other = (embed + head + s.h) * gb;
    // An untied embedding's gradient appears only when backward reaches the first layer.
    t.grads_embed = head > 0 ? embed * gb : 0;
    // ZeroAdamW keeps its fp32 master shard also when the weights are fp32 (zero.cpp).
    t.master = pure ? 0 : 4 * untargeted;
    t.adam = untargeted * (pure ? 2 * b : 8);
    t.step_tmp = t.hf ? untargeted * b : 0;
    if (c.use_galore) {
      // The hook holds one layer's bf16 gradients, back-projects the update of the largest
      // matrix to fp32, and every update_proj_gap steps refreshes the projection: an SVD of
      // the fp32 gradient (the matrix, U, Vh, S).
      // One layer's gradients in the weights' dtype; two fp32 copies of the largest (the
      // projection's and, on a refresh step, the SVD's input); an exact SVD's factors for
      // weights whose smaller side is at most 1024 (larger ones take a randomized SVD whose
      // workspace is r + 8 columns wide).
      (void)largest_in, (void)largest_out;
      i64 exact_ws = 0;
      for (std::size_t k = 0; k < kModules; ++k)
        if (gmask & (1u << k)) {
          const i64 big = std::max(s.in[k], s.out[k]), small = std::min(s.in[k], s.out[k]);
          if (small <= 1024) exact_ws = std::max(exact_ws, 4 * (small * big + small * small + small));
        }
      t.layer_grads_tmp = targeted_block * b + 8 * largest_target + exact_ws;
    }
    if (!pure) t.layer_grads_tmp += per_layer * b;  // bf16 grads before fp32 accumulation
  }
  t.grads_unsharded = t.grads_layers + t.grads_other;
  if (zero_stage >= 1) {
    t.master = ceil_div(t.master, shards);
    t.adam = ceil_div(t.adam, shards);
    t.galore_states = ceil_div(t.galore_states, shards);
  }
  if (zero_stage >= 2) {
    t.grads_layers = ceil_div(t.grads_layers, shards);
    t.grads_other = ceil_div(t.grads_other, shards);
    t.grads_embed = ceil_div(t.grads_embed, shards);
  }
  // ZeRO's fp32 gradient shard is one buffer allocated with the optimizer: it exists in every
  // phase, as accumulated gradients do (measured: Qwen2.5-14B, two H200s, docs/optimizers.md).
  if (zero_stage >= 1 && !t.hf) t.grads_persistent = true;
  if (c.offload_optimizer && t.cuda) {
    // fp32 master weights and moments of the shard live in host memory (12 B per parameter of
    // a shard) and the update runs on the CPU; the fp32 gradient shard stays on the GPU
    // (docs/optimizers.md, core/train/zero.h).
    t.host_optimizer = t.master + t.adam + t.galore_states + t.galore_proj;
    t.master = t.adam = t.galore_states = t.galore_proj = 0;
    t.step_tmp = 0;
  }
  if (t.cuda && !t.hf && p.world_size > 1) t.grad_buckets = std::min(2 * kGradBucketBytes, t.grads_unsharded);

  // -- activations saved by one block, per local token
  const i64 kv_heads_gpu = std::max<i64>(1, s.Hkv / u);
  const i64 kv_eff = u * kv_heads_gpu * s.d;  // K/V heads replicate when ulysses > kv heads
  const bool full = !t.lora;
  const double dropout = t.lora ? c.lora_dropout : 0.0;
  // LoRA dropout: PEFT (and the engine with fused_kernels false) keeps each adapter's dropped
  // input and its mask; the fused engine's projections redraw the mask in backward
  // (kernels::LoraDropout) and keep neither, holding one block of masked rows while they run.
  const bool dropout_kept = dropout > 0.0 && (t.hf || !c.fused_kernels);
  // PEFT (and the engine with fused_kernels false) casts each adapter's input to fp32: an own
  // copy per adapter. With fused_kernels the engine computes adapters in the input's dtype on
  // every projection, also in blocks the fused kernels do not cover (model::LinearImpl,
  // lora_in_input_dtype), so the adapters share the projection's input.
  const bool adapters_fp32 = (t.hf || !c.fused_kernels) && b != 4;
  auto needs_shared = [&](Module k) {
    if (full) return true;
    if (!(lmask & (1u << k))) return false;
    const bool own_copy = dropout_kept || adapters_fp32;
    return !own_copy;
  };
  i64 per_token = m.norms_per_block() * norm_bytes(s.h, b, t.fused, full);  // 4 with sandwich norms
  i64 mlp_tok = 0;                                                          // the MLP's share of per_token
  if (m.qk_norm) {
    const i64 rows = m.qk_norm_whole ? 2 : s.H + s.Hkv;  // one fp32 statistic per normalized row
    per_token += t.fused ? b * (s.q + s.kv) + 4 * rows : 4 * (s.q + s.kv) + 4 * rows + (full ? b * (s.q + s.kv) : 0);
  }
  // The fused engine's projections of a norm's output keep the norm's input (counted in
  // norm_bytes) and recompute the output in backward (kernels::rms_norm_linear); the reference
  // ops keep the output as the projections' shared input.
  const bool norm_recomputed = t.fused;
  const bool qkv_input_kept =
      !norm_recomputed && (needs_shared(Q) || needs_shared(K) || needs_shared(V) || (m.fused_qkv && needs_shared(QKV)));
  const bool mlp_input_kept =
      !norm_recomputed && (needs_shared(Gate) || needs_shared(Up) || (m.fused_gate_up && needs_shared(GateUp)));
  if (qkv_input_kept) per_token += b * s.h;
  if (needs_shared(O) && (u > 1 || t.hf)) per_token += b * s.q;  // else flash's saved output
  if (mlp_input_kept) mlp_tok += b * s.h;
  // The fused engine's down projection keeps gate and up, not the activation (recomputed in
  // the SwiGLU backward, kernels::swiglu_down); the reference ops keep it as its input.
  const bool act_kept = needs_shared(Down) && !t.mlp_fused;
  if (act_kept) mlp_tok += b * s.i;
  i64 dropout_tok = 0, mlp_dropout_tok = 0;
  if (t.lora)
    for (std::size_t k = 0; k < kModules; ++k) {
      if (!(lmask & (1u << k))) continue;
      if (s.in[k] == 0) continue;  // not a module of this model
      const bool in_mlp = k == Gate || k == Up || k == Down || k == GateUp;
      i64& into = in_mlp ? mlp_tok : per_token;
      const bool fp32_inputs = adapters_fp32;
      const i64 copy_b = fp32_inputs ? 4 : b;
      if (dropout_kept) (in_mlp ? mlp_dropout_tok : dropout_tok) += (copy_b + 1) * s.in[k];  // dropped copy + mask
      else if (fp32_inputs) into += 4 * s.in[k];
      into += r * (fp32_inputs ? 4 : b);  // lora_A output
    }
  per_token += dropout_tok;
  mlp_tok += mlp_dropout_tok;
  per_token += b * (s.q + 2 * kv_eff) + b * s.q + 4 * s.H;                // q, k, v, output, fp32 LSE
  if (!m.is_moe() || t.hf) mlp_tok += (swiglu_kernel ? 2 : 3) * b * s.i;  // gate, up (reference: act(gate) too)
  if (m.is_moe()) {
    // The token's k expert outputs (their weighting by the routing probabilities needs them,
    // kernels::combine_rows), fp32 router probabilities, the sort's indices; and the k permuted
    // copies of the token when the experts train (their weights' or adapters' gradients need
    // them; frozen experts keep none, kernels::grouped_linear).
    const bool expert_lora = t.lora && t.expert_adapter_rank > 0;
    const bool experts_train = !t.lora || expert_lora;
    mlp_tok += (experts_train ? 2 : 1) * m.num_experts_per_tok * b * s.h + 2 * 4 * m.num_experts +
               3 * 8 * m.num_experts_per_tok;
    if (!t.hf) {
      // The experts' SwiGLU keeps their gate_up output (kernels::swiglu_packed; the reference
      // ops keep silu(gate) too); the down projection keeps its input only when the experts
      // train (frozen experts under attention-only LoRA keep none); expert adapters keep their
      // rank-wide products (gate_up's at twice the rank when the MLP names mean the experts).
      mlp_tok += ((t.fused ? 2 : 3) + (experts_train ? 1 : 0)) * b * s.i;
      if (expert_lora) mlp_tok += t.expert_adapter_rank * m.num_experts_per_tok * b;
    }
  }
  per_token += mlp_tok;
  t.per_token_layer = per_token;
  t.mlp_per_token = mlp_tok;
  t.mlp_input_extra = mlp_input_kept ? 0 : b * s.h;
  t.hidden_bytes = b * s.h;
  t.dropout_per_layer = (dropout_tok + mlp_dropout_tok) * T;
  const bool eager = c.attn_impl == "eager";
  // Probabilities fp32 + their cast, s² per head; in double, saturated (searches reach 2^26).
  const double sq =
      static_cast<double>(batch * (s.H / u) * (b + 4)) * static_cast<double>(seq) * static_cast<double>(seq);
  // Under ring attention, soft-capped and windowed layers take the reference ring: fp32 scores,
  // probabilities and their gradient of one [H/u, S/ring, S/ring] block at a time
  // (dist/sequence_parallel.h, ring_attention; about 16 B per score).
  const bool capped = m.attn_logit_softcapping > 0;
  const bool windowed = m.sliding_window > 0 && m.sliding_window < seq;
  const bool ring_reference = p.ring > 1 && (capped || windowed);
  // Elsewhere the engine computes soft-capped layers, and windowed ones flash attention's band
  // cannot take (model/attention.h, window_on_flash: CUDA, 16-bit, head dim <= 256, no
  // soft-capping, attn_impl not eager), in tiles of exact attention (model/tiled_attention.h):
  // nothing of s² is saved; a layer's backward holds a few tiles of fp32 scores and fp32 dK/dV
  // sums over the row (the gathered row's, for this GPU's heads, under Ulysses). HF computes
  // soft-capping by its eager formula; eager attention keeps s² where layers are not capped.
  const bool flash_band = t.cuda && b == 2 && s.d <= 256 && !capped && !eager;
  const bool tiled = !t.hf && !ring_reference && (capped || (windowed && !flash_band));
  const bool eager_formula = (eager && !capped) || (capped && t.hf);
  const double ring_block = static_cast<double>(seq) / static_cast<double>(p.ring);
  const double ring_sq = static_cast<double>(batch * (s.H / u) * 16) * ring_block * ring_block;
  const i64 eager_sq = ring_reference  ? static_cast<i64>(std::min(ring_sq, 1e17))
                       : eager_formula ? static_cast<i64>(std::min(sq, 1e17))
                                       : 0;
  const i64 tiled_working =
      tiled ? model::kTiledBackwardBlocks * model::tiled_attention_block_bytes(seq, seq, std::max<i64>(1, s.H / u)) +
                  2 * 4 * kv_heads_gpu * s.d * seq
            : 0;

  t.layer_full = per_token * T + eager_sq;
  t.layer_in = b * s.h * T;
  t.layer_in_host = static_cast<i64>(std::bit_ceil(static_cast<std::uint64_t>(t.layer_in)));
  t.segment = std::max<i64>(1, c.layers_per_checkpoint);
  t.recompute_extra = t.fused ? 0 : t.layer_in;
  // auto is resolved by plan_memory (planned both ways); a Terms of auto is planned without.
  t.offload_acts = c.offload_activations == "true" && t.cuda;
  t.kept_on_host = t.offload_acts && o.kept_attention_on_host;
  t.mlp_park = o.mlp_park;
  // A kept attention output (the layer's own O and fp32 log-sum-exp, alive from forward to the
  // layer's backward). The engine keeps it on padding-free rows, also under sequence
  // parallelism (Ulysses: each rank its heads of the gathered row; ring: its queries' merged
  // output; the same bytes).
  t.attn_kept = attention_keepable(c, m, t.cuda) ? T * (b * s.q + 4 * s.H) : 0;
  // kernels::rms_norm_mlp keeps neither gate nor up: backward recomputes both from the norm's
  // input.
  if (t.mlp_fused) {
    t.mlp_recompute_saved = 2 * b * s.i * T;
    t.recompute_mlp_flops = 2.0 * static_cast<double>(T) * static_cast<double>(2 * s.h * s.i);
  }
  // Recompute costs (planner/flops.h's conventions; LoRA's small matrices left out). A GPU's
  // attention covers its tokens' queries against the whole sequence (sp = ulysses · ring).
  // A checkpointed layer's recomputation runs gate and up but not the down projection where the
  // MLP is rms_norm_mlp's (skip_output: its backward rebuilds gate and up, nothing reads the
  // output); the tiled MLP re-runs all three (tile_mlp).
  t.recompute_down_flops = 2.0 * static_cast<double>(T) * static_cast<double>(s.h * s.i);
  t.recompute_linear_flops =
      2.0 * static_cast<double>(T) * static_cast<double>(s.h * s.q + 2 * s.h * s.kv + s.q * s.h + 2 * s.h * s.i) +
      (t.mlp_recompute_saved > 0 ? 0.0 : t.recompute_down_flops);
  t.recompute_attention_flops = 2.0 * static_cast<double>(s.d * s.H) * static_cast<double>(batch) *
                                static_cast<double>(seq) * static_cast<double>(seq) / static_cast<double>(sp);
  // The MLP offload tier: the bytes rms_norm_mlp would not keep, kept on the host instead, on
  // as many layers as the host link moves in one forward's compute time.
  if (t.mlp_recompute_saved > 0 && t.offload_acts) {
    t.mlp_offload_saved = t.mlp_recompute_saved;
    t.mlp_offload_host = 2 * static_cast<i64>(std::bit_ceil(static_cast<std::uint64_t>(b * s.i * T)));
    // (A layer's whole forward: its down projection too, which a recomputation skips here.)
    const double forward_s = static_cast<double>(s.L) *
                             (t.recompute_linear_flops + t.recompute_down_flops + t.recompute_attention_flops) /
                             planner::kOffloadLayerFlopsPerSecond;
    t.link_forward_bytes = planner::kHostLinkBytesPerSecond * forward_s;
    const double layers = t.link_forward_bytes / static_cast<double>(t.mlp_offload_saved);
    t.mlp_offload_max = std::min<i64>(s.L, static_cast<i64>(layers));
  }
  t.misc = T * (3 * 8 + 2 * 4 * s.d);
  // A sliding window below the sequence length is an explicit [S, S] boolean mask per row in
  // HF's model unless flash attention's band computes it (the engine's band or tiles need none).
  if (windowed && t.hf && !flash_band && sp == 1)
    t.misc += static_cast<i64>(
        std::min(static_cast<double>(batch) * static_cast<double>(seq) * static_cast<double>(seq), 1e17));

  // -- loss: final norm, then logits → cross-entropy, on this GPU's tokens
  const i64 final_norm = norm_bytes(s.h, b, t.fused, full) * T;
  t.fused_loss = t.fused && m.logits_scaling == 1.0 && m.final_logit_softcapping == 0.0;
  if (t.fused_loss) {
    // kernels/linear_ce.cpp: one chunk of logits in the compute dtype, its softmax − onehot
    // written over it in place by the CUDA row kernel (2 B per logit in bf16). Off CUDA the
    // ATen row step upcasts the chunk and forms its softmax in fp32 beside it (+8 B per 16-bit
    // logit, +4 B per fp32 one). Counted at 6 B per bf16 logit until 2026-12-06: 1.16 GiB
    // above the engine's peak at a 152K vocabulary, the whole error of loss-peaked lines.
    t.loss_chunk = std::min(T, kFusedLossChunkTokens);
    const i64 per_logit = t.cuda ? b : b + 4 + (b < 4 ? 4 : 0);
    t.loss =
        final_norm + t.loss_chunk * s.V * per_logit + T * s.h * b + (full && t.zero_stage >= 2 ? 4 * s.V * s.h : 0);
  } else if (t.hf) {
    // fp32 log-softmax output + its gradient + the gradient of the logits (12 B/logit); HF
    // also keeps the model output's logits alive through backward.
    t.loss = final_norm + 12 * T * s.V + b * T * s.V + (full ? b * s.h * T : 0);
  } else {
    // The engine's reference ops: chunks of 2^26 logits, each recomputed in backward (12 B
    // per logit of one chunk at a time); the full logits never exist.
    t.loss_chunk = std::min(T, std::max<i64>(1, (i64{1} << 26) / s.V));
    t.loss = final_norm + 12 * t.loss_chunk * s.V + (full ? b * s.h * T : 0);
  }

  // -- backward working sets of one layer
  // The down projection's saved input (when stored) is released once its backward has run,
  // before SwiGLU's backward creates the gradients of gate and up: it is not live with them.
  // Fused: the activation's gradient, then d gate and d up, the activation recomputed into the
  // first buffer.
  t.bwd_mlp_h = (norm_recomputed ? 4 : 3) * b * s.h;  // + the recomputed norm output
  t.bwd_mlp_i = (swiglu_kernel ? 3 : 4) * b * s.i - (act_kept ? b * s.i : 0);
  t.bwd_mlp = T * (t.bwd_mlp_h + t.bwd_mlp_i);
  t.bwd_attn =
      T * (b * ((norm_recomputed ? 4 : 3) * s.h + 2 * s.q + 2 * kv_eff) + 4 * s.q + 4 * s.H) + eager_sq + tiled_working;
  if (dropout > 0.0 && !dropout_kept) {
    t.dropout_mlp_in = s.i;
    t.dropout_element_bytes = b;
    t.bwd_mlp += dropout_blocks(t, T, s.i);
    t.bwd_attn += dropout_blocks(t, T, std::max(s.h, s.q));
  }
  // A kept layer's attention backward calls cuDNN's kernel directly, which takes K and V with
  // the query heads' count: K/V repeated, their gradients in that shape, then summed per KV
  // head in fp32 (model/attention.cpp, LseAttention).
  // Soft-capped layers keep through the tiles, whose backward is the same with or without a
  // kept output (model/tiled_attention.h): no repeated K/V.
  t.bwd_attn_kept =
      t.bwd_attn + (kv_eff < s.q && !capped ? T * (2 * b * s.q + 2 * b * (s.q - kv_eff) + 2 * 4 * kv_eff) : 0);
  if (u > 1) t.a2a = T * 2 * b * (s.q + 2 * kv_eff);
  if (p.ring > 1) {
    const i64 chunk = T * kv_eff * 2 * b;
    t.ring = 2 * chunk + 2 * chunk * 4 / b + 4 * T * s.q;
  }
  return t;
}

void tile_mlp(Terms& t, std::int64_t tile) {
  // MoE layers run their experts on the whole row (the router's statistics are per layer call):
  // the engine tiles dense MLPs only (CausalLMImpl::set_mlp_tile_tokens).
  if (tile <= 0 || t.tokens <= tile || t.mlp_tile > 0 || t.moe) return;
  const i64 T = t.tokens;
  t.mlp_tile = tile;
  if (t.mlp_recompute_saved > 0) t.recompute_linear_flops += t.recompute_down_flops;  // each tile re-runs it
  t.mlp_recompute_saved = 0;  // the tiles keep no intermediates already
  t.mlp_offload_saved = t.mlp_offload_host = t.mlp_offload_max = 0;
  t.per_token_layer += t.mlp_input_extra - t.mlp_per_token;
  t.layer_full -= (t.mlp_per_token - t.mlp_input_extra) * T;
  // One tile's intermediates (recomputed) and their gradients; the gradients of the MLP's
  // output and input stay full length. The tiles are narrowed views of the input, whose
  // backward (torch's slice_backward) returns each tile's input gradient as a zero-filled
  // full-length tensor that is then added into the input's gradient: one more hidden-sized
  // tensor of every token while a tile's backward runs (the lines of 2026-12-03 at 4.6-5.0 GiB
  // measured 0.05-0.1 GiB above the plan without it).
  t.bwd_mlp = T * (t.bwd_mlp_h + t.hidden_bytes) + tile * (t.bwd_mlp_i + t.mlp_per_token) +
              dropout_blocks(t, tile, t.dropout_mlp_in);
}

std::int64_t dropout_blocks(const Terms& t, std::int64_t tokens, std::int64_t in) {
  return t.dropout_element_bytes * std::min<std::int64_t>(std::int64_t{1} << 26, tokens * in);
}

std::int64_t park_stride(const Terms& t) {
  if (t.mlp_offload_saved <= 0 || t.layers <= 0 || t.link_forward_bytes <= 0) return 0;
  const double spare = t.link_forward_bytes / static_cast<double>(t.layers) -
                       static_cast<double>(t.layer_in + (t.kept_on_host ? t.attn_kept : 0));
  if (spare <= 0) return 0;
  return std::max<i64>(1, static_cast<i64>(std::ceil(static_cast<double>(t.mlp_offload_saved) / spare)));
}

Eval evaluate(const Terms& t, std::int64_t ckpt, std::int64_t every, std::int64_t kept, std::int64_t mlp,
              std::int64_t offload, std::int64_t park, std::int64_t stride) {
  Eval e;
  const i64 L = t.layers;
  auto is_ckpt = [&](i64 j) { return every > 0 ? j % every == 0 : j < ckpt; };
  // Of the layers that are not checkpointed, the first `offload` keep gate and up on the host,
  // the next `mlp` recompute them.
  std::vector<bool> mlp_rc(static_cast<std::size_t>(L), false), mlp_off(static_cast<std::size_t>(L), false);
  i64 off_left = t.mlp_offload_saved > 0 ? std::min(offload, t.mlp_offload_max) : 0;
  for (i64 j = 0, left = t.mlp_recompute_saved > 0 ? mlp : 0; j < L && (left > 0 || off_left > 0); ++j) {
    if (is_ckpt(j)) continue;
    if (off_left > 0) mlp_off[static_cast<std::size_t>(j)] = true, --off_left;
    else mlp_rc[static_cast<std::size_t>(j)] = true, --left;
  }
  for (bool m : mlp_rc) e.mlp_layers += m ? 1 : 0;
  for (bool m : mlp_off) e.offload_layers += m ? 1 : 0;
  const i64 lead = planner::mlp_offload_lead(e.offload_layers);
  std::vector<i64> off_below(static_cast<std::size_t>(L) + 1, 0);  // offloaded layers below x
  for (i64 x = 0; x < L; ++x)
    off_below[static_cast<std::size_t>(x) + 1] =
        off_below[static_cast<std::size_t>(x)] + (mlp_off[static_cast<std::size_t>(x)] ? 1 : 0);
  // The last `kept` checkpointed layers keep their attention output.
  std::vector<bool> keeps(static_cast<std::size_t>(L), false);
  for (i64 j = L - 1, left = t.attn_kept > 0 ? kept : 0; j >= 0 && left > 0; --j)
    if (is_ckpt(j)) keeps[static_cast<std::size_t>(j)] = true, --left;
  i64 n_kept = 0;
  for (bool k : keeps) n_kept += k ? 1 : 0;
  e.kept_layers = n_kept;
  // Checkpoint segments (t.segment > 1; checkpoint_stores): `pos` is a checkpointed layer's
  // place in its segment (its input is rebuilt in backward when pos > 0).
  // (Without segments every checkpointed layer stores its input: no tables, as the searches
  // evaluate thousands of plans.)
  // The checkpointed layers as a table, for the two rules that take one (segments, the park).
  auto ckpt_table = [&] {
    std::vector<bool> table(static_cast<std::size_t>(L), false);
    for (i64 j = 0; j < L; ++j) table[static_cast<std::size_t>(j)] = is_ckpt(j);
    return table;
  };
  std::vector<bool> stores;
  std::vector<i64> pos;
  if (t.segment > 1) {
    const std::vector<bool> ckpt_layers = ckpt_table();
    stores = checkpoint_stores(ckpt_layers, keeps, t.segment);
    pos.assign(static_cast<std::size_t>(L), 0);
    for (std::size_t j = 1; j < pos.size(); ++j)
      if (ckpt_layers[j] && !stores[j]) pos[j] = pos[j - 1] + 1;
  }
  auto stores_at = [&](i64 j) { return t.segment > 1 ? bool(stores[static_cast<std::size_t>(j)]) : is_ckpt(j); };
  auto pos_at = [&](i64 j) { return t.segment > 1 ? pos[static_cast<std::size_t>(j)] : i64{0}; };
  auto inputs_on_gpu = [&](i64 n) { return t.offload_acts ? std::min<i64>(n, 2) * t.layer_in : n * t.layer_in; };
  // Kept attention outputs wait on the host too under offload (AttentionStash::park): at most
  // two on the GPU (the one being copied, the one prefetched).
  auto kept_on_gpu = [&](i64 n) { return (t.kept_on_host ? std::min<i64>(n, 2) : n) * t.attn_kept; };
  i64 n_ckpt = 0, n_stored = 0;
  for (i64 j = 0; j < L; ++j) n_ckpt += is_ckpt(j) ? 1 : 0;
  for (i64 j = 0; j < L; ++j) n_stored += stores_at(j) ? 1 : 0;
  e.stored_segments = n_stored;
  // The MLP park: `park` checkpointed layers, every stride-th from the first (park_stride), within
  // what the tier's cap leaves and what the host link has left in one forward after the other
  // offloads' bytes (stored inputs, kept outputs, the offload tier): a forward that sends more
  // ends with copies still queued, which backward's first takes wait for.
  std::vector<bool> parked(static_cast<std::size_t>(L), false);
  const i64 chosen = stride > 0 ? stride : park_stride(t);  // 0: the link carries no pair
  e.park_stride = std::max<i64>(1, chosen);
  if (t.mlp_offload_saved > 0 && t.segment == 1 && every == 0 && chosen > 0 && park > 0) {
    const double others = static_cast<double>(n_stored * t.layer_in + (t.kept_on_host ? n_kept * t.attn_kept : 0) +
                                              e.offload_layers * t.mlp_offload_saved);
    const double room = std::max(0.0, t.link_forward_bytes - others) / static_cast<double>(t.mlp_offload_saved);
    const i64 cap = std::min(t.mlp_offload_max - e.offload_layers, static_cast<i64>(room));
    parked = mlp_park_layers(ckpt_table(), std::min(park, cap), e.park_stride);
    for (bool p : parked) e.park_layers += p ? 1 : 0;
  }
  e.stored_inputs = inputs_on_gpu(n_stored);
  e.stored_full =
      (L - n_ckpt) * t.layer_full - e.mlp_layers * t.mlp_recompute_saved - e.offload_layers * t.mlp_offload_saved;
  // On the host: every stored input and kept output pushed to an offload chain, from its copy in
  // forward until backward takes it (the two counted on the GPU above too).
  e.host_acts = (t.offload_acts ? n_stored : 0) * t.layer_in_host +
                (e.offload_layers + e.park_layers) * t.mlp_offload_host + (t.kept_on_host ? n_kept * t.attn_kept : 0);

  // GaLore's rank-r gradients grow as backward goes down the layers, like the gradients.
  const i64 fixed_static = t.weights + t.adapters + t.master + t.adam + t.galore_proj + t.galore_states;
  const i64 grads_all = t.grads_layers + t.grads_other;

  // Backward walks the layers from the last; before layer j runs, layers < j still hold their
  // activations, layers > j have produced their gradients. Track the largest moment.
  i64 best = -1, ck_below = n_stored, full_below = L - n_ckpt, kept_below = n_kept, mlp_below = e.mlp_layers;
  for (i64 j = L - 1; j >= 0; --j) {
    const bool c = is_ckpt(j);
    const i64 p = pos_at(j);
    // ck_below: stored inputs below j. Those of the runs below j's own wait (on the host with
    // offload); j's run's inputs at places 0 .. p-1 (the stored one taken back, the others
    // rebuilt) are on the GPU while j's backward runs.
    if (stores_at(j)) --ck_below;
    if (!c) --full_below;
    // Layer j's own recomputed gate and up exist while its MLP's backward runs: it counts whole.
    if (mlp_rc[static_cast<std::size_t>(j)]) --mlp_below;
    // Layer j's own kept output is the recomputed layer's attention output (in layer_full).
    if (keeps[static_cast<std::size_t>(j)]) --kept_below;
    const i64 galore = t.grads_persistent ? t.galore_accum : t.galore_accum * (L - 1 - j) / L;
    const i64 grads =
        (t.grads_persistent ? grads_all : t.grads_other - t.grads_embed + t.grads_layers * (L - 1 - j) / L) + galore;
    // With offload, the input below that is on the GPU is the one prefetched for the next
    // recomputation (the current layer's own input is among its activations).
    const i64 others = ck_below - (p > 0 ? 1 : 0);
    const i64 acts_in = (t.offload_acts ? std::min<i64>(others, 1) : others) * t.layer_in + p * t.layer_in;
    // Offloaded layers below j are back on the GPU from the moment backward reaches their
    // trigger (layer i + lead, or the last layer) on; the others are still on the host.
    // (i + lead < j, as the trigger of an i < j is never the last layer then.)
    const i64 off_away = j - lead > 0 ? off_below[static_cast<std::size_t>(j - lead)] : 0;
    const i64 acts_full =
        full_below * t.layer_full - mlp_below * t.mlp_recompute_saved - off_away * t.mlp_offload_saved;
    const i64 cur = c ? t.layer_full + t.recompute_extra : t.layer_full;
    // Kept outputs below j: on the GPU, or (offload) only the one prefetched for the next layer.
    const i64 kept_live = (t.kept_on_host ? std::min<i64>(kept_below, 1) : kept_below) * t.attn_kept;
    // The parked pair of the layer below, prefetched when layer j's backward starts.
    const i64 parked_next = j > 0 && parked[static_cast<std::size_t>(j - 1)] ? t.mlp_offload_saved : 0;
    const i64 live = acts_in + acts_full + cur + grads + kept_live + parked_next;
    if (live > best) {
      best = live;
      e.bwd_kept = kept_live;
      e.bwd_inputs = acts_in + (c ? t.recompute_extra : 0);
      e.bwd_full = acts_full + (c ? 0 : t.layer_full);
      e.bwd_recompute = (c ? t.layer_full : 0) + parked_next;
      e.bwd_parked = parked_next;
      e.bwd_grads = grads - galore;
      e.bwd_galore = galore;
    }
  }
  const i64 ws = std::max(t.bwd_mlp, (n_kept > 0 ? t.bwd_attn_kept : t.bwd_attn) + t.a2a + t.ring) + t.layer_grads_tmp;
  e.stored_kept = kept_on_gpu(n_kept);
  e.phase_bytes[0] = fixed_static + (t.grads_persistent ? grads_all + t.galore_accum : 0) + t.misc + e.stored_inputs +
                     e.stored_full + e.stored_kept + t.loss;
  e.phase_bytes[1] = fixed_static + t.misc + best + ws + t.grad_buckets;
  e.phase_bytes[2] = fixed_static + grads_all + t.galore_accum + t.step_tmp + t.grad_buckets;
  for (int k = 1; k < 3; ++k)
    if (e.phase_bytes[k] > e.phase_bytes[e.phase]) e.phase = k;
  e.fragmentation = fragmentation_of(e.phase_bytes[e.phase]);
  e.peak = e.phase_bytes[e.phase] + e.fragmentation + t.runtime + t.nccl;
  return e;
}

std::int64_t choose_kept_attention(const Terms& t, const std::string& keep, std::int64_t ckpt, std::int64_t every) {
  if (t.attn_kept <= 0 || keep == "none") return 0;
  i64 n_ckpt = 0;
  for (i64 j = 0; j < t.layers; ++j) n_ckpt += (every > 0 ? j % every == 0 : j < ckpt) ? 1 : 0;
  if (keep == "all") return n_ckpt;
  if (!t.cuda) return 0;  // auto: the engine keeps attention on GPUs only
  // Keeping is for speed, so auto stops short of the capacity by the planner's error margin
  // (memory_planner.h): the most kept layers whose plan stays below that line.
  const i64 line = speed_line(t);
  i64 best = 0;
  for (i64 k = 1; k <= n_ckpt && evaluate(t, ckpt, every, k).peak <= line; ++k) best = k;
  return best;
}

std::int64_t choose_checkpointing(const Terms& t, const CheckpointPolicy& p, std::int64_t* every) {
  *every = 0;
  const i64 L = t.layers;
  switch (p.kind) {
    case CheckpointPolicy::None: return 0;
    case CheckpointPolicy::All: return L;
    case CheckpointPolicy::EveryK: *every = std::max<i64>(1, p.every); return ceil_div(L, *every);
    case CheckpointPolicy::Auto: break;
  }
  // Fewest first layers that fit. The peak falls (nearly) monotonically with more
  // checkpointed layers, so bisect; the result is checked, and all is the fallback.
  auto fits = [&](i64 n) { return evaluate(t, n, 0).peak <= t.capacity; };
  if (fits(0)) return 0;
  i64 lo = 0, hi = L;  // fits(lo) false; answer in (lo, hi]
  while (hi - lo > 1) {
    const i64 mid = lo + (hi - lo) / 2;
    if (fits(mid)) hi = mid;
    else lo = mid;
  }
  return fits(hi) ? hi : L;
}

double recompute_flops(const Terms& t, std::int64_t ckpt, std::int64_t kept, std::int64_t mlp, std::int64_t park) {
  return static_cast<double>(ckpt) * t.recompute_linear_flops +
         static_cast<double>(ckpt - kept) * t.recompute_attention_flops +
         static_cast<double>(mlp - park) * t.recompute_mlp_flops;
}

namespace {
// The most checkpointed layers that park their MLP with the plan's peak within `limit`, or
// within its peak without parking where that is higher, and its host bytes within the host's
// capacity (the peak and the host bytes grow with each: bisection).
void most_parked(const Terms& t, LayerChoice& c, std::int64_t limit) {
  c.park = 0;
  // 4-bit bases only: the rows measured to gain under a budget's cap (docs/memory-planner.md,
  // "The MLP park"); odyssey-bench --mlp-park N parks on any base.
  if (!t.mlp_park || !t.base_4bit || t.mlp_offload_saved <= 0 || t.segment != 1 || c.every != 0 || c.checkpointed == 0)
    return;
  // The most the caps allow (evaluate applies them).
  const i64 hi = evaluate(t, c.checkpointed, 0, c.kept, c.mlp, c.offload, c.checkpointed).park_layers;
  if (hi <= 0) return;
  // Above the line already (a plan that fits only without margin): parking must not raise it.
  // Nor may it take host memory the plan does not have (or, short already, any more).
  const Eval base = evaluate(t, c.checkpointed, 0, c.kept, c.mlp, c.offload);
  // And the caching allocator needs room beyond the planned peak for the pairs in flight (one
  // being taken, one coming back): without kParkSlackPairs pairs of it under the capacity, a
  // budget's cap makes it free its cache and synchronize the device to find blocks, which costs
  // more than the parked projections save (docs/memory-planner.md, "The MLP park").
  limit = std::min(std::max(limit, base.peak), t.capacity - planner::kParkSlackPairs * t.mlp_offload_saved);
  const i64 host_limit = std::max(t.host_capacity, t.host_optimizer + base.host_acts);
  auto fits = [&](i64 p) {
    const Eval e = evaluate(t, c.checkpointed, 0, c.kept, c.mlp, c.offload, p);
    return e.peak <= limit && t.host_optimizer + e.host_acts <= host_limit;
  };
  if (!fits(0)) return;
  if (fits(hi)) {
    c.park = hi;
    return;
  }
  i64 lo = 0, up = hi;  // fits(lo), !fits(up)
  while (up - lo > 1) {
    const i64 mid = lo + (up - lo) / 2;
    (fits(mid) ? lo : up) = mid;
  }
  c.park = lo;
}

// Checkpointed layers, kept attention outputs and the MLP tiers, without the park.
LayerChoice choose_recomputation(const Terms& t, const CheckpointPolicy& p, const std::string& keep) {
  LayerChoice c;
  c.checkpointed = choose_checkpointing(t, p, &c.every);
  c.kept = choose_kept_attention(t, keep, c.checkpointed, c.every);
  if (p.kind != CheckpointPolicy::Auto) return c;
  const bool can_keep = t.attn_kept > 0 && keep != "none" && (keep == "all" || t.cuda);
  const bool can_mlp = t.mlp_recompute_saved > 0;
  const i64 off_max = t.mlp_offload_saved > 0 ? t.mlp_offload_max : 0;
  if (!can_keep && !can_mlp && off_max == 0) return c;
  if (c.checkpointed == 0) return c;                                  // nothing recomputed
  if (evaluate(t, c.checkpointed, 0, 0).peak > t.capacity) return c;  // does not fit at all: reported as is
  const i64 L = t.layers;
  // Kept attention is for speed: auto keeps within the margin below capacity (memory_planner.h).
  const i64 line = speed_line(t);
  // The fewest-layers plan is the one to beat where it fits as chosen (keep all may not).
  double best = evaluate(t, c.checkpointed, 0, c.kept).peak <= t.capacity ? recompute_flops(t, c.checkpointed, c.kept)
                                                                          : std::numeric_limits<double>::infinity();
  // The smallest v in [0, hi] with fits(v), given fits(hi); bisection (the peak falls with v).
  auto fewest = [](i64 hi, const auto& fits) {
    i64 lo = -1;
    while (hi - lo > 1) {
      const i64 mid = lo + (hi - lo) / 2;
      (fits(mid) ? hi : lo) = mid;
    }
    return hi;
  };
  for (i64 n = 0; n <= L; ++n) {
    if (static_cast<double>(n) * t.recompute_linear_flops >= best) break;  // even keeping all costs more
    const i64 k_lo = !can_keep ? 0 : keep == "all" ? n : 0;
    const i64 k_hi = !can_keep ? 0 : n;
    const i64 o_max = std::min(off_max, L - n);
    for (i64 k = k_hi; k >= k_lo; --k) {
      const i64 limit = k > 0 && keep != "all" ? line : t.capacity;
      auto fits_offload = [&](i64 o) { return evaluate(t, n, 0, k, 0, o).peak <= limit; };
      if (fits_offload(o_max)) {  // offloading alone (or nothing) fits: no MLP recomputed
        const double cost = recompute_flops(t, n, k);
        if (cost < best) best = cost, c = {n, 0, k, 0, fewest(o_max, fits_offload), 0};
        continue;
      }
      auto fits = [&](i64 m) { return evaluate(t, n, 0, k, m, o_max).peak <= limit; };
      const i64 m_max = can_mlp ? L - n - o_max : 0;
      if (!fits(m_max)) continue;
      const i64 m = fewest(m_max, fits);
      const double cost = recompute_flops(t, n, k, m);
      if (cost < best) best = cost, c = {n, 0, k, m, o_max, 0};
    }
  }
  return c;
}
}  // namespace

LayerChoice choose_layers(const Terms& t, const CheckpointPolicy& p, const std::string& keep) {
  LayerChoice c = choose_recomputation(t, p, keep);
  // The MLP park on the layers chosen: as many as fit, never a reason to checkpoint more. (Its
  // FLOPs are only saved where the allocator and the host link have room, which the caps and the
  // slack check; trading a stored layer for parked ones was not measured to pay.) Kept attention
  // and the park are for speed: within the margin below capacity (memory_planner.h).
  most_parked(t, c, speed_line(t));
  return c;
}

}  // namespace odyssey::planner_detail
