#include "train/zero.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#if __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#define ODYSSEY_ZERO_CUDA 1
#endif

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>

namespace odyssey::train {

namespace {

constexpr std::int64_t kLayoutVersion = 1;
constexpr std::int64_t kLayoutFixed = 8;  // entries of layout() before the per-bucket sizes

// FNV-1a over the parameters' names, sizes and dtypes in layout order: a checkpoint of
// another model or adapter set with the same element count is still refused.
std::uint64_t fnv(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

torch::Tensor host_empty(std::int64_t n, torch::ScalarType dtype, bool pinned) {
  return torch::empty({n}, torch::TensorOptions().dtype(dtype).device(torch::kCPU).pinned_memory(pinned));
}

}  // namespace

// The post-accumulate-grad hook of one parameter (stage 2).
struct ZeroGradHook final : torch::autograd::PostAccumulateGradHook {
  ZeroGradHook(ZeroAdamW* o, std::size_t i) : owner(o), index(i) {}
  void operator()(const torch::autograd::Variable& param) override { owner->on_gradient(index, param); }
  ZeroAdamW* owner;
  std::size_t index;
};

// Offload's transfer machinery: two staging buffers (raw bytes, viewed as fp32 for a
// gradient slice and as the parameter dtype for the cast masters); on CUDA the side stream
// that moves them and, per buffer, the events of its last download and upload.
struct ZeroAdamW::Offload {
  std::vector<torch::Tensor> staging;  // uint8
#ifdef ODYSSEY_ZERO_CUDA
  std::vector<std::optional<at::cuda::CUDAEvent>> fetched;   // per buffer: a gradient slice landed in it
  std::vector<std::optional<at::cuda::CUDAEvent>> uploaded;  // per buffer: its H2D copy read it
  std::optional<c10::cuda::CUDAStream> side;

  c10::cuda::CUDAStream side_stream(const torch::Device& device) {
    if (!side) side = at::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
    return *side;
  }
  static void wait(std::optional<at::cuda::CUDAEvent>& e) {
    if (e) {
      e->synchronize();
      e.reset();
    }
  }
#endif

  std::size_t buffer_of(std::size_t bucket) const { return bucket % staging.size(); }
  // The first n elements of buffer k as `dtype`.
  torch::Tensor view(std::size_t k, torch::ScalarType dtype, std::int64_t n) const {
    return staging[k].view(dtype).narrow(0, 0, n);
  }
  // Buffer k's gradient slice has landed (the host may read it).
  void wait_fetched(std::size_t k) {
#ifdef ODYSSEY_ZERO_CUDA
    wait(fetched[k]);
#else
    (void)k;
#endif
  }
  // Buffer k's last upload has read it (the host may write it).
  void wait_uploaded(std::size_t k) {
#ifdef ODYSSEY_ZERO_CUDA
    wait(uploaded[k]);
#else
    (void)k;
#endif
  }
  void wait_all() {
    for (std::size_t k = 0; k < staging.size(); ++k) {
      wait_fetched(k);
      wait_uploaded(k);
    }
  }
};

ZeroAdamW::ZeroAdamW(std::vector<NamedParam> params, AdamWOptions options, dist::Group& world, int stage, bool offload,
                     std::int64_t bucket_elements)
    : Optimizer(std::move(params)),
      options_(options),
      world_(world),
      stage_(stage),
      offload_(offload),
      bucket_elements_(bucket_elements) {
  if (stage != 1 && stage != 2) throw std::invalid_argument("ZeRO stage must be 1 or 2, got " + std::to_string(stage));
  if (bucket_elements < 1) throw std::invalid_argument("ZeRO bucket_elements must be positive");
  if (world.size() < 1) throw std::invalid_argument("ZeRO needs a process group");
  if (!params_.empty()) device_ = params_.front().param.device();
  for (const auto& p : params_) {
    if (p.param.device() != device_)
      throw std::invalid_argument("ZeRO shards parameters of one device: " + params_.front().name + " is on " +
                                  device_.str() + ", " + p.name + " on " + p.param.device().str());
    if (!p.param.is_contiguous())
      throw std::invalid_argument("ZeRO needs contiguous parameters: " + p.name + " is not");
  }
  state_device_ = offload_ ? torch::Device(torch::kCPU) : device_;
  const std::int64_t n = world.size(), r = world.rank();

  // Buckets: reverse registration order, cut at bucket_elements and at dtype changes.
  members_.resize(params_.size());
  got_.assign(params_.size(), 0);
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t k = params_.size(); k-- > 0;) {
    const torch::Tensor& p = params_[k].param;
    const auto dtype = p.scalar_type();
    h = fnv(h, params_[k].name.data(), params_[k].name.size() + 1);
    const std::int64_t numel = p.numel(), code = static_cast<std::int64_t>(dtype);
    h = fnv(h, &numel, sizeof numel);
    h = fnv(h, &code, sizeof code);
    total_elements_ += numel;
    std::int64_t done = 0;
    while (done < numel) {
      if (buckets_.empty() || buckets_.back().dtype != dtype || buckets_.back().elements == bucket_elements_) {
        buckets_.emplace_back();
        buckets_.back().dtype = dtype;
      }
      Bucket& b = buckets_.back();
      const std::int64_t len = std::min(numel - done, bucket_elements_ - b.elements);
      members_[k].emplace_back(buckets_.size() - 1, b.entries.size());
      b.entries.push_back({k, done, b.elements, len});
      b.elements += len;
      done += len;
    }
  }
  digest_ = static_cast<std::int64_t>(h);

  // This rank's slice of every bucket: the pieces of parameters it holds, and its runs of
  // equal weight decay (padding belongs to no run: it is never updated and stays zero).
  for (auto& b : buckets_) {
    b.padded = (b.elements + n - 1) / n * n;
    b.slice = b.padded / n;
    b.shard_offset = shard_total_;
    shard_total_ += b.slice;
    const std::int64_t lo = r * b.slice, hi = lo + b.slice;
    for (const auto& e : b.entries) {
      const std::int64_t a = std::max(lo, e.bucket_offset), z = std::min(hi, e.bucket_offset + e.length);
      if (a >= z) continue;
      b.pieces.push_back({e.param, e.param_offset + (a - e.bucket_offset), a - lo, z - a});
      const bool decay = params_[e.param].decay;
      if (!b.segments.empty() && b.segments.back().decay == decay &&
          b.segments.back().offset + b.segments.back().length == a - lo)
        b.segments.back().length += z - a;
      else b.segments.push_back({a - lo, z - a, decay});
    }
  }

  if (offload_) {
    off_ = std::make_unique<Offload>();
    // Room for the largest slice as fp32 (the gradient) and in its dtype (the cast masters),
    // in whole 8-byte words so that every dtype's view divides it.
    std::int64_t bytes = 0;
    for (const auto& b : buckets_) {
      const auto width = std::max<std::int64_t>(4, static_cast<std::int64_t>(c10::elementSize(b.dtype)));
      bytes = std::max(bytes, b.slice * width);
    }
    bytes = (bytes + 7) / 8 * 8;
    const std::size_t count = std::min<std::size_t>(2, buckets_.size());
    for (std::size_t k = 0; k < count; ++k)
      off_->staging.push_back(host_empty(bytes, torch::kUInt8, /*pinned=*/device_.is_cuda()));
#ifdef ODYSSEY_ZERO_CUDA
    off_->fetched.resize(count);
    off_->uploaded.resize(count);
#endif
  }
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  torch::NoGradGuard no_grad;
  master_ = torch::zeros({shard_total_}, f32.device(state_device_));
  exp_avg_ = torch::zeros({shard_total_}, f32.device(state_device_));
  exp_avg_sq_ = torch::zeros({shard_total_}, f32.device(state_device_));
  grad_ = torch::zeros({shard_total_}, f32.device(device_));  // on the device, offload or not
  step_ = torch::zeros({}, f32.device(state_device_));
  for (std::size_t bi = 0; bi < buckets_.size(); ++bi)
    for (const auto& pc : buckets_[bi].pieces)
      slice_of(master_, bi)
          .narrow(0, pc.slice_offset, pc.length)
          .copy_(params_[pc.param].param.detach().reshape({-1}).narrow(0, pc.param_offset, pc.length));

  if (stage_ == 2)
    for (std::size_t k = 0; k < params_.size(); ++k)
      torch::autograd::impl::set_post_acc_grad_hooks(params_[k].param, std::make_unique<ZeroGradHook>(this, k));
}

ZeroAdamW::~ZeroAdamW() {
  try {
    // Only our own hooks: a newer optimizer over the same parameters may have replaced them.
    for (const auto& p : params_) {
      auto& hook = torch::autograd::impl::post_acc_grad_hooks(p.param);
      const auto* mine = dynamic_cast<const ZeroGradHook*>(hook.get());
      if (mine && mine->owner == this) hook.reset();
    }
    if (off_) off_->wait_all();
  } catch (...) {}
}

torch::Tensor ZeroAdamW::slice_of(const torch::Tensor& flat, std::size_t b) const {
  return flat.narrow(0, buckets_[b].shard_offset, buckets_[b].slice);
}

// ---- gradients --------------------------------------------------------------------------

void ZeroAdamW::begin_step() {
  reset_micro_batch();
  in_step_ = stage_ == 2;
}

void ZeroAdamW::on_gradient(std::size_t index, const torch::Tensor& param) {
  if (!in_step_) return;  // outside a step the gradient stays in .grad (reduce_gradients' fallback)
  const torch::Tensor g = param.grad();
  if (!g.defined()) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor flat = g.reshape({-1});
  const bool again = got_[index] != 0;  // a second backward in this micro-batch: add
  for (const auto& [bi, ei] : members_[index]) {
    Bucket& b = buckets_[bi];
    if (b.issued)
      throw std::logic_error("ZeroAdamW: " + params_[index].name +
                             " received a gradient after its bucket was reduced in this micro-batch; "
                             "call end_micro_batch after each backward");
    const Entry& e = b.entries[ei];
    if (!b.staging.defined()) b.staging = torch::zeros({b.padded}, flat.options().dtype(b.dtype));
    torch::Tensor dst = b.staging.narrow(0, e.bucket_offset, e.length);
    if (again) {
      dst.add_(flat.narrow(0, e.param_offset, e.length));
    } else {
      dst.copy_(flat.narrow(0, e.param_offset, e.length));
      ++b.arrived;
    }
  }
  got_[index] = 1;
  param.mutable_grad() = torch::Tensor();  // the copy in staging is the only one now
  issue_ready();
}

void ZeroAdamW::issue_ready() {
  while (next_issue_ < buckets_.size() && buckets_[next_issue_].arrived == buckets_[next_issue_].entries.size())
    issue(next_issue_++);
}

void ZeroAdamW::issue(std::size_t bi) {
  Bucket& b = buckets_[bi];
  if (!b.staging.defined())  // no gradient here this micro-batch: take part with zeros
    b.staging = torch::zeros({b.padded}, torch::TensorOptions().dtype(b.dtype).device(device_));
  const torch::Tensor reduced = world_.reduce_scatter(b.staging);
  b.staging = torch::Tensor();
  b.issued = true;
  accumulate(bi, reduced);
}

void ZeroAdamW::accumulate(std::size_t bi, const torch::Tensor& reduced) {
  torch::NoGradGuard no_grad;
  slice_of(grad_, bi).add_(reduced);
}

void ZeroAdamW::reset_micro_batch() {
  for (auto& b : buckets_) {
    b.staging = torch::Tensor();
    b.arrived = 0;
    b.issued = false;
  }
  std::fill(got_.begin(), got_.end(), 0);
  next_issue_ = 0;
}

void ZeroAdamW::end_micro_batch(bool last) {
  if (!in_step_) return;
  while (next_issue_ < buckets_.size()) issue(next_issue_++);  // bucket order, like every rank
  reset_micro_batch();
  reduced_ = true;
  if (last) in_step_ = false;
}

void ZeroAdamW::reduce_from_grads() {
  torch::NoGradGuard no_grad;
  for (std::size_t bi = 0; bi < buckets_.size(); ++bi) {
    const Bucket& b = buckets_[bi];
    torch::Tensor flat = torch::zeros({b.padded}, torch::TensorOptions().dtype(b.dtype).device(device_));
    for (const auto& e : b.entries) {
      torch::Tensor p = params_[e.param].param;
      if (!p.grad().defined()) continue;
      flat.narrow(0, e.bucket_offset, e.length).copy_(p.grad().reshape({-1}).narrow(0, e.param_offset, e.length));
      if (e.param_offset + e.length == p.numel()) p.mutable_grad() = torch::Tensor();  // its last piece
    }
    const torch::Tensor reduced = world_.reduce_scatter(flat);
    flat = torch::Tensor();
    accumulate(bi, reduced);
  }
  reduced_ = true;
}

void ZeroAdamW::reduce_gradients(dist::Group& /*world*/) {
  if (stage_ == 2) {
    if (in_step_) end_micro_batch(/*last=*/true);  // a caller that skipped the last end_micro_batch
    if (reduced_) return;
  }
  reduce_from_grads();
}

double ZeroAdamW::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  // A group of one (ZeRO-Offload on one process) is never asked to reduce by the step engine.
  if (!reduced_) reduce_gradients(world_);
  // Per-bucket norms in fp64 (a fp32 sum over a shard of many millions of elements
  // loses digits), squared and summed: this rank's part of the global squared norm.
  std::vector<torch::Tensor> slices;
  for (std::size_t bi = 0; bi < buckets_.size(); ++bi) slices.push_back(slice_of(grad_, bi));
  torch::Tensor sq = slices.empty() ? torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64))
                                    : torch::stack(at::_foreach_norm(slices, 2, torch::kFloat64)).square().sum();
  sq = sq.reshape({1}).to(device_);
  world_.all_reduce(sq);
  const double norm = std::sqrt(sq.cpu().item<double>());
  if (max_norm > 0 && std::isfinite(norm)) {
    const double coef = std::min(1.0, max_norm / (norm + 1e-6));
    if (coef < 1.0) grad_.mul_(coef);
  }
  return norm;
}

void ZeroAdamW::zero_grad() {
  torch::NoGradGuard no_grad;
  grad_.zero_();
  for (auto& p : params_)
    if (p.param.grad().defined()) p.param.mutable_grad() = torch::Tensor();
  reset_micro_batch();
  reduced_ = false;
  in_step_ = false;
}

// ---- update -----------------------------------------------------------------------------

void ZeroAdamW::update_bucket(std::size_t bi, double lr, const torch::Tensor& grad) {
  const Bucket& b = buckets_[bi];
  // One fused call per weight-decay rule, as AdamW groups its tensors; the same step tensor
  // for every run (the kernel only reads it).
  for (const bool decay : {true, false}) {
    std::vector<torch::Tensor> ps, gs, ms, vs, st;
    for (const auto& s : b.segments) {
      if (s.decay != decay) continue;
      ps.push_back(slice_of(master_, bi).narrow(0, s.offset, s.length));
      gs.push_back(grad.narrow(0, s.offset, s.length));
      ms.push_back(slice_of(exp_avg_, bi).narrow(0, s.offset, s.length));
      vs.push_back(slice_of(exp_avg_sq_, bi).narrow(0, s.offset, s.length));
      st.push_back(step_);
    }
    if (ps.empty()) continue;
    at::_fused_adamw_(ps, gs, ms, vs, /*max_exp_avg_sqs=*/{}, st, lr, options_.beta1, options_.beta2,
                      decay ? options_.weight_decay : 0.0, options_.eps, /*amsgrad=*/false, /*maximize=*/false);
  }
}

void ZeroAdamW::fetch_gradient(std::size_t bi) {
  const std::size_t k = off_->buffer_of(bi);
  const torch::Tensor src = slice_of(grad_, bi);
  torch::Tensor dst = off_->view(k, torch::kFloat32, buckets_[bi].slice);
#ifdef ODYSSEY_ZERO_CUDA
  if (src.is_cuda()) {
    // On the side stream, after whatever it queued before: this buffer's last upload has
    // read it by then. step() ordered the side stream after the accumulator's last write.
    const c10::cuda::CUDAGuard guard(device_);
    const auto side = off_->side_stream(device_);
    {
      const c10::cuda::CUDAStreamGuard on_side(side);
      dst.copy_(src, /*non_blocking=*/true);
    }
    off_->fetched[k].emplace();
    off_->fetched[k]->record(side);
    return;
  }
#endif
  dst.copy_(src);
}

torch::Tensor ZeroAdamW::upload_bucket(std::size_t bi) {
  const Bucket& b = buckets_[bi];
  const std::size_t k = off_->buffer_of(bi);
  const torch::Tensor src = off_->view(k, b.dtype, b.slice);
#ifdef ODYSSEY_ZERO_CUDA
  if (device_.is_cuda()) {
    const c10::cuda::CUDAGuard guard(device_);
    auto compute = at::cuda::getCurrentCUDAStream(device_.index());
    const auto side = off_->side_stream(device_);
    torch::Tensor local = torch::empty({b.slice}, torch::TensorOptions().dtype(b.dtype).device(device_));
    at::cuda::CUDAEvent allocated;  // earlier compute-stream work on this block first
    allocated.record(compute);
    allocated.block(side);
    {
      const c10::cuda::CUDAStreamGuard on_side(side);
      local.copy_(src, /*non_blocking=*/true);
    }
    off_->uploaded[k].emplace();
    off_->uploaded[k]->record(side);
    off_->uploaded[k]->block(compute);  // the all-gather and the copies after it
    c10::cuda::CUDACachingAllocator::recordStream(local.storage().data_ptr(), side);
    return local;
  }
#endif
  return src.to(device_, /*non_blocking=*/false, /*copy=*/true);
}

void ZeroAdamW::gather_bucket(std::size_t bi, const torch::Tensor& local) {
  const Bucket& b = buckets_[bi];
  const torch::Tensor gathered = world_.all_gather(local);
  for (const auto& e : b.entries) {
    torch::Tensor p = params_[e.param].param.detach();
    p.view({-1}).narrow(0, e.param_offset, e.length).copy_(gathered.narrow(0, e.bucket_offset, e.length));
  }
}

void ZeroAdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  if (!reduced_) reduce_gradients(world_);
  step_.add_(1.0);  // before the kernel, as torch.optim.AdamW does
  if (!off_) {
    for (std::size_t bi = 0; bi < buckets_.size(); ++bi) {
      update_bucket(bi, lr, slice_of(grad_, bi));
      gather_bucket(bi, slice_of(master_, bi).to(buckets_[bi].dtype));
    }
    return;
  }
  if (buckets_.empty()) return;
#ifdef ODYSSEY_ZERO_CUDA
  if (device_.is_cuda()) {  // the downloads read the accumulator after its last write (clipping)
    const c10::cuda::CUDAGuard guard(device_);
    at::cuda::CUDAEvent reduced;
    reduced.record(at::cuda::getCurrentCUDAStream(device_.index()));
    reduced.block(off_->side_stream(device_));
  }
#endif
  // Bucket i in buffer i % 2: while the CPU updates bucket i, the GPU uploads and
  // all-gathers bucket i-1 and downloads bucket i+1's gradient (none of it blocks the host).
  fetch_gradient(0);
  for (std::size_t bi = 0; bi < buckets_.size(); ++bi) {
    const Bucket& b = buckets_[bi];
    const std::size_t k = off_->buffer_of(bi);
    off_->wait_fetched(k);
    if (bi + 1 < buckets_.size()) fetch_gradient(bi + 1);  // into the other buffer
    update_bucket(bi, lr, off_->view(k, torch::kFloat32, b.slice));
    // The download waited for above followed the buffer's last upload on the side stream,
    // so this returns at once; it keeps the host write safe on its own.
    off_->wait_uploaded(k);
    off_->view(k, b.dtype, b.slice).copy_(slice_of(master_, bi));
    gather_bucket(bi, upload_bucket(bi));
  }
}

// ---- checkpoints ------------------------------------------------------------------------

torch::Tensor ZeroAdamW::layout() const {
  std::vector<std::int64_t> v{kLayoutVersion,   world_.size(),   world_.rank(),
                              stage_,           total_elements_, static_cast<std::int64_t>(buckets_.size()),
                              bucket_elements_, digest_};
  for (const auto& b : buckets_) v.push_back(b.padded);
  return torch::tensor(v, torch::kInt64);
}

NamedTensors ZeroAdamW::state() const {
  auto host = [](const torch::Tensor& t) {
    return t.device().is_cpu() ? t.detach().clone() : t.detach().to(torch::kCPU);
  };
  const std::string r = ".rank" + std::to_string(world_.rank());
  return {{"zero.master" + r, host(master_)},
          {"zero.exp_avg" + r, host(exp_avg_)},
          {"zero.exp_avg_sq" + r, host(exp_avg_sq_)},
          {"zero.step", host(step_).reshape({1})},
          {"zero.layout", layout()}};
}

Diagnostics ZeroAdamW::load_state(const NamedTensors& named, const std::string& file) {
  Diagnostics d;
  auto error = [&](const std::string& key, const std::string& message) {
    d.push_back({Severity::Error, file, 0, 0, key, message});
  };
  std::map<std::string, torch::Tensor> by_name(named.begin(), named.end());
  auto it = by_name.find("zero.layout");
  if (it == by_name.end()) {
    error("zero.layout", "missing: this is not a ZeRO optimizer state (was it written by another optimizer?)");
    return d;
  }
  const torch::Tensor want = layout();
  const torch::Tensor got = it->second.to(torch::kCPU).to(torch::kInt64).reshape({-1});
  auto elem = [](const torch::Tensor& t, std::int64_t i) { return i < t.numel() ? t[i].item<std::int64_t>() : -1; };
  const auto w = [&](std::int64_t i) { return elem(want, i); };
  const auto g = [&](std::int64_t i) { return elem(got, i); };
  torch::Tensor same_stage = want.clone();  // the stage may differ: the shard means the same
  same_stage[3] = g(3);
  if (got.numel() < kLayoutFixed || g(0) != kLayoutVersion) {
    error("zero.layout", "has an unknown format (version " + std::to_string(g(0)) + "), expected version " +
                             std::to_string(kLayoutVersion));
  } else if (g(1) != w(1)) {
    error("zero.layout", "was written by a run sharded over " + std::to_string(g(1)) + " processes, this run has " +
                             std::to_string(w(1)) +
                             ": ZeRO optimizer states are per rank and load only at the same world size");
  } else if (g(2) != w(2)) {
    error("zero.layout", "is rank " + std::to_string(g(2)) + "'s state, expected rank " + std::to_string(w(2)) + "'s");
  } else if (g(4) != w(4) || g(7) != w(7)) {
    error("zero.layout", "was written for other trainable parameters (" + std::to_string(g(4)) + " elements, digest " +
                             std::to_string(g(7)) + "), expected " + std::to_string(w(4)) + " elements, digest " +
                             std::to_string(w(7)));
  } else if (!got.equal(same_stage)) {
    error("zero.layout", "was written with buckets of " + std::to_string(g(6)) + " elements (" + std::to_string(g(5)) +
                             " buckets), expected " + std::to_string(w(6)) + " (" + std::to_string(w(5)) + " buckets)");
  }
  if (has_errors(d)) return d;
  const std::string r = ".rank" + std::to_string(world_.rank());
  auto find = [&](const std::string& key, std::int64_t numel) -> torch::Tensor {
    auto f = by_name.find(key);
    if (f == by_name.end()) {
      error(key, "missing from the optimizer state");
      return {};
    }
    if (f->second.numel() != numel) {
      error(key, "has " + std::to_string(f->second.numel()) + " elements, expected " + std::to_string(numel));
      return {};
    }
    return f->second;
  };
  const torch::Tensor m = find("zero.master" + r, shard_total_), ea = find("zero.exp_avg" + r, shard_total_),
                      eas = find("zero.exp_avg_sq" + r, shard_total_), st = find("zero.step", 1);
  if (has_errors(d)) return d;
  torch::NoGradGuard no_grad;
  master_.copy_(m.reshape({-1}));
  exp_avg_.copy_(ea.reshape({-1}));
  exp_avg_sq_.copy_(eas.reshape({-1}));
  step_.copy_(st.reshape({}));
  return d;
}

std::int64_t ZeroAdamW::state_bytes() const {
  if (off_) return static_cast<std::int64_t>(grad_.nbytes());
  return static_cast<std::int64_t>(master_.nbytes() + exp_avg_.nbytes() + exp_avg_sq_.nbytes() + grad_.nbytes() +
                                   step_.nbytes());
}

std::int64_t ZeroAdamW::host_state_bytes() const {
  if (!off_) return 0;
  auto b = static_cast<std::int64_t>(master_.nbytes() + exp_avg_.nbytes() + exp_avg_sq_.nbytes() + step_.nbytes());
  for (const auto& t : off_->staging) b += static_cast<std::int64_t>(t.nbytes());
  return b;
}

}  // namespace odyssey::train
