// Internal to kernels/: how an autograd Function takes a LinearWeights (linear.h) apart.
// The Function's inputs are the weight, then the bias, lora_a and lora_b as optionals
// (absent ones get no autograd edge), then the LoRA scaling, then the 4-bit weight (null for a
// 16-bit base; a 4-bit base passes an empty placeholder as its weight, so the edges keep their
// places, and the quantized weight travels in the context as a capsule, never saved as a
// tensor), then the adapter's dropout draw (null: none; a capsule in the context too); these
// helpers rebuild the projection in backward and say which of its gradients are wanted.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <optional>
#include <string>

#include "kernels/linear.h"

namespace odyssey::kernels::detail {

inline std::optional<torch::Tensor> opt(const torch::Tensor& t) {
  return t.defined() ? std::optional<torch::Tensor>(t) : std::nullopt;
}

// The tensor a Function takes as the projection's weight: the weight, or for a 4-bit base an
// empty placeholder on the 4-bit weight's device (a frozen input: no gradient is asked for).
inline torch::Tensor weight_arg(const LinearWeights& w) {
  if (!w.quant) return w.weight;
  return torch::empty({0}, torch::TensorOptions().dtype(torch::kFloat32).device(w.quant->device()));
}

inline LinearWeights weights_of(const torch::Tensor& weight, const std::optional<torch::Tensor>& bias,
                                const std::optional<torch::Tensor>& lora_a, const std::optional<torch::Tensor>& lora_b,
                                double scaling, const c10::intrusive_ptr<Quant4Weight>& quant,
                                const c10::intrusive_ptr<LoraDropout>& dropout) {
  LinearWeights w;
  if (quant) w.quant = quant;
  else w.weight = weight;
  w.bias = bias.value_or(torch::Tensor());
  w.lora_a = lora_a.value_or(torch::Tensor());
  w.lora_b = lora_b.value_or(torch::Tensor());
  w.lora_scaling = scaling;
  if (w.lora_a.defined()) w.dropout = dropout;
  return w;
}

// What backward needs besides the saved weight and adapters: the scaling and whether there was
// a bias (its gradient is the sum of dy; the bias itself is not needed). `key` tells apart the
// projections of a Function that has several.
inline void remember_linear(torch::autograd::AutogradContext* ctx, const LinearWeights& w,
                            const std::string& key = "") {
  ctx->saved_data[key + "lora_scaling"] = w.lora_scaling;
  ctx->saved_data[key + "has_bias"] = w.bias.defined();
  if (w.quant) ctx->saved_data[key + "quant"] = c10::IValue::make_capsule(w.quant);
  if (w.dropout) ctx->saved_data[key + "dropout"] = c10::IValue::make_capsule(w.dropout);
}

inline LinearWeights saved_weights(torch::autograd::AutogradContext* ctx, const torch::Tensor& weight,
                                   const torch::Tensor& lora_a, const torch::Tensor& lora_b,
                                   const std::string& key = "") {
  LinearWeights w;
  if (const auto it = ctx->saved_data.find(key + "quant"); it != ctx->saved_data.end())
    w.quant = c10::static_intrusive_pointer_cast<Quant4Weight>(it->second.toCapsule());
  else w.weight = weight;
  w.lora_a = lora_a;
  w.lora_b = lora_b;
  w.lora_scaling = ctx->saved_data[key + "lora_scaling"].toDouble();
  if (const auto it = ctx->saved_data.find(key + "dropout"); it != ctx->saved_data.end())
    w.dropout = c10::static_intrusive_pointer_cast<LoraDropout>(it->second.toCapsule());
  return w;
}

struct LinearWants {
  bool weight = false, bias = false, lora_a = false, lora_b = false;
};

// `first_edge`: the weight's position among the Function's inputs that have edges.
inline LinearWants linear_wants(torch::autograd::AutogradContext* ctx, std::size_t first_edge, const LinearWeights& w,
                                const std::string& key = "") {
  const bool has_bias = ctx->saved_data[key + "has_bias"].toBool();
  const bool lora = w.lora_a.defined();
  const std::size_t a_edge = first_edge + (has_bias ? 2 : 1);
  LinearWants want;
  want.weight = ctx->needs_input_grad(first_edge);
  want.bias = has_bias && ctx->needs_input_grad(first_edge + 1);
  want.lora_a = lora && ctx->needs_input_grad(a_edge);
  want.lora_b = lora && ctx->needs_input_grad(a_edge + 1);
  return want;
}

// linear_weight_grads for the gradients `want` asks for.
inline LinearGrads weight_grads(const LinearBackward& b, const torch::Tensor& x, const torch::Tensor& lora_out,
                                const LinearWeights& w, const LinearWants& want) {
  return linear_weight_grads(b, x, lora_out, w, want.weight, want.bias, want.lora_a, want.lora_b);
}

// How many of the Function's edges a projection takes: the weight, the bias, the LoRA pair.
inline std::size_t linear_edges(torch::autograd::AutogradContext* ctx, const LinearWeights& w,
                                const std::string& key = "") {
  return 1 + (ctx->saved_data[key + "has_bias"].toBool() ? 1 : 0) + (w.lora_a.defined() ? 2 : 0);
}

}  // namespace odyssey::kernels::detail
