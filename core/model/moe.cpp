// Mixture-of-experts layers (decoder.h: RouterImpl, ExpertsImpl, MoeImpl) and the
// load-balancing loss's bookkeeping (moe.h). docs/moe.md.
#include "model/moe.h"

#include <cmath>

#include "kernels/grouped_gemm.h"
#include "kernels/moe_rows.h"
#include "kernels/swiglu.h"
#include "model/decoder.h"

namespace odyssey::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Identity on the router probabilities whose backward adds the load-balancing loss's gradient.
struct RouterAuxGrad : public torch::autograd::Function<RouterAuxGrad> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& probs,
                               const c10::intrusive_ptr<RouterStats>& stats) {
    ctx->saved_data["stats"] = c10::IValue::make_capsule(stats);
    return probs.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto stats = c10::static_intrusive_pointer_cast<RouterStats>(ctx->saved_data["stats"].toCapsule());
    torch::Tensor g = grads[0];
    if (stats->grad_scale != 0.0) g = g.defined() ? g + stats->probs_grad(g) : stats->probs_grad(g);
    return {g, torch::Tensor()};
  }
};

// y = x[index] where every row of x appears `copies` times in index, and back[j] is where
// row j / copies's (j % copies)-th copy went. Backward gathers instead of scattering:
// dx[n] = Σ_c dy[back[n · copies + c]] (kernels::sum_rows: one pass, the sum in fp32), where
// index_select's own backward is an atomic index_add (11 % of a Qwen3-30B-A3B LoRA step on an
// H200 when measured, and nondeterministic in bf16).
struct GatherRows : public torch::autograd::Function<GatherRows> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& index,
                               const torch::Tensor& back, std::int64_t copies) {
    ctx->save_for_backward({back});
    ctx->saved_data["copies"] = copies;
    ctx->saved_data["rows"] = x.size(0);
    return x.index_select(0, index);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor back = ctx->get_saved_variables()[0];
    const std::int64_t copies = ctx->saved_data["copies"].toInt(), rows = ctx->saved_data["rows"].toInt();
    const torch::Tensor dx = kernels::sum_rows(grads[0], back, copies);
    TORCH_CHECK(dx.size(0) == rows, "GatherRows: ", dx.size(0), " rows back for ", rows);
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void RouterStats::record(std::int64_t layer, const torch::Tensor& top_index, const torch::Tensor& probs) {
  torch::NoGradGuard no_grad;
  const std::int64_t n = probs.size(0);
  torch::Tensor counts, sums;
  if (row_weight.defined()) {
    const torch::Tensor w = row_weight.to(probs.device(), torch::kFloat32);
    counts = torch::zeros({num_experts}, probs.options().dtype(torch::kFloat32))
                 .scatter_add_(0, top_index.reshape({-1}), w.repeat_interleave(top_k));
    sums = (probs.to(torch::kFloat32) * w.unsqueeze(-1)).sum(0);
  } else {
    counts = torch::bincount(top_index.reshape({-1}), {}, num_experts).to(torch::kFloat32);
    sums = probs.to(torch::kFloat32).sum(0);
  }
  double rows = row_weight.defined() ? row_weight.sum().item<double>() : static_cast<double>(n);
  if (sum_over_row) {  // the whole row's statistic: one all-reduce of 2E + 1 numbers per layer
    torch::Tensor all = torch::cat({counts, sums, torch::full({1}, rows, counts.options())});
    sum_over_row(all);
    counts = all.narrow(0, 0, num_experts);
    sums = all.narrow(0, num_experts, num_experts);
    rows = all[2 * num_experts].item<double>();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  // A recomputation (activation checkpointing) records the same layer again: replace its share.
  if (auto it = counts_.find(layer); it != counts_.end()) count_total_ = count_total_ - it->second;
  count_total_ = count_total_.defined() ? count_total_ + counts : counts.clone();
  counts_[layer] = counts;
  prob_sums_[layer] = sums;
  rows_ = rows;
}

torch::Tensor RouterStats::aux_loss() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (counts_.empty()) return torch::zeros({}, torch::kFloat32);
  const torch::Tensor& c = count_total_;
  torch::Tensor p = torch::zeros_like(c);
  for (const auto& [layer, t] : prob_sums_) p = p + t;
  const double r = static_cast<double>(counts_.size()) * rows_;
  if (r <= 0) return torch::zeros({}, c.options());
  return (c / r * (p / r)).sum() * static_cast<double>(num_experts);
}

torch::Tensor RouterStats::probs_grad(const torch::Tensor& like) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!count_total_.defined()) return torch::zeros_like(like);
  const torch::Tensor c = count_total_.to(like.options());
  const double r = static_cast<double>(counts_.size()) * rows_;
  if (r <= 0) return torch::zeros_like(like);
  // d/dp_re of E · Σ_e (C_e / R)(Σ_r w_r p_re / R) = E · C_e · w_r / R².
  torch::Tensor g = (c * (grad_scale * static_cast<double>(num_experts) / (r * r))).unsqueeze(0).expand_as(like);
  if (row_weight.defined()) g = g * row_weight.to(like.options()).unsqueeze(-1);
  return g;
}

torch::Tensor route_through_stats(const torch::Tensor& probs, const torch::Tensor& top_index, std::int64_t layer,
                                  const c10::intrusive_ptr<RouterStats>& stats) {
  stats->record(layer, top_index, probs);
  if (!probs.requires_grad()) return probs;
  return RouterAuxGrad::apply(probs, stats);
}

RouterImpl::RouterImpl(std::int64_t experts, std::int64_t hidden, const torch::TensorOptions& o) {
  weight = register_parameter("weight", torch::empty({experts, hidden}, o));
}

ExpertsImpl::ExpertsImpl(std::int64_t experts, std::int64_t hidden_, std::int64_t intermediate_,
                         const torch::TensorOptions& o, bool quantized_)
    : quantized(quantized_),
      dtype(o.dtype().toScalarType()),
      num_experts(experts),
      hidden(hidden_),
      intermediate(intermediate_) {
  if (quantized) return;
  gate_up_proj = register_parameter("gate_up_proj", torch::empty({experts, 2 * intermediate, hidden}, o));
  down_proj = register_parameter("down_proj", torch::empty({experts, hidden, intermediate}, o));
}

std::vector<std::int64_t> ExpertsImpl::shape_of(const std::string& parameter) const {
  if (parameter == "gate_up_proj") return {num_experts, 2 * intermediate, hidden};
  TORCH_CHECK(parameter == "down_proj", "expert parameters are gate_up_proj and down_proj, not ", parameter);
  return {num_experts, hidden, intermediate};
}

ExpertLoraImpl::ExpertLoraImpl(std::int64_t e, std::int64_t out, std::int64_t in, std::int64_t r, double s,
                               const torch::Device& device)
    : experts(e), rank(r), scaling(s) {
  const auto o = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  lora_A = register_parameter("lora_A", torch::empty({r * e, in}, o));
  lora_B = register_parameter("lora_B", torch::zeros({out, r * e}, o));
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(lora_A, std::sqrt(5.0));  // nn.Linear's default, as PEFT leaves it
}

torch::Tensor ExpertLoraImpl::a3(torch::ScalarType dtype) const {
  return lora_A.to(dtype).view({experts, rank, lora_A.size(1)});
}

torch::Tensor ExpertLoraImpl::b3(torch::ScalarType dtype, double scale) const {
  const torch::Tensor b = scale == 1.0 ? lora_B : lora_B * scale;
  return b.to(dtype).view({lora_B.size(0), rank, experts}).permute({2, 0, 1}).contiguous();
}

void ExpertsImpl::add_lora(const std::string& parameter, std::int64_t rank, double scaling) {
  const bool gu = parameter == "gate_up_proj";
  TORCH_CHECK(gu || parameter == "down_proj", "expert LoRA targets gate_up_proj or down_proj, not ", parameter);
  const std::vector<std::int64_t> s = shape_of(parameter);
  const torch::Device device = quantized ? (gate_up_quant ? gate_up_quant->device() : torch::Device(torch::kCPU))
                                         : (gu ? gate_up_proj : down_proj).device();
  ExpertLora& slot = gu ? gate_up_lora : down_lora;
  TORCH_CHECK(!slot, "LoRA already added to ", parameter);
  slot = register_module(parameter + "_lora", ExpertLora(s[0], s[1], s[2], rank, scaling, device));
}

void ExpertsImpl::keep_experts(std::int64_t first, std::int64_t count, bool adapters_only) {
  torch::NoGradGuard no_grad;
  if (!adapters_only) {
    TORCH_CHECK(first >= 0 && count > 0 && first + count <= num_experts, "keep_experts: experts ", first, "..",
                first + count - 1, " of ", num_experts);
    if (quantized) {  // the share's packed bytes, its absmax expanded to fp32 (kernels::slice_4bit)
      TORCH_CHECK(gate_up_quant && down_quant, "keep_experts: 4-bit experts split before their weights were loaded");
      gate_up_quant = kernels::slice_4bit(*gate_up_quant, first, count);
      down_quant = kernels::slice_4bit(*down_quant, first, count);
    } else {
      for (torch::Tensor* w : {&gate_up_proj, &down_proj}) w->set_data(w->narrow(0, first, count).clone());
    }
    num_experts = count;
  }
  for (ExpertLora* lora : {&gate_up_lora, &down_lora}) {
    if (!*lora) continue;
    ExpertLoraImpl& l = **lora;
    const std::int64_t r = l.rank, e = l.experts;
    TORCH_CHECK(first >= 0 && count > 0 && first + count <= e, "keep_experts: experts ", first, "..", first + count - 1,
                " of the adapter's ", e);
    // A: expert-major rows [E·r, in]; B: expert-minor columns [out, r·E] (PEFT's layout).
    l.lora_A.set_data(l.lora_A.narrow(0, first * r, count * r).clone());
    l.lora_B.set_data(l.lora_B.view({l.lora_B.size(0), r, e}).narrow(2, first, count).reshape({-1, r * count}).clone());
    l.experts = count;
  }
}

void ExpertsImpl::gather_experts(ExpertGroup& group, bool adapters_only) {
  torch::NoGradGuard no_grad;
  const std::int64_t p = group.size();
  if (!adapters_only) {
    // 4-bit experts are frozen (QLoRA): a checkpoint holds their adapters only.
    TORCH_CHECK(!quantized, "expert parallelism gathers 16-bit experts only (4-bit experts are never saved)");
    for (torch::Tensor* w : {&gate_up_proj, &down_proj}) w->set_data(group.gather(w->contiguous()));
    num_experts = gate_up_proj.size(0);
  }
  for (ExpertLora* lora : {&gate_up_lora, &down_lora}) {
    if (!*lora) continue;
    ExpertLoraImpl& l = **lora;
    const std::int64_t r = l.rank, e = l.experts, out = l.lora_B.size(0);
    l.lora_A.set_data(group.gather(l.lora_A.contiguous()));
    // B [out, r·e] per rank: gathered as [p·out, r, e], the experts put back in the last place.
    const torch::Tensor b = group.gather(l.lora_B.contiguous()).view({p, out, r, e});
    l.lora_B.set_data(b.permute({1, 2, 0, 3}).reshape({out, r * p * e}).contiguous());
    l.experts = e * p;
  }
}

void ExpertsImpl::merge_lora() {
  torch::NoGradGuard no_grad;
  if (quantized) {  // dequantized into 16-bit parameters first, then merged as below
    gate_up_proj = register_parameter("gate_up_proj", kernels::dequantize_4bit(*gate_up_quant, dtype), false);
    down_proj = register_parameter("down_proj", kernels::dequantize_4bit(*down_quant, dtype), false);
    quantized = false;
    gate_up_quant.reset();
    down_quant.reset();
  }
  for (auto [w, lora] : {std::pair{&gate_up_proj, &gate_up_lora}, std::pair{&down_proj, &down_lora}}) {
    if (!*lora) continue;
    const ExpertLora& l = *lora;
    const torch::Tensor delta = torch::bmm(l->b3(torch::kFloat32, l->scaling), l->a3(torch::kFloat32));
    w->copy_((w->to(torch::kFloat32) + delta).to(w->scalar_type()));
  }
  remove_lora();
}

void ExpertsImpl::remove_lora() {
  for (auto [name, lora] : {std::pair{"gate_up_proj_lora", &gate_up_lora}, std::pair{"down_proj_lora", &down_lora}}) {
    if (!*lora) continue;
    unregister_module(name);
    *lora = nullptr;
  }
}

torch::Tensor ExpertsImpl::project(const torch::Tensor& x, const torch::Tensor& w,
                                   const c10::intrusive_ptr<kernels::Quant4Weight>& q, const ExpertLora& lora,
                                   const torch::Tensor& ends) {
  if (quantized) TORCH_CHECK(q, "4-bit experts were used before their weights were loaded");
  torch::Tensor y = quantized ? kernels::grouped_linear_quant4(x, q, ends) : kernels::grouped_linear(x, w, ends);
  if (!lora) return y;
  // x · A_eᵀ · B_eᵀ per expert: two more grouped GEMMs through the rank. The fused path computes
  // them in the activations' dtype (autocast's rule, as LinearImpl); otherwise in fp32.
  const torch::ScalarType dt = fused ? x.scalar_type() : torch::kFloat32;
  const torch::Tensor xa = kernels::grouped_linear(x.to(dt), lora->a3(dt), ends);
  // The scaling rides in B's per-expert copy (r·E·out values), not on the [T, out] product.
  return y + kernels::grouped_linear(xa, lora->b3(dt, lora->scaling), ends).to(y.scalar_type());
}

torch::Tensor ExpertsImpl::forward(const torch::Tensor& x, const torch::Tensor& ends) {
  const torch::Tensor gu = project(x, gate_up_proj, gate_up_quant, gate_up_lora, ends);
  const std::int64_t i = intermediate;
  const torch::Tensor act = fused ? kernels::swiglu_packed(gu) : torch::silu(gu.narrow(-1, 0, i)) * gu.narrow(-1, i, i);
  return project(act, down_proj, down_quant, down_lora, ends);
}

MoeImpl::MoeImpl(const DecoderConfig& c, const torch::TensorOptions& o, std::int64_t layer)
    : num_experts(c.hf.num_experts),
      top_k(c.hf.num_experts_per_tok),
      layer_index(layer),
      norm_topk_prob(c.hf.norm_topk_prob),
      weights_in_fp32(c.hf.family_row().router_weights_fp32()),
      jitter(c.hf.router_jitter_noise) {
  const std::int64_t h = c.hf.hidden_size;
  const std::string prefix = "model.layers." + std::to_string(layer) + ".mlp.";
  gate = register_module("gate", Router(num_experts, h, o));
  experts = register_module("experts", Experts(num_experts, h, c.hf.moe_intermediate_size, o,
                                               !c.quant.experts_16bit && c.quant.quantizes(prefix + "experts")));
  if (c.hf.shared_expert_intermediate_size > 0) {
    shared_expert = register_module("shared_expert",
                                    Mlp(c, o, layer, c.hf.shared_expert_intermediate_size, prefix + "shared_expert."));
    shared_expert_gate =
        register_module("shared_expert_gate", Linear(h, 1, false, o, c.quant.quantizes(prefix + "shared_expert_gate")));
  }
}

torch::Tensor MoeImpl::forward(const torch::Tensor& x, const c10::intrusive_ptr<RouterStats>& stats) {
  const std::int64_t h = x.size(-1);
  torch::Tensor flat = x.reshape({-1, h});
  if (jitter > 0 && is_training())  // MixtralSparseMoeBlock: router and experts see the jittered input
    flat = flat * torch::empty_like(flat).uniform_(1.0 - jitter, 1.0 + jitter);
  const torch::Tensor logits = at::linear(flat, gate->weight);
  torch::Tensor probs = torch::softmax(logits, -1, torch::kFloat32);
  const torch::Tensor top_index = std::get<1>(probs.detach().topk(top_k, -1));  // [N, k], most probable first
  if (stats) probs = route_through_stats(probs, top_index, layer_index, stats);
  torch::Tensor top_p = probs.gather(-1, top_index);
  if (norm_topk_prob) top_p = top_p / top_p.sum(-1, true);
  if (!weights_in_fp32) top_p = top_p.to(logits.scalar_type());

  // Sort the N·k (token, expert) pairs by expert; pair j is token j / k's (j % k)-th choice.
  const torch::Tensor choice = top_index.reshape({-1});
  const torch::Tensor order = std::get<1>(choice.sort(std::optional<bool>(true), /*dim=*/0, /*descending=*/false));
  const torch::Tensor token = order.div(top_k, "floor");
  const torch::Tensor counts = torch::bincount(choice, {}, num_experts);  // rows per expert
  // inverse[j]: where pair j (token j / k's (j % k)-th choice) sits in the sorted order.
  const torch::Tensor inverse =
      torch::empty_like(order).scatter_(0, order, torch::arange(order.size(0), order.options()));
  const torch::Tensor sorted = GatherRows::apply(flat, token, inverse, top_k);
  const torch::Tensor out =
      ep ? run_experts(sorted, counts) : experts(sorted, counts.cumsum(0).to(torch::kInt32));  // [N·k, h], sorted
  // Back to (token, choice) order, weighted, summed over the k choices: one pass.
  torch::Tensor y = kernels::combine_rows(out, inverse, order, top_p).to(x.scalar_type());
  if (shared_expert) y = y + torch::sigmoid(shared_expert_gate(flat)) * shared_expert(flat);
  return y.view(x.sizes());
}

torch::Tensor MoeImpl::run_experts(const torch::Tensor& sorted, const torch::Tensor& counts) {
  // 1. How many rows go to each rank (its experts' counts) and how many come from each, per
  //    local expert: one small exchange (the host needs the sizes for the row exchange).
  const int p = ep->size();
  const std::int64_t local = num_experts / p;
  const torch::Tensor mine = counts.to(torch::kCPU, torch::kInt64).view({p, local}).contiguous();
  const torch::Tensor got = ep->exchange_counts(mine).to(torch::kCPU, torch::kInt64).contiguous();  // [p, local]
  std::vector<std::int64_t> send(static_cast<std::size_t>(p)), recv(static_cast<std::size_t>(p));
  const auto* m = mine.data_ptr<std::int64_t>();
  const auto* g = got.data_ptr<std::int64_t>();
  for (int j = 0; j < p; ++j)
    for (std::int64_t e = 0; e < local; ++e) {
      send[static_cast<std::size_t>(j)] += m[j * local + e];
      recv[static_cast<std::size_t>(j)] += g[j * local + e];
    }
  // 2. The rows to their experts' ranks: they arrive grouped by source rank, each group sorted
  //    by local expert; regroup them by expert (source ranks in order within an expert).
  const torch::Tensor arrived = ep->exchange_rows(sorted, send, recv);
  std::vector<std::int64_t> start(static_cast<std::size_t>(p) * static_cast<std::size_t>(local));
  std::int64_t at = 0;
  for (int j = 0; j < p; ++j)
    for (std::int64_t e = 0; e < local; ++e) {
      start[static_cast<std::size_t>(j * local + e)] = at;
      at += g[j * local + e];
    }
  std::vector<std::int64_t> by_expert, local_ends;
  by_expert.reserve(static_cast<std::size_t>(at));
  for (std::int64_t e = 0; e < local; ++e) {
    for (int j = 0; j < p; ++j) {
      const std::int64_t s0 = start[static_cast<std::size_t>(j * local + e)];
      for (std::int64_t i = 0; i < g[j * local + e]; ++i) by_expert.push_back(s0 + i);
    }
    local_ends.push_back(static_cast<std::int64_t>(by_expert.size()));
  }
  const auto dev = sorted.device();
  const torch::Tensor order = torch::tensor(torch::ArrayRef<std::int64_t>(by_expert), torch::kInt64).to(dev);
  const torch::Tensor inverse =
      torch::empty_like(order).scatter_(0, order, torch::arange(order.size(0), order.options()));
  const torch::Tensor ends =
      torch::tensor(torch::ArrayRef<std::int64_t>(local_ends), torch::kInt64).to(dev, torch::kInt32);
  // 3. This rank's experts, then the outputs back in arrival order and home to their ranks.
  const torch::Tensor out = experts(GatherRows::apply(arrived, order, inverse, 1), ends);
  return ep->exchange_rows(GatherRows::apply(out, inverse, order, 1), recv, send);
}

}  // namespace odyssey::model
