#include "model/activation_checkpoint.h"

#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>
#if __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#define ODYSSEY_HAVE_CUDA_RUNTIME 1
#endif

#include <atomic>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace odyssey::model {

namespace {
std::atomic<std::int64_t> g_offloaded{0};
}  // namespace

std::int64_t offloaded_bytes_total() { return g_offloaded.load(); }

// The checkpointed inputs of one forward, in order, and the side stream that moves them.
class OffloadChain {
 public:
  struct Entry {
    torch::Tensor host;         // pinned copy
    torch::Tensor device;       // the GPU copy while it exists (forward until the D2H is queued; prefetched)
    c10::Device where = c10::Device(c10::kCPU);
#ifdef ODYSSEY_HAVE_CUDA_RUNTIME
    std::optional<at::cuda::CUDAEvent> ready;  // recorded on the side stream after the H2D copy
#endif
  };

  // Forward: queue the copy of `x` to the host; returns its index in the chain.
  std::size_t push(const torch::Tensor& x) {
    Entry e;
    e.where = x.device();
#ifdef ODYSSEY_HAVE_CUDA_RUNTIME
    const c10::cuda::CUDAGuard guard(x.device());
    auto compute = at::cuda::getCurrentCUDAStream(x.device().index());
    if (!side_) side_ = at::cuda::getStreamFromPool(/*isHighPriority=*/false, x.device().index());
    at::cuda::CUDAEvent produced;
    produced.record(compute);
    produced.block(*side_);
    e.host = torch::empty(x.sizes(), x.options().device(torch::kCPU).pinned_memory(true));
    {
      const c10::cuda::CUDAStreamGuard on_side(*side_);
      e.host.copy_(x, /*non_blocking=*/true);
    }
    // The block must not be handed out again before the side stream has read it.
    c10::cuda::CUDACachingAllocator::recordStream(x.storage().data_ptr(), *side_);
    g_offloaded += static_cast<std::int64_t>(x.nbytes());
#else
    e.host = x;
#endif
    entries_.push_back(std::move(e));
    return entries_.size() - 1;
  }

  // Backward: start bringing entry i back (no-op when already there or out of range).
  void prefetch(std::size_t i) {
    if (i >= entries_.size() || entries_[i].device.defined()) return;
    Entry& e = entries_[i];
#ifdef ODYSSEY_HAVE_CUDA_RUNTIME
    const c10::cuda::CUDAGuard guard(e.where);
    auto compute = at::cuda::getCurrentCUDAStream(e.where.index());
    e.device = torch::empty(e.host.sizes(), e.host.options().device(e.where).pinned_memory(false));
    at::cuda::CUDAEvent allocated;  // earlier compute work on this block is done first
    allocated.record(compute);
    allocated.block(*side_);
    {
      const c10::cuda::CUDAStreamGuard on_side(*side_);
      e.device.copy_(e.host, /*non_blocking=*/true);
    }
    e.ready.emplace();
    e.ready->record(*side_);
    c10::cuda::CUDACachingAllocator::recordStream(e.device.storage().data_ptr(), *side_);
    g_offloaded += static_cast<std::int64_t>(e.host.nbytes());
#else
    e.device = e.host;
#endif
  }

  // Backward: entry i on its device, ready for the compute stream; the chain lets go of it.
  torch::Tensor take(std::size_t i) {
    prefetch(i);
    Entry& e = entries_[i];
#ifdef ODYSSEY_HAVE_CUDA_RUNTIME
    if (e.ready) e.ready->block(at::cuda::getCurrentCUDAStream(e.where.index()));
#endif
    torch::Tensor out = std::move(e.device);
    e.device = torch::Tensor();
    e.host = torch::Tensor();  // the pinned block returns to the host allocator's cache
    return out;
  }

 private:
  std::vector<Entry> entries_;
#ifdef ODYSSEY_HAVE_CUDA_RUNTIME
  std::optional<c10::cuda::CUDAStream> side_;
#endif
};

std::shared_ptr<OffloadChain> make_offload_chain() { return std::make_shared<OffloadChain>(); }

namespace {

// What backward needs besides the saved input: the function and the RNG states of forward.
struct Recompute : torch::CustomClassHolder {
  std::function<torch::Tensor(const torch::Tensor&)> fn;
  torch::Tensor cpu_rng;
  torch::Tensor cuda_rng;
  c10::DeviceIndex cuda_device = -1;
  std::shared_ptr<OffloadChain> offload;  // the input went to the host: entry `slot`
  std::size_t slot = 0;
};

at::Generator cuda_generator(c10::DeviceIndex index) {
  return at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::CUDA, index));
}

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               c10::intrusive_ptr<Recompute> state) {
    state->cpu_rng = at::detail::getDefaultCPUGenerator().get_state();
    if (input.is_cuda()) {
      state->cuda_device = input.device().index();
      state->cuda_rng = cuda_generator(state->cuda_device).get_state();
    }
    if (state->offload && input.is_cuda()) {
      state->slot = state->offload->push(input);
    } else {
      state->offload.reset();
      ctx->save_for_backward({input});
    }
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    torch::NoGradGuard no_grad;
    return state->fn(input);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["state"].toCapsule());
    torch::Tensor saved;
    if (state->offload) {
      saved = state->offload->take(state->slot);
      // Bring the next input backward needs while this layer recomputes.
      if (state->slot > 0) state->offload->prefetch(state->slot - 1);
    } else {
      saved = ctx->get_saved_variables()[0];
    }
    // Re-run with forward's RNG state, then give the generators their current state back.
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    const torch::Tensor cpu_now = cpu.get_state();
    cpu.set_state(state->cpu_rng);
    torch::Tensor cuda_now;
    if (state->cuda_device >= 0) {
      cuda_now = cuda_generator(state->cuda_device).get_state();
      cuda_generator(state->cuda_device).set_state(state->cuda_rng);
    }
    torch::Tensor x = saved.detach().requires_grad_(true);
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      y = state->fn(x);
    }
    cpu.set_state(cpu_now);
    if (state->cuda_device >= 0) cuda_generator(state->cuda_device).set_state(cuda_now);
    if (y.requires_grad()) torch::autograd::backward({y}, {grad_outputs[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpointed(std::function<torch::Tensor(const torch::Tensor&)> fn, const torch::Tensor& input,
                           const std::shared_ptr<OffloadChain>& offload) {
  TORCH_CHECK(input.requires_grad(), "checkpointed(): the input must require grad");
  auto state = c10::make_intrusive<Recompute>();
  state->fn = std::move(fn);
  state->offload = offload;
  return CheckpointFunction::apply(input, state);
}

}  // namespace odyssey::model
