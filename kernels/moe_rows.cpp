// combine_rows as a torch::autograd::Function with a hand-written backward, and sum_rows
// (moe_rows.h). CUDA tensors run moe_rows.cu's kernels; others the same math in ATen ops.
#include "kernels/moe_rows.h"
#include "kernels/dtype.h"

#ifdef ODYSSEY_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/moe_rows_launch.h"
#endif

namespace odyssey::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void check_rows(const torch::Tensor& rows, const torch::Tensor& index, std::int64_t k, const char* what) {
  TORCH_CHECK(rows.dim() == 2, what, ": rows [M, h], got ", rows.sizes());
  TORCH_CHECK(supported_dtype(rows.scalar_type()), what, ": rows must be float32, bfloat16 or float16, got ",
              rows.scalar_type());
  TORCH_CHECK(index.dim() == 1 && index.scalar_type() == torch::kInt64 && index.device() == rows.device(), what,
              ": index int64 [N·k] on ", rows.device(), ", got ", index.sizes(), " ", index.scalar_type(), " on ",
              index.device());
  TORCH_CHECK(k > 0 && index.size(0) % k == 0, what, ": ", index.size(0), " indices are not whole tokens of ", k);
}

// y [N, h] = Σ_c rows[index[n·k + c]] · w[n·k + c] (w fp32 [N·k], or undefined: 1).
torch::Tensor combine_forward(const torch::Tensor& rows, const torch::Tensor& index, const torch::Tensor& w,
                              std::int64_t k) {
  const std::int64_t n = index.size(0) / k, h = rows.size(1);
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  if (rows.is_cuda()) {
    const c10::cuda::CUDAGuard guard(rows.device());
    const torch::Tensor r = rows.contiguous();
    torch::Tensor y = torch::empty({n, h}, r.options());
    cuda::combine_rows_fwd(r.data_ptr(), index.data_ptr<std::int64_t>(), w.defined() ? w.data_ptr<float>() : nullptr,
                           y.data_ptr(), n, k, h, dtype_code(r.scalar_type()),
                           at::cuda::getCurrentCUDAStream().stream());
    return y;
  }
#endif
  torch::Tensor g = rows.index_select(0, index).to(torch::kFloat32).view({n, k, h});
  if (w.defined()) g = g * w.view({n, k, 1});
  return g.sum(1).to(rows.scalar_type());
}

struct CombineRows : public torch::autograd::Function<CombineRows> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& rows, const torch::Tensor& index,
                               const torch::Tensor& order, const torch::Tensor& weights) {
    const std::int64_t k = weights.size(1);
    const torch::Tensor w = weights.detach().to(torch::kFloat32).contiguous().view({-1});
    // rows only serve d weights.
    ctx->save_for_backward({weights.requires_grad() ? rows : torch::Tensor(), order, w});
    ctx->saved_data["k"] = k;
    ctx->saved_data["weights_dtype"] = weights.scalar_type();
    return combine_forward(rows, index, w, k);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &rows = saved[0], &order = saved[1], &w = saved[2];
    const std::int64_t k = ctx->saved_data["k"].toInt();
    const auto wdtype = ctx->saved_data["weights_dtype"].toScalarType();
    const bool want_w = ctx->needs_input_grad(3) && rows.defined();
    const torch::Tensor dy = grads[0].contiguous();
    const std::int64_t m = order.size(0), h = dy.size(1);
    torch::Tensor d_rows, d_w;
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
    if (dy.is_cuda()) {
      const c10::cuda::CUDAGuard guard(dy.device());
      d_rows = torch::empty({m, h}, dy.options());
      if (want_w) d_w = torch::empty({m}, w.options());
      cuda::combine_rows_bwd(dy.data_ptr(), want_w ? rows.contiguous().data_ptr() : nullptr,
                             order.data_ptr<std::int64_t>(), w.data_ptr<float>(), d_rows.data_ptr(),
                             want_w ? d_w.data_ptr<float>() : nullptr, m, k, h, dtype_code(dy.scalar_type()),
                             at::cuda::getCurrentCUDAStream().stream());
    }
#endif
    if (!d_rows.defined()) {
      const torch::Tensor d = dy.to(torch::kFloat32).index_select(0, order.div(k, "floor"));  // [M, h]: dy[n]
      d_rows = (d * w.index_select(0, order).unsqueeze(1)).to(dy.scalar_type());
      if (want_w) d_w = torch::empty({m}, w.options()).index_put_({order}, (d * rows.to(torch::kFloat32)).sum(1));
    }
    if (d_w.defined()) d_w = d_w.view({m / k, k}).to(wdtype);
    return {d_rows, torch::Tensor(), torch::Tensor(), d_w};
  }
};

}  // namespace

torch::Tensor combine_rows(const torch::Tensor& rows, const torch::Tensor& index, const torch::Tensor& order,
                           const torch::Tensor& weights) {
  TORCH_CHECK(weights.dim() == 2 && weights.is_floating_point(), "combine_rows: weights [N, k], got ", weights.sizes(),
              " ", weights.scalar_type());
  check_rows(rows, index, weights.size(1), "combine_rows");
  TORCH_CHECK(index.size(0) == weights.numel() && rows.size(0) == index.size(0), "combine_rows: ", rows.size(0),
              " rows, ", index.size(0), " indices and ", weights.numel(), " weights must agree");
  TORCH_CHECK(order.sizes() == index.sizes() && order.scalar_type() == torch::kInt64 && order.device() == rows.device(),
              "combine_rows: order must be index's inverse permutation, int64 ", index.sizes(), " on ", rows.device(),
              ", got ", order.sizes(), " ", order.scalar_type());
  TORCH_CHECK(weights.device() == rows.device(), "combine_rows: weights are on ", weights.device(), ", rows on ",
              rows.device());
  return CombineRows::apply(rows, index.contiguous(), order.contiguous(), weights);
}

torch::Tensor sum_rows(const torch::Tensor& rows, const torch::Tensor& index, std::int64_t copies) {
  check_rows(rows, index, copies, "sum_rows");
  torch::NoGradGuard no_grad;
  if (copies == 1) return rows.index_select(0, index);
  return combine_forward(rows, index.contiguous(), torch::Tensor(), copies);
}

}  // namespace odyssey::kernels
