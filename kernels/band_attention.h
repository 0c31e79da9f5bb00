// Band attention: exact attention over one padding-free row where query i sees keys
// first_key[i]..i (causal, packed samples and a sliding window in one rule), with an optional
// soft-cap of the scores, x = cap * tanh(s * scale / cap) (Gemma-2), fused in the manner of
// FlashAttention-2 (band_attention.cu, docs/kernels.md): nothing of size T x T is made. Flash
// attention as LibTorch builds it has no soft-capping; this is what the tiles of
// model/tiled_attention.h run on CUDA 16-bit tensors with head dim 64, 128 or 256.
//
// q [T, Hq, D], k and v [T, Hkv, D] (Hq a multiple of Hkv, query head h reading KV head
// h / (Hq / Hkv); strided views with a contiguous last dimension are fine); first_key [T] int64
// on their device, non-decreasing, first_key[i] <= i.
#pragma once

#include <torch/torch.h>

#include <tuple>
#include <utility>

namespace odyssey::kernels {

// Whether the kernels take these tensors (CUDA build, CUDA bf16/fp16, D 64/128/256) and the
// switch below is on; when not, callers compute the band their own way.
bool band_attention_supported(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
// Whether the kernels take them, whatever the switch (what forward and backward below need).
bool band_kernels_take(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// On by default (its selftest rows passed on an H100, 2026-12-06); off makes
// band_attention_supported false, and model/tiled_attention.h runs its GEMM tiles alone
// (odyssey-bench --band-attention on|off measures the difference).
void set_band_attention(bool on);
bool band_attention_enabled();

// How the kernels compute the soft-cap's tanh: true (the default), the hardware's tanh.approx.f32
// (relative error about 2^-11, what FlashAttention-2's soft-capping uses; transformers' eager
// Gemma-2 rounds the scores and the tanh to bf16, 2^-8); false, tanhf and a true division. Both
// pass the selftest's bounds; approx made Gemma-2-9B LoRA 4% faster at 16K and 32K on an H100
// (docs/benchmarks.md, 2026-12-06 night). ODYSSEY_BAND_TANH=exact starts the process with false.
// Read at each call below unless given.
void set_band_fast_tanh(bool on);
bool band_fast_tanh();

// {out [T, Hq, D] in q's dtype, lse [Hq, T] fp32 (natural log)}. Needs band_kernels_take.
std::pair<torch::Tensor, torch::Tensor> band_attention_forward(const torch::Tensor& q, const torch::Tensor& k,
                                                               const torch::Tensor& v, const torch::Tensor& first_key,
                                                               double scale, double softcap,
                                                               bool fast_tanh = band_fast_tanh());

// {dq, dk, dv} in the inputs' dtype from dout [T, Hq, D], the forward's out and lse ([Hq, T] or
// any shape of Hq * T values in that order).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> band_attention_backward(
    const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, const torch::Tensor& first_key, double scale, double softcap,
    bool fast_tanh = band_fast_tanh());

// out, differentiable in q, k and v through the two above (autograd), and lse (not
// differentiable), where the kernels take the tensors (band_kernels_take, whatever the switch:
// the selftest's fused path); the reference elsewhere. Backward computes the tanh as forward did.
std::pair<torch::Tensor, torch::Tensor> band_attention(const torch::Tensor& q, const torch::Tensor& k,
                                                       const torch::Tensor& v, const torch::Tensor& first_key,
                                                       double scale, double softcap, bool fast_tanh = band_fast_tanh());

// The reference: the dense formula in ATen ops in q's dtype (float64 for exact runs),
// differentiable through autograd; T x T scores per head, so for test lengths only.
std::pair<torch::Tensor, torch::Tensor> band_attention_reference(const torch::Tensor& q, const torch::Tensor& k,
                                                                 const torch::Tensor& v, const torch::Tensor& first_key,
                                                                 double scale, double softcap);

}  // namespace odyssey::kernels
