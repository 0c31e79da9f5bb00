// Soft-capped causal attention with cuDNN's fused attention doing most of the work.
//
// cuDNN's graph API (through NVIDIA's header-only cudnn-frontend) runs flash attention with a
// score modifier, x = cap * tanh(s * scale / cap) (Gemma-2's soft-capping), on Hopper's wgmma
// kernels; but with a score modifier it takes no causal mask, so a causal row would cost the
// whole square. A causal T x T triangle is cut instead into full rectangles and small
// triangles on the diagonal (docs/kernels.md, "Soft-capped attention through cuDNN"):
//
//   level 1: queries T/2..T on keys 0..T/2;  level 2: queries n..2n on keys 0..n and 3n..4n
//   on 2n..3n (n = T/4), one cuDNN call with the two as its batch; ...; level L: blocks of
//   B = T / 2^L rows. What is left is the diagonal's 2^L causal B x B triangles, which the band
//   kernels (band_attention.h) run with first_key[i] = floor(i / B) * B.
//
// A windowed row (query i sees keys i-W+1..i, W < T; Gemma-2's local layers) is cut by blocks of
// B rows dividing T and W (softcap_window_block): query block j sees key blocks j-W/B..j. Key
// block j is the diagonal's causal triangle (the band kernels, as above); key blocks j-1 ..
// j-W/B+1 are full rectangles, one cuDNN call per distance m (queries mB..T on keys 0..T-mB as
// [T/B - m] blocks); key block j-W/B is the window's edge, query r seeing keys r+1..B-1 of it,
// a rectangle with that mask inside the score modifier (its last row sees no key).
//
// Each part returns its own output and log-sum-exp; the parts of a row are merged by their
// log-sum-exps in fp32. The backward of each part runs from the whole attention's output,
// log-sum-exp and output gradient (what FlashAttention's backward needs of a row: P from the
// row's log-sum-exp, delta = rowsum(dO * O)), so the parts' gradients are the whole's pieces
// and are summed in fp32.
//
// Built only where configure found cudnn_frontend.h and cudnn.h (ODYSSEY_HAVE_CUDNN_FRONTEND);
// libcudnn itself is the one LibTorch loads, opened at first use. On by default (measured
// faster than the band kernels: Gemma-2-9B LoRA +10.8% at 16K, +32.1% at 32K on an H100);
// set_cudnn_softcap(false), or ODYSSEY_CUDNN_SOFTCAP=0 at start, turns it off.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

namespace odyssey::kernels {

// Whether this build has the cuDNN path at all.
bool cudnn_softcap_compiled();

void set_cudnn_softcap(bool on);
bool cudnn_softcap_enabled();
// Windowed rows through cuDNN too (default on; off at start with ODYSSEY_CUDNN_SOFTCAP_WINDOWED=0;
// off: the band kernels run them).
void set_cudnn_softcap_windowed(bool on);
bool cudnn_softcap_windowed_enabled();

// The diagonal block size B for a causal row of t tokens: t / 2^L for the largest L with
// t divisible by 2^L and t / 2^L >= min_block (1,024) and a multiple of 64; 0 when no L >= 1
// does (t < 2,048 or odd multiples), and the caller runs its own path.
std::int64_t softcap_diagonal_block(std::int64_t t, std::int64_t min_block = 1024);

// Whether softcap_causal_forward/backward take these tensors: built with cuDNN, the switch on,
// CUDA bf16/fp16 q [T, Hq, D], k, v [T, Hkv, D] with D 64, 128 or 256 (the band kernels'),
// the last dimension contiguous, and no earlier cuDNN failure in this process.
bool softcap_causal_takes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// The reason the path was turned off by a failure (a graph cuDNN cannot run), or empty.
std::string cudnn_softcap_failure();

// The block B for a row of t tokens with a window of `window` (0 < window < t): the largest
// multiple of 64 at most min(max_block, window) and at least 256 dividing both; 0 when none does
// (the caller runs its own path).
std::int64_t softcap_window_block(std::int64_t t, std::int64_t window, std::int64_t max_block = 1024);

// The windowed rows' switch on (set_cudnn_softcap_windowed), softcap_causal_takes, and no earlier
// failure of the windowed rows' graphs (the edge's mask).
bool softcap_window_takes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// Why the windowed rows' path was turned off, or empty (a failure of the rectangles shared with
// causal rows is cudnn_softcap_failure's).
std::string cudnn_softcap_window_failure();

// One causal row (every query sees keys 0..i) with soft-capping: {out [T, Hq, D] in q's dtype,
// lse [Hq, T] fp32, natural log}. block_first_key: int64 [T] on q's device, floor(i / block) *
// block, block = softcap_diagonal_block(T). Empty when cuDNN cannot build the graphs (the
// failure is remembered and softcap_causal_takes turns false); the caller then runs its own.
std::optional<std::pair<torch::Tensor, torch::Tensor>> softcap_causal_forward(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& block_first_key,
    std::int64_t block, double scale, double softcap);

// {dq, dk, dv} in the inputs' dtype from dout [T, Hq, D] and the whole attention's out and lse
// ([Hq, T] or any shape of Hq * T values in that order), however they were computed. Empty as above.
std::optional<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>> softcap_causal_backward(
    const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, const torch::Tensor& block_first_key, std::int64_t block,
    double scale, double softcap);

// One windowed row, as softcap_causal_forward/backward; block = softcap_window_block(T, window),
// block_first_key floor(i / block) * block; softcap > 0 (the edge's mask rides in its score modifier).
std::optional<std::pair<torch::Tensor, torch::Tensor>> softcap_window_forward(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& block_first_key,
    std::int64_t block, std::int64_t window, double scale, double softcap);
std::optional<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>> softcap_window_backward(
    const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, const torch::Tensor& block_first_key, std::int64_t block,
    std::int64_t window, double scale, double softcap);

// The cut itself, with the parts' attention given (what softcap_causal_forward/backward run
// with cuDNN and the band kernels; the tests run it with dense formulas on the CPU). q [T, Hq, D],
// k, v [T, Hkv, D]; T = 2^L blocks of `block` rows, L >= 1. Merges and sums are in fp32 for
// 16-bit inputs and in float64 for float64.
namespace levels {
// The diagonal's blocks (query i sees keys floor(i / block) * block .. i): {out [T, Hq, D], lse [Hq, T]}.
using DiagonalForward = std::function<std::pair<torch::Tensor, torch::Tensor>(
    const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;
// One level's rectangles, every query seeing every key: q [c, n, Hq, D], k, v [c, n, Hkv, D]
// (strided views) -> {out [c, n, Hq, D], lse [c, Hq, n]}.
using RectangleForward = DiagonalForward;
// Their backward from the whole row's output gradient, output and log-sum-exp (restricted to the
// part's rows): (dout, q, k, v, out, lse) -> {dq, dk, dv} of the part's rows and keys; the
// diagonal's lse is [Hq, T], a level's [c, Hq, n] packed.
using DiagonalBackward = std::function<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>(
    const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
    const torch::Tensor&)>;
using RectangleBackward = DiagonalBackward;

std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                                std::int64_t block, const DiagonalForward& diag,
                                                const RectangleForward& rect);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> backward(const torch::Tensor& dout, const torch::Tensor& q,
                                                                 const torch::Tensor& k, const torch::Tensor& v,
                                                                 const torch::Tensor& out, const torch::Tensor& lse,
                                                                 std::int64_t block, const DiagonalBackward& diag,
                                                                 const RectangleBackward& rect);
}  // namespace levels

// The windowed cut (query i sees keys i-window+1..i), parts given as for levels: the diagonal's
// blocks, the rectangles at each distance m = 1 .. window/block - 1 (q [c, block, Hq, D] of rows
// m*block.., k, v [c, block, Hkv, D] of keys 0..), and `upper` at the edge m = window/block:
// the same views, query r seeing keys r+1..block-1 only; its last row's out and lse are ignored.
namespace windowed {
std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                                std::int64_t window, std::int64_t block,
                                                const levels::DiagonalForward& diag,
                                                const levels::RectangleForward& rect,
                                                const levels::RectangleForward& upper);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> backward(const torch::Tensor& dout, const torch::Tensor& q,
                                                                 const torch::Tensor& k, const torch::Tensor& v,
                                                                 const torch::Tensor& out, const torch::Tensor& lse,
                                                                 std::int64_t window, std::int64_t block,
                                                                 const levels::DiagonalBackward& diag,
                                                                 const levels::RectangleBackward& rect,
                                                                 const levels::RectangleBackward& upper);
}  // namespace windowed

// out [T, Hq, D], differentiable in q, k and v through the functions above (autograd), for the
// selftest: a causal row (window 0) or a windowed one; throws naming cuDNN's failure when the
// graphs cannot be built (never falls back).
torch::Tensor softcap_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       double scale, double softcap, std::int64_t window = 0);

}  // namespace odyssey::kernels
