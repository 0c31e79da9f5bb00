// SwiGLU, forward and backward (docs/kernels.md): y = silu(gate) * up, as HF's MLP computes
// it (`act_fn(gate_proj(x)) * up_proj(x)`: silu rounded to the dtype, then the product).
// The backward keeps gate and up only (the reference's autograd also keeps silu(gate)).
#pragma once

#include <torch/torch.h>

#include "kernels/linear.h"
#include "kernels/offload.h"

namespace odyssey::kernels {

// gate, up: same shape and dtype (bf16, f16 or f32); any strides whose last dimension is
// contiguous (e.g. the two halves of one [T, 2I] projection). Differentiable in both.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// swiglu(gate_up[..., :I], gate_up[..., I:]) for one [..., 2I] tensor (a fused gate_up
// projection's output: Phi-3's MLP, the stacked experts of a MoE layer), differentiable in
// gate_up with its gradient written as one [..., 2I] tensor; swiglu on the two views would
// leave autograd to assemble it (a zero tensor and a copy of each half).
torch::Tensor swiglu_packed(const torch::Tensor& gate_up);

// down(swiglu(gate, up)), down a projection of linear.h (weight [out, I], optional bias and
// LoRA pair), without keeping the activation for backward: backward keeps gate and
// up (and lora_a's r-wide output), and the SwiGLU backward recomputes the activation for the
// weight gradients in the pass that computes d gate and d up (into the activation gradient's
// buffer). Saves I elements per token against swiglu() followed by a linear layer, which
// keeps the activation as the linear layer's input. Differentiable in every tensor.
// With `offload`, gate and up wait in that chain (offload.h; pushed gate first, then up) from
// forward to backward instead of on their device: the caller's last references to them then
// free 2·I elements per token once the copies have read them, and whoever drives backward
// prefetches the two entries before this op's backward takes them.
torch::Tensor swiglu_down(const torch::Tensor& gate, const torch::Tensor& up, const LinearWeights& down,
                          const std::shared_ptr<OffloadChain>& offload = nullptr);

// The whole MLP of a norm's output, down(swiglu(gate(n), up(n))) for n = rms_norm(s,
// norm_weight, eps) which the caller computed (n must be exactly that), keeping for backward
// only what the norm keeps anyway (s), the weights and the adapters' r-wide outputs: backward
// recomputes n, gate and up (two GEMMs of the forward's shape) before swiglu_down's backward.
// Saves the 2·I elements per token that swiglu_down keeps (gate, up), at the cost of those two
// GEMMs; the memory planner uses it on as many layers as a budget needs, a cheaper way to
// memory than recomputing whole layers. Differentiable in n and every projection tensor (s and
// norm_weight get no gradient here: the norm's own backward gives theirs).
// skip_output: forward runs no GEMM at all and returns zeros of the output's shape, keeping
// only s and the weights; backward is the same (it recomputes gate and up anyway, and then the
// adapters' r-wide outputs, bit for bit the forward's) and its gradients are identical. For a
// re-run whose output nobody reads, only back-propagates through: a checkpointed layer's
// recomputation in backward (core/model/activation_checkpoint.h), where this saves the down
// projection's GEMM (and, on a 4-bit base, the three dequantizations) of every such layer.
// parked: gate and up of this n as the checkpoint's forward computed them, parked in a chain
// (offload.h, ParkedPair): backward takes them from there instead of recomputing the two GEMMs
// (whoever drives backward prefetches them first). The gradients are those of the recomputed
// gate and up, which are the same bits.
torch::Tensor rms_norm_mlp(const torch::Tensor& n, const torch::Tensor& s, const torch::Tensor& norm_weight, double eps,
                           const LinearWeights& gate, const LinearWeights& up, const LinearWeights& down,
                           bool skip_output = false, const c10::intrusive_ptr<ParkedPair>& parked = {});

// The reference: at::silu(gate) * up, differentiated by autograd.
torch::Tensor swiglu_reference(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace odyssey::kernels
