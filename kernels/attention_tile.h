// The softmax of one tile of tiled exact attention (core/model/tiled_attention.h), forward and
// backward, fused (docs/kernels.md): what lies between the tile's GEMMs. CUDA tensors run
// attention_tile.cu; other tensors the reference below in ATen ops (the same formula).
//
// A tile is R = G * rows rows of raw scores s = q . k (fp32 [R, m], contiguous): row r is query
// row0 + r % rows of head group r / rows, column c is key key0 + c. Query i sees key j when
// first_key[i] <= j <= i (first_key [T] int64: its sample's start, or its window's). With x the
// transformed score, x = cap * tanh(s * scale / cap) (softcap > 0) or s * scale:
//   forward   p = exp(x - lse) where seen, 0 elsewhere (out_dtype), lse = log sum_seen exp(x) (fp32 [R]);
//   backward  p as above and ds = p * (dp - delta) * (1 - tanh^2 when capped) * scale (out_dtype): the
//             gradient of the raw score, from dp = dO . v (fp32 [R, m]) and delta = rowsum(dO * O) (fp32 [R]).
// Every row must see at least one key (a causal row sees itself).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>

namespace odyssey::kernels {

struct AttentionTile {
  torch::Tensor first_key;  // [T] int64, on the scores' device
  std::int64_t row0 = 0, rows = 0, key0 = 0;
  double scale = 1.0, softcap = 0.0;
};

// {p, lse}.
std::pair<torch::Tensor, torch::Tensor> tile_softmax(const torch::Tensor& s, const AttentionTile& t,
                                                     torch::ScalarType out_dtype);
// {p, ds}.
std::pair<torch::Tensor, torch::Tensor> tile_softmax_backward(const torch::Tensor& s, const torch::Tensor& dp,
                                                              const torch::Tensor& lse, const torch::Tensor& delta,
                                                              const AttentionTile& t, torch::ScalarType out_dtype);

// The references: the same formulas in ATen ops, in s's dtype (fp32 or float64).
std::pair<torch::Tensor, torch::Tensor> tile_softmax_reference(const torch::Tensor& s, const AttentionTile& t,
                                                               torch::ScalarType out_dtype);
std::pair<torch::Tensor, torch::Tensor> tile_softmax_backward_reference(const torch::Tensor& s, const torch::Tensor& dp,
                                                                        const torch::Tensor& lse,
                                                                        const torch::Tensor& delta,
                                                                        const AttentionTile& t,
                                                                        torch::ScalarType out_dtype);

// Gemma-2's attention-logit soft-capping, cap · tanh(s / cap), as transformers computes it (op
// for op); with tanh_out, also tanh(s / cap), the backward's chain factor being 1 − tanh². cap <= 0:
// s itself. The one formula of the tiles' reference, the eager path and the reference ring.
torch::Tensor soft_cap(const torch::Tensor& s, double cap, torch::Tensor* tanh_out = nullptr);

}  // namespace odyssey::kernels
