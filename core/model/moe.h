// What the mixture-of-experts layers (decoder.h, MoeImpl; docs/moe.md) record for
// transformers' load-balancing loss (load_balancing_loss_func in modeling_qwen3_moe.py,
// 5.17), and how its gradient reaches the routers.
//
// transformers sums over the MoE layers before it multiplies:
//
//   aux = E · Σ_e (C_e / R) · (P_e / R)
//   C_e = Σ_layers Σ_rows w_r · [e among the row's top-k],  P_e = Σ_layers Σ_rows w_r · p_re,
//   R = (MoE layers) · Σ_rows w_r,   w_r = 1 for a token, 0 for padding (no mask: all 1)
//
// so one layer's gradient dAux/dp_re = E · C_e · w_r / R² needs every layer's counts C. Each
// layer therefore records its counts and probability sums here in forward, and its router
// probabilities pass through an identity whose backward adds grad_scale · dAux/dp: by the
// time backward reaches a layer, forward has finished and C is complete. This holds with
// activation checkpointing (the recomputation records the same counts again) and lets the
// caller decide the loss's scale (grad_scale) after forward. No LibTorch beyond tensors.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace odyssey::model {

struct RouterStats : torch::CustomClassHolder {
  std::int64_t num_experts = 0, top_k = 0;
  torch::Tensor row_weight;  // [N] fp32 (1 token, 0 padding) of the flattened rows, or undefined: all 1
  // d(loss)/d(aux): what backward multiplies dAux/dp by; 0: the aux loss is not trained.
  double grad_scale = 0.0;
  // Under sequence parallelism a row's tokens are spread over ranks: this sums each layer's
  // counts, probability sums and row weight over them (in place, [2E + 1] fp32) so that every
  // rank's statistic, loss and dAux/dp are those of the whole row. Unset: this rank's rows are
  // the row.
  std::function<void(torch::Tensor&)> sum_over_row;
  int row_ranks = 1;  // the ranks sum_over_row sums over

  // A MoE layer's forward: its top-k choices [N, k] and probabilities [N, E] (fp32).
  void record(std::int64_t layer, const torch::Tensor& top_index, const torch::Tensor& probs);
  // The load-balancing loss of the last forward (a detached fp32 scalar; 0 before any).
  torch::Tensor aux_loss() const;
  // dAux/dp for one layer's probabilities [N, E] (backward; grad_scale applied).
  torch::Tensor probs_grad(const torch::Tensor& like) const;
  bool empty() const { return counts_.empty(); }

 private:
  mutable std::mutex mutex_;
  std::map<std::int64_t, torch::Tensor> counts_, prob_sums_;  // per layer, [E] fp32
  // Σ of counts_ kept as they are recorded (whole numbers in fp32: exact), so each layer's
  // backward reads C without summing every layer again.
  torch::Tensor count_total_;
  double rows_ = 0.0;  // Σ w_r of one layer
};

// The ranks that split a MoE model's experts (expert parallelism, docs/moe.md), as the layers
// see them; dist/expert_parallel.h implements it over a process group. Rank j holds experts
// j·E/size .. (j + 1)·E/size - 1.
class ExpertGroup {
 public:
  virtual ~ExpertGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // counts int64 [size, n] on the host, row j for rank j: returns [size, n], row j from rank j.
  virtual torch::Tensor exchange_counts(const torch::Tensor& counts) = 0;
  // Differentiable: the first send[0] rows of `rows` go to rank 0, the next send[1] to rank 1,
  // ...; returns the recv[j] rows from each rank j in rank order. Backward sends the gradient
  // back the same way reversed.
  virtual torch::Tensor exchange_rows(const torch::Tensor& rows, const std::vector<std::int64_t>& send,
                                      const std::vector<std::int64_t>& recv) = 0;
  // Every rank's `share` [n, ...] concatenated in rank order: [size · n, ...] (not differentiable).
  virtual torch::Tensor gather(const torch::Tensor& share) = 0;
};

// probs unchanged; in backward, its gradient plus stats->probs_grad(). Recording happens here
// too (counts from top_index).
torch::Tensor route_through_stats(const torch::Tensor& probs, const torch::Tensor& top_index, std::int64_t layer,
                                  const c10::intrusive_ptr<RouterStats>& stats);

}  // namespace odyssey::model
