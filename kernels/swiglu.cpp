// swiglu as a torch::autograd::Function with a hand-written backward (swiglu.h). CUDA
// tensors run swiglu.cu's kernels; other tensors the same fused math in ATen ops. Saved for
// backward: gate and up only (views of the caller's tensors, no copies).
#include "kernels/swiglu.h"
#include "kernels/dtype.h"

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

// down(swiglu(gate, up)) with down = weight (+ bias) (+ scaling * lora_b(lora_a(.)), the
// adapters cast to the activation's dtype as LinearImpl's fused path does). Saved: gate, up,
// the weights and the r-wide lora_a output, not the activation: backward computes the
// activation's gradient first, then the SwiGLU backward writes the activation into that
// buffer in the same pass, and the weight gradients take it from there.
struct SwiGluDown : torch::autograd::Function<SwiGluDown> {
  // Absent tensors are nullopt (autograd gives them no edge and no gradient slot).
  using Opt = std::optional<torch::Tensor>;

  static variable_list forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up,
                               const torch::Tensor& weight, const Opt& bias, const Opt& lora_a, const Opt& lora_b,
                               double scaling) {
    const torch::Tensor act = swiglu_forward(gate, up);
    torch::Tensor y = at::linear(act, weight, bias);
    torch::Tensor a;
    if (lora_a) {
      const auto dt = act.scalar_type();
      a = at::linear(act, lora_a->to(dt));
      y = y + at::linear(a, lora_b->to(dt)) * scaling;
    }
    ctx->save_for_backward({gate, up, weight, lora_a.value_or(torch::Tensor()), lora_b.value_or(torch::Tensor()), a});
    ctx->saved_data["scaling"] = scaling;
    ctx->saved_data["bias"] = bias.has_value();
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& gate = saved[0];
    const torch::Tensor& up = saved[1];
    const torch::Tensor& weight = saved[2];
    const torch::Tensor& lora_a = saved[3];
    const torch::Tensor& lora_b = saved[4];
    const torch::Tensor& a = saved[5];
    const double scaling = ctx->saved_data["scaling"].toDouble();
    const bool has_bias = ctx->saved_data["bias"].toBool();
    const bool lora = lora_a.defined();
    // Edges exist for present tensors only: gate, up, weight, then bias, lora_a, lora_b if given.
    const std::size_t bias_edge = 3, a_edge = has_bias ? 4 : 3, b_edge = a_edge + 1;
    const bool want_weight = ctx->needs_input_grad(2), want_bias = has_bias && ctx->needs_input_grad(bias_edge);
    const bool want_a = lora && ctx->needs_input_grad(a_edge), want_b = lora && ctx->needs_input_grad(b_edge);
    const auto dt = gate.scalar_type();
    const std::int64_t inter = gate.size(-1), out = weight.size(0);
    const torch::Tensor dy = grads[0].reshape({-1, out});

    torch::Tensor dact = at::mm(dy, weight);  // [N, I]
    torch::Tensor ds, da;                      // scaling * dy, and the gradient of lora_a's output
    if (lora) {
      ds = dy * scaling;
      da = at::mm(ds, lora_b.to(dt));
      dact.addmm_(da, lora_a.to(dt));
    }
    auto [dgate, dup] = swiglu_backward(dact, gate, up, /*recompute=*/want_weight || want_a);
    const torch::Tensor act = dact.view({-1, inter});  // the activation now, when recomputed
    torch::Tensor dweight, dbias, dlora_a, dlora_b;
    if (want_weight) dweight = at::mm(dy.t(), act);
    if (want_bias) dbias = dy.sum(0);
    if (want_a) dlora_a = at::mm(da.t(), act).to(lora_a.scalar_type());
    if (want_b) dlora_b = at::mm(ds.t(), a.reshape({-1, a.size(-1)})).to(lora_b.scalar_type());
    return {dgate, dup, dweight, dbias, dlora_a, dlora_b, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  check_inputs(gate, up);
  return SwiGlu::apply(gate, up)[0];
}

torch::Tensor swiglu_down(const torch::Tensor& gate, const torch::Tensor& up, const DownProjection& down) {
  check_inputs(gate, up);
  TORCH_CHECK(down.weight.defined() && down.weight.dim() == 2 && down.weight.size(1) == gate.size(-1),
              "swiglu_down: the down weight must be [out, ", gate.size(-1), "], got ",
              down.weight.defined() ? down.weight.sizes() : torch::IntArrayRef{});
  TORCH_CHECK(down.lora_a.defined() == down.lora_b.defined(), "swiglu_down: lora_a and lora_b come together");
  auto opt = [](const torch::Tensor& t) { return t.defined() ? std::optional<torch::Tensor>(t) : std::nullopt; };
  return SwiGluDown::apply(gate, up, down.weight, opt(down.bias), opt(down.lora_a), opt(down.lora_b),
                           down.lora_scaling)[0];
}

}  // namespace odyssey::kernels
