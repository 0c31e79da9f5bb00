// The reference of the fused linear cross-entropy (kernels/linear_ce.h): what
// core/train/batch.cpp computed before FLCE, in one piece — the full [T, V] logits in the
// activations' dtype, upcast to fp32, cross_entropy(reduction = sum), autograd for the
// gradients. float64 inputs stay float64 (the logits are upcast to at least fp32, never
// down), so the tests can use the reference in float64 as their oracle.
#include "kernels/linear_ce.h"

namespace odyssey::kernels {

torch::Tensor linear_cross_entropy_reference(const torch::Tensor& hidden, const torch::Tensor& weight,
                                             const torch::Tensor& targets, std::int64_t ignore_index) {
  torch::Tensor logits = at::linear(hidden, weight);
  if (logits.scalar_type() != torch::kFloat64) logits = logits.to(torch::kFloat32);
  return torch::nn::functional::cross_entropy(
      logits, targets,
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(ignore_index).reduction(torch::kSum));
}

}  // namespace odyssey::kernels
