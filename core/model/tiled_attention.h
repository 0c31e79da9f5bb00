// Exact causal attention over a padding-free row, computed in tiles of query rows, for the
// score transforms the fused kernels lack: Gemma-2's attention-logit soft-capping
// (tanh(s / cap) * cap), and a sliding window where flash attention's band cannot run (CPU,
// fp32, head dim > 256).
//
// A tile of n query rows sees only the keys its rows can reach (from the first row's sample
// start, or its window's start, to the tile's last row), so causality and sample boundaries
// skip about half the work and a window skips the rest of the row. Per tile: fp32 scores from
// one GEMM (bf16/fp16 inputs accumulate and come out in fp32), then the transform, the mask,
// the log-sum-exp and the probabilities in one fused pass (kernels/attention_tile.h; rounded to
// the inputs' dtype for the GEMM with V, as flash attention rounds them). The backward
// recomputes each tile's scores from the saved log-sum-exp (FlashAttention-2's backward, done
// with GEMMs and one fused pass for P and dS): nothing of size T x T is kept, and the working
// set is a few tiles of scores (tiled_attention_rows sizes them).
//
// On CUDA with 16-bit inputs and head dim 64, 128 or 256 the forward is not cut into tiles: the
// band kernels (kernels/band_attention.h) compute the same attention fused, as flash attention
// does, from the same per-query first keys; so does the backward of windowed layers (global
// layers' backward runs the tiles, faster there, from the kernels' output and log-sum-exp).
//
// Semantics are transformers' eager_attention_forward of Gemma-2 (scores * scale, soft-capped,
// masked, softmax, times V) for rows where each query sees at least itself, which causal rows
// always do; tests/core/tst_tiled_attention.cpp checks it against the dense formula in float64
// and tst_decoder_parity against transformers through whole models.
#pragma once

#include <torch/torch.h>

#include "model/attention.h"
#include "model/attention_tiles.h"

#include <cstdint>
#include <memory>

namespace odyssey::model {

// The tile plans of one packed row, shared by its layers (LayerContext::tile_plans) and by the
// recomputation in backward: a plan depends only on the row's sample boundaries, the window, the
// head count and the tile size, so the row plans each combination once, from the boundaries held
// on the host, instead of every layer reading cu_seqlens back from the GPU (a synchronisation)
// and uploading its per-query first keys again. Safe to share between threads.
class TilePlans;
// cu_seqlens: the row's boundaries (any integer dtype and device; read back to the host once,
// when the row's first plan is made, so a row no layer tiles never reads them).
std::shared_ptr<TilePlans> make_tile_plans(const torch::Tensor& cu_seqlens);

// q [T, Hq, D], k and v [T, Hkv, D] (Hq a multiple of Hkv; strided views are fine); cu_seqlens
// [n + 1] (any integer dtype and device; sample i is rows cu[i]..cu[i+1]). window > 0: a key is
// seen from a query at most window - 1 positions behind it (transformers' kv > q - window);
// softcap > 0: scores soft-capped. tile_rows 0: tiled_attention_rows. plans: the row's
// (make_tile_plans of the same cu_seqlens), or null to plan here. Returns [T, Hq, D] in q's
// dtype; differentiable in q, k and v.
torch::Tensor tiled_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& cu_seqlens, double scale, std::int64_t window, double softcap,
                                     std::int64_t tile_rows = 0, TilePlans* plans = nullptr);

// The same for a layer that keeps its output (keep_attention; as kept_causal_attention in
// attention.h): without grad mode (the checkpoint's forward) it computes the tiles' output and
// log-sum-exp and keeps both in `stash`; with grad mode (the recomputation) it returns the kept
// output through a node whose backward is the tiles' backward from it, so the recomputation
// runs no attention forward.
torch::Tensor kept_tiled_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& cu_seqlens, double scale, std::int64_t window, double softcap,
                                   AttentionStash& stash, TilePlans* plans = nullptr);

// Which layers' backward runs the band kernels where they take the tensors: windowed layers only
// (false, the default) or every layer (true). For measuring the two (odyssey-bench
// --band-backward, model_parity_gpu's tiled-band backend).
void set_band_backward_everywhere(bool on);
bool band_backward_everywhere();

}  // namespace odyssey::model
