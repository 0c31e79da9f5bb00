// Causal GQA attention through ATen's scaled_dot_product_attention, with the backend chosen
// deliberately and the one that ran reported.
//
// Like transformers 5.17's sdpa_attention_forward: without padding, is_causal=true and
// enable_gqa (KV heads shared by Hq/Hkv query heads); with padding, an explicit boolean mask
// (causal AND key-not-padding) and KV heads repeated. A query row whose keys are all masked
// (left padding) gives zeros, as SDPA does for HF.
//
// On CUDA the preferred backend is put first in SDPA's priority order (ATen's default order
// is flash, efficient, math, cuDNN; docs/model.md: cuDNN is 1.7x flash at 32K on an H200).
// The backend reported is at::_fused_sdp_choice for the exact arguments of the call, which
// is the function SDPA dispatches on.
#pragma once

#include <torch/torch.h>

#include "kernels/offload.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace odyssey::model {

enum class AttentionBackend { Auto, CuDNN, Flash, Efficient, Math };

// Attention over a padding-free row computed elsewhere than in this process alone: the
// sequence-parallel engine (dist/sequence_parallel.h) installs one per sharded row. q is
// [T_local, Hq, D], k and v [T_local, Hkv, D] (RoPE applied with global positions); returns
// [T_local, Hq, D].
struct AttentionStash;

class AttentionOverride {
 public:
  virtual ~AttentionOverride() = default;
  // `prefer`: the configured backend (attn_impl), for rows where SDPA runs. `stash`: the
  // layer keeps its attention output (keep_attention), else null; an override keeps this
  // rank's share of it (AttentionStash::recomputing says whether to keep or to take).
  virtual torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                               AttentionBackend prefer, std::int64_t* ran, AttentionStash* stash) = 0;
  // The same with a sliding window (keys at most window - 1 behind the query, 0: none) and/or
  // attention-logit soft-capping (softcap > 0: masked_attention's eager formula). Overrides
  // that cannot compute it (ring attention) fail with a message; validation refuses those
  // layouts before a run starts.
  virtual torch::Tensor attend_masked(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      double scale, std::int64_t window, double softcap, AttentionBackend prefer,
                                      std::int64_t* ran) = 0;
  // The shard's tokens as the row's statistics count them: fp32 [T], 1 for a token of the row,
  // 0 for padding the shard added (MoE routing statistics); undefined: every token counts.
  virtual torch::Tensor token_weight() const { return {}; }
};

// What a decode step's attention records when kernels::decode_attention ran it (not an SDPA
// backend).
inline constexpr std::int64_t kDecodeKernelRan = 100;
// "cudnn", "flash", "efficient", "math" (ATen's SDPBackend values), "decode_kernel"
// (kDecodeKernelRan), "unknown" otherwise.
std::string sdp_backend_name(std::int64_t backend);
const char* attention_backend_name(AttentionBackend b);

// q [B, Hq, S, D], k and v [B, Hkv, S, D]; keep [B, 1, S, S] bool (true = attend) or
// undefined for plain causal attention. Writes the SDPBackend that ran to *ran when given.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& keep, double scale, AttentionBackend prefer, std::int64_t* ran);

// Causal attention over a padding-free row of several samples: q [T, Hq, D], k and v
// [T, Hkv, D], cu_seqlens int32 [n+1] (sample i is rows cu[i]..cu[i+1]); attention never
// crosses a sample boundary. CUDA with bf16/fp16: varlen flash attention
// (at::_flash_attention_forward, differentiable). Otherwise SDPA with a block-diagonal
// causal mask [1, 1, T, T] (exact; meant for CPU lengths). Returns [T, Hq, D].
// window > 0: a sliding window as transformers' (a key fewer than `window` rows behind its
// query): flash attention's local band on CUDA (window_size_left = window - 1, no [T, T]
// mask), the mask's band otherwise.
torch::Tensor varlen_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& cu_seqlens, std::int64_t max_seqlen, double scale,
                                      std::int64_t* ran, std::int64_t window = 0);
// Whether a layer with this sliding window runs on varlen_causal_attention's flash band: CUDA,
// bf16/fp16, head dim <= 256, no soft-capping, and a backend preference the flash kernel
// serves (not Efficient or Math, which take the explicit mask).
bool window_on_flash(const torch::Device& device, torch::ScalarType dtype, std::int64_t head_dim, double softcap,
                     AttentionBackend prefer);

// Causal attention over a row that is one sequence: q [T, Hq, D], k and v [T, Hkv, D] (views
// of the projections are fine). SDPA over [1, H, T, D] views, so cuDNN's attention can run
// (1.24x varlen flash for the 7B shape's forward and backward at 32K on an H200,
// docs/model.md). Also exact for a sequence followed by padding: a causal query never sees a
// later key, so real tokens never see the padding. Returns [T, Hq, D].
torch::Tensor sequence_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        double scale, AttentionBackend prefer, std::int64_t* ran);

// Attention that also returns its log-sum-exp, and the backward from output and log-sum-exp
// alone: for computations that split attention or keep its output (ring attention's blocks,
// a checkpointed layer's attention kept out of recomputation). q [nq, Hq, D], k and v
// [nk, Hkv, D]; cu_q / cu_k int32 [n+1]: sample i pairs rows cu_q[i].. of q with rows
// cu_k[i].. of k (causal: top-left aligned within the pair, as flash attention's varlen).
//   CuDNN  cuDNN's SDPA (CUDA bf16/fp16, one sample, KV heads repeated for it)
//   Flash  varlen flash attention (CUDA bf16/fp16, head dim <= 256)
//   Math   explicit fp32 softmax (any device; meant for CPU lengths)
// Whether cuDNN attention takes grouped-query K/V as they are (fewer K/V heads than query heads).
// On by default: the grouped path passed tests/gpu/cudnn_gqa_check.py on an H100 (2026-12-06)
// and made Qwen2.5-7B LoRA at 32K 0.6% faster than K/V repeated (docs/benchmarks.md, 2026-12-06
// night); off repeats K/V to the query heads and sums dK/dV back (odyssey-bench --cudnn-gqa
// on|off). A cuDNN that refuses the grouped shapes turns it off for the process, with one line
// on stderr.
void set_cudnn_gqa(bool on);
bool cudnn_gqa();

class LseAttention {
 public:
  enum class Kind { CuDNN, Flash, Math };
  // The kernel for these inputs: Math off CUDA or outside flash's dtypes/head dims; CuDNN for
  // one sample unless Flash is preferred; else Flash.
  static Kind choose(const torch::Tensor& q, bool one_sample, AttentionBackend prefer, std::int64_t window = 0);
  // Whether the fused kernels take q (CUDA, bf16/fp16, head dim <= 256); Math otherwise.
  static bool fused_supported(const torch::Tensor& q);
  // The at::SDPBackend value reported for a kind (attention_backend_ran).
  static std::int64_t sdp_backend(Kind kind);

  // `window` > 0: a sliding window as transformers has it (key j seen from query i when
  // i - window < j <= i, positions within the sample): flash's local band, or the Math kernel's
  // mask; cuDNN has no band, so choose() never picks it for a window. Causal attention only.
  LseAttention(Kind kind, std::int64_t q_heads, std::int64_t kv_heads, std::int64_t window = 0)
      : kind_(kind), hq_(q_heads), hkv_(kv_heads), window_(window) {}
  Kind kind() const { return kind_; }

  // out [nq, Hq, D] in q's dtype, lse [Hq, nq] fp32.
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v, const torch::Tensor& cu_q,
                                                  const torch::Tensor& cu_k, std::int64_t max_q, std::int64_t max_k,
                                                  bool causal, double scale);
  // dq [nq, Hq, D], dk and dv [nk, Hkv, D]: in the kernel's dtype (fp32 for Math; dK/dV of
  // heads repeated for cuDNN, cudnn_gqa() off, are summed in fp32); `out` and `lse` are the final ones of these
  // queries (when attention was split, the merged ones: then these are this part's terms).
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> backward(const torch::Tensor& dout, const torch::Tensor& q,
                                                                   const torch::Tensor& k, const torch::Tensor& v,
                                                                   const torch::Tensor& out, const torch::Tensor& lse,
                                                                   const torch::Tensor& cu_q, const torch::Tensor& cu_k,
                                                                   std::int64_t max_q, std::int64_t max_k, bool causal,
                                                                   double scale) const;

  // What the kernel's forward hands its backward (random-number state, sequence tensors),
  // and shapes, as tensors and integers an autograd context can save.
  std::vector<torch::Tensor> saved_tensors() const { return {aux_a_, aux_b_, aux_c_, aux_d_}; }
  std::vector<std::int64_t> saved_ints() const;
  static LseAttention restore(const std::vector<torch::Tensor>& tensors, const std::vector<std::int64_t>& ints);

 private:
  torch::Tensor repeat(const torch::Tensor& x) const;
  torch::Tensor fold(const torch::Tensor& g) const;
  // Flash's band for the window: window - 1 keys behind the query, none after; none without one.
  std::optional<std::int64_t> band_left() const {
    return window_ > 0 ? std::optional<std::int64_t>(window_ - 1) : std::nullopt;
  }
  std::optional<std::int64_t> band_right() const { return window_ > 0 ? std::optional<std::int64_t>(0) : std::nullopt; }
  Kind kind_;
  std::int64_t hq_, hkv_;
  std::int64_t window_ = 0;
  torch::Tensor aux_a_, aux_b_, aux_c_, aux_d_;
  std::vector<std::int64_t> lse_shape_;  // the kernel's own log-sum-exp shape (cuDNN)
  bool lse_3d_ = false;                  // flash returned [1, H, >= nq]
  bool grouped_ = false;                 // cuDNN's forward took K/V with their own heads
};

// A checkpointed layer's attention output and log-sum-exp kept from its forward, so the
// layer's recomputation in backward runs the attention backward without running the attention
// forward again (keep_attention, docs/training.md). Filled by the layer's no-grad forward,
// handed to the autograd node of its recomputation.
struct AttentionStash {
  torch::Tensor out, lse;
  std::vector<torch::Tensor> kernel_tensors;
  std::vector<std::int64_t> kernel_ints;
  // Whether this call is the layer's recomputation (grad mode on), which takes what was kept,
  // rather than the checkpoint's forward, which keeps it. Fails when nothing was kept. A
  // parked output is taken back from the host first.
  bool recomputing();
  // offload_activations: once the layer's forward has filled the stash, out and lse wait in
  // pinned host memory (`host`, one chain per forward, entries in forward order) instead of on
  // the GPU; the recomputation takes them back and starts bringing the stash below it (the
  // next one backward reaches). On the CPU the chain only holds them.
  void park(const std::shared_ptr<kernels::OffloadChain>& host);

 private:
  std::shared_ptr<kernels::OffloadChain> host_;
  std::size_t slot_ = 0;  // out at slot_, lse at slot_ + 1
};

// Causal attention of a layer that keeps its output, over a padding-free row (q [T, Hq, D],
// k and v [T, Hkv, D], samples by cu_seqlens): without grad mode (the checkpoint's forward)
// it computes the output with its log-sum-exp (LseAttention) and keeps both in `stash`; with
// grad mode (the recomputation) it returns the kept output through a node whose backward is
// the attention backward from it. `one_sample`: the row is one sample, perhaps followed by
// padding that no real query sees, so causal attention over the whole row is exact (cuDNN).
// `window` > 0: the layer's sliding window (LseAttention), on flash's band or the Math mask.
torch::Tensor kept_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& cu_seqlens, std::int64_t max_seqlen, bool one_sample,
                                    AttentionBackend prefer, AttentionStash& stash, double scale, std::int64_t* ran,
                                    std::int64_t window = 0);

// The block-diagonal causal mask of a row: keep[0, 0, i, j] = same sample and j <= i.
torch::Tensor block_causal_mask(const torch::Tensor& cu_seqlens, std::int64_t total, const torch::Device& device);

// transformers' repeat_kv: [B, Hkv, S, D] -> [B, Hkv * n, S, D], each KV head n times in a row.
torch::Tensor repeat_kv(const torch::Tensor& x, std::int64_t n);

// keep (causal, and padding or sample boundaries; undefined: plain causal over seq_len) AND
// the key at most window - 1 positions behind the query (transformers' sliding_window_overlay:
// kv_idx > q_idx - window). [B or 1, 1, S, S] bool.
torch::Tensor window_mask(const torch::Tensor& keep, std::int64_t seq_len, std::int64_t window,
                          const torch::Device& device);

// Attention through an explicit mask keep [B or 1, 1, S, S] (undefined: causal), q [B, Hq, S, D],
// k and v [B, Hkv, S, D]. Without soft-capping: SDPA with the mask (causal_attention). With
// softcap > 0: transformers' eager_attention_forward of Gemma-2, op for op: scores = q k^T *
// scale, tanh(scores / softcap) * softcap, plus the dtype's lowest value where masked (as HF
// adds it; the masked scores' gradient passes through), softmax in fp32 cast back to q's dtype, times v. Memory: the
// [B, Hq, S, S] scores (meant for the lengths the eager formula serves; the fused kernels do not cover soft-capping).
torch::Tensor masked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& keep, double scale, double softcap, AttentionBackend prefer,
                               std::int64_t* ran);

// The boolean mask for padded batches: causal AND attention_mask[b, key] (HF's sdpa_mask);
// undefined when attention_mask is undefined or all ones (then is_causal is used).
torch::Tensor causal_padding_mask(const torch::Tensor& attention_mask, std::int64_t seq_len);

}  // namespace odyssey::model
