#include "train/batch.h"

#include "kernels/linear.h"
#include "kernels/linear_ce.h"
#include "planner/memory_planner.h"

#include "model/activation_checkpoint.h"

namespace odyssey::train {

std::int64_t PackedRow::target_tokens() const {
  if (targets.defined()) return targets.ne(-100).sum().item<std::int64_t>();
  if (labels.size(1) < 2) return 0;
  return labels.narrow(1, 1, labels.size(1) - 1).ne(-100).sum().item<std::int64_t>();
}

PackedRow PackedRow::to(const torch::Device& device) const {
  PackedRow r = *this;
  r.input_ids = input_ids.to(device);
  r.labels = labels.to(device);
  r.position_ids = position_ids.to(device);
  r.cu_seqlens = cu_seqlens.to(device);
  if (targets.defined()) r.targets = targets.to(device);
  if (token_rows.defined()) r.token_rows = token_rows.to(device);
  return r;
}

namespace {

torch::Tensor row_tensor(const std::vector<std::int32_t>& v) {
  return torch::tensor(torch::ArrayRef<std::int32_t>(v), torch::kInt32).to(torch::kInt64).view({1, -1});
}

std::vector<std::int32_t> boundaries(const torch::Tensor& position_ids) {
  const torch::Tensor p = position_ids.reshape({-1}).to(torch::kCPU, torch::kInt64).contiguous();
  const auto* d = p.data_ptr<std::int64_t>();
  std::vector<std::int32_t> cu;
  for (std::int64_t i = 0; i < p.numel(); ++i)
    if (i == 0 || d[i] == 0) cu.push_back(static_cast<std::int32_t>(i));
  cu.push_back(static_cast<std::int32_t>(p.numel()));
  return cu;
}

PackedRow finish(PackedRow r, std::vector<std::int32_t> cu) {
  std::int32_t longest = 0;
  for (std::size_t i = 1; i < cu.size(); ++i) longest = std::max(longest, cu[i] - cu[i - 1]);
  r.max_seqlen = longest;
  r.samples = static_cast<std::int64_t>(cu.size()) - 1;
  r.cu_seqlens = torch::tensor(torch::ArrayRef<std::int32_t>(cu), torch::kInt32);
  return r;
}

}  // namespace

PackedRow make_packed_row(const std::vector<std::int32_t>& input_ids, const std::vector<std::int32_t>& labels,
                          const std::vector<std::int32_t>& position_ids, std::vector<std::int32_t> cu_seqlens) {
  PackedRow r;
  r.input_ids = row_tensor(input_ids);
  r.labels = row_tensor(labels);
  r.position_ids = row_tensor(position_ids);
  if (cu_seqlens.empty()) cu_seqlens = boundaries(r.position_ids);
  return finish(std::move(r), std::move(cu_seqlens));
}

PackedRow make_packed_row(const torch::Tensor& input_ids, const torch::Tensor& labels,
                          const torch::Tensor& position_ids) {
  PackedRow r;
  r.input_ids = input_ids.to(torch::kInt64).view({1, -1});
  r.labels = labels.to(torch::kInt64).view({1, -1});
  r.position_ids = position_ids.to(torch::kInt64).view({1, -1});
  return finish(std::move(r), boundaries(r.position_ids));
}

torch::Tensor row_loss_sum(model::CausalLM& lm, const PackedRow& row, std::int64_t max_logits_elements) {
  torch::Tensor h;
  {
    // A shard's LoRA dropout draws the whole row's bits for its tokens.
    const kernels::LoraDropoutRows rows(row.token_rows);
    h = lm->hidden_states_packed(row.input_ids, row.position_ids, row.cu_seqlens, row.max_seqlen, row.attention)[0];
  }
  const std::int64_t t = h.size(0);
  const torch::Tensor targets =
      row.targets.defined() ? row.targets[0] : torch::constant_pad_nd(row.labels[0], {0, 1}, -100).narrow(0, 1, t);
  const torch::Tensor w = lm->lm_head_weight();
  const model::LogitTransform transform = lm->logit_transform();
  // The fused loss computes plain lm_head logits: a family that scales or caps them (Granite,
  // Gemma-2) takes the chunked reference loss (model::fused_kernel_gaps names the op).
  if (lm->fused_kernels() && transform.identity()) {  // gradients computed in the forward pass, logits never whole
    // Chunks of the planner's size (2048 rows: 0.6 GB of bf16 logits at a 152K vocabulary),
    // large enough that the three GEMMs per chunk run near the tensor cores' rate.
    kernels::LinearCeOptions o;
    o.chunk_tokens = planner::kFusedLossChunkTokens;
    return kernels::linear_cross_entropy(h, w, targets, o);
  }
  const std::int64_t vocab = w.size(0);
  auto chunk_loss = [w, transform](const torch::Tensor& hc, const torch::Tensor& tc) {
    return torch::nn::functional::cross_entropy(
        transform.apply(at::linear(hc, w)).to(torch::kFloat32), tc,
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum));
  };
  if (t * vocab <= max_logits_elements) return chunk_loss(h, targets);
  const std::int64_t chunk = std::max<std::int64_t>(1, max_logits_elements / vocab);
  const bool recording = torch::GradMode::is_enabled() && h.requires_grad();
  torch::Tensor total = torch::zeros({}, h.options().dtype(torch::kFloat32));
  for (std::int64_t i = 0; i < t; i += chunk) {
    const std::int64_t n = std::min(chunk, t - i);
    const torch::Tensor tc = targets.narrow(0, i, n);
    if (tc.ne(-100).sum().item<std::int64_t>() == 0) continue;
    const torch::Tensor hc = h.narrow(0, i, n);
    total = total +
            (recording ? model::checkpointed([chunk_loss, tc](const torch::Tensor& x) { return chunk_loss(x, tc); }, hc)
                       : chunk_loss(hc, tc));
  }
  return total;
}

}  // namespace odyssey::train
