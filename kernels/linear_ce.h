// Fused linear cross-entropy (docs/kernels.md): the summed next-token loss of
// logits = hidden · weightᵀ without ever materialising the [T, V] logits.
//
// Tokens are processed `chunk` rows at a time. Per chunk: logits in the activations' dtype
// (as HF's lm_head gives them), upcast to fp32 for the softmax; the loss of each row
// (logsumexp − logit[target]) and, when gradients are wanted, the logits' gradient
// (softmax − one-hot) written over the chunk's logits in place; then in the same forward
// pass dhidden_chunk = g · weight and, when the weight trains, dweight += gᵀ · hidden_chunk
// (fp32 accumulation). Backward only scales the stored gradients by the incoming scalar:
// the logits are never recomputed. Rows whose target is `ignore_index` add nothing.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace odyssey::kernels {

struct LinearCeOptions {
  std::int64_t chunk_tokens = 0;  // 0: as many rows as make about 2^26 logits
  std::int64_t ignore_index = -100;
  // CUDA only: always the two-pass row kernel (reads each row twice), not the one-read
  // cluster kernel where that applies; for the selftest and benchmarks that compare them.
  bool two_pass_rows = false;
};

// hidden [T, H] (bf16, f16 or f32), weight [V, H] of the same dtype, targets int64 [T].
// Returns the fp32 scalar Σ over counted rows of −log softmax(logits)[target].
// Differentiable in hidden and (when it requires grad) weight. CUDA tensors run the CUDA
// kernel for the per-row softmax/loss/gradient step; others the same step in ATen ops.
torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                   const torch::Tensor& targets, const LinearCeOptions& options = {});

// The reference: full logits, upcast to fp32, cross_entropy(reduction = sum), autograd.
torch::Tensor linear_cross_entropy_reference(const torch::Tensor& hidden, const torch::Tensor& weight,
                                             const torch::Tensor& targets, std::int64_t ignore_index = -100);

}  // namespace odyssey::kernels
