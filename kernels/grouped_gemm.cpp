#include "kernels/grouped_gemm.h"

namespace odyssey::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// y = grouped x · wᵀ; dx = grouped dy · w; dw[e] = dy[group e]ᵀ · x[group e] (the 2-d by
// 2-d form of _grouped_mm, groups along the token dimension).
struct GroupedLinear : public torch::autograd::Function<GroupedLinear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& ends) {
    ctx->save_for_backward({x, w, ends});
    return at::_grouped_mm(x, w.transpose(1, 2), ends);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1], &ends = saved[2];
    const torch::Tensor dy = grads[0].contiguous();  // an expanded gradient has 0 strides
    torch::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) dx = at::_grouped_mm(dy, w, ends);
    if (ctx->needs_input_grad(1)) dw = at::_grouped_mm(dy.t(), x, ends);
    return {dx, dw, torch::Tensor()};
  }
};

}  // namespace

bool grouped_gemm_applies(const torch::Tensor& x, const torch::Tensor& w) {
  if (x.scalar_type() != w.scalar_type() || x.size(0) == 0) return false;
  // ATen's grouped GEMM: bf16 on CUDA (sm80+); fp32 and bf16 on the CPU. Rows of both
  // operands 16-byte aligned.
  const bool dtype_ok = x.is_cuda()
                            ? x.scalar_type() == torch::kBFloat16
                            : x.is_cpu() && (x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kBFloat16);
  const std::int64_t per16 = 16 / static_cast<std::int64_t>(x.element_size());
  return dtype_ok && x.size(1) % per16 == 0 && w.size(1) % per16 == 0;
}

torch::Tensor grouped_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& ends) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 3 && x.size(1) == w.size(2),
              "grouped_linear: x [N, in] and w [E, out, in], got ", x.sizes(), " and ", w.sizes());
  TORCH_CHECK(ends.dim() == 1 && ends.size(0) == w.size(0) && ends.scalar_type() == torch::kInt32,
              "grouped_linear: ends int32 [", w.size(0), "], got ", ends.sizes(), " ", ends.scalar_type());
  if (!grouped_gemm_applies(x, w)) return grouped_linear_reference(x, w, ends);
  return GroupedLinear::apply(x.contiguous(), w.contiguous(), ends.to(x.device()));
}

}  // namespace odyssey::kernels
