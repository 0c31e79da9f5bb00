// Grouped GEMM for mixture-of-experts layers (docs/moe.md): the tokens routed to each expert
// are consecutive rows of one matrix, and every expert's product runs in one launch.
//
//   y[r] = x[r] · w[e]ᵀ   for the rows r of group e, ends[e - 1] <= r < ends[e] (ends[-1] = 0)
//
// x [N, in], w [E, out, in] (an nn.Linear weight per expert, stacked), ends int32 [E] on x's
// device, non-decreasing, ends[E - 1] = N; empty groups are allowed. Differentiable in x and w.
//
// ATen's grouped GEMM (at::_grouped_mm: CUTLASS on CUDA sm90, bf16; its CPU kernel for fp32
// and bf16) runs forward and backward (dx one grouped GEMM, dw one grouped GEMM over the token
// dimension) when rows are 16-byte aligned (in and out multiples of 8 in bf16, of 4 in fp32),
// with no host synchronization; x is kept for backward only when w trains. Everything else runs the reference: a loop
// over the experts, one at::linear each (reads ends on the host). In fp32 on the CPU the two agree bitwise
// (tests/kernels/tst_grouped_gemm.cpp); on CUDA within bf16 rounding (selftest).
#pragma once

#include <torch/torch.h>

#include "kernels/quant4.h"

namespace odyssey::kernels {

torch::Tensor grouped_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& ends);

// The per-expert loop, differentiated by autograd (the oracle of the grouped path).
torch::Tensor grouped_linear_reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& ends);

// The same product for 4-bit stacked expert weights (a QLoRA base, docs/moe.md): w is one
// Quant4Weight of shape [E, out, in], dequantized to x's dtype for the product and again for
// the input's gradient in backward, so nothing of w's size is kept in between (as
// quant4_linear does for a projection). Frozen: no weight gradient. The product is
// grouped_linear's on the dequantized stack (bitwise so on the CPU in fp32, tst_grouped_gemm).
torch::Tensor grouped_linear_quant4(const torch::Tensor& x, const c10::intrusive_ptr<Quant4Weight>& w,
                                    const torch::Tensor& ends);

// Whether grouped_linear takes the grouped-GEMM path for these operands.
bool grouped_gemm_applies(const torch::Tensor& x, const torch::Tensor& w);

}  // namespace odyssey::kernels
