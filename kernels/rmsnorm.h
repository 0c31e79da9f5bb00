// Fused residual add + RMSNorm, forward and backward (docs/kernels.md).
//
// Computes what a Hugging Face decoder layer computes between its blocks, in one pass:
//   sum = x + residual                      (rounded to x's dtype, as HF's `h = x + attn(...)`)
//   y   = weight * to_dtype(sum_f32 * rsqrt(mean(sum_f32^2) + eps))
// (HF's *RMSNorm: statistics in fp32, the normalized value cast back to the input dtype,
// then multiplied by the weight in that dtype.) The backward keeps only `sum` and one fp32
// rstd per row instead of the reference's fp32 intermediates.
#pragma once

#include <torch/torch.h>

#include <mutex>
#include <utility>

#include "kernels/linear.h"

namespace odyssey::kernels {

// x, residual: [..., H] of one dtype (bf16, f16 or f32), residual may be undefined (then
// sum is x itself); weight [H] of x's dtype. Returns {y, sum}. Differentiable in x,
// residual and weight (weight's gradient only when it requires grad). CUDA tensors run
// the CUDA kernel, others the same math in ATen ops.
std::pair<torch::Tensor, torch::Tensor> add_rms_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                                     const torch::Tensor& weight, double eps);
inline torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return add_rms_norm(x, {}, weight, eps).first;
}

// One recomputation shared by the projections of one norm output (q, k, v; gate, up): give
// each of their rms_norm_linear calls the same NormShare. The first backward that needs the
// output computes it, the others take it, and it is released once every projection's backward
// has run (or with the graph). Without one, each projection recomputes the output itself.
//
// The projections' gradients of the norm output are summed here too, each backward's GEMM
// adding to the previous one's (beta = 1) instead of autograd adding whole tensors: the
// projection whose backward completes the set returns the sum, the others no gradient for
// it. Every projection that shares a NormShare must therefore take part in each backward
// through them (as q/k/v and gate/up do: all reach the loss).
struct NormShare : torch::CustomClassHolder {
  std::mutex mutex;
  torch::Tensor output;      // the recomputed norm output, while some projection's backward is pending
  int pending = 0;           // projections whose backward has not run yet
  int projections = 0;       // projections made with this share (forward calls)
  int summed = 0;            // of those, how many have added their gradient in the current backward
  torch::Tensor input_grad;  // the sum so far of their gradients of the norm output
};

// A projection (linear.h) of n = rms_norm(s, norm_weight, eps), which the caller has already
// computed (n must be exactly that, e.g. the output of add_rms_norm whose sum is s), without
// keeping n for backward: the weights' gradients recompute it from s, which the norm keeps for
// its own backward anyway (once per `share`, see above). Saves b·H bytes per token per norm
// against a linear layer, which keeps its input. Differentiable in n and the projection's
// tensors (s and norm_weight get no gradient here: the norm's own backward gives theirs).
torch::Tensor rms_norm_linear(const torch::Tensor& n, const torch::Tensor& s, const torch::Tensor& norm_weight,
                              double eps, const LinearWeights& w,
                              const c10::intrusive_ptr<NormShare>& share = c10::intrusive_ptr<NormShare>());

// The reference, and the formula's one home: HF's residual add and RMSNorm in plain ATen ops,
// differentiated by autograd. The statistic is taken in fp32 (float64 for a float64 input: the
// selftest's exact run), y = weight * (h * rms_inverse(h)) rounded to the input dtype, or with
// `plus_one` (Gemma) (h * (1 + weight)) rounded once at the end, or with `weight_fp32` (OLMo)
// (weight * h) in fp32 rounded once at the end. Returns {y, x + residual}.
std::pair<torch::Tensor, torch::Tensor> add_rms_norm_reference(const torch::Tensor& x, const torch::Tensor& residual,
                                                               const torch::Tensor& weight, double eps,
                                                               bool plus_one = false, bool weight_fp32 = false);
// 1 / sqrt(mean(h²) + eps) over the last dimension, kept as a size-1 dimension: the norm's
// statistic (the CPU path of add_rms_norm saves it for its backward).
torch::Tensor rms_inverse(const torch::Tensor& h, double eps);

}  // namespace odyssey::kernels
