#include "model/activation_checkpoint.h"

#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>

#include <memory>
#include <utility>

namespace odyssey::model {

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
