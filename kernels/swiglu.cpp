// swiglu as a torch::autograd::Function with a hand-written backward (swiglu.h). CUDA
// tensors run swiglu.cu's kernels; other tensors the same fused math in ATen ops. Saved for
// backward: gate and up only (views of the caller's tensors, no copies).
#include "kernels/swiglu.h"
#include "kernels/dtype.h"
#include "kernels/linear_autograd.h"
#include "kernels/rmsnorm.h"

#include <optional>
#include <tuple>
#include <utility>
#include <vector>

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
// overwritten with swiglu(gate, up) as the forward computes it. With `packed`, the two come
// back as the halves of one [.., 2I] tensor (the gradient of a fused gate_up projection's
// output), written there directly.
std::pair<torch::Tensor, torch::Tensor> swiglu_backward(torch::Tensor& dy, const torch::Tensor& gate,
                                                        const torch::Tensor& up, bool recompute,
                                                        torch::Tensor* packed = nullptr) {
  torch::Tensor dgate, dup;
  const std::int64_t i = gate.size(-1);
  auto halves = [&](const torch::Tensor& both) {
    dgate = both.narrow(-1, 0, i);
    dup = both.narrow(-1, i, i);
  };
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  if (gate.is_cuda()) {
    const c10::cuda::CUDAGuard guard(gate.device());
    const torch::Tensor g = rows_view(gate);
    const torch::Tensor u = rows_view(up);
    if (!dy.is_contiguous()) dy = dy.contiguous();
    const auto opts = gate.options().memory_format(torch::MemoryFormat::Contiguous);
    if (packed != nullptr) {
      std::vector<std::int64_t> shape = gate.sizes().vec();
      shape.back() = 2 * i;
      *packed = torch::empty(shape, opts);
      halves(*packed);
    } else {
      dgate = torch::empty(gate.sizes(), opts);
      dup = torch::empty(gate.sizes(), opts);
    }
    cuda::swiglu_bwd(dy.data_ptr(), g.data_ptr(), g.stride(0), u.data_ptr(), u.stride(0), dgate.data_ptr(),
                     dup.data_ptr(), packed != nullptr ? 2 * i : i, recompute ? dy.data_ptr() : nullptr, g.size(0), i,
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
  if (packed != nullptr) {
    *packed = torch::cat({dgate, dup}, -1);
    halves(*packed);
  }
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

// swiglu on the two halves of one [.., 2I] tensor, whose gradient is one [.., 2I] tensor too:
// autograd would otherwise build it from the halves' gradients (a zero tensor, two copies).
struct SwiGluPacked : torch::autograd::Function<SwiGluPacked> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate_up) {
    ctx->save_for_backward({gate_up});
    const std::int64_t i = gate_up.size(-1) / 2;
    return swiglu_forward(gate_up.narrow(-1, 0, i), gate_up.narrow(-1, i, i));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor gate_up = ctx->get_saved_variables()[0];
    const std::int64_t i = gate_up.size(-1) / 2;
    torch::Tensor dy = grads[0], packed;
    swiglu_backward(dy, gate_up.narrow(-1, 0, i), gate_up.narrow(-1, i, i), /*recompute=*/false, &packed);
    return {packed};
  }
};

// The backward of down(swiglu(gate, up)) from dy [..., out]: the activation's gradient first,
// then the SwiGLU backward, which writes the recomputed activation over that gradient's buffer
// (when the down projection's weight gradients need it) in the pass that computes d gate and
// d up; the weight gradients read it from there. lora_out: the down adapter's r-wide product.
struct DownBackward {
  torch::Tensor dgate, dup;
  detail::LinearGrads grads;
};
DownBackward swiglu_down_backward(const torch::Tensor& dy, const torch::Tensor& gate, const torch::Tensor& up,
                                  const LinearWeights& w, const torch::Tensor& lora_out,
                                  const detail::LinearWants& want) {
  DownBackward r;
  detail::LinearBackward b = detail::linear_input_grad(dy.reshape({-1, w.out_features()}), w, gate.scalar_type());
  // The activation is recomputed into b.input_grad for the weight gradients, and for the
  // adapter's r-wide output when the forward left it uncomputed (rms_norm_mlp's skip_output).
  const bool act_needed = want.weight || want.lora_a || (want.lora_b && !lora_out.defined());
  std::tie(r.dgate, r.dup) = swiglu_backward(b.input_grad, gate, up, /*recompute=*/act_needed);
  r.grads = detail::weight_grads(b, b.input_grad.view({-1, gate.size(-1)}), lora_out, w, want);
  return r;
}

// down(swiglu(gate, up)) with down a projection of linear.h. Saved: gate, up, the weights and
// the r-wide lora_a output, not the activation: backward computes the activation's gradient
// first, then the SwiGLU backward writes the activation into that buffer in the same pass,
// and the weight gradients take it from there.
// gate and up in an offload chain (swiglu_down's `offload`): the chain and their entries.
struct OffloadedPair : torch::CustomClassHolder {
  std::shared_ptr<OffloadChain> chain;
  std::size_t gate = 0, up = 0;
};

struct SwiGluDown : torch::autograd::Function<SwiGluDown> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up,
                               const torch::Tensor& weight, const std::optional<torch::Tensor>& bias,
                               const std::optional<torch::Tensor>& lora_a, const std::optional<torch::Tensor>& lora_b,
                               double scaling, const c10::intrusive_ptr<Quant4Weight>& quant,
                               const c10::intrusive_ptr<LoraDropout>& dropout,
                               const std::shared_ptr<OffloadChain>& offload) {
    const LinearWeights w = detail::weights_of(weight, bias, lora_a, lora_b, scaling, quant, dropout);
    torch::Tensor a;
    const torch::Tensor y = detail::linear_forward(swiglu_forward(gate, up), w, &a);
    if (offload) {
      auto pair = c10::make_intrusive<OffloadedPair>();
      pair->chain = offload;
      pair->gate = offload->push(gate);
      pair->up = offload->push(up);
      ctx->saved_data["offloaded"] = c10::IValue::make_capsule(std::move(pair));
      ctx->save_for_backward({torch::Tensor(), torch::Tensor(), w.weight, w.lora_a, w.lora_b, a});
    } else {
      ctx->save_for_backward({gate, up, w.weight, w.lora_a, w.lora_b, a});
    }
    detail::remember_linear(ctx, w);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    torch::Tensor gate = saved[0], up = saved[1];
    if (const auto it = ctx->saved_data.find("offloaded"); it != ctx->saved_data.end()) {
      const auto pair = c10::static_intrusive_pointer_cast<OffloadedPair>(it->second.toCapsule());
      gate = pair->chain->take(pair->gate);
      up = pair->chain->take(pair->up);
    }
    const LinearWeights w = detail::saved_weights(ctx, saved[2], saved[3], saved[4]);
    const DownBackward r =
        swiglu_down_backward(grads[0], gate, up, w, saved[5], detail::linear_wants(ctx, /*first_edge=*/2, w));
    const detail::LinearGrads& g = r.grads;
    return {r.dgate,  r.dup,           g.weight,        g.bias,          g.lora_a,
            g.lora_b, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// down(swiglu(gate(n), up(n))) for n = rms_norm(s, norm_weight, eps): saved are s (which the
// norm keeps for its own backward anyway), the weights (and gate's and up's biases) and the
// three r-wide lora_a outputs (none with skip_output: backward computes them from the
// recomputed n and activation); not n, gate, up or the activation. Backward recomputes n (the norm's kernel), gate and
// up (their forward GEMMs, bit for bit the forward's), then runs swiglu_down's backward and the two projections' (their
// gradients of n summed by the second GEMM, beta = 1).
struct RmsNormMlp : torch::autograd::Function<RmsNormMlp> {
  static constexpr const char* kKeys[3] = {"gate.", "up.", "down."};

  static variable_list forward(AutogradContext* ctx, const torch::Tensor& n, const torch::Tensor& s,
                               const torch::Tensor& norm_weight, double eps,
                               // gate, up, down: weight, bias, lora_a, lora_b, scaling each
                               const torch::Tensor& gw, const std::optional<torch::Tensor>& gb,
                               const std::optional<torch::Tensor>& ga, const std::optional<torch::Tensor>& gbb,
                               double gs, const torch::Tensor& uw, const std::optional<torch::Tensor>& ub,
                               const std::optional<torch::Tensor>& ua, const std::optional<torch::Tensor>& ubb,
                               double us, const torch::Tensor& dw, const std::optional<torch::Tensor>& db,
                               const std::optional<torch::Tensor>& da, const std::optional<torch::Tensor>& dbb,
                               double ds,
                               // the 4-bit weights (null for 16-bit bases)
                               const c10::intrusive_ptr<Quant4Weight>& gq, const c10::intrusive_ptr<Quant4Weight>& uq,
                               const c10::intrusive_ptr<Quant4Weight>& dq,
                               // the adapters' dropout draws (null: none)
                               const c10::intrusive_ptr<LoraDropout>& gd, const c10::intrusive_ptr<LoraDropout>& ud,
                               const c10::intrusive_ptr<LoraDropout>& dd, bool skip_output,
                               const c10::intrusive_ptr<ParkedPair>& parked) {
    const LinearWeights w[3] = {detail::weights_of(gw, gb, ga, gbb, gs, gq, gd),
                                detail::weights_of(uw, ub, ua, ubb, us, uq, ud),
                                detail::weights_of(dw, db, da, dbb, ds, dq, dd)};
    torch::Tensor a[3];  // skip_output: left undefined, backward computes them
    torch::Tensor act, y;
    if (skip_output) {
      std::vector<std::int64_t> shape = n.sizes().vec();
      shape.back() = w[2].out_features();
      y = at::zeros(shape, n.options());
    } else {
      torch::Tensor gate = detail::linear_forward(n, w[0], &a[0]);
      torch::Tensor up = detail::linear_forward(n, w[1], &a[1]);
      act = swiglu_forward(gate, up);
      gate.reset(), up.reset();  // freed before the down projection's output exists
      y = detail::linear_forward(act, w[2], &a[2]);
    }
    // gate's and up's biases too: backward recomputes their outputs.
    ctx->save_for_backward({s, norm_weight, w[0].weight, w[0].lora_a, w[0].lora_b, w[1].weight, w[1].lora_a,
                            w[1].lora_b, w[2].weight, w[2].lora_a, w[2].lora_b, a[0], a[1], a[2], w[0].bias,
                            w[1].bias});
    ctx->saved_data["eps"] = eps;
    if (parked) ctx->saved_data["parked"] = c10::IValue::make_capsule(parked);
    for (int k = 0; k < 3; ++k) detail::remember_linear(ctx, w[k], kKeys[k]);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& s = saved[0];
    const auto dtype = s.scalar_type();
    const std::int64_t hidden = s.size(-1);
    LinearWeights w[3];
    detail::LinearWants want[3];
    std::size_t edge = 3;  // n, s, norm_weight, then the projections' tensors
    for (int k = 0; k < 3; ++k) {
      w[k] = detail::saved_weights(ctx, saved[2 + 3 * k], saved[3 + 3 * k], saved[4 + 3 * k], kKeys[k]);
      want[k] = detail::linear_wants(ctx, edge, w[k], kKeys[k]);
      edge += detail::linear_edges(ctx, w[k], kKeys[k]);
    }
    w[0].bias = saved[14], w[1].bias = saved[15];
    const torch::Tensor n =
        add_rms_norm(s, {}, saved[1], ctx->saved_data["eps"].toDouble()).first.reshape({-1, hidden});
    const std::int64_t inter = w[0].out_features();
    DownBackward down;
    {
      torch::Tensor gate, up, unused;
      if (const auto it = ctx->saved_data.find("parked"); it != ctx->saved_data.end()) {
        std::tie(gate, up) = c10::static_intrusive_pointer_cast<ParkedPair>(it->second.toCapsule())->take();
      } else {
        gate = detail::linear_forward(n, w[0], &unused);
        up = detail::linear_forward(n, w[1], &unused);
      }
      down = swiglu_down_backward(grads[0], gate, up, w[2], saved[13], want[2]);
    }  // gate, up and the activation freed
    detail::LinearGrads g[3];
    g[2] = down.grads;
    detail::LinearBackward bg = detail::linear_input_grad(down.dgate.view({-1, inter}), w[0], dtype);
    detail::LinearBackward bu = detail::linear_input_grad(down.dup.view({-1, inter}), w[1], dtype, bg.input_grad);
    g[0] = detail::weight_grads(bg, n, saved[11], w[0], want[0]);
    g[1] = detail::weight_grads(bu, n, saved[12], w[1], want[1]);
    variable_list out{bu.input_grad.view(s.sizes()), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    for (int k = 0; k < 3; ++k)
      for (const torch::Tensor& t : {g[k].weight, g[k].bias, g[k].lora_a, g[k].lora_b, torch::Tensor()})
        out.push_back(t);
    for (int k = 0; k < 3; ++k) out.emplace_back();  // the 4-bit weights
    for (int k = 0; k < 3; ++k) out.emplace_back();  // the dropout draws
    out.emplace_back();                              // skip_output
    out.emplace_back();                              // parked
    return out;
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  check_inputs(gate, up);
  return SwiGlu::apply(gate, up)[0];
}

torch::Tensor swiglu_packed(const torch::Tensor& gate_up) {
  TORCH_CHECK(gate_up.defined() && gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0,
              "swiglu_packed: gate_up must be [..., 2I], got ", gate_up.sizes());
  const std::int64_t i = gate_up.size(-1) / 2;
  check_inputs(gate_up.narrow(-1, 0, i), gate_up.narrow(-1, i, i));
  return SwiGluPacked::apply(gate_up);
}

torch::Tensor swiglu_down(const torch::Tensor& gate, const torch::Tensor& up, const LinearWeights& down,
                          const std::shared_ptr<OffloadChain>& offload) {
  check_inputs(gate, up);
  detail::check_linear(down, gate.size(-1), "swiglu_down");
  return SwiGluDown::apply(gate, up, detail::weight_arg(down), detail::opt(down.bias), detail::opt(down.lora_a),
                           detail::opt(down.lora_b), down.lora_scaling, down.quant, down.dropout, offload)[0];
}

}  // namespace odyssey::kernels

namespace odyssey::kernels {

torch::Tensor rms_norm_mlp(const torch::Tensor& n, const torch::Tensor& s, const torch::Tensor& norm_weight, double eps,
                           const LinearWeights& gate, const LinearWeights& up, const LinearWeights& down,
                           bool skip_output, const c10::intrusive_ptr<ParkedPair>& parked) {
  TORCH_CHECK(s.defined() && s.dim() >= 1, "rms_norm_mlp: the norm input must be [..., H], got ",
              s.defined() ? s.sizes() : torch::IntArrayRef{});
  TORCH_CHECK(n.defined() && n.sizes() == s.sizes() && n.scalar_type() == s.scalar_type(),
              "rms_norm_mlp: the norm output must have the input's shape ", s.sizes(), " and dtype ", s.scalar_type(),
              ", got ", n.defined() ? n.sizes() : torch::IntArrayRef{});
  TORCH_CHECK(norm_weight.defined() && norm_weight.dim() == 1 && norm_weight.size(0) == s.size(-1),
              "rms_norm_mlp: the norm weight must be [", s.size(-1), "]");
  detail::check_linear(gate, s.size(-1), "rms_norm_mlp (gate)");
  detail::check_linear(up, s.size(-1), "rms_norm_mlp (up)");
  TORCH_CHECK(gate.out_features() == up.out_features(), "rms_norm_mlp: gate and up must have one width, got ",
              gate.out_features(), " and ", up.out_features());
  detail::check_linear(down, gate.out_features(), "rms_norm_mlp (down)");
  TORCH_CHECK(supported_dtype(s.scalar_type()), "rms_norm_mlp: float32, bfloat16 or float16, got ", s.scalar_type());
  using detail::opt;
  using detail::weight_arg;
  return RmsNormMlp::apply(n, s.detach(), norm_weight.detach(), eps, weight_arg(gate), opt(gate.bias), opt(gate.lora_a),
                           opt(gate.lora_b), gate.lora_scaling, weight_arg(up), opt(up.bias), opt(up.lora_a),
                           opt(up.lora_b), up.lora_scaling, weight_arg(down), opt(down.bias), opt(down.lora_a),
                           opt(down.lora_b), down.lora_scaling, gate.quant, up.quant, down.quant, gate.dropout,
                           up.dropout, down.dropout, skip_output, parked)[0];
}

}  // namespace odyssey::kernels
