#include "model/decoder.h"

#include <ATen/SDPBackend.h>

#include <cmath>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "model/activation_checkpoint.h"
#include "planner/memory_planner.h"
#include "model/rope.h"
#include "model/tiled_attention.h"

namespace odyssey::model {

LinearImpl::LinearImpl(std::int64_t in, std::int64_t out, bool with_bias, const torch::TensorOptions& o,
                       bool quantized_)
    : quantized(quantized_), dtype(o.dtype().toScalarType()), in_features(in), out_features(out) {
  if (!quantized) weight = register_parameter("weight", torch::empty({out, in}, o));
  if (with_bias) bias = register_parameter("bias", torch::zeros({out}, o));
}

torch::Tensor LinearImpl::base_weight(torch::ScalarType dt) const {
  if (!quantized) return weight.to(dt);
  TORCH_CHECK(quant, "a 4-bit projection was used before its weight was loaded");
  return kernels::dequantize_4bit(*quant, dt);
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  if (lora_A && lora_in_input_dtype && x.scalar_type() == (quantized ? dtype : weight.scalar_type())) {
    const kernels::LinearWeights w = fused_weights();
    // Adapter dropout: the Function keeps x and redraws the mask in backward (kernels::linear),
    // where autograd would keep the mask and the dropped copy. A 4-bit base, or adapters in the
    // input's own dtype (fp32 runs), go there only then; without dropout they keep the
    // branches below.
    if (w.dropout) return kernels::linear(x, w);
    if (!quantized && x.scalar_type() != lora_A->weight.scalar_type()) {
      // kernels/linear.cpp's order under autograd (autocast's rule: the fp32 adapters cast to
      // the input's dtype): the adapter's r-wide product writes the output, the base GEMM adds
      // onto it.
      torch::Tensor a;
      return kernels::detail::linear_forward(x, w, &a);
    }
  }
  torch::Tensor y;
  if (quantized) {
    TORCH_CHECK(quant, "a 4-bit projection was used before its weight was loaded");
    y = kernels::quant4_linear(x, quant, bias);
  } else {
    y = at::linear(x, weight, bias.defined() ? std::optional<torch::Tensor>(bias) : std::nullopt);
  }
  if (!lora_A) return y;
  if (lora_in_input_dtype && x.scalar_type() != lora_A->weight.scalar_type()) {
    // Autocast's rule: the fp32 adapter weights are cast to the input's dtype for the two
    // products, so autograd keeps the (shared) input instead of an fp32 copy per adapter;
    // the weights' gradients come back in fp32.
    // Here a 4-bit base (quant4_linear wrote y) or a base in another dtype: the adapter's
    // product is accumulated onto the base output by its GEMM (addmm, the scaling as alpha),
    // no [N, out] temporaries.
    const auto dt = x.scalar_type();
    const torch::Tensor in = lora_dropout > 0.0 ? torch::dropout(x, lora_dropout, is_training()) : x;
    const torch::Tensor a = at::linear(in.reshape({-1, in.size(-1)}), lora_A->weight.to(dt));
    return at::addmm(y.reshape({-1, y.size(-1)}), a, lora_B->weight.to(dt).t(), 1, lora_scaling).view(y.sizes());
  }
  // Adapters are kept in fp32 whatever the base dtype (PEFT's autocast_adapter_dtype): the
  // input is cast to theirs and the update back to the base output's.
  torch::Tensor in = x.to(lora_A->weight.scalar_type());
  if (lora_dropout > 0.0) in = torch::dropout(in, lora_dropout, is_training());
  return y + (at::linear(at::linear(in, lora_A->weight), lora_B->weight) * lora_scaling).to(y.scalar_type());
}

void LinearImpl::add_adapter_(torch::Tensor y, const torch::Tensor& x) const {
  if (!lora_A) return;
  torch::NoGradGuard no_grad;
  if (lora_in_input_dtype && x.scalar_type() != lora_A->weight.scalar_type()) {  // forward()'s addmm
    const auto dt = x.scalar_type();
    y.addmm_(at::linear(x, lora_A->weight.to(dt)), lora_B->weight.to(dt).t(), 1, lora_scaling);
    return;
  }
  const torch::Tensor in = x.to(lora_A->weight.scalar_type());
  y.add_((at::linear(at::linear(in, lora_A->weight), lora_B->weight) * lora_scaling).to(y.scalar_type()));
}

namespace {

// The projections `parts` (none 4-bit, all with a bias or none) packed: their weights copied
// into rows of one [sum out, in] tensor (biases likewise) and each weight (bias) made a view of
// its rows. {} when they cannot be.
std::pair<torch::Tensor, torch::Tensor> pack_linears(const std::vector<LinearImpl*>& parts) {
  for (const LinearImpl* p : parts)
    if (p == nullptr || p->quantized || !p->weight.defined() || p->bias.defined() != parts[0]->bias.defined() ||
        p->in_features != parts[0]->in_features || p->weight.scalar_type() != parts[0]->weight.scalar_type() ||
        p->weight.device() != parts[0]->weight.device())
      return {};
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> ws, bs;
  for (const LinearImpl* p : parts) {
    ws.push_back(p->weight);
    if (p->bias.defined()) bs.push_back(p->bias);
  }
  const torch::Tensor w = torch::cat(ws), b = bs.empty() ? torch::Tensor() : torch::cat(bs);
  std::int64_t row = 0;
  for (LinearImpl* p : parts) {
    const torch::Tensor rows = w.narrow(0, row, p->out_features);
    p->weight.set_(w.storage(), rows.storage_offset(), rows.sizes(), rows.strides());
    if (b.defined()) {
      const torch::Tensor part = b.narrow(0, row, p->out_features);
      p->bias.set_(b.storage(), part.storage_offset(), part.sizes(), part.strides());
    }
    row += p->out_features;
  }
  return {w, b};
}

// Whether every part's weight (and bias) is still its rows of the packed tensors (set_data,
// Module::to or a new parameter may have replaced one since; merge_lora writes in place).
bool still_packed(const std::vector<LinearImpl*>& parts, const torch::Tensor& w, const torch::Tensor& b) {
  // Row addresses by arithmetic (w[row] would make a tensor per part and call).
  auto at_row = [](const torch::Tensor& t, std::int64_t row) {
    return static_cast<const char*>(t.const_data_ptr()) +
           row * t.stride(0) * static_cast<std::int64_t>(t.element_size());
  };
  std::int64_t row = 0;
  for (const LinearImpl* p : parts) {
    if (!p->weight.defined() || !p->weight.is_alias_of(w) || p->weight.const_data_ptr() != at_row(w, row) ||
        p->weight.size(0) != p->out_features)
      return false;
    if (b.defined() && (!p->bias.defined() || !p->bias.is_alias_of(b) || p->bias.const_data_ptr() != at_row(b, row)))
      return false;
    row += p->out_features;
  }
  return row == w.size(0);
}

// The packed projections' outputs [..., sum out] of x [..., in], without autograd: one product,
// then each part's adapter added onto its columns.
torch::Tensor packed_forward(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                             const std::vector<LinearImpl*>& parts) {
  const torch::Tensor y = at::linear(x, w, b.defined() ? std::optional<torch::Tensor>(b) : std::nullopt);
  const torch::Tensor y2 = y.view({-1, y.size(-1)}), x2 = x.reshape({-1, x.size(-1)});
  std::int64_t col = 0;
  for (const LinearImpl* p : parts) {
    p->add_adapter_(y2.narrow(1, col, p->out_features), x2);
    col += p->out_features;
  }
  return y;
}

// Whether a step may take the packed product: packed, no autograd, and no adapter dropout
// that forward() would apply.
bool use_packed(const torch::Tensor& w, const torch::Tensor& b, const std::vector<LinearImpl*>& parts, bool training) {
  if (!w.defined() || torch::GradMode::is_enabled()) return false;
  for (const LinearImpl* p : parts)
    if (p->lora_A && p->lora_dropout > 0.0 && training) return false;
  return still_packed(parts, w, b);
}

}  // namespace

bool PackedProjections::pack(const std::vector<LinearImpl*>& of) {
  std::tie(weight, bias) = pack_linears(of);
  parts = weight.defined() ? of : std::vector<LinearImpl*>{};
  return weight.defined();
}

torch::Tensor PackedProjections::forward(const torch::Tensor& x, bool training) const {
  return use_packed(weight, bias, parts, training) ? packed_forward(x, weight, bias, parts) : torch::Tensor();
}

torch::Tensor LinearImpl::forward_normed(const torch::Tensor& n, const NormSource* src) {
  if (src == nullptr || !fused_projection()) return forward(n);
  return kernels::rms_norm_linear(n, src->input, src->weight, src->eps, fused_weights(), src->share);
}

kernels::LinearWeights LinearImpl::fused_weights() const {
  kernels::LinearWeights w;
  w.weight = weight;
  w.quant = quant;
  w.bias = bias;
  if (lora_A) {
    w.lora_a = lora_A->weight;
    w.lora_b = lora_B->weight;
    w.lora_scaling = lora_scaling;
    if (lora_dropout > 0.0 && is_training()) w.dropout = kernels::LoraDropout::draw(lora_dropout);
  }
  return w;
}

void LinearImpl::add_lora(std::int64_t rank, double scaling, double dropout) {
  TORCH_CHECK(!lora_A, "LoRA already added");
  const torch::Device device = quantized ? (quant ? quant->device() : torch::Device(torch::kCPU)) : weight.device();
  const auto o = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  lora_A = register_module("lora_A", std::make_shared<LinearImpl>(in_features, rank, false, o));
  lora_B = register_module("lora_B", std::make_shared<LinearImpl>(rank, out_features, false, o));
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(lora_A->weight, std::sqrt(5.0));
  lora_B->weight.zero_();
  lora_scaling = scaling;
  lora_dropout = dropout;
}

void LinearImpl::merge_lora() {
  if (!lora_A && !quantized) return;
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor delta =
        lora_A ? torch::matmul(lora_B->weight.to(torch::kFloat32), lora_A->weight.to(torch::kFloat32)) * lora_scaling
               : torch::zeros({}, torch::kFloat32);
    if (quantized) {
      // PEFT's merge on a bitsandbytes base dequantizes it; the merged weight is 16-bit.
      weight = register_parameter("weight", (base_weight(torch::kFloat32) + delta).to(dtype), false);
      quantized = false;
      quant.reset();
    } else {
      weight.copy_((weight.to(torch::kFloat32) + delta).to(weight.scalar_type()));
    }
  }
  if (!lora_A) return;
  unregister_module("lora_A");
  unregister_module("lora_B");
  lora_A = nullptr;
  lora_B = nullptr;
}

RMSNormImpl::RMSNormImpl(std::int64_t dim, double eps_, const torch::TensorOptions& o, bool plus_one_,
                         bool weight_fp32_)
    : eps(eps_), plus_one(plus_one_), weight_fp32(weight_fp32_) {
  weight = register_parameter("weight", plus_one ? torch::zeros({dim}, o) : torch::ones({dim}, o));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  if (fused && !plus_one && !weight_fp32) return kernels::rms_norm(x, weight, eps);
  return kernels::add_rms_norm_reference(x, torch::Tensor(), weight, eps, plus_one, weight_fp32).first;
}

EmbeddingImpl::EmbeddingImpl(std::int64_t vocab, std::int64_t dim, std::optional<std::int64_t> pad,
                             const torch::TensorOptions& o)
    : padding_idx(pad) {
  weight = register_parameter("weight", torch::empty({vocab, dim}, o));
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) {
  return at::embedding(weight, ids, padding_idx.value_or(-1));
}

AttentionImpl::AttentionImpl(const DecoderConfig& c, const torch::TensorOptions& o, std::int64_t layer)
    : heads(c.hf.num_attention_heads), kv_heads(c.hf.num_key_value_heads), head_dim(c.hf.head_dim) {
  const std::int64_t h = c.hf.hidden_size;
  const std::string prefix = "model.layers." + std::to_string(layer) + ".self_attn.";
  auto q = [&](const char* name) { return c.quant.quantizes(prefix + name); };
  if (c.hf.fused_qkv) {
    qkv_proj =
        register_module("qkv_proj", Linear(h, (heads + 2 * kv_heads) * head_dim, c.hf.qkv_bias, o, q("qkv_proj")));
  } else {
    q_proj = register_module("q_proj", Linear(h, heads * head_dim, c.hf.qkv_bias, o, q("q_proj")));
    k_proj = register_module("k_proj", Linear(h, kv_heads * head_dim, c.hf.qkv_bias, o, q("k_proj")));
    v_proj = register_module("v_proj", Linear(h, kv_heads * head_dim, c.hf.qkv_bias, o, q("v_proj")));
  }
  o_proj = register_module("o_proj", Linear(heads * head_dim, h, c.hf.o_bias, o, q("o_proj")));
  if (c.hf.qk_norm) {
    const double eps = c.hf.rms_norm_eps;
    const bool p1 = c.hf.norm_plus_one, w32 = c.hf.norm_weight_fp32;
    q_norm = register_module("q_norm", RMSNorm(c.hf.q_norm_width(), eps, o, p1, w32));
    k_norm = register_module("k_norm", RMSNorm(c.hf.k_norm_width(), eps, o, p1, w32));
    qk_norm_whole = c.hf.qk_norm_whole;
  }
  // HF: self.head_dim**-0.5, Granite's attention_multiplier, Gemma's query_pre_attn_scalar**-0.5.
  scale = c.hf.attention_scale > 0 ? c.hf.attention_scale : std::pow(static_cast<double>(head_dim), -0.5);
  softcap = c.hf.attn_logit_softcapping;
  sliding = c.hf.sliding_layer(layer);
  window = sliding ? c.hf.sliding_window : 0;
  local_rope = sliding && c.rope_local.has_value();
  rope = c.hf.rope_layer(layer);
  rope_interleaved = c.hf.rope_interleaved;
  layer_index = layer;
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> AttentionImpl::project(const torch::Tensor& x,
                                                                               const NormSource* src) {
  const std::int64_t b = x.size(0), s = x.size(1);
  if (qkv_proj) {  // Phi-3: [q | k | v] along the output features
    const torch::Tensor qkv = qkv_proj->forward_normed(x, src);
    const std::int64_t nq = heads * head_dim, nk = kv_heads * head_dim;
    return {qkv.narrow(-1, 0, nq).view({b, s, -1, head_dim}), qkv.narrow(-1, nq, nk).view({b, s, -1, head_dim}),
            qkv.narrow(-1, nq + nk, nk).view({b, s, -1, head_dim})};
  }
  if (const torch::Tensor qkv = packed.forward(x, is_training()); qkv.defined()) {  // one product for q, k and v
    const std::int64_t nq = q_proj->out_features, nk = k_proj->out_features;
    return {qkv.narrow(-1, 0, nq).view({b, s, -1, head_dim}), qkv.narrow(-1, nq, nk).view({b, s, -1, head_dim}),
            qkv.narrow(-1, nq + nk, nk).view({b, s, -1, head_dim})};
  }
  return {q_proj->forward_normed(x, src).view({b, s, -1, head_dim}),
          k_proj->forward_normed(x, src).view({b, s, -1, head_dim}),
          v_proj->forward_normed(x, src).view({b, s, -1, head_dim})};
}

void AttentionImpl::normalize_qk(torch::Tensor& q, torch::Tensor& k) {
  if (!q_norm) return;
  if (qk_norm_whole) {  // OLMo: over [.., H x D] as the projection wrote it, then the heads again
    q = q_norm(q.flatten(-2)).view(q.sizes());
    k = k_norm(k.flatten(-2)).view(k.sizes());
    return;
  }
  q = q_norm(q);
  k = k_norm(k);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const LayerContext& ctx, const NormSource* src) {
  if (ctx.cache) return forward_cached(x, ctx, src);
  const std::int64_t b = x.size(0), s = x.size(1);
  const torch::Tensor& cos = local_rope ? ctx.cos_local : ctx.cos;
  const torch::Tensor& sin = local_rope ? ctx.sin_local : ctx.sin;
  // Soft-capping or a window shorter than the row's longest sequence: flash attention's band
  // where it serves, else tiled exact attention on padding-free rows (tiled_attention.h) and an
  // explicit mask on padded batches (attention.h, masked_attention). A window at least that
  // long hides nothing.
  const bool windowed = sliding && (ctx.cu_seqlens.defined() ? ctx.max_seqlen : s) > window;
  const bool general = softcap > 0 || windowed;
  // kernels::apply_rope_ rotates whole heads by halves, with cos/sin in the activations' dtype
  const bool rope_fusable = cos.size(-1) == head_dim && !rope_interleaved && cos.scalar_type() == x.scalar_type();
  auto [q, k, v] = project(x, src);
  normalize_qk(q, k);
  if (ctx.cu_seqlens.defined()) {  // padding-free row: [1, T, .] -> varlen attention over [T, H, D]
    v = v.view({s, -1, head_dim});
    if (!rope) {  // a NoPE layer
      q = q.reshape({s, -1, head_dim});
      k = k.reshape({s, -1, head_dim});
    } else if (fused && rope_fusable) {  // [T, H, D] views of the projections, rotated in place: no copies
      std::tie(q, k) = kernels::apply_rope_(q.view({s, -1, head_dim}), k.view({s, -1, head_dim}), cos[0], sin[0]);
    } else {
      q = apply_rope(q.transpose(1, 2), cos, sin, rope_interleaved)[0].transpose(0, 1).contiguous();
      k = apply_rope(k.transpose(1, 2), cos, sin, rope_interleaved)[0].transpose(0, 1).contiguous();
    }
    std::int64_t ran = -1;
    torch::Tensor out;
    // A kept output (keep_attention) through the attention's own kernel: plain causal, or a
    // window on flash's band (CUDA) or the explicit-softmax kernel's mask (CPU), or soft-capped
    // scores in tiles; a window flash cannot take without soft-capping goes through the general
    // path, which keeps nothing (the memory policy keeps no such layer: attention_keepable).
    const bool keep_here =
        ctx.stash && !ctx.attention_override && softcap <= 0 &&
        (!windowed || !q.is_cuda() || window_on_flash(q.device(), q.scalar_type(), head_dim, softcap, ctx.attention));
    if (ctx.stash && !ctx.attention_override && softcap > 0) {  // soft-capped: the tiles keep it
      out = kept_tiled_attention(q, k, v, ctx.cu_seqlens, scale, windowed ? window : 0, softcap, *ctx.stash,
                                 ctx.tile_plans.get());
      ran = static_cast<std::int64_t>(at::SDPBackend::math);
    } else if (keep_here) {
      out = kept_causal_attention(q, k, v, ctx.cu_seqlens, ctx.max_seqlen, ctx.max_seqlen == s, ctx.attention,
                                  *ctx.stash, scale, &ran, windowed ? window : 0);
    } else if (general && ctx.attention_override) {  // Ulysses: the gathered row, masked the same way
      out = ctx.attention_override->attend_masked(q, k, v, scale, windowed ? window : 0, softcap, ctx.attention, &ran);
    } else if (windowed && window_on_flash(q.device(), q.scalar_type(), head_dim, softcap, ctx.attention)) {
      out = varlen_causal_attention(q, k, v, ctx.cu_seqlens, ctx.max_seqlen, scale, &ran, window);  // flash's band
    } else if (general) {  // soft-capping, or a window flash cannot take: tiles of exact attention
      out = tiled_causal_attention(q, k, v, ctx.cu_seqlens, scale, windowed ? window : 0, softcap, 0,
                                   ctx.tile_plans.get());
      ran = static_cast<std::int64_t>(at::SDPBackend::math);
    } else if (ctx.attention_override) {
      out = ctx.attention_override->attend(q, k, v, scale, ctx.attention, &ran, ctx.stash.get());
    } else if (ctx.max_seqlen == s && q.is_cuda() && ctx.attention != AttentionBackend::Flash) {
      out = sequence_causal_attention(q, k, v, scale, ctx.attention, &ran);  // one sample: cuDNN can run
    } else {
      out = varlen_causal_attention(q, k, v, ctx.cu_seqlens, ctx.max_seqlen, scale, &ran);
    }
    if (ctx.backend_ran) ctx.backend_ran->store(ran);
    return o_proj(out.reshape({b, s, -1}));
  }
  // [B, S, H, D] -> [B, H, S, D].
  v = v.transpose(1, 2);
  q = rope ? apply_rope(q.transpose(1, 2), cos, sin, rope_interleaved) : q.transpose(1, 2);
  k = rope ? apply_rope(k.transpose(1, 2), cos, sin, rope_interleaved) : k.transpose(1, 2);
  std::int64_t ran = -1;
  const torch::Tensor out =
      general ? masked_attention(q, k, v, windowed ? ctx.keep_window : ctx.keep, scale, softcap, ctx.attention, &ran)
              : causal_attention(q, k, v, ctx.keep, scale, ctx.attention, &ran);
  if (ctx.backend_ran) ctx.backend_ran->store(ran);
  return o_proj(out.transpose(1, 2).reshape({b, s, -1}).contiguous());
}

MlpImpl::MlpImpl(const DecoderConfig& c, const torch::TensorOptions& o, std::int64_t layer, std::int64_t intermediate,
                 const std::string& module_name) {
  const std::int64_t h = c.hf.hidden_size, i = intermediate > 0 ? intermediate : c.hf.intermediate_size;
  gelu = c.hf.hidden_act == "gelu_pytorch_tanh";
  const std::string prefix = module_name.empty() ? "model.layers." + std::to_string(layer) + ".mlp." : module_name;
  auto q = [&](const char* name) { return c.quant.quantizes(prefix + name); };
  if (c.hf.fused_gate_up) {
    gate_up_proj = register_module("gate_up_proj", Linear(h, 2 * i, c.hf.mlp_bias, o, q("gate_up_proj")));
  } else {
    gate_proj = register_module("gate_proj", Linear(h, i, c.hf.mlp_bias, o, q("gate_proj")));
    up_proj = register_module("up_proj", Linear(h, i, c.hf.mlp_bias, o, q("up_proj")));
  }
  down_proj = register_module("down_proj", Linear(i, h, c.hf.mlp_bias, o, q("down_proj")));
}

torch::Tensor MlpImpl::compute(const torch::Tensor& x, const NormSource* src,
                               const std::shared_ptr<kernels::OffloadChain>& offload,
                               const c10::intrusive_ptr<kernels::ParkedPair>& park) {
  // gate and up by one product where they are packed (pack_projections; no autograd).
  std::optional<std::pair<torch::Tensor, torch::Tensor>> gate_up;
  if (const torch::Tensor gu = packed.forward(x, is_training()); gu.defined()) {
    const std::int64_t i = gate_proj->out_features;
    gate_up.emplace(gu.narrow(-1, 0, i), gu.narrow(-1, i, i));
  }
  if (gate_up_proj || gelu) {  // the reference formula (the fused kernels are SwiGLU with separate gate/up)
    torch::Tensor gate, up;
    if (gate_up) {
      std::tie(gate, up) = *gate_up;
    } else if (gate_up_proj) {
      const torch::Tensor gu = gate_up_proj->forward_normed(x, src);
      if (fused && !gelu) return down_proj(kernels::swiglu_packed(gu));  // Phi3MLP: up * silu(gate), rounded so
      const std::int64_t i = gu.size(-1) / 2;
      gate = gu.narrow(-1, 0, i);
      up = gu.narrow(-1, i, i);
    } else {
      gate = gate_proj->forward_normed(x, src);
      up = up_proj->forward_normed(x, src);
    }
    const torch::Tensor act = gelu ? torch::gelu(gate, "tanh") : torch::silu(gate);
    return down_proj(gate_up_proj ? up * act : act * up);  // Phi3MLP: up * act(gate)
  }
  // In a checkpointed layer's recomputation (src given: forward_split's MLP, whose output only
  // meets the residual sum) nothing reads the output: rms_norm_mlp skips the forward GEMMs there,
  // and takes gate and up back from the park where its forward parked them.
  const bool norm_mlp = fused && src != nullptr && gate_proj->fused_projection() && up_proj->fused_projection() &&
                        down_proj->fused_projection();
  const bool parking = park && norm_mlp;
  const bool rerun = (skip_in_rerun || parking) && src != nullptr && recomputing_for_backward();
  if (norm_mlp && (recompute || rerun) && torch::GradMode::is_enabled()) {
    // One statement each: the dropout draws come in the order the other paths take them
    // (gate, up, down), which a checkpointed layer's re-run must repeat.
    const kernels::LinearWeights gate = gate_proj->fused_weights();
    const kernels::LinearWeights up = up_proj->fused_weights();
    const kernels::LinearWeights down = down_proj->fused_weights();
    return kernels::rms_norm_mlp(x, src->input, src->weight, src->eps, gate, up, down, /*skip_output=*/rerun,
                                 rerun && parking ? park : c10::intrusive_ptr<kernels::ParkedPair>());
  }
  if (fused) {
    const torch::Tensor gate = gate_up ? gate_up->first : gate_proj->forward_normed(x, src);
    const torch::Tensor up = gate_up ? gate_up->second : up_proj->forward_normed(x, src);
    // The checkpoint's forward (no recording): gate and up go to the park before the down
    // projection runs, so the copies overlap it.
    if (parking && !torch::GradMode::is_enabled()) park->push(gate, up);
    if (!down_proj->fused_projection()) return down_proj(kernels::swiglu(gate, up));
    // The activation is not kept for backward (I elements per token): recomputed there.
    // Gate and up wait in the offload chain when this layer offloads its MLP.
    return kernels::swiglu_down(gate, up, down_proj->fused_weights(),
                                torch::GradMode::is_enabled() ? offload : nullptr);
  }
  if (gate_up) return down_proj(torch::silu(gate_up->first) * gate_up->second);
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x, const NormSource* src,
                               const std::shared_ptr<kernels::OffloadChain>& offload,
                               const c10::intrusive_ptr<kernels::ParkedPair>& park) {
  const std::int64_t h = x.size(-1), n = x.numel() / h;
  if (tile_tokens <= 0 || n <= tile_tokens) return compute(x, src, offload, park);
  const torch::Tensor flat = x.reshape({n, h});
  const bool recording = torch::GradMode::is_enabled();
  std::vector<torch::Tensor> parts;
  for (std::int64_t i = 0; i < n; i += tile_tokens) {
    torch::Tensor tile = flat.narrow(0, i, std::min(tile_tokens, n - i));
    if (!recording) {
      parts.push_back(compute(tile, nullptr));
      continue;
    }
    // A checkpoint needs an input that requires grad; when x does not (frozen embeddings
    // below), a detached leaf stands in and its gradient is simply not used.
    if (!tile.requires_grad()) tile = tile.detach().requires_grad_(true);
    parts.push_back(checkpointed([this](const torch::Tensor& t) { return compute(t, nullptr); }, tile));
  }
  std::vector<std::int64_t> shape = x.sizes().vec();
  shape.back() = parts.front().size(-1);
  return torch::cat(parts).view(shape);
}

DecoderLayerImpl::DecoderLayerImpl(const DecoderConfig& c, const torch::TensorOptions& o, std::int64_t layer) {
  const bool p1 = c.hf.norm_plus_one, w32 = c.hf.norm_weight_fp32;
  self_attn = register_module("self_attn", Attention(c, o, layer));
  if (c.hf.moe_layer(layer)) moe = register_module("mlp", Moe(c, o, layer));
  else mlp = register_module("mlp", Mlp(c, o, layer));
  const BlockNormNames names = block_norm_names(c.hf);
  auto norm = [&](const std::string& name) {
    return name.empty() ? RMSNorm(nullptr)
                        : register_module(name, RMSNorm(c.hf.hidden_size, c.hf.rms_norm_eps, o, p1, w32));
  };
  attention_in = norm(names.attention_in);
  attention_out = norm(names.attention_out);
  mlp_in = norm(names.mlp_in);
  mlp_out = norm(names.mlp_out);
  residual_multiplier = c.hf.residual_multiplier;
  fusable = c.hf.block_norms == BlockNorms::Pre && !p1 && !w32 && residual_multiplier == 1.0;
}

torch::Tensor DecoderLayerImpl::feed_forward(const torch::Tensor& x, const LayerContext& ctx, const NormSource* src) {
  if (moe) return moe(x, ctx.router_stats);
  if (!src) return mlp(x);
  return mlp(x, src, ctx.mlp_offload, ctx.mlp_park);
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const LayerContext& ctx) {
  if (fused && fusable) {
    const auto [h, m] = forward_split(x, {}, ctx);
    return h + m;
  }
  // A missing norm passes its tensor through (OLMo's inputs, Llama's outputs).
  auto apply = [](RMSNorm& n, const torch::Tensor& t) { return n ? n(t) : t; };
  if (attention_out || mlp_out) {  // Gemma, OLMo: norm each branch's output before the residual add
    torch::Tensor h = x + apply(attention_out, self_attn(apply(attention_in, x), ctx));
    return h + apply(mlp_out, feed_forward(apply(mlp_in, h), ctx));
  }
  if (residual_multiplier != 1.0) {  // Granite
    torch::Tensor h = x + self_attn(attention_in(x), ctx) * residual_multiplier;
    return h + feed_forward(mlp_in(h), ctx) * residual_multiplier;
  }
  torch::Tensor h = x + self_attn(attention_in(x), ctx);
  return h + feed_forward(mlp_in(h), ctx);
}

std::pair<torch::Tensor, torch::Tensor> DecoderLayerImpl::forward_split(const torch::Tensor& x,
                                                                        const torch::Tensor& residual,
                                                                        const LayerContext& ctx) {
  TORCH_CHECK(fused && fusable, "DecoderLayer::forward_split needs the fused kernels and a block they cover");
  // s = x + residual rounded as HF's add (x itself without a residual), normalised in the
  // same pass; then h = s + attention, likewise. The projections keep each norm's input (kept
  // by the norm anyway), not its output.
  const auto [n, s] = kernels::add_rms_norm(x, residual, attention_in->weight, attention_in->eps);
  NormSource in;
  in.input = s, in.weight = attention_in->weight, in.eps = attention_in->eps;
  auto [normed, h] = kernels::add_rms_norm(self_attn(n, ctx, &in), s, mlp_in->weight, mlp_in->eps);
  NormSource post;
  post.input = h, post.weight = mlp_in->weight, post.eps = mlp_in->eps;
  return {h, feed_forward(normed, ctx, &post)};
}

DecoderBodyImpl::DecoderBodyImpl(const DecoderConfig& c, const torch::TensorOptions& o) {
  embed_tokens = register_module("embed_tokens", Embedding(c.hf.vocab_size, c.hf.hidden_size, c.pad_token_id, o));
  layers = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.hf.num_hidden_layers; ++i) {
    layer_list.emplace_back(c, o, i);
    layers->push_back(layer_list.back());
  }
  norm = register_module("norm",
                         RMSNorm(c.hf.hidden_size, c.hf.rms_norm_eps, o, c.hf.norm_plus_one, c.hf.norm_weight_fp32));
}

CausalLMImpl::CausalLMImpl(DecoderConfig config, DecoderOptions options)
    : config_(std::move(config)), options_(options) {
  // A pre-quantized checkpoint keeps its own settings; otherwise the 4-bit base asked for.
  if (!config_.quant.prequantized) config_.quant = options_.quant;
  const auto o = torch::TensorOptions().dtype(options_.dtype).device(options_.device);
  model = register_module("model", DecoderBody(config_, o));
  if (!config_.hf.tie_word_embeddings)
    lm_head = register_module("lm_head", Linear(config_.hf.hidden_size, config_.hf.vocab_size, false, o));
  inv_freq_ = rope_inv_freq(config_.rope, config_.hf.head_dim).to(options_.device);
  if (config_.rope_local) inv_freq_local_ = rope_inv_freq(*config_.rope_local, config_.hf.head_dim).to(options_.device);
  logit_transform_.divide = config_.hf.logits_scaling;
  logit_transform_.softcap = config_.hf.final_logit_softcapping;
  set_fused_kernels(options_.fused_kernels);
}

torch::Tensor LogitTransform::apply(torch::Tensor logits) const {
  if (divide != 1.0) logits = logits / divide;                        // Granite: logits / logits_scaling
  if (softcap > 0) logits = torch::tanh(logits / softcap) * softcap;  // Gemma-2
  return logits;
}

torch::Tensor CausalLMImpl::logits(const torch::Tensor& hidden) const {
  return logit_transform_.apply(at::linear(hidden, lm_head_weight()));
}

torch::Tensor CausalLMImpl::embed(const torch::Tensor& input_ids) {
  torch::Tensor h = model->embed_tokens(input_ids);
  if (config_.hf.embed_scale_sqrt_hidden) {  // torch.tensor(hidden**0.5, dtype=h.dtype): the root rounded to h's dtype
    // The rounded value as a scalar (exact in that dtype): the same product as by a 0-d tensor,
    // without a host-to-device copy (which a CUDA graph capture of a decode step cannot hold).
    const auto root = static_cast<float>(std::sqrt(static_cast<double>(config_.hf.hidden_size)));
    double rounded = root;
    if (h.scalar_type() == torch::kBFloat16) rounded = static_cast<float>(c10::BFloat16(root));
    if (h.scalar_type() == torch::kHalf) rounded = static_cast<float>(c10::Half(root));
    if (h.scalar_type() == torch::kDouble) rounded = std::sqrt(static_cast<double>(config_.hf.hidden_size));
    h = h * rounded;
  }
  if (config_.hf.embedding_multiplier != 1.0) h = h * config_.hf.embedding_multiplier;
  return h;
}

torch::Tensor CausalLMImpl::inv_freq_for(const RopeParams& rope, const torch::Tensor& fixed,
                                         const torch::Tensor& position_ids) const {
  if (!rope_depends_on_length(rope)) return fixed;
  const std::int64_t len = position_ids.max().item<std::int64_t>() + 1;  // transformers' seq_len
  return rope_inv_freq(rope, config_.hf.head_dim, len).to(fixed.device());
}

void CausalLMImpl::set_fused_kernels(bool on) {
  options_.fused_kernels = on;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* n = dynamic_cast<RMSNormImpl*>(m.get())) n->fused = on;
    if (auto* a = dynamic_cast<AttentionImpl*>(m.get())) a->fused = on;
    if (auto* p = dynamic_cast<MlpImpl*>(m.get())) p->fused = on;
    if (auto* e = dynamic_cast<ExpertsImpl*>(m.get())) e->fused = on;
    if (auto* l = dynamic_cast<DecoderLayerImpl*>(m.get())) l->fused = on && l->fusable;
    if (auto* l = dynamic_cast<LinearImpl*>(m.get())) l->lora_in_input_dtype = on;
  }
}

std::int64_t CausalLMImpl::pack_projections() {
  std::int64_t groups = 0;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* a = dynamic_cast<AttentionImpl*>(m.get()); a && a->q_proj && !a->packed.weight.defined())
      groups += a->packed.pack({a->q_proj.get(), a->k_proj.get(), a->v_proj.get()});
    if (auto* p = dynamic_cast<MlpImpl*>(m.get()); p && p->gate_proj && !p->packed.weight.defined())
      groups += p->packed.pack({p->gate_proj.get(), p->up_proj.get()});
  }
  return groups;
}

void CausalLMImpl::set_decode_kernel(bool on) {
  for (auto& m : modules(/*include_self=*/false))
    if (auto* a = dynamic_cast<AttentionImpl*>(m.get())) a->decode_kernel = on;
}

void CausalLMImpl::set_rerun_skips_mlp(bool on) {
  for (auto& layer : model->layer_list)
    if (layer->mlp) layer->mlp->skip_in_rerun = on;
}

torch::Tensor CausalLMImpl::lm_head_weight() const { return lm_head ? lm_head->weight : model->embed_tokens->weight; }

void CausalLMImpl::set_mlp_tile_tokens(std::int64_t tokens) {
  mlp_tile_tokens_ = std::max<std::int64_t>(0, tokens);
  for (auto& layer : model->layer_list)
    if (layer->mlp) layer->mlp->tile_tokens = mlp_tile_tokens_;  // MoE layers: their experts see few tokens each
}

void CausalLMImpl::set_mlp_offload_layers(const std::vector<bool>& layers, std::int64_t lead) {
  TORCH_CHECK(layers.empty() || layers.size() == model->layer_list.size(),
              "set_mlp_offload_layers: ", model->layer_list.size(), " layers or none, got ", layers.size());
  TORCH_CHECK(lead >= 1, "set_mlp_offload_layers: the prefetch lead must be at least 1 layer, got ", lead);
  const bool any = std::find(layers.begin(), layers.end(), true) != layers.end();
  TORCH_CHECK(!any || mlp_tier_gap().empty(),
              "set_mlp_offload_layers: the MLP offload tier does not apply: ", mlp_tier_gap());
  mlp_offload_layers_ = layers;
  mlp_offload_lead_ = lead;
}

std::string CausalLMImpl::mlp_tier_gap() const {
  if (!options_.fused_kernels) return "the fused kernels are off (fused_kernels: false)";
  const DecoderLayer& layer = model->layer_list.front();
  if (config_.hf.is_moe())
    return "a mixture-of-experts model: its expert MLPs keep their activations (the MLP tiers are the dense SwiGLU "
           "MLP's)";
  if (!layer->fusable)
    return "this family's block is not a fused one (norms on the branches' outputs, (1 + w) or fp32-weighted norms, or "
           "a residual multiplier)";
  if (layer->mlp->gate_up_proj)
    return "this family's MLP has one gate_up_proj (Phi-3, GLM-4), not separate gate and up";
  if (layer->mlp->gelu) return "this family's MLP is GeGLU (tanh GELU), not SwiGLU";
  return {};
}

void CausalLMImpl::set_mlp_recompute_layers(const std::vector<bool>& layers) {
  TORCH_CHECK(layers.empty() || layers.size() == model->layer_list.size(), "set_mlp_recompute_layers: ", layers.size(),
              " flags for ", model->layer_list.size(), " layers");
  const bool any = std::find(layers.begin(), layers.end(), true) != layers.end();
  TORCH_CHECK(!any || mlp_tier_gap().empty(),
              "set_mlp_recompute_layers: MLP recomputation does not apply: ", mlp_tier_gap());
  for (std::size_t i = 0; i < model->layer_list.size(); ++i)
    if (model->layer_list[i]->mlp) model->layer_list[i]->mlp->recompute = i < layers.size() && layers[i];
}

LayerContext CausalLMImpl::context(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                   const torch::Tensor& position_ids, torch::ScalarType dtype) {
  const std::int64_t s = input_ids.size(1);
  torch::Tensor pos = position_ids;
  if (!pos.defined())  // HF: arange(S)[None], whatever the mask says
    pos = torch::arange(s, torch::TensorOptions().dtype(torch::kInt64).device(input_ids.device())).unsqueeze(0);
  LayerContext ctx;
  // rope_fp32 (OLMo-2/3, whose rotary module hands cos and sin over in fp32 where Llama's casts
  // them to the activations' dtype): q and k rotate in fp32 and round once, as apply_rope does
  // when cos is wider than q.
  const torch::ScalarType rope_dtype = config_.hf.rope_fp32 ? torch::kFloat32 : dtype;
  std::tie(ctx.cos, ctx.sin) = rope_cos_sin(inv_freq_for(config_.rope, inv_freq_, pos), pos, rope_dtype,
                                            config_.rope.attention_factor, config_.hf.rope_interleaved);
  if (config_.rope_local)
    std::tie(ctx.cos_local, ctx.sin_local) =
        rope_cos_sin(inv_freq_for(*config_.rope_local, inv_freq_local_, pos), pos, rope_dtype,
                     config_.rope_local->attention_factor, config_.hf.rope_interleaved);
  ctx.keep = causal_padding_mask(attention_mask, s);
  ctx.attention = options_.attention;
  ctx.backend_ran = &backend_ran_;
  return ctx;
}

torch::Tensor CausalLMImpl::hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                          const torch::Tensor& position_ids) {
  TORCH_CHECK(input_ids.dim() == 2, "input_ids must be [batch, seq], got ", input_ids.sizes());
  TORCH_CHECK(!attention_mask.defined() || attention_mask.sizes() == input_ids.sizes(),
              "attention_mask must have the shape of input_ids ", input_ids.sizes(), ", got ", attention_mask.sizes());
  torch::Tensor h = embed(input_ids);
  LayerContext ctx = context(input_ids, attention_mask, position_ids, h.scalar_type());
  start_router_stats(ctx, attention_mask, input_ids.numel());
  if (config_.hf.sliding_window > 0)
    ctx.keep_window = window_mask(ctx.keep, input_ids.size(1), config_.hf.sliding_window, input_ids.device());
  return layers_and_norm(h, ctx);
}

torch::Tensor CausalLMImpl::hidden_states_packed(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                                 const torch::Tensor& cu_seqlens, std::int64_t max_seqlen,
                                                 std::shared_ptr<AttentionOverride> attention) {
  TORCH_CHECK(input_ids.dim() == 2 && input_ids.size(0) == 1, "a packed row is [1, T], got ", input_ids.sizes());
  TORCH_CHECK(position_ids.sizes() == input_ids.sizes(), "position_ids must be ", input_ids.sizes(), ", got ",
              position_ids.sizes());
  torch::Tensor h = embed(input_ids);
  LayerContext ctx = context(input_ids, {}, position_ids, h.scalar_type());
  start_router_stats(ctx, attention ? attention->token_weight() : torch::Tensor(), input_ids.numel());
  ctx.cu_seqlens = cu_seqlens.to(input_ids.device(), torch::kInt32);
  ctx.tile_plans = make_tile_plans(cu_seqlens);  // from the boundaries as given (the host, from the trainer)
  ctx.max_seqlen = max_seqlen;
  ctx.attention_override = std::move(attention);
  return layers_and_norm(h, ctx);
}

void CausalLMImpl::start_router_stats(LayerContext& ctx, const torch::Tensor& attention_mask, std::int64_t rows) {
  router_stats_.reset();
  if (!router_aux_loss_ || !config_.hf.is_moe()) return;
  router_stats_ = c10::make_intrusive<RouterStats>();
  router_stats_->num_experts = config_.hf.num_experts;
  router_stats_->top_k = config_.hf.num_experts_per_tok;
  if (attention_mask.defined()) router_stats_->row_weight = attention_mask.reshape({rows}).to(torch::kFloat32);
  router_stats_->sum_over_row = router_stats_sum_;
  router_stats_->row_ranks = router_stats_ranks_;
  ctx.router_stats = router_stats_;
}

void CausalLMImpl::split_experts(const std::shared_ptr<ExpertGroup>& group) {
  TORCH_CHECK(group, "split_experts: no group");
  const std::int64_t e = config_.hf.num_experts, p = group->size();
  TORCH_CHECK(config_.hf.is_moe(), "expert parallelism needs a mixture-of-experts model");
  TORCH_CHECK(p >= 1 && e % p == 0, "expert parallelism: ", e, " experts do not split over ", p,
              " ranks (expert_parallel_size must divide num_experts)");
  for (auto& layer : model->layer_list) {
    Moe& moe = layer->moe;
    if (!moe) continue;
    TORCH_CHECK(!moe->ep, "split_experts: the experts are split already");
    if (p == 1) continue;
    moe->experts->keep_experts(group->rank() * (e / p), e / p);
    moe->ep = group;
  }
}

void CausalLMImpl::set_experts_whole(bool whole, bool adapters_only) {
  for (auto& layer : model->layer_list) {
    Moe& moe = layer->moe;
    if (!moe || !moe->ep) continue;
    const std::int64_t share = moe->num_experts / moe->ep->size();
    if (whole) moe->experts->gather_experts(*moe->ep, adapters_only);
    else moe->experts->keep_experts(moe->ep->rank() * share, share, adapters_only);
  }
}

torch::Tensor CausalLMImpl::layers_and_norm(torch::Tensor h, const LayerContext& ctx) {
  const bool recording = torch::GradMode::is_enabled();
  const auto offload = recording && offload_checkpoints_ && h.is_cuda() ? make_offload_chain() : nullptr;
  // Kept attention outputs go to the host too under offload_activations (AttentionStash::park;
  // on the CPU the chain only holds them, so CPU tests run the same path).
  std::shared_ptr<kernels::OffloadChain> kept_host;  // made with the first kept layer
  const std::size_t n = model->layer_list.size();
  auto flagged = [](const std::vector<bool>& v, std::size_t i) { return i < v.size() && v[i]; };
  // The MLP offload tier: offloaded layers' gate/up entries, to prefetch when backward reaches
  // the output of layer min(i + lead, last) (a gradient hook there).
  // Parked MLPs of checkpointed layers go to the same chain, prefetched when backward reaches
  // the output of the layer above the segment (lead 1).
  std::shared_ptr<kernels::OffloadChain> mlp_chain;
  std::vector<std::vector<std::size_t>> prefetch_at;  // sized on the first offloaded layer
  auto chain = [&] {
    if (!mlp_chain) {
      mlp_chain = kernels::make_offload_chain();
      prefetch_at.resize(n);
    }
    return mlp_chain;
  };
  // The last layer's output is h + m while m is defined (forward_split's pair), else h.
  torch::Tensor m;
  auto output = [&] {
    if (m.defined()) h = h + m;
    m = torch::Tensor();
    return h;
  };
  // Checkpoint segments: which checkpointed layers store their input (the others are rebuilt
  // from their segment's first layer in backward).
  const std::vector<bool> stores =
      odyssey::checkpoint_stores(checkpoint_layers_, keep_attention_layers_, layers_per_checkpoint_);
  for (std::size_t i = 0; i < n; ++i) {
    // Sources whose copies to the host are done go back to the allocator before this layer
    // allocates (the chains hold their newest few otherwise, kernels/offload.h).
    for (const auto& c : {offload, kept_host, mlp_chain})
      if (c) c->release_done();
    DecoderLayer layer = model->layer_list[i];
    const bool ckpt = recording && flagged(checkpoint_layers_, i);
    const bool mlp_off = !ckpt && recording && flagged(mlp_offload_layers_, i) && layer->mlp && !layer->mlp->recompute;
    const std::size_t seg_first = i;  // a checkpoint segment runs from here to i
    if (ckpt) {
      h = output();
      if (!h.requires_grad()) h = h.detach().requires_grad_(true);  // frozen embeddings (LoRA)
      LayerContext lctx = ctx;
      if (flagged(keep_attention_layers_, i) && ctx.cu_seqlens.defined())
        lctx.stash = std::make_shared<AttentionStash>();
      if (flagged(mlp_offload_layers_, i) && layer->mlp && !layer->mlp->recompute)
        lctx.mlp_park = c10::make_intrusive<kernels::ParkedPair>(chain());
      const std::size_t parked_first = mlp_chain ? mlp_chain->size() : 0;
      std::vector<std::function<torch::Tensor(const torch::Tensor&)>> fns{
          [layer, lctx](const torch::Tensor& x) mutable { return layer(x, lctx); }};
      // The checkpointed layers after it that store no input of their own join its segment.
      while (i + 1 < n && flagged(checkpoint_layers_, i + 1) && !flagged(stores, i + 1)) {
        ++i;
        fns.push_back([next = model->layer_list[i], ctx](const torch::Tensor& x) mutable { return next(x, ctx); });
      }
      h = checkpointed_segment(std::move(fns), h, offload);  // a segment of one: checkpointed()
      if (lctx.mlp_park) {  // (entries only where the MLP took the fused path and parked)
        auto& at = prefetch_at[std::min(n - 1, i + 1)];
        for (std::size_t e = parked_first; e < mlp_chain->size(); ++e) at.push_back(e);
      }
      if (lctx.stash && offload_checkpoints_) {
        if (!kept_host) kept_host = make_offload_chain();
        lctx.stash->park(kept_host);
      }
    } else {
      LayerContext offloading;  // ctx with this layer's MLP chain, for an offloaded layer only
      if (mlp_off) {
        offloading = ctx;
        offloading.mlp_offload = chain();
      }
      const LayerContext& lctx = mlp_off ? offloading : ctx;
      const std::size_t first = mlp_chain ? mlp_chain->size() : 0;
      if (layer->fused) {  // x + residual = the previous output: (m, h) of a split layer, else (h, none)
        auto [next_h, next_m] = m.defined() ? layer->forward_split(m, h, lctx) : layer->forward_split(h, {}, lctx);
        h = std::move(next_h);
        m = std::move(next_m);
      } else {
        h = layer(output(), lctx);
      }
      if (mlp_off) {
        auto& at = prefetch_at[std::min(n - 1, i + static_cast<std::size_t>(mlp_offload_lead_))];
        for (std::size_t e = first; e < mlp_chain->size(); ++e) at.push_back(e);
      }
    }
    // The layer's output gets its gradient when the next layer's backward has run: on m when
    // the output is a pair (m's gradient is the output's).
    // (A segment's layers first..i have one output, the last one's.)
    const torch::Tensor& out = m.defined() ? m : h;
    std::vector<std::size_t> entries;
    for (std::size_t j = seg_first; j <= i && j < prefetch_at.size(); ++j)
      entries.insert(entries.end(), prefetch_at[j].begin(), prefetch_at[j].end());
    if (!entries.empty() && out.requires_grad())
      out.register_hook([chain = mlp_chain, entries = std::move(entries)](const torch::Tensor&) {
        for (const std::size_t e : entries) chain->prefetch(e);
      });
  }
  // Forward is over: the chains let go of the GPU tensors their last copies to the host read
  // (kernels/offload.h), which the loss and the top layers' backward would otherwise share
  // memory with until backward reached each chain.
  for (const auto& c : {offload, kept_host, mlp_chain})
    if (c) c->release_held();
  if (m.defined()) return kernels::add_rms_norm(m, h, model->norm->weight, model->norm->eps).first;
  return model->norm(h);
}

torch::Tensor CausalLMImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                    const torch::Tensor& position_ids) {
  return logits(hidden_states(input_ids, attention_mask, position_ids));
}

void CausalLMImpl::initialize_random() {
  torch::NoGradGuard no_grad;
  const double std = config_.initializer_range;
  for (auto& p : named_parameters(true)) {
    const std::string& name = p.key();
    torch::Tensor t = p.value();
    if (name.ends_with("norm.weight")) {
      t.fill_(config_.hf.norm_plus_one ? 0.0 : 1.0);  // Gemma's (1 + w) norms start at w = 0
    } else if (name.ends_with(".bias")) {
      t.zero_();
    } else {
      t.normal_(0.0, std);
    }
  }
  if (config_.pad_token_id) model->embed_tokens->weight[*config_.pad_token_id].zero_();
}

std::string CausalLMImpl::attention_backend_ran() const {
  const std::int64_t b = backend_ran_.load();
  return b < 0 ? std::string("none") : sdp_backend_name(b);
}

torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  const std::int64_t v = logits.size(-1);
  const torch::Tensor padded = torch::constant_pad_nd(labels, {0, 1}, -100);
  const torch::Tensor shifted = padded.narrow(-1, 1, labels.size(-1)).contiguous();
  return torch::nn::functional::cross_entropy(
      logits.to(torch::kFloat32).view({-1, v}), shifted.view({-1}).to(logits.device()),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kMean));
}

torch::Tensor causal_lm_token_nll(const torch::Tensor& hidden, const torch::Tensor& lm_weight,
                                  const torch::Tensor& labels, std::int64_t chunk_tokens,
                                  const LogitTransform& transform) {
  const std::int64_t b = hidden.size(0), s = hidden.size(1);
  const torch::Tensor padded = torch::constant_pad_nd(labels, {0, 1}, -100);
  const torch::Tensor targets = padded.narrow(-1, 1, s).reshape({-1}).to(hidden.device());
  const torch::Tensor flat = hidden.reshape({b * s, hidden.size(2)});
  std::vector<torch::Tensor> parts;
  for (std::int64_t i = 0; i < b * s; i += chunk_tokens) {
    const std::int64_t n = std::min(chunk_tokens, b * s - i);
    const torch::Tensor logits = transform.apply(at::linear(flat.narrow(0, i, n), lm_weight)).to(torch::kFloat32);
    parts.push_back(torch::nn::functional::cross_entropy(
        logits, targets.narrow(0, i, n),
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kNone)));
  }
  return torch::cat(parts).view({b, s});
}

}  // namespace odyssey::model
