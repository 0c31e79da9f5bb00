// add_rms_norm as a torch::autograd::Function with a hand-written backward (rmsnorm.h).
// CUDA tensors run rmsnorm.cu's kernels; other tensors the same fused math in ATen ops.
// Saved for backward: the rounded sum (x itself without a residual), the fp32 rstd per row
// and the weight.
#include "kernels/rmsnorm.h"
#include "kernels/dtype.h"
#include "kernels/linear_autograd.h"

#include <tuple>

#ifdef ODYSSEY_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/rmsnorm_launch.h"
#endif

namespace odyssey::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void check_inputs(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight, double eps) {
  TORCH_CHECK(x.defined(), "add_rms_norm: x is undefined");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "add_rms_norm: x must be [..., H] with H > 0, got ", x.sizes());
  TORCH_CHECK(supported_dtype(x.scalar_type()), "add_rms_norm: x must be float32, bfloat16 or float16, got ",
              x.scalar_type());
  TORCH_CHECK(weight.defined(), "add_rms_norm: weight is undefined");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1), "add_rms_norm: weight must be [H] = [", x.size(-1),
              "] for x of shape ", x.sizes(), ", got ", weight.sizes());
  TORCH_CHECK(weight.scalar_type() == x.scalar_type(), "add_rms_norm: weight dtype ", weight.scalar_type(),
              " differs from x dtype ", x.scalar_type());
  TORCH_CHECK(weight.device() == x.device(), "add_rms_norm: weight is on ", weight.device(), ", x on ", x.device());
  if (residual.defined()) {
    TORCH_CHECK(residual.sizes() == x.sizes(), "add_rms_norm: residual shape ", residual.sizes(),
                " differs from x shape ", x.sizes());
    TORCH_CHECK(residual.scalar_type() == x.scalar_type(), "add_rms_norm: residual dtype ", residual.scalar_type(),
                " differs from x dtype ", x.scalar_type());
    TORCH_CHECK(residual.device() == x.device(), "add_rms_norm: residual is on ", residual.device(), ", x on ",
                x.device());
  }
  TORCH_CHECK(eps >= 0, "add_rms_norm: eps must be >= 0, got ", eps);
}

std::vector<std::int64_t> leading(const torch::Tensor& t) {
  auto s = t.sizes().vec();
  s.pop_back();
  return s;
}

struct AddRmsNorm : torch::autograd::Function<AddRmsNorm> {
  // residual_or_empty: the residual, or an empty placeholder when there is none (Function::apply
  // cannot take undefined tensors: it records every tensor input's device).
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& residual_or_empty,
                               const torch::Tensor& weight, double eps, bool has_residual) {
    const auto dtype = x.scalar_type();
    const torch::Tensor residual = has_residual ? residual_or_empty : torch::Tensor();
    const torch::Tensor xc = x.contiguous();
    const torch::Tensor rc = residual.defined() ? residual.contiguous() : residual;
    const torch::Tensor wc = weight.contiguous();
    torch::Tensor y, sum, rstd;
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
    if (x.is_cuda()) {
      const c10::cuda::CUDAGuard guard(x.device());
      const std::int64_t hidden = x.size(-1);
      const std::int64_t rows = x.numel() / hidden;
      y = torch::empty_like(xc);
      sum = rc.defined() ? torch::empty_like(xc) : xc;
      rstd = torch::empty(leading(xc), xc.options().dtype(torch::kFloat32));
      cuda::add_rms_norm_fwd(xc.data_ptr(), rc.defined() ? rc.data_ptr() : nullptr, wc.data_ptr(), y.data_ptr(),
                             rc.defined() ? sum.data_ptr() : nullptr, rstd.data_ptr<float>(), rows, hidden,
                             static_cast<float>(eps), dtype_code(dtype), at::cuda::getCurrentCUDAStream().stream());
    } else
#endif
    {
      std::tie(y, sum) = add_rms_norm_reference(xc, rc, wc, eps);
      rstd = rms_inverse(sum.to(torch::kFloat32), eps).squeeze(-1);
    }
    ctx->save_for_backward({sum, rstd, wc});
    ctx->saved_data["has_residual"] = residual.defined();
    ctx->set_materialize_grads(false);
    // Without a residual the sum is x itself: returned as is (autograd makes it a view).
    return {y, residual.defined() ? sum : x};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& sum = saved[0];
    const torch::Tensor& rstd = saved[1];
    const torch::Tensor& w = saved[2];
    const bool has_residual = ctx->saved_data["has_residual"].toBool();
    const bool want_w = ctx->needs_input_grad(2);
    const torch::Tensor& dy = grads[0];
    const torch::Tensor& dsum_out = grads[1];
    const auto dtype = sum.scalar_type();
    const std::int64_t hidden = sum.size(-1);
    const std::int64_t rows = sum.numel() / hidden;
    torch::Tensor dsum, dw;
    if (!dy.defined()) {
      dsum = dsum_out;  // only the sum's gradient: it passes through unchanged
      if (want_w) dw = torch::zeros_like(w);
    } else {
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
      if (sum.is_cuda()) {
        const c10::cuda::CUDAGuard guard(sum.device());
        const torch::Tensor dyc = dy.contiguous();
        const torch::Tensor doc = dsum_out.defined() ? dsum_out.contiguous() : dsum_out;
        dsum = torch::empty_like(sum);
        torch::Tensor workspace;
        std::int64_t ws_rows = 0;
        if (want_w) {
          dw = rows > 0 ? torch::empty_like(w) : torch::zeros_like(w);
          ws_rows = cuda::add_rms_norm_bwd_workspace_rows();
          workspace = torch::empty({ws_rows, hidden}, sum.options().dtype(torch::kFloat32));
        }
        cuda::add_rms_norm_bwd(dyc.data_ptr(), sum.data_ptr(), rstd.data_ptr<float>(), w.data_ptr(),
                               doc.defined() ? doc.data_ptr() : nullptr, dsum.data_ptr(),
                               want_w ? dw.data_ptr() : nullptr, want_w ? workspace.data_ptr<float>() : nullptr,
                               ws_rows, rows, hidden, dtype_code(dtype), at::cuda::getCurrentCUDAStream().stream());
      } else
#endif
      {
        // d sum_j = r * g_j - r^3 / H * (Σ_i g_i s_i) * s_j with g = dy * w, in fp32.
        const torch::Tensor s = sum.to(torch::kFloat32);
        const torch::Tensor r = rstd.unsqueeze(-1);
        const torch::Tensor d = dy.to(torch::kFloat32);
        const torch::Tensor g = d * w.to(torch::kFloat32);
        const torch::Tensor coef = r * r * r * (g * s).sum(-1, true) / static_cast<double>(hidden);
        torch::Tensor ds = r * g - coef * s;
        if (dsum_out.defined()) ds = ds + dsum_out.to(torch::kFloat32);
        dsum = ds.to(dtype);
        if (want_w) {
          const torch::Tensor n = (s * r).to(dtype).to(torch::kFloat32);
          dw = (d * n).reshape({rows, hidden}).sum(0).to(dtype);
        }
      }
    }
    return {dsum, has_residual ? dsum : torch::Tensor(), dw, torch::Tensor(), torch::Tensor()};
  }
};

// projection(n) for n = rms_norm(s, norm_weight, eps), which the caller computed: saved are s
// (which the norm keeps for its own backward anyway), the norm's weight, the projection's
// weights and the r-wide lora_a output, not n. Backward returns the gradient of n (the norm's
// own backward turns it into the gradient of s) and recomputes n, with the forward's kernel,
// only for the weights' gradients.
struct RmsNormLinear : torch::autograd::Function<RmsNormLinear> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& n, const torch::Tensor& s,
                               const torch::Tensor& norm_weight, double eps, const torch::Tensor& weight,
                               const std::optional<torch::Tensor>& bias, const std::optional<torch::Tensor>& lora_a,
                               const std::optional<torch::Tensor>& lora_b, double scaling,
                               const c10::intrusive_ptr<Quant4Weight>& quant,
                               const c10::intrusive_ptr<LoraDropout>& dropout,
                               const c10::intrusive_ptr<NormShare>& share) {
    const LinearWeights w = detail::weights_of(weight, bias, lora_a, lora_b, scaling, quant, dropout);
    torch::Tensor a;
    const torch::Tensor y = detail::linear_forward(n, w, &a);
    ctx->save_for_backward({s, norm_weight, w.weight, w.lora_a, w.lora_b, a});
    ctx->saved_data["eps"] = eps;
    if (share) {
      const std::lock_guard<std::mutex> lock(share->mutex);
      ++share->pending;
      ++share->projections;
      ctx->saved_data["share"] = c10::IValue::make_capsule(share);
    }
    detail::remember_linear(ctx, w);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& s = saved[0];
    const LinearWeights w = detail::saved_weights(ctx, saved[2], saved[3], saved[4]);
    // Edges: n, s, norm_weight (no gradient through these two), then the projection.
    const detail::LinearWants want = detail::linear_wants(ctx, /*first_edge=*/3, w);
    const std::int64_t hidden = s.size(-1);
    const torch::Tensor dy = grads[0].reshape({-1, w.out_features()});
    detail::LinearBackward b;
    torch::Tensor n_grad;  // this node's gradient of n: its own, the share's sum, or none
    const bool need_n = want.weight || want.lora_a;
    auto recompute = [&] { return add_rms_norm(s, {}, saved[1], ctx->saved_data["eps"].toDouble()).first; };
    torch::Tensor n;
    if (const auto it = ctx->saved_data.find("share"); it != ctx->saved_data.end()) {
      const auto share = c10::static_intrusive_pointer_cast<NormShare>(it->second.toCapsule());
      const std::lock_guard<std::mutex> lock(share->mutex);
      b = detail::linear_input_grad(dy, w, s.scalar_type(), share->input_grad);
      share->input_grad = b.input_grad;
      if (++share->summed == share->projections) {  // the last of the set: hand over the sum
        n_grad = std::move(share->input_grad);
        share->input_grad = torch::Tensor();
        share->summed = 0;
      }
      if (need_n && !share->output.defined()) share->output = recompute();
      if (need_n) n = share->output;
      if (--share->pending == 0) share->output = torch::Tensor();
    } else {
      b = detail::linear_input_grad(dy, w, s.scalar_type());
      n_grad = b.input_grad;
      if (need_n) n = recompute();
    }
    if (n.defined()) n = n.reshape({-1, hidden});
    const detail::LinearGrads g = detail::weight_grads(b, n, saved[5], w, want);
    if (n_grad.defined()) n_grad = n_grad.view(s.sizes());
    return {n_grad,   torch::Tensor(), torch::Tensor(), torch::Tensor(), g.weight,        g.bias,
            g.lora_a, g.lora_b,        torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> add_rms_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                                     const torch::Tensor& weight, double eps) {
  check_inputs(x, residual, weight, eps);
  const bool has_residual = residual.defined();
  auto out = AddRmsNorm::apply(x, has_residual ? residual : torch::empty({0}, x.options()), weight, eps, has_residual);
  return {out[0], out[1]};
}

torch::Tensor rms_norm_linear(const torch::Tensor& n, const torch::Tensor& s, const torch::Tensor& norm_weight,
                              double eps, const LinearWeights& w, const c10::intrusive_ptr<NormShare>& share) {
  check_inputs(s, {}, norm_weight, eps);
  TORCH_CHECK(n.defined() && n.sizes() == s.sizes() && n.scalar_type() == s.scalar_type(),
              "rms_norm_linear: the norm output must have the input's shape ", s.sizes(), " and dtype ",
              s.scalar_type(), ", got ", n.defined() ? n.sizes() : torch::IntArrayRef{});
  detail::check_linear(w, s.size(-1), "rms_norm_linear");
  return RmsNormLinear::apply(n, s.detach(), norm_weight.detach(), eps, detail::weight_arg(w), detail::opt(w.bias),
                              detail::opt(w.lora_a), detail::opt(w.lora_b), w.lora_scaling, w.quant, w.dropout,
                              share)[0];
}

}  // namespace odyssey::kernels
