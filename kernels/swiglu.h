// SwiGLU, forward and backward (docs/kernels.md): y = silu(gate) * up, as HF's MLP computes
// it (`act_fn(gate_proj(x)) * up_proj(x)`: silu rounded to the dtype, then the product).
// The backward keeps gate and up only (the reference's autograd also keeps silu(gate)).
#pragma once

#include <torch/torch.h>

namespace odyssey::kernels {

// gate, up: same shape and dtype (bf16, f16 or f32); any strides whose last dimension is
// contiguous (e.g. the two halves of one [T, 2I] projection). Differentiable in both.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// The reference: at::silu(gate) * up, differentiated by autograd.
torch::Tensor swiglu_reference(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace odyssey::kernels
