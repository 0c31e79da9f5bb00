// A projection as the engine's fused path computes it (core/model/decoder.cpp, LinearImpl with
// fused kernels): y = x W^T (+ b) (+ scaling * B(A(x))), the LoRA pair (fp32 master weights)
// cast to x's dtype for its two products, autocast's rule. The fused ops that consume or
// produce an activation the engine does not keep for backward (swiglu_down in swiglu.h,
// rms_norm_linear in rmsnorm.h) compute their projection with these helpers, in two halves
// in backward: the input's gradient first (it needs only the weights), then the weights'
// gradients once the input has been recomputed.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "kernels/quant4.h"

namespace odyssey::kernels {

// LoRA dropout on a fused projection's adapter input (PEFT's nn.Dropout before lora_A: each
// element kept with probability 1 - p and then scaled by 1 / (1 - p)), without keeping the mask
// or the dropped copy for backward: each element's bit is a function of `seed` and its position
// in the [n, in] input (Philox4x32-10, kernels/lora_dropout_bits.h), computed where the element
// is read (one pass: the CUDA kernel lora_dropout.cu, the same bits in a CPU loop), in forward and
// again in backward. One draw per forward call of a projection; a checkpointed layer's re-run
// draws the same seeds (the default CPU generator's state is restored for it,
// model/activation_checkpoint.h).
//
// A row's position is its index in the input unless `rows` says otherwise: under sequence
// parallelism a rank's projections read its shard of the packed row, and `rows` holds each
// shard token's index in the whole row (PackedRow::token_rows), so a shard draws exactly the
// bits one process over the whole row draws for those tokens (the same seeds: every rank takes
// the same draws from the same seed). Used where its length is the input's row count; an
// input of another length (an MLP tile) takes its own row indices.
struct LoraDropout : torch::CustomClassHolder {
  double p = 0.0;
  std::uint64_t seed = 0;
  torch::Tensor rows;  // int64 [n] on the input's device, or undefined
  // A new draw: p in (0, 1), the seed the next 64 bits of the default CPU generator (so
  // torch::manual_seed and the trainer's saved RNG state reproduce it), `rows` the thread's
  // LoraDropoutRows::current().
  static c10::intrusive_ptr<LoraDropout> draw(double p);
};

// The token rows the projections of this thread's forward read (LoraDropout::rows) for the
// scope of an instance: train::row_loss_sum sets a shard's, and a checkpointed segment's
// re-run restores the ones its forward saw (model/activation_checkpoint.cpp).
class LoraDropoutRows {
 public:
  explicit LoraDropoutRows(torch::Tensor rows);
  ~LoraDropoutRows();
  LoraDropoutRows(const LoraDropoutRows&) = delete;
  LoraDropoutRows& operator=(const LoraDropoutRows&) = delete;
  static torch::Tensor current();

 private:
  torch::Tensor previous_;
};

// Rows of the adapter input per block the fused projections mask at a time: 2^26 elements at
// most (128 MiB in bf16), one block buffer while a forward or backward pass runs (the masked
// input, or the adapter's input gradient before it is masked into the projection's).
std::int64_t lora_dropout_block_rows(std::int64_t in_features);

// The mask of `d` over an [n, in] input as the fused projections apply it: 1 where an element is
// kept, 0 where dropped, in `options`' dtype and device (the same bits on every device and in
// every dtype). For tests and the selftest; the projections never materialize it.
torch::Tensor lora_dropout_mask(const LoraDropout& d, std::int64_t n, std::int64_t in,
                                const torch::TensorOptions& options);

// weight [out, in], or, for a 4-bit base (QLoRA), weight undefined and `quant` holding it
// (dequantized to the input's dtype for each product, one projection at a time, and never
// given a gradient); bias [out] or undefined; lora_a [r, in] and lora_b [out, r], both or
// neither, any float dtype (used in the input's dtype).
struct LinearWeights {
  torch::Tensor weight, bias, lora_a, lora_b;
  c10::intrusive_ptr<Quant4Weight> quant;
  double lora_scaling = 1.0;
  // The adapter's dropout for this call (null: none, e.g. p 0 or not training): lora_a reads
  // its input masked by it, in forward and in both halves of backward.
  c10::intrusive_ptr<LoraDropout> dropout;
  std::int64_t out_features() const { return weight.defined() ? weight.size(0) : (quant ? quant->shape[0] : 0); }
  std::int64_t in_features() const { return weight.defined() ? weight.size(1) : (quant ? quant->shape[1] : 0); }
  // The base weight in `dtype`: `weight` cast, or `quant` dequantized.
  torch::Tensor dense(torch::ScalarType dtype) const;
};

namespace detail {

// Checks the shapes above for an input of `in` features; `what` names the caller.
void check_linear(const LinearWeights& w, std::int64_t in, const char* what);

// y for x [..., in]; *lora_out = x A^T (in x's dtype, [N, r]) when there is an adapter (with
// w.dropout, drop(x) A^T). Plain ATen ops, so autograd may record it (without dropout: the
// dropped blocks are temporaries autograd must not keep; LinearImpl takes linear() then).
torch::Tensor linear_forward(const torch::Tensor& x, const LinearWeights& w, torch::Tensor* lora_out);

// Backward of linear_forward. dy: [N, out] (flattened). input_grad = dy W (+ (dy scaling B) A,
// masked and scaled by w.dropout where there is one), [N, in];
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
// stay undefined). Gradients of the adapters come back in the adapters' dtype. With w.dropout,
// x is the undropped input (the mask is drawn again here).
struct LinearGrads {
  torch::Tensor weight, bias, lora_a, lora_b;
};
LinearGrads linear_weight_grads(const LinearBackward& b, const torch::Tensor& x, const torch::Tensor& lora_out,
                                const LinearWeights& w, bool want_weight, bool want_bias, bool want_a, bool want_b);

}  // namespace detail

// linear_forward as an autograd Function, keeping x, the weights and the r-wide lora_a output
// (never a dropped copy or a mask) and running backward through linear_input_grad and
// linear_weight_grads. Differentiable in x and every projection tensor. The fused path's
// projection of an input no fused op produces (the o_proj) when its adapter has dropout.
torch::Tensor linear(const torch::Tensor& x, const LinearWeights& w);

}  // namespace odyssey::kernels
