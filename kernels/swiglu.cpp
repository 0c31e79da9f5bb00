// swiglu as a torch::autograd::Function with a hand-written backward (swiglu.h). CUDA
// tensors run swiglu.cu's kernels; other tensors the same fused math in ATen ops. Saved for
// backward: gate and up only (views of the caller's tensors, no copies).
#include "kernels/swiglu.h"
#include "kernels/dtype.h"

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

struct SwiGlu : torch::autograd::Function<SwiGlu> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    torch::Tensor y;
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
    if (gate.is_cuda()) {
      const c10::cuda::CUDAGuard guard(gate.device());
      const torch::Tensor g = rows_view(gate);
      const torch::Tensor u = rows_view(up);
      y = torch::empty(gate.sizes(), gate.options().memory_format(torch::MemoryFormat::Contiguous));
      cuda::swiglu_fwd(g.data_ptr(), g.stride(0), u.data_ptr(), u.stride(0), y.data_ptr(), g.size(0), g.size(1),
                       dtype_code(gate.scalar_type()), at::cuda::getCurrentCUDAStream().stream());
    } else
#endif
    {
      y = torch::silu(gate) * up;  // silu rounded to the dtype, then the product rounded
    }
    ctx->save_for_backward({gate, up});
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& gate = saved[0];
    const torch::Tensor& up = saved[1];
    const torch::Tensor& dy = grads[0];
    torch::Tensor dgate, dup;
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
    if (gate.is_cuda()) {
      const c10::cuda::CUDAGuard guard(gate.device());
      const torch::Tensor g = rows_view(gate);
      const torch::Tensor u = rows_view(up);
      const torch::Tensor d = dy.contiguous();
      const auto opts = gate.options().memory_format(torch::MemoryFormat::Contiguous);
      dgate = torch::empty(gate.sizes(), opts);
      dup = torch::empty(gate.sizes(), opts);
      cuda::swiglu_bwd(d.data_ptr(), g.data_ptr(), g.stride(0), u.data_ptr(), u.stride(0), dgate.data_ptr(),
                       dup.data_ptr(), g.size(0), g.size(1), dtype_code(gate.scalar_type()),
                       at::cuda::getCurrentCUDAStream().stream());
    } else
#endif
    {
      // silu'(g) = sig(g) * (1 + g * (1 - sig(g))), everything in fp32, rounded once.
      const auto dtype = gate.scalar_type();
      const torch::Tensor g = gate.to(torch::kFloat32);
      const torch::Tensor sig = torch::sigmoid(g);
      const torch::Tensor d = dy.to(torch::kFloat32);
      dup = (d * g * sig).to(dtype);
      dgate = (d * up.to(torch::kFloat32) * sig * (1 + g * (1 - sig))).to(dtype);
    }
    return {dgate, dup};
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  check_inputs(gate, up);
  return SwiGlu::apply(gate, up)[0];
}

}  // namespace odyssey::kernels
