// Rotary position embedding applied in place to Q and K (docs/kernels.md).
//
// Per head, with the two halves x1, x2 of its D features (HF's rotate_half convention):
//   out1 = x1 * cos - x2 * sin,  out2 = x2 * cos + x1 * sin
// each product and the sum rounded to the tensors' dtype as HF's
// `(q * cos) + (rotate_half(q) * sin)` does. cos and sin are per token ([T, D], the rows
// rope_cos_sin gives for a packed row's restarting position ids), so packed sequences
// get their own positions. The backward is the inverse rotation, also in place on the
// incoming gradient: nothing is saved but cos and sin.
#pragma once

#include <torch/torch.h>

#include <utility>

namespace odyssey::kernels {

// q [T, Hq, D], k [T, Hk, D] (any strides with a contiguous last dimension, e.g. views
// of the projection outputs), cos/sin [T, D] in q's dtype. Rotates q and k in place and
// returns them, marked dirty for autograd: the same tensors, or, for a view that reshapes a
// whole tensor (a projection's [1, T, H·D] output seen as [T, H, D]), a new view of that
// tensor, which is the one marked (autograd then keeps no view bookkeeping for it).
// Differentiable in q and k.
std::pair<torch::Tensor, torch::Tensor> apply_rope_(torch::Tensor q, torch::Tensor k, const torch::Tensor& cos,
                                                    const torch::Tensor& sin);

// The reference: HF's apply_rotary_pos_emb on [T, H, D] (out of place, autograd).
std::pair<torch::Tensor, torch::Tensor> apply_rope_reference(const torch::Tensor& q, const torch::Tensor& k,
                                                             const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace odyssey::kernels
