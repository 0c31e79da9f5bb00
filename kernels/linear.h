// A projection as the engine's fused path computes it (core/model/decoder.cpp, LinearImpl with
// fused kernels): y = x W^T (+ b) (+ scaling * B(A(x))), the LoRA pair (fp32 master weights)
// cast to x's dtype for its two products, autocast's rule. The fused ops that consume or
// produce an activation the engine does not keep for backward (swiglu_down in swiglu.h,
// rms_norm_linear in rmsnorm.h) compute their projection with these helpers, in two halves
// in backward: the input's gradient first (it needs only the weights), then the weights'
// gradients once the input has been recomputed.
#pragma once

#include <torch/torch.h>

#include "kernels/quant4.h"

namespace odyssey::kernels {

// weight [out, in], or, for a 4-bit base (QLoRA), weight undefined and `quant` holding it
// (dequantized to the input's dtype for each product, one projection at a time, and never
// given a gradient); bias [out] or undefined; lora_a [r, in] and lora_b [out, r], both or
// neither, any float dtype (used in the input's dtype).
struct LinearWeights {
  torch::Tensor weight, bias, lora_a, lora_b;
  c10::intrusive_ptr<Quant4Weight> quant;
  double lora_scaling = 1.0;
  std::int64_t out_features() const { return weight.defined() ? weight.size(0) : (quant ? quant->shape[0] : 0); }
  std::int64_t in_features() const { return weight.defined() ? weight.size(1) : (quant ? quant->shape[1] : 0); }
  // The base weight in `dtype`: `weight` cast, or `quant` dequantized.
  torch::Tensor dense(torch::ScalarType dtype) const;
};

namespace detail {

// Checks the shapes above for an input of `in` features; `what` names the caller.
void check_linear(const LinearWeights& w, std::int64_t in, const char* what);

// y for x [..., in]; *lora_out = x A^T (in x's dtype, [..., r]) when there is an adapter.
// `lora_x`, when defined (x's shape and dtype), is the adapter's input instead of x: x after
// LoRA dropout (LinearImpl::forward, under autograd). Plain ATen ops, so autograd may record it.
torch::Tensor linear_forward(const torch::Tensor& x, const LinearWeights& w, torch::Tensor* lora_out,
                             const torch::Tensor& lora_x = torch::Tensor());

// Backward of linear_forward. dy: [N, out] (flattened). input_grad = dy W (+ (dy scaling B) A), [N, in];
// with `into` ([N, in], x's dtype) defined, the products are added to it in place (the GEMMs'
// beta = 1, no separate add) and input_grad is `into`.
struct LinearBackward {
  torch::Tensor dy, da;  // dy and the gradient of x A^T (adapter only)
  torch::Tensor input_grad;
};
LinearBackward linear_input_grad(const torch::Tensor& dy, const LinearWeights& w, torch::ScalarType dtype,
                                 const torch::Tensor& into = torch::Tensor());

// The weights' gradients from the first half and the input x [N, in] (flattened) and lora_out
// [N, r] (undefined: computed from x as linear_forward does); only those asked for (the others
// stay undefined). Gradients of the adapters come back in the adapters' dtype.
struct LinearGrads {
  torch::Tensor weight, bias, lora_a, lora_b;
};
LinearGrads linear_weight_grads(const LinearBackward& b, const torch::Tensor& x, const torch::Tensor& lora_out,
                                const LinearWeights& w, bool want_weight, bool want_bias, bool want_a, bool want_b);

}  // namespace detail
}  // namespace odyssey::kernels
