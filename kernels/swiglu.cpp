// swiglu as a torch::autograd::Function with a hand-written backward (swiglu.h). CUDA
// tensors run swiglu.cu's kernels; other tensors the same fused math in ATen ops. Saved for
// backward: gate and up only (views of the caller's tensors, no copies).
#include "kernels/swiglu.h"
#include "kernels/dtype.h"
#include "kernels/linear_autograd.h"

#include <optional>
#include <utility>

#ifdef ODYSSEY_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/swiglu_launch.h"
#endif

namespace odyssey::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void check_inputs(const torch::Tensor& gate, const torch::Tensor& up) {
  TORCH_CHECK(gate.defined() && up.defined(), "swiglu: gate and up must be defined");
  TORCH_CHECK(gate.sizes() == up.sizes(), "swiglu: gate shape ", gate.sizes(), " differs from up shape ", up.sizes());
  TORCH_CHECK(gate.dim() >= 1 && gate.size(-1) > 0, "swiglu: gate must be [..., I] with I > 0, got ", gate.sizes());
  TORCH_CHECK(supported_dtype(gate.scalar_type()), "swiglu: gate must be float32, bfloat16 or float16, got ",
              gate.scalar_type());
  TORCH_CHECK(up.scalar_type() == gate.scalar_type(), "swiglu: up dtype ", up.scalar_type(),
              " differs from gate dtype ", gate.scalar_type());
  TORCH_CHECK(up.device() == gate.device(), "swiglu: up is on ", up.device(), ", gate on ", gate.device());
  TORCH_CHECK(gate.stride(-1) == 1 || gate.size(-1) == 1, "swiglu: gate's last dimension must be contiguous, strides ",
              gate.strides());
  TORCH_CHECK(up.stride(-1) == 1 || up.size(-1) == 1, "swiglu: up's last dimension must be contiguous, strides ",
              up.strides());
}

#ifdef ODYSSEY_HAVE_CUDA_KERNELS
// [rows, I] with contiguous rows: a view when the leading dimensions collapse (e.g. a half
// of a [..., 2I] tensor), otherwise a contiguous copy.
torch::Tensor rows_view(const torch::Tensor& t) {
  torch::Tensor r = t.reshape({-1, t.size(-1)});
  if (r.size(1) > 1 && r.stride(1) != 1) r = r.contiguous();
  return r;
}
#endif

torch::Tensor swiglu_forward(const torch::Tensor& gate, const torch::Tensor& up) {
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  if (gate.is_cuda()) {
    const c10::cuda::CUDAGuard guard(gate.device());
    const torch::Tensor g = rows_view(gate);
    const torch::Tensor u = rows_view(up);
    torch::Tensor y = torch::empty(gate.sizes(), gate.options().memory_format(torch::MemoryFormat::Contiguous));
    cuda::swiglu_fwd(g.data_ptr(), g.stride(0), u.data_ptr(), u.stride(0), y.data_ptr(), g.size(0), g.size(1),
                     dtype_code(gate.scalar_type()), at::cuda::getCurrentCUDAStream().stream());
    return y;
  }
#endif
  return torch::silu(gate) * up;  // silu rounded to the dtype, then the product rounded
}

// dgate and dup from dy; with `recompute`, dy (an [.., I] tensor the caller owns) is
// overwritten with swiglu(gate, up) as the forward computes it.
std::pair<torch::Tensor, torch::Tensor> swiglu_backward(torch::Tensor& dy, const torch::Tensor& gate,
                                                        const torch::Tensor& up, bool recompute) {
  torch::Tensor dgate, dup;
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  if (gate.is_cuda()) {
    const c10::cuda::CUDAGuard guard(gate.device());
    const torch::Tensor g = rows_view(gate);
    const torch::Tensor u = rows_view(up);
    if (!dy.is_contiguous()) dy = dy.contiguous();
    const auto opts = gate.options().memory_format(torch::MemoryFormat::Contiguous);
    dgate = torch::empty(gate.sizes(), opts);
    dup = torch::empty(gate.sizes(), opts);
    cuda::swiglu_bwd(dy.data_ptr(), g.data_ptr(), g.stride(0), u.data_ptr(), u.stride(0), dgate.data_ptr(),
                     dup.data_ptr(), recompute ? dy.data_ptr() : nullptr, g.size(0), g.size(1),
                     dtype_code(gate.scalar_type()), at::cuda::getCurrentCUDAStream().stream());
    return {dgate, dup};
  }
#endif
  // silu'(g) = sig(g) * (1 + g * (1 - sig(g))), everything in fp32, rounded once.
  const auto dtype = gate.scalar_type();
  const torch::Tensor g = gate.to(torch::kFloat32);
  const torch::Tensor sig = torch::sigmoid(g);
  const torch::Tensor d = dy.to(torch::kFloat32).view(gate.sizes());
  dup = (d * g * sig).to(dtype);
  dgate = (d * up.to(torch::kFloat32) * sig * (1 + g * (1 - sig))).to(dtype);
  if (recompute) dy = swiglu_forward(gate, up);
  return {dgate, dup};
}

struct SwiGlu : torch::autograd::Function<SwiGlu> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    ctx->save_for_backward({gate, up});
    return {swiglu_forward(gate, up)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    torch::Tensor dy = grads[0];
    auto [dgate, dup] = swiglu_backward(dy, saved[0], saved[1], /*recompute=*/false);
    return {dgate, dup};
  }
};

// down(swiglu(gate, up)) with down a projection of linear.h. Saved: gate, up, the weights and
// the r-wide lora_a output, not the activation: backward computes the activation's gradient
// first, then the SwiGLU backward writes the activation into that buffer in the same pass,
// and the weight gradients take it from there.
struct SwiGluDown : torch::autograd::Function<SwiGluDown> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up,
                               const torch::Tensor& weight, const std::optional<torch::Tensor>& bias,
                               const std::optional<torch::Tensor>& lora_a, const std::optional<torch::Tensor>& lora_b,
                               double scaling) {
    const LinearWeights w = detail::weights_of(weight, bias, lora_a, lora_b, scaling);
    torch::Tensor a;
    const torch::Tensor y = detail::linear_forward(swiglu_forward(gate, up), w, &a);
    ctx->save_for_backward({gate, up, w.weight, w.lora_a, w.lora_b, a});
    detail::remember_linear(ctx, w);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& gate = saved[0];
    const torch::Tensor& up = saved[1];
    const LinearWeights w = detail::saved_weights(ctx, saved[2], saved[3], saved[4]);
    const detail::LinearWants want = detail::linear_wants(ctx, /*first_edge=*/2, w);
    const std::int64_t inter = gate.size(-1);
    detail::LinearBackward b =
        detail::linear_input_grad(grads[0].reshape({-1, w.weight.size(0)}), w, gate.scalar_type());
    auto [dgate, dup] = swiglu_backward(b.input_grad, gate, up, /*recompute=*/want.weight || want.lora_a);
    // b.input_grad holds the activation now (when recomputed).
    const detail::LinearGrads g = detail::linear_weight_grads(b, b.input_grad.view({-1, inter}), saved[5], w,
                                                              want.weight, want.bias, want.lora_a, want.lora_b);
    return {dgate, dup, g.weight, g.bias, g.lora_a, g.lora_b, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  check_inputs(gate, up);
  return SwiGlu::apply(gate, up)[0];
}

torch::Tensor swiglu_down(const torch::Tensor& gate, const torch::Tensor& up, const LinearWeights& down) {
  check_inputs(gate, up);
  detail::check_linear(down, gate.size(-1), "swiglu_down");
  return SwiGluDown::apply(gate, up, down.weight, detail::opt(down.bias), detail::opt(down.lora_a),
                           detail::opt(down.lora_b), down.lora_scaling)[0];
}

}  // namespace odyssey::kernels
