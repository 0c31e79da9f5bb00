#include "train/galore.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <tuple>
#include <map>
#include <stdexcept>

#include "train/lora.h"

namespace odyssey::train {
namespace {

struct GaLoreHook : torch::autograd::PostAccumulateGradHook {
  GaLoreHook(GaLoreAdamW* o, std::size_t i) : opt(o), index(i) {}
  void operator()(const torch::autograd::Variable& /*param*/) override { opt->on_gradient(index); }
  GaLoreAdamW* opt;
  std::size_t index;
};

torch::Tensor scalar_i64(std::int64_t v) { return torch::tensor({v}, torch::kInt64); }

}  // namespace

bool galore_targets(const std::string& hf_name, const torch::Tensor& param, const std::vector<std::string>& modules) {
  if (param.dim() != 2 || !hf_name.starts_with("model.layers.") || !hf_name.ends_with(".weight")) return false;
  const std::string stem = hf_name.substr(0, hf_name.size() - 7);  // without ".weight"
  for (const auto& m : modules)
    if (stem.ends_with("." + m)) return true;
  return false;
}

// ---------------------------------------------------------------- projector

GaLoreProjector::GaLoreProjector(std::vector<std::int64_t> shape, std::int64_t rank, bool quantized, int bits,
                                 std::int64_t group, std::int64_t exact_svd_max_side)
    : shape_(std::move(shape)),
      quantized_(quantized),
      bits_(bits),
      group_(group),
      exact_svd_max_side_(exact_svd_max_side) {
  if (shape_.size() != 2) throw std::invalid_argument("GaLore projects 2-D weights only");
  side_ = shape_[0] >= shape_[1] ? Side::Right : Side::Left;
  rank_ = std::min({rank, shape_[0], shape_[1]});
}

std::vector<std::int64_t> GaLoreProjector::low_shape() const {
  return side_ == Side::Right ? std::vector<std::int64_t>{shape_[0], rank_}
                              : std::vector<std::int64_t>{rank_, shape_[1]};
}

// The top-k singular vectors of a [m, n] by randomized subspace iteration (Halko, Martinsson
// and Tropp, 2011): a basis Q of the range of a·Ω (Ω Gaussian [n, k + p]), refined by `iters`
// power iterations (re-orthonormalised each time), then the exact SVD of the small Qᵀ·a.
// O(m·n·(k + p)) instead of O(m·n·min(m, n)). Ω comes from a generator seeded with `seed`,
// so every rank computes the same vectors from the same matrix.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> randomized_svd(const torch::Tensor& a, std::int64_t k,
                                                                       std::uint64_t seed, int iters = 2,
                                                                       std::int64_t oversample = 8) {
  const std::int64_t m = a.size(0), n = a.size(1), l = std::min({k + oversample, m, n});
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const torch::Tensor omega = torch::randn({n, l}, gen, torch::TensorOptions().dtype(torch::kFloat32)).to(a.device());
  torch::Tensor q = std::get<0>(torch::linalg_qr(torch::matmul(a, omega)));
  for (int i = 0; i < iters; ++i) {
    const torch::Tensor z = std::get<0>(torch::linalg_qr(torch::matmul(a.t(), q)));
    q = std::get<0>(torch::linalg_qr(torch::matmul(a, z)));
  }
  auto [ub, s, vh] = torch::linalg_svd(torch::matmul(q.t(), a), /*full_matrices=*/false);
  return {torch::matmul(q, ub), s, vh};
}

std::optional<double> GaLoreProjector::refresh(const torch::Tensor& grad, std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  const torch::Tensor g = grad.detach().to(torch::kFloat32);
  torch::Tensor U, S, Vh;
  if (std::min(shape_[0], shape_[1]) <= exact_svd_max_side_)
    std::tie(U, S, Vh) = torch::linalg_svd(g, /*full_matrices=*/false);
  else std::tie(U, S, Vh) = randomized_svd(g, rank_, seed);
  // Right: P = Vh[:r] [r, n]; Left: P = U[:, :r] [m, r] (the smaller side stays orthogonal).
  // Row-major copies: a view would keep the whole factor alive (3584 x 3584 floats for a
  // Qwen2.5-7B MLP weight), and LAPACK's factors are column-major, which a plain clone keeps;
  // the layout must not depend on where P came from (a resumed run loads it row-major).
  const auto rm = torch::MemoryFormat::Contiguous;
  torch::Tensor p = side_ == Side::Right ? Vh.narrow(0, 0, rank_).clone(rm) : U.narrow(1, 0, rank_).clone(rm);
  const torch::Tensor first = side_ == Side::Right ? p.select(0, 0) : p.select(1, 0);
  std::optional<double> cos;
  if (first_vector_.defined())
    cos = torch::nn::functional::cosine_similarity(first_vector_, first,
                                                   torch::nn::functional::CosineSimilarityFuncOptions().dim(0))
              .item<double>();
  first_vector_ = first.clone();
  if (quantized_) {
    q_ = quantize_groupwise(p, bits_, group_);
    p_ = torch::Tensor();
  } else {
    p_ = p;
  }
  ready_ = true;
  return cos;
}

torch::Tensor GaLoreProjector::matrix() const { return quantized_ ? dequantize_groupwise(q_) : p_; }

torch::Tensor GaLoreProjector::project(const torch::Tensor& grad) const {
  const torch::Tensor p = matrix();
  const torch::Tensor g = grad.to(torch::kFloat32);
  return side_ == Side::Right ? torch::matmul(g, p.t()) : torch::matmul(p.t(), g);
}

torch::Tensor GaLoreProjector::project_back(const torch::Tensor& low) const {
  const torch::Tensor p = matrix();
  return side_ == Side::Right ? torch::matmul(low, p) : torch::matmul(p, low);
}

std::int64_t GaLoreProjector::nbytes() const {
  if (!ready_) return 0;
  return (quantized_ ? q_.nbytes() : static_cast<std::int64_t>(p_.nbytes())) +
         static_cast<std::int64_t>(first_vector_.nbytes());
}

NamedTensors GaLoreProjector::state(const std::string& name) const {
  NamedTensors out;
  if (!ready_) return out;
  if (quantized_) {
    out.emplace_back("galore.proj_codes." + name, q_.codes.cpu());
    out.emplace_back("galore.proj_lo." + name, q_.lo.cpu());
    out.emplace_back("galore.proj_scale." + name, q_.scale.cpu());
  } else {
    out.emplace_back("galore.proj." + name, p_.cpu());
  }
  out.emplace_back("galore.first_vector." + name, first_vector_.cpu());
  return out;
}

Diagnostics GaLoreProjector::load_state(const NamedTensors& named, const std::string& name, const std::string& file,
                                        const torch::Device& device) {
  Diagnostics d;
  std::map<std::string, torch::Tensor> by(named.begin(), named.end());
  auto get = [&](const std::string& key, std::int64_t numel, torch::Dtype dtype) -> torch::Tensor {
    auto it = by.find(key);
    if (it == by.end()) {
      d.push_back(error_at(file, key, "missing from the optimizer state (a GaLore projection)"));
      return {};
    }
    if (numel >= 0 && it->second.numel() != numel) {
      d.push_back(error_at(file, key,
                           "has " + std::to_string(it->second.numel()) + " elements, expected " +
                               std::to_string(numel) + " (another galore_rank or model?)"));
      return {};
    }
    return it->second.to(device, dtype);
  };
  const bool present = by.count((quantized_ ? "galore.proj_codes." : "galore.proj.") + name) > 0;
  if (!present) {
    // A weight that never had a gradient has no projection yet; anything else is a mismatch.
    const bool other = by.count((quantized_ ? "galore.proj." : "galore.proj_codes.") + name) > 0;
    if (other)
      d.push_back(error_at(file, (quantized_ ? "galore.proj." : "galore.proj_codes.") + name,
                           std::string("was saved by ") + (quantized_ ? "GaLore" : "Q-GaLore") + "; this run uses " +
                               (quantized_ ? "Q-GaLore" : "GaLore") + " (galore_quantization must match to resume)"));
    return d;
  }
  const std::int64_t pn = rank_ * (side_ == Side::Right ? shape_[1] : shape_[0]);
  const std::vector<std::int64_t> pshape =
      side_ == Side::Right ? std::vector<std::int64_t>{rank_, shape_[1]} : std::vector<std::int64_t>{shape_[0], rank_};
  const std::int64_t vn = side_ == Side::Right ? shape_[1] : shape_[0];
  torch::Tensor first = get("galore.first_vector." + name, vn, torch::kFloat32);
  if (quantized_) {
    const std::int64_t groups = (pn + group_ - 1) / group_;
    torch::Tensor codes = get("galore.proj_codes." + name, bits_ <= 4 ? (pn + 1) / 2 : pn, torch::kUInt8);
    torch::Tensor lo = get("galore.proj_lo." + name, groups, torch::kFloat32);
    torch::Tensor scale = get("galore.proj_scale." + name, groups, torch::kFloat32);
    if (has_errors(d)) return d;
    q_.codes = codes.clone();
    q_.lo = lo.clone();
    q_.scale = scale.clone();
    q_.shape = pshape;
    q_.bits = bits_;
    q_.group = group_;
  } else {
    torch::Tensor p = get("galore.proj." + name, pn, torch::kFloat32);
    if (has_errors(d)) return d;
    p_ = p.reshape(pshape).clone();  // never an alias of the caller's tensors
  }
  first_vector_ = first.reshape({vn}).clone();
  ready_ = true;
  return d;
}

// ---------------------------------------------------------------- optimizer

GaLoreAdamW::GaLoreAdamW(std::vector<NamedParam> params, AdamWOptions adamw, GaLoreOptions galore, dist::Group* world)
    : Optimizer(std::move(params)), galore_(std::move(galore)), adamw_(adamw), world_(world) {
  if (galore_.rank < 1) throw std::invalid_argument("galore_rank must be at least 1");
  if (galore_.update_proj_gap < 1) throw std::invalid_argument("galore_update_proj_gap must be at least 1");
  auto modules = resolve_target_modules(galore_.target_modules);
  if (!modules.ok()) throw std::invalid_argument("galore_target_modules: " + format_all(modules.diagnostics));
  std::vector<NamedParam> rest;
  targets_.reserve(params_.size());
  for (const auto& p : params_) {
    if (!galore_targets(p.name, p.param, modules.value)) {
      rest.push_back(p);
      rest_params_.push_back(p.param);
      continue;
    }
    const auto shape = p.param.sizes();
    if (galore_.rank > std::min(shape[0], shape[1]))
      throw std::invalid_argument(
          "galore_rank " + std::to_string(galore_.rank) + " is larger than the smaller side of " + p.name + " [" +
          std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + "]; use at most " +
          std::to_string(std::min(shape[0], shape[1])) + " or leave that module out of galore_target_modules");
    Target t{p.name,
             p.param,
             p.decay,
             GaLoreProjector(p.param.sizes().vec(), galore_.rank, galore_.quantized, galore_.proj_bits,
                             galore_.proj_group_size, galore_.exact_svd_max_side),
             0,
             galore_.update_proj_gap,
             {},
             {},
             {},
             {},
             {},
             std::nullopt,
             std::nullopt};
    t.gap = galore_.update_proj_gap;
    const auto low = t.projector.low_shape();
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(p.param.device());
    if (galore_.quantized) {
      t.qm = quantize_blockwise(torch::zeros(low, f32), true, galore_.state_block);
      t.qv = quantize_blockwise(torch::zeros(low, f32), false, galore_.state_block);
    } else {
      t.m = torch::zeros(low, f32);
      t.v = torch::zeros(low, f32);
    }
    targets_.push_back(std::move(t));
  }
  rest_ = std::make_unique<AdamW>(std::move(rest), adamw_);
  for (std::size_t i = 0; i < targets_.size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(targets_[i].param, std::make_unique<GaLoreHook>(this, i));
}

GaLoreAdamW::~GaLoreAdamW() {
  for (auto& t : targets_) torch::autograd::impl::set_post_acc_grad_hooks(t.param, nullptr);
}

std::int64_t GaLoreAdamW::targeted_params() const {
  std::int64_t n = 0;
  for (const auto& t : targets_) n += t.param.numel();
  return n;
}

const GaLoreProjector* GaLoreAdamW::projector(const std::string& name) const {
  for (const auto& t : targets_)
    if (t.name == name) return &t.projector;
  return nullptr;
}

std::int64_t GaLoreAdamW::update_proj_gap(const std::string& name) const {
  for (const auto& t : targets_)
    if (t.name == name) return t.gap;
  return -1;
}

void GaLoreAdamW::begin_step() { micro_ = 0; }

void GaLoreAdamW::end_micro_batch(bool /*last*/) { ++micro_; }

void GaLoreAdamW::on_gradient(std::size_t i) {
  torch::NoGradGuard no_grad;
  Target& t = targets_[i];
  torch::Tensor g = t.param.grad();
  if (!g.defined()) return;
  const bool parallel = world_ && world_->size() > 1;
  const bool refresh = !t.projector.ready() || (micro_ == 0 && t.steps % t.gap == 0);
  if (refresh) {
    if (parallel) world_->all_reduce(g);  // every rank takes the SVD of the same (global) gradient
    // The seed of a randomized SVD: the same on every rank, and after a resume.
    const auto cos = t.projector.refresh(g, 0x9a1025eedULL * (i + 1) + static_cast<std::uint64_t>(t.steps));
    ++svd_count_;
    if (galore_.quantized && cos) {  // Q-GaLore's lazy subspace rule
      t.queue.push_back(*cos);
      if (static_cast<std::int64_t>(t.queue.size()) > galore_.queue_size) t.queue.pop_front();
      double mean = 0;
      for (double c : t.queue) mean += c;
      mean /= static_cast<double>(std::max<std::size_t>(1, t.queue.size()));
      if (static_cast<std::int64_t>(t.queue.size()) == galore_.queue_size && mean >= galore_.cos_threshold)
        t.gap = std::max<std::int64_t>(1, static_cast<std::int64_t>(static_cast<double>(t.gap) * galore_.gamma_proj));
    }
  }
  torch::Tensor low = t.projector.project(g);
  torch::Tensor& acc = refresh && parallel ? t.acc_global : t.acc;
  if (acc.defined()) acc.add_(low);
  else acc = low;
  t.param.mutable_grad() = torch::Tensor();  // the full gradient is not kept
}

void GaLoreAdamW::reduce_gradients(dist::Group& world) {
  all_reduce_gradients(rest_params_, world);
  // The rank-r parts not yet summed, in target order (the same on every rank); a weight
  // without a gradient on this rank takes part with zeros.
  std::vector<torch::Tensor> accs;
  for (auto& t : targets_) {
    if (!t.acc.defined()) t.acc = torch::zeros(t.projector.low_shape(), t.param.options().dtype(torch::kFloat32));
    accs.push_back(t.acc);
  }
  all_reduce_bucketed(accs, world);
  for (auto& t : targets_)
    if (t.acc_global.defined()) {
      t.acc.add_(t.acc_global);
      t.acc_global = torch::Tensor();
    }
}

double GaLoreAdamW::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : rest_params_)
    if (p.grad().defined()) grads.push_back(p.grad());
  for (auto& t : targets_) {
    if (t.acc_global.defined()) {  // one process, or a refresh without a later reduce
      t.acc = t.acc.defined() ? t.acc.add_(t.acc_global) : t.acc_global;
      t.acc_global = torch::Tensor();
    }
    if (t.acc.defined()) grads.push_back(t.acc);
  }
  if (grads.empty()) return 0.0;
  // Per dtype and device, as torch groups; then the norm of the norms.
  std::vector<torch::Tensor> norms;
  for (const auto& n : at::_foreach_norm(grads, 2)) norms.push_back(n.to(torch::kFloat32).to(grads.front().device()));
  const torch::Tensor total = torch::linalg_vector_norm(torch::stack(norms), 2);
  if (max_norm > 0) {
    const torch::Tensor coef = torch::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
    for (auto& g : grads) g.mul_(coef.to(g.device()));
  }
  return total.item<double>();
}

void GaLoreAdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  rest_->step(lr);
  const double b1 = adamw_.beta1, b2 = adamw_.beta2;
  for (auto& t : targets_) {
    if (!t.acc.defined()) continue;  // no gradient this step
    const torch::Tensor& g = t.acc;
    torch::Tensor m = galore_.quantized ? dequantize_blockwise(*t.qm) : t.m;
    torch::Tensor v = galore_.quantized ? dequantize_blockwise(*t.qv) : t.v;
    ++t.steps;
    m.mul_(b1).add_(g, 1.0 - b1);
    v.mul_(b2).addcmul_(g, g, 1.0 - b2);
    const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t.steps));
    const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t.steps));
    const double step_size = lr * std::sqrt(bc2) / bc1;
    const torch::Tensor update = t.projector.project_back(m / (v.sqrt() + adamw_.eps));
    // galore-torch: p -= step_size · scale · update, then p -= lr · wd · p.
    torch::Tensor w = t.param.detach().to(torch::kFloat32);
    w.add_(update, -step_size * galore_.scale);
    if (t.decay && adamw_.weight_decay > 0) w.mul_(1.0 - lr * adamw_.weight_decay);
    t.param.detach().copy_(w);
    if (galore_.quantized) {
      requantize_blockwise(*t.qm, m);
      requantize_blockwise(*t.qv, v);
    }
  }
}

void GaLoreAdamW::zero_grad() {
  rest_->zero_grad();
  for (auto& t : targets_) {
    t.acc = torch::Tensor();
    t.acc_global = torch::Tensor();
    if (t.param.grad().defined()) t.param.mutable_grad() = torch::Tensor();
  }
}

NamedTensors GaLoreAdamW::state() const {
  NamedTensors out = rest_->state();
  for (const auto& t : targets_) {
    if (galore_.quantized) {
      out.emplace_back("galore.exp_avg_codes." + t.name, t.qm->codes.cpu());
      out.emplace_back("galore.exp_avg_absmax." + t.name, t.qm->absmax.cpu());
      out.emplace_back("galore.exp_avg_sq_codes." + t.name, t.qv->codes.cpu());
      out.emplace_back("galore.exp_avg_sq_absmax." + t.name, t.qv->absmax.cpu());
    } else {
      out.emplace_back("galore.exp_avg." + t.name, t.m.cpu());
      out.emplace_back("galore.exp_avg_sq." + t.name, t.v.cpu());
    }
    out.emplace_back("galore.step." + t.name, scalar_i64(t.steps));
    out.emplace_back("galore.update_proj_gap." + t.name, scalar_i64(t.gap));
    std::vector<float> q(t.queue.begin(), t.queue.end());
    out.emplace_back("galore.cos_queue." + t.name,
                     torch::tensor(q, torch::kFloat32).reshape({static_cast<std::int64_t>(q.size())}));
    auto p = t.projector.state(t.name);
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

Diagnostics GaLoreAdamW::load_state(const NamedTensors& named, const std::string& file) {
  NamedTensors rest_named;
  for (const auto& [k, v] : named)
    if (!k.starts_with("galore.")) rest_named.emplace_back(k, v);
  Diagnostics d = rest_->load_state(rest_named, file);
  std::map<std::string, torch::Tensor> by(named.begin(), named.end());
  auto get = [&](const std::string& key, std::int64_t numel) -> torch::Tensor {
    auto it = by.find(key);
    if (it == by.end()) {
      d.push_back(error_at(file, key, "missing from the optimizer state (GaLore)"));
      return {};
    }
    if (numel >= 0 && it->second.numel() != numel) {
      d.push_back(error_at(file, key,
                           "has " + std::to_string(it->second.numel()) + " elements, expected " +
                               std::to_string(numel) + " (another galore_rank or model?)"));
      return {};
    }
    return it->second;
  };
  for (auto& t : targets_) {
    std::int64_t n = 1;
    for (auto s : t.projector.low_shape()) n *= s;
    if (galore_.quantized) {
      const std::int64_t blocks = (n + galore_.state_block - 1) / galore_.state_block;
      torch::Tensor mc = get("galore.exp_avg_codes." + t.name, n), ma = get("galore.exp_avg_absmax." + t.name, blocks);
      torch::Tensor vc = get("galore.exp_avg_sq_codes." + t.name, n),
                    va = get("galore.exp_avg_sq_absmax." + t.name, blocks);
      if (mc.defined() && ma.defined() && vc.defined() && va.defined()) {
        t.qm->codes.copy_(mc.to(torch::kUInt8).reshape({-1}));
        t.qm->absmax.copy_(ma.to(torch::kFloat32).reshape({-1}));
        t.qv->codes.copy_(vc.to(torch::kUInt8).reshape({-1}));
        t.qv->absmax.copy_(va.to(torch::kFloat32).reshape({-1}));
      }
    } else {
      torch::Tensor m = get("galore.exp_avg." + t.name, n), v = get("galore.exp_avg_sq." + t.name, n);
      if (m.defined() && v.defined()) {
        t.m.copy_(m.reshape(t.m.sizes()));
        t.v.copy_(v.reshape(t.v.sizes()));
      }
    }
    torch::Tensor s = get("galore.step." + t.name, 1), gap = get("galore.update_proj_gap." + t.name, 1),
                  q = get("galore.cos_queue." + t.name, -1);
    if (s.defined()) t.steps = s.to(torch::kInt64).reshape({-1})[0].item<std::int64_t>();
    if (gap.defined()) t.gap = std::max<std::int64_t>(1, gap.to(torch::kInt64).reshape({-1})[0].item<std::int64_t>());
    if (q.defined()) {
      t.queue.clear();
      const torch::Tensor qf = q.to(torch::kFloat32).reshape({-1});
      for (std::int64_t i = 0; i < qf.numel(); ++i) t.queue.push_back(qf[i].item<double>());
    }
    auto pd = t.projector.load_state(named, t.name, file, t.param.device());
    d.insert(d.end(), pd.begin(), pd.end());
  }
  return d;
}

std::int64_t GaLoreAdamW::state_bytes() const {
  std::int64_t b = rest_->state_bytes();
  for (const auto& t : targets_) {
    b += t.projector.nbytes();
    b += galore_.quantized ? t.qm->nbytes() + t.qv->nbytes() : static_cast<std::int64_t>(t.m.nbytes() + t.v.nbytes());
  }
  return b;
}

}  // namespace odyssey::train
