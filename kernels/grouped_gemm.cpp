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
    // x only serves dw: a frozen w (LoRA on attention of a MoE model) keeps none of it.
    ctx->save_for_backward({w.requires_grad() ? x : torch::Tensor(), w, ends});
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

// y[group e] = x[group e] · w[e]ᵀ with no autograd, or x[group e] · w[e] when `transposed`: the
// grouped GEMM where it applies (the operands as GroupedLinear passes them), else the
// per-expert loop (what grouped_linear computes, without its graph).
torch::Tensor grouped_product(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& ends,
                              bool transposed) {
  torch::NoGradGuard no_grad;
  const torch::Tensor wt = w.transpose(1, 2);
  if (grouped_gemm_applies(x, transposed ? wt : w)) return at::_grouped_mm(x.contiguous(), transposed ? w : wt, ends);
  return grouped_linear_reference(x, transposed ? wt : w, ends);
}

// grouped_linear on a 4-bit stack: the weight is a capsule, dequantized in forward and again in
// backward (dx = grouped dy · w, as GroupedLinear's backward computes it).
struct GroupedLinearQuant4 : public torch::autograd::Function<GroupedLinearQuant4> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const c10::intrusive_ptr<Quant4Weight>& w,
                               const torch::Tensor& ends) {
    ctx->saved_data["w"] = c10::IValue::make_capsule(w);
    ctx->save_for_backward({ends});
    return grouped_product(x, dequantize_4bit(*w, x.scalar_type()), ends, false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto w = c10::static_intrusive_pointer_cast<Quant4Weight>(ctx->saved_data["w"].toCapsule());
    const torch::Tensor ends = ctx->get_saved_variables()[0];
    torch::Tensor dx;
    if (ctx->needs_input_grad(0)) {
      const torch::Tensor dy = grads[0].contiguous();  // an expanded gradient has 0 strides
      dx = grouped_product(dy, dequantize_4bit(*w, dy.scalar_type()), ends, true);
    }
    return {dx, torch::Tensor(), torch::Tensor()};
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

torch::Tensor grouped_linear_quant4(const torch::Tensor& x, const c10::intrusive_ptr<Quant4Weight>& w,
                                    const torch::Tensor& ends) {
  TORCH_CHECK(w && w->shape.size() == 3, "grouped_linear_quant4: a 3-d 4-bit weight [E, out, in] is needed");
  TORCH_CHECK(x.dim() == 2 && x.size(1) == w->shape[2], "grouped_linear_quant4: x [N, in] for a weight [", w->shape[0],
              ", ", w->shape[1], ", ", w->shape[2], "], got ", x.sizes());
  TORCH_CHECK(ends.dim() == 1 && ends.size(0) == w->shape[0] && ends.scalar_type() == torch::kInt32,
              "grouped_linear_quant4: ends int32 [", w->shape[0], "], got ", ends.sizes(), " ", ends.scalar_type());
  TORCH_CHECK(x.device() == w->device(), "grouped_linear_quant4: the input is on ", x.device(), ", the weight on ",
              w->device());
  return GroupedLinearQuant4::apply(x, w, ends.to(x.device()));
}

}  // namespace odyssey::kernels
