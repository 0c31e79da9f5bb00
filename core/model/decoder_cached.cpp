// The decoder's incremental forward for generation (decoder.h: KvCache, hidden_states_cached):
// the same layers as a full forward, with each attention appending its new keys and values
// to the cache and attending over the cache's slots. Masks are built once per call, in slot
// indices, as transformers builds them over its cache positions (causal, key padding, and the
// sliding window counted in slots). Sliding-window layers keep a ring of `window` slots once
// the cache is longer than the window (KvCache::window).
#include "kernels/decode_attention.h"
#include "kernels/rope.h"
#include "model/decoder.h"
#include "model/rope.h"

namespace odyssey::model {

namespace {

// Attention of every query over every key (decode steps without padding: the one new query
// may see the whole cache). GQA by enable_gqa, as causal_attention's unmasked path.
torch::Tensor attend_all(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                         std::int64_t* ran) {
  const bool gqa = q.size(1) != k.size(1);
  if (ran) *ran = at::_fused_sdp_choice(q, k, v, std::nullopt, 0.0, false, scale, gqa);
  return at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, false, scale, gqa);
}

// Attention of one new query per row over the cache: q [B, Hq, 1, D], k and v [B, Hkv, L, D],
// keep [B, 1, 1, L] bool or undefined (every slot). The query heads that share a KV head are
// laid out as that head's query rows ([B, Hkv, Hq / Hkv, D]), so no KV head is repeated: one
// attention over the cache as it is. Soft-capping: transformers' eager formula (masked_attention)
// on the same layout. With `kernel`, CUDA tensors the decode kernel takes run it instead
// (kernels/decode_attention.h: split along the cache, one launch and a merge).
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& keep, double scale, double softcap, std::int64_t* ran,
                               bool kernel) {
  const std::int64_t b = q.size(0), hq = q.size(1), hkv = k.size(1), d = q.size(3);
  if (kernel && softcap <= 0 && q.is_cuda()) {
    const torch::Tensor q3 = q.select(2, 0);
    const torch::Tensor all =
        keep.defined() ? keep.reshape({keep.size(0), k.size(2)})
                       : torch::ones({1, k.size(2)}, torch::TensorOptions().dtype(torch::kBool).device(k.device()));
    if (kernels::decode_attention_on_kernel(q3, k, v, all)) {
      if (ran) *ran = kDecodeKernelRan;
      return kernels::decode_attention(q3, k, v, all, scale).view({b, hq, 1, d});
    }
  }
  const torch::Tensor qg = q.reshape({b, hkv, hq / hkv, d});
  torch::Tensor out;
  if (softcap > 0) {
    const torch::Tensor all =
        keep.defined()
            ? keep
            : torch::ones({1, 1, 1, k.size(2)}, torch::TensorOptions().dtype(torch::kBool).device(k.device()));
    out = masked_attention(qg, k, v, all, scale, softcap, AttentionBackend::Math, ran);
  } else {
    std::optional<torch::Tensor> mask;
    if (keep.defined()) mask = keep;
    if (ran) *ran = at::_fused_sdp_choice(qg, k, v, mask, 0.0, false, scale, false);
    out = at::scaled_dot_product_attention(qg, k, v, mask, 0.0, false, scale, false);
  }
  return out.reshape({b, hq, 1, d});
}

}  // namespace

torch::Tensor AttentionImpl::forward_cached(const torch::Tensor& x, const LayerContext& ctx, const NormSource* src) {
  const std::int64_t b = x.size(0), s = x.size(1);
  KvCache& cache = *ctx.cache;
  const std::int64_t start = ctx.cache_start, len = start + s;
  const torch::Tensor& cos = local_rope ? ctx.cos_local : ctx.cos;
  const torch::Tensor& sin = local_rope ? ctx.sin_local : ctx.sin;
  auto [q, k, v] = project(x, src);
  normalize_qk(q, k);
  if (!rope) {  // a NoPE layer
    q = q.transpose(1, 2);
    k = k.transpose(1, 2);
  } else if (fused && cos.size(-1) == head_dim && !rope_interleaved &&
             cos.scalar_type() ==
                 x.scalar_type()) {  // the fused rotation in place over the B x S tokens (kernels/rope.h)
    auto [qr, kr] = kernels::apply_rope_(q.reshape({b * s, -1, head_dim}), k.reshape({b * s, -1, head_dim}),
                                         cos.reshape({b * s, -1}), sin.reshape({b * s, -1}));
    q = qr.view({b, s, -1, head_dim}).transpose(1, 2);  // [B, H, S, D]
    k = kr.view({b, s, -1, head_dim}).transpose(1, 2);
  } else {
    q = apply_rope(q.transpose(1, 2), cos, sin, rope_interleaved);  // [B, H, S, D]
    k = apply_rope(k.transpose(1, 2), cos, sin, rope_interleaved);
  }
  torch::Tensor& ck = cache.k[static_cast<std::size_t>(layer_index)];
  torch::Tensor& cv = cache.v[static_cast<std::size_t>(layer_index)];
  const bool ring = cache.ring(static_cast<std::size_t>(layer_index));
  std::int64_t ran = -1;
  if (ctx.cache_slot.defined()) {  // static decode step: the slot is a tensor, attention reads the whole cache
    const torch::Tensor& at = ring ? ctx.ring_slot : ctx.cache_slot;
    ck.index_copy_(2, at, k);
    cv.index_copy_(2, at, v.transpose(1, 2));
    const torch::Tensor& keep = ring ? ctx.keep_ring : sliding ? ctx.keep_window : ctx.keep;
    const torch::Tensor out = decode_attention(q, ck, cv, keep, scale, softcap, &ran, decode_kernel);
    if (ctx.backend_ran) ctx.backend_ran->store(ran);
    return o_proj(out.transpose(1, 2).reshape({b, s, -1}));
  }
  if (ring && len > cache.window) {
    // The ring is full: a decode step overwrites the key that left the window and reads the
    // ring; a chunk reads the ring followed by its own keys, then keeps its last `window`.
    const std::int64_t w = cache.window;
    const torch::Tensor vt = v.transpose(1, 2);
    torch::Tensor out;
    if (s == 1) {
      ck.narrow(2, start % w, 1).copy_(k);
      cv.narrow(2, start % w, 1).copy_(vt);
      out = decode_attention(q, ck, cv, ctx.keep_ring, scale, softcap, &ran, decode_kernel);
    } else if (start == 0) {  // a first chunk: the ring holds nothing yet
      out = masked_attention(q, k, vt, ctx.keep_ring.narrow(3, w, s), scale, softcap, ctx.attention, &ran);
    } else {
      out = masked_attention(q, torch::cat({ck, k}, 2), torch::cat({cv, vt}, 2), ctx.keep_ring, scale, softcap,
                             ctx.attention, &ran);
    }
    if (s > 1) {
      const std::int64_t m = std::min(s, w);
      ck.index_copy_(2, ctx.ring_write, k.narrow(2, s - m, m));
      cv.index_copy_(2, ctx.ring_write, vt.narrow(2, s - m, m));
    }
    if (ctx.backend_ran) ctx.backend_ran->store(ran);
    return o_proj(out.transpose(1, 2).reshape({b, s, -1}));
  }
  // Full layers, and ring layers while the cache is within the window (slot j at position j).
  ck.narrow(2, start, s).copy_(k);
  cv.narrow(2, start, s).copy_(v.transpose(1, 2));
  const torch::Tensor keys = ck.narrow(2, 0, len), values = cv.narrow(2, 0, len);
  // A window hides a key from some query once the last query is `window` slots past the first.
  const bool windowed = sliding && len - 1 >= window;
  torch::Tensor out;
  if (s == 1) {  // a decode step: the query heads of a KV head as its rows, no repeated KV heads
    out = decode_attention(q, keys, values, windowed ? ctx.keep_window : ctx.keep, scale, softcap, &ran, decode_kernel);
  } else if (softcap > 0 || windowed) {
    out = masked_attention(q, keys, values, windowed ? ctx.keep_window : ctx.keep, scale, softcap, ctx.attention, &ran);
  } else if (ctx.keep.defined()) {
    out = causal_attention(q, keys, values, ctx.keep, scale, ctx.attention, &ran);
  } else if (start == 0) {
    out = causal_attention(q, keys, values, {}, scale, ctx.attention, &ran);  // a prompt without padding
  } else {
    TORCH_CHECK(s == 1, "hidden_states_cached: an unmasked step past the prompt must be one token, got ", s);
    out = attend_all(q, keys, values, scale, &ran);
  }
  if (ctx.backend_ran) ctx.backend_ran->store(ran);
  return o_proj(out.transpose(1, 2).reshape({b, s, -1}));
}

std::int64_t KvCache::bytes() const {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < k.size(); ++i) n += static_cast<std::int64_t>(k[i].nbytes() + v[i].nbytes());
  return n;
}

KvCache CausalLMImpl::allocate_cache(std::int64_t batch, std::int64_t capacity, bool ring) const {
  TORCH_CHECK(batch > 0 && capacity > 0, "allocate_cache: batch and capacity must be positive, got ", batch, " and ",
              capacity);
  const auto o = torch::TensorOptions().dtype(options_.dtype).device(options_.device);
  KvCache c;
  const std::int64_t window = config_.hf.sliding_window;
  c.window = ring && window > 0 && window < capacity ? window : 0;
  for (std::int64_t i = 0; i < config_.hf.num_hidden_layers; ++i) {
    const std::int64_t slots = c.window > 0 && config_.hf.sliding_layer(i) ? c.window : capacity;
    c.k.push_back(torch::zeros({batch, config_.hf.num_key_value_heads, slots, config_.hf.head_dim}, o));
    c.v.push_back(torch::zeros({batch, config_.hf.num_key_value_heads, slots, config_.hf.head_dim}, o));
  }
  c.key_mask = torch::zeros({batch, capacity}, torch::TensorOptions().dtype(torch::kBool).device(options_.device));
  return c;
}

torch::Tensor CausalLMImpl::hidden_states_cached(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                                 const torch::Tensor& attention_mask, KvCache& cache) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(input_ids.dim() == 2, "input_ids must be [batch, seq], got ", input_ids.sizes());
  TORCH_CHECK(position_ids.sizes() == input_ids.sizes(), "position_ids must be ", input_ids.sizes(), ", got ",
              position_ids.sizes());
  TORCH_CHECK(!attention_mask.defined() || attention_mask.sizes() == input_ids.sizes(), "attention_mask must be ",
              input_ids.sizes(), ", got ", attention_mask.sizes());
  TORCH_CHECK(
      static_cast<std::int64_t>(cache.k.size()) == config_.hf.num_hidden_layers && input_ids.size(0) == cache.batch(),
      "hidden_states_cached: the cache is for ", cache.batch(), " rows of ", cache.k.size(), " layers; got ",
      input_ids.size(0), " rows for ", config_.hf.num_hidden_layers, " layers");
  const std::int64_t s = input_ids.size(1), start = cache.length, len = start + s;
  TORCH_CHECK(len <= cache.capacity(), "hidden_states_cached: ", len, " tokens exceed the cache's ", cache.capacity());
  const torch::Device dev = input_ids.device();
  torch::Tensor slots = cache.key_mask.narrow(1, start, s);
  if (attention_mask.defined()) {
    slots.copy_(attention_mask.to(torch::kBool));
    if (!cache.padded) cache.padded = !slots.all().item<bool>();
  } else {
    slots.fill_(true);
  }
  cache.length = len;

  torch::Tensor h = embed(input_ids);
  LayerContext ctx = context(input_ids, {}, position_ids, h.scalar_type());
  ctx.cache = &cache;
  ctx.cache_start = start;
  // keep [B, 1, S, len]: causal in slots and the key a real token; only where the fast paths
  // (no padding: square causal for a first chunk, every slot for one new token) do not apply,
  // or where the eager soft-capped formula needs an explicit mask.
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(dev);
  const torch::Tensor q_slot = (torch::arange(s, i64) + start).view({s, 1});
  const torch::Tensor k_slot = torch::arange(len, i64).view({1, len});
  const torch::Tensor causal = k_slot.le(q_slot).view({1, 1, s, len});
  const bool softcapped = config_.hf.attn_logit_softcapping > 0;
  if (cache.padded || (start > 0 && s > 1) || softcapped)
    ctx.keep = causal.logical_and(cache.key_mask.narrow(1, 0, len).view({cache.batch(), 1, 1, len}));
  const std::int64_t window = config_.hf.sliding_window;
  const std::int64_t w = cache.window;
  if (w > 0 && len > w) {
    // Ring layers. Before this call ring position r holds slot start - 1 - ((start - 1 - r) mod
    // w), none when negative; after it, the same with len for start.
    const torch::Tensor r = torch::arange(w, i64);
    if (s == 1) {
      if (cache.padded || softcapped) {
        const torch::Tensor held = (len - 1) - torch::remainder((len - 1) - r, w);
        ctx.keep_ring = cache.key_mask.index_select(1, held).view({cache.batch(), 1, 1, w});
      }
    } else {
      const torch::Tensor key_slot =
          torch::cat({(start - 1) - torch::remainder((start - 1) - r, w), torch::arange(start, len, i64)});
      const torch::Tensor ks = key_slot.view({1, w + s});
      const torch::Tensor seen = ks.ge(0).logical_and(ks.le(q_slot)).logical_and(ks.gt(q_slot - w));
      ctx.keep_ring =
          seen.view({1, 1, s, w + s})
              .logical_and(cache.key_mask.index_select(1, key_slot.clamp_min(0)).view({cache.batch(), 1, 1, w + s}));
      const std::int64_t m = std::min(s, w);
      ctx.ring_write = torch::remainder(torch::arange(len - m, len, i64), w);
    }
  } else if (w == 0 && window > 0 && len - 1 >= window) {  // sliding layers holding every slot
    const torch::Tensor in_window = k_slot.gt(q_slot - window).view({1, 1, s, len});
    ctx.keep_window = (ctx.keep.defined() ? ctx.keep : causal).logical_and(in_window);
  }
  return layers_and_norm(h, ctx);
}

bool CausalLMImpl::static_decode_supported() const {
  return !rope_depends_on_length(config_.rope) && !(config_.rope_local && rope_depends_on_length(*config_.rope_local));
}

torch::Tensor CausalLMImpl::decode_step(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                        const torch::Tensor& slot, KvCache& cache) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(static_decode_supported(), "decode_step: RoPE ", config_.rope.type,
              " depends on the length; use hidden_states_cached");
  TORCH_CHECK(input_ids.dim() == 2 && input_ids.size(1) == 1 && input_ids.size(0) == cache.batch() &&
                  position_ids.sizes() == input_ids.sizes(),
              "decode_step: input_ids and position_ids must be [", cache.batch(), ", 1], got ", input_ids.sizes(),
              " and ", position_ids.sizes());
  const std::int64_t b = cache.batch(), cap = cache.capacity();
  cache.key_mask.index_fill_(1, slot, true);
  torch::Tensor h = embed(input_ids);
  LayerContext ctx = context(input_ids, {}, position_ids, h.scalar_type());
  ctx.cache = &cache;
  ctx.cache_slot = slot;
  ctx.keep = cache.key_mask.view({b, 1, 1, cap});
  if (const std::int64_t w = cache.window; w > 0) {
    // Ring layers: this token goes to position slot % w, after which position r holds slot
    // slot - ((slot - r) mod w), none when negative.
    ctx.ring_slot = torch::remainder(slot, w);
    const torch::Tensor held = slot - torch::remainder(slot - torch::arange(w, slot.options()), w);
    ctx.keep_ring = held.ge(0)
                        .view({1, w})
                        .logical_and(cache.key_mask.gather(1, held.clamp_min(0).view({1, w}).expand({b, w})))
                        .view({b, 1, 1, w});
  } else if (config_.hf.sliding_window > 0) {  // a key at most window - 1 slots behind this one
    const torch::Tensor k_slot = torch::arange(cap, slot.options()).view({1, 1, 1, cap});
    ctx.keep_window = ctx.keep.logical_and(k_slot.gt(slot.view({1, 1, 1, 1}) - config_.hf.sliding_window));
  }
  return layers_and_norm(h, ctx);
}

}  // namespace odyssey::model
