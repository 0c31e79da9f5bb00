// The token permutation of a mixture-of-experts layer (docs/moe.md): the rows leave the
// experts sorted by expert and come back to their tokens, weighted by the router and summed
// over the k choices, in one pass.
//
//   y[n] = Σ_c rows[index[n·k + c]] · weights[n, c]        c = 0 … k − 1
//
// rows [M, h] (M = N·k, the experts' outputs in sorted order), index int64 [N·k] (pair p =
// token p / k's (p % k)-th choice sits at row index[p]), order int64 [M] its inverse
// (order[index[p]] = p: which pair row j holds), weights [N, k] (fp32 or rows' dtype), all
// on one device. The sum runs in fp32 and is rounded once to rows' dtype.
//
// Differentiable in rows and weights. Backward, one pass over the rows in sorted order:
// d rows[j] = dy[n] · weights[p] and d weights[p] = Σ_h dy[n, h] · rows[j, h] (fp32), for
// p = order[j], n = p / k. It keeps rows, which the unfused formula (index_select, a broadcast
// product, a sum) keeps too, as its product's input; that formula writes the k-fold product
// and its gradient, [M, h] fp32 when the weights are fp32, and the gathered copy besides.
//
// CUDA tensors run moe_rows.cu's kernels (bf16, f16, fp32); others the same math in ATen
// ops. combine_rows_reference is the unfused formula differentiated by autograd, the oracle.
#pragma once

#include <torch/torch.h>

namespace odyssey::kernels {

torch::Tensor combine_rows(const torch::Tensor& rows, const torch::Tensor& index, const torch::Tensor& order,
                           const torch::Tensor& weights);

// y[n] = Σ_c rows[index[n·copies + c]] with no autograd and no weights: the backward of a
// gather that copied every token `copies` times (the rows' way into the experts), in one pass
// where index_select then a sum over the copies would write the k-fold gather first.
torch::Tensor sum_rows(const torch::Tensor& rows, const torch::Tensor& index, std::int64_t copies);

torch::Tensor combine_rows_reference(const torch::Tensor& rows, const torch::Tensor& index,
                                     const torch::Tensor& weights);

}  // namespace odyssey::kernels
