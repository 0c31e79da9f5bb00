// Attention of one new query per row over a KV cache, for generation's decode steps
// (docs/kernels.md, docs/inference.md). CUDA tensors of a head_dim of 64, 128 or 256 with at
// most 16 query heads per KV head run decode_attention.cu (split along the cache, then
// merged); other tensors the reference below in ATen ops (the same formula).
//
// q [B, Hq, D], k and v [B, Hkv, L, D] (the cache; any strides with a contiguous last
// dimension), keep bool [B or 1, L] (the slots each row may attend; at least one per row):
//   out[b, h] = sum_j softmax_j(scale * q[b, h] . k[b, h / G, j]) v[b, h / G, j] over kept j,
// G = Hq / Hkv, computed in fp32 and rounded once to q's dtype; out [B, Hq, D] contiguous.
// Forward only (generation runs without autograd).
#pragma once

#include <torch/torch.h>

namespace odyssey::kernels {

torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& keep, double scale);

// Whether decode_attention runs its CUDA kernel for these inputs (else the reference).
bool decode_attention_on_kernel(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& keep);

// The reference: scores, masked softmax and the product in ATen ops, in fp32 (float64 for
// float64 inputs), rounded to q's dtype.
torch::Tensor decode_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const torch::Tensor& keep, double scale);

}  // namespace odyssey::kernels
