#include "model/activation_checkpoint.h"

#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/linear.h"

#include <memory>
#include <utility>
#include <vector>

namespace odyssey::model {

namespace {

using Fn = std::function<torch::Tensor(const torch::Tensor&)>;

thread_local int recording_reruns = 0;  // nesting depth of recording re-runs on this thread

// Marks one recording re-run (recomputing_for_backward()) for its scope.
class RerunScope {
 public:
  RerunScope() { ++recording_reruns; }
  ~RerunScope() { --recording_reruns; }
  RerunScope(const RerunScope&) = delete;
  RerunScope& operator=(const RerunScope&) = delete;
};

// What backward needs besides the saved input: the functions and the RNG states each had in
// forward, and the token rows LoRA dropout drew for (kernels::LoraDropoutRows).
struct Recompute : torch::CustomClassHolder {
  std::vector<Fn> fns;
  std::vector<torch::Tensor> cpu_rng, cuda_rng;  // per function
  torch::Tensor dropout_rows;
  c10::DeviceIndex cuda_device = -1;
  std::shared_ptr<OffloadChain> offload;  // the input went to the host: entry `slot`
  std::size_t slot = 0;
};

at::Generator cuda_generator(c10::DeviceIndex index) {
  return at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::CUDA, index));
}

// The generators' states as function j of `state` found them in forward, and the forward's LoRA
// dropout rows, for the duration of one call; the current states come back afterwards (dropout
// in backward's hooks, the next forward, draw as if no recomputation had run).
class ForwardRng {
 public:
  ForwardRng(const Recompute& state, std::size_t j) : cuda_device_(state.cuda_device), rows_(state.dropout_rows) {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    cpu_now_ = cpu.get_state();
    cpu.set_state(state.cpu_rng[j]);
    if (cuda_device_ >= 0) {
      at::Generator cuda = cuda_generator(cuda_device_);
      cuda_now_ = cuda.get_state();
      cuda.set_state(state.cuda_rng[j]);
    }
  }
  ~ForwardRng() {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    cpu.set_state(cpu_now_);
    if (cuda_device_ >= 0) {
      at::Generator cuda = cuda_generator(cuda_device_);
      cuda.set_state(cuda_now_);
    }
  }
  ForwardRng(const ForwardRng&) = delete;
  ForwardRng& operator=(const ForwardRng&) = delete;

 private:
  c10::DeviceIndex cuda_device_;
  torch::Tensor cpu_now_, cuda_now_;
  kernels::LoraDropoutRows rows_;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               c10::intrusive_ptr<Recompute> state) {
    if (input.is_cuda()) state->cuda_device = input.device().index();
    if (state->offload && input.is_cuda()) {
      state->slot = state->offload->push(input);
    } else {
      state->offload.reset();
      ctx->save_for_backward({input});
    }
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    state->dropout_rows = kernels::LoraDropoutRows::current();
    torch::NoGradGuard no_grad;
    torch::Tensor x = input;
    for (const Fn& fn : state->fns) {
      state->cpu_rng.push_back(at::detail::getDefaultCPUGenerator().get_state());
      if (state->cuda_device >= 0) state->cuda_rng.push_back(cuda_generator(state->cuda_device).get_state());
      x = fn(x);
    }
    return x;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["state"].toCapsule());
    torch::Tensor saved;
    if (state->offload) {
      saved = state->offload->take(state->slot);
      // Bring the next input backward needs while this segment recomputes.
      if (state->slot > 0) state->offload->prefetch(state->slot - 1);
    } else {
      saved = ctx->get_saved_variables()[0];
    }
    // The inputs of the segment's later functions, rebuilt without recording.
    std::vector<torch::Tensor> inputs{saved.detach()};
    saved = torch::Tensor();
    for (std::size_t j = 0; j + 1 < state->fns.size(); ++j) {
      torch::NoGradGuard no_grad;  // values read: not a recording re-run
      ForwardRng rng(*state, j);
      inputs.push_back(state->fns[j](inputs[j]));
    }
    torch::Tensor grad = grad_outputs[0];
    for (std::size_t j = state->fns.size(); j-- > 0;) {
      torch::Tensor x = inputs[j].detach().requires_grad_(true);
      inputs[j] = torch::Tensor();
      torch::Tensor y;
      {
        ForwardRng rng(*state, j);
        torch::AutoGradMode enable(true);
        RerunScope rerun;
        y = state->fns[j](x);
      }
      if (!y.requires_grad() || !grad.defined()) return {torch::Tensor(), torch::Tensor()};
      torch::autograd::backward({y}, {grad});
      grad = x.grad();
    }
    return {grad, torch::Tensor()};
  }
};

}  // namespace

bool recomputing_for_backward() { return recording_reruns > 0; }

torch::Tensor checkpointed(std::function<torch::Tensor(const torch::Tensor&)> fn, const torch::Tensor& input,
                           const std::shared_ptr<OffloadChain>& offload) {
  TORCH_CHECK(input.requires_grad(), "checkpointed(): the input must require grad");
  return checkpointed_segment({std::move(fn)}, input, offload);
}

torch::Tensor checkpointed_segment(std::vector<Fn> fns, const torch::Tensor& input,
                                   const std::shared_ptr<OffloadChain>& offload) {
  TORCH_CHECK(input.requires_grad(), "checkpointed_segment(): the input must require grad");
  TORCH_CHECK(!fns.empty(), "checkpointed_segment(): no function");
  auto state = c10::make_intrusive<Recompute>();
  state->fns = std::move(fns);
  state->offload = offload;
  return CheckpointFunction::apply(input, state);
}

}  // namespace odyssey::model
