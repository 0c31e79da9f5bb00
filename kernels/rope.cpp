// apply_rope_: in-place rotary embedding of q and k with a hand-written backward (rope.h).
//
// The rotation of q and k runs once (one CUDA launch for both, or the same math in ATen ops
// elsewhere) outside autograd; then each of q and k goes through RopeMark, a one-output
// Function that only marks its input dirty and saves cos/sin. Two Functions instead of one:
// autograd refuses a Function that modifies a view in place and returns more than one
// tensor (custom_function.cpp), and q/k are normally views of the projections' outputs
// (when such a view covers its whole tensor, that tensor is the one marked: whole_base).
// RopeMark's backward applies the inverse rotation to the incoming gradient in place when
// this backward holds the only reference to it, otherwise writes it into a fresh tensor (the
// engine may hand the same gradient tensor to several nodes, e.g. after an addition).
#include "kernels/rope.h"
#include "kernels/dtype.h"

#ifdef ODYSSEY_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/rope_launch.h"
#endif

namespace odyssey::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void check_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& cos, const torch::Tensor& sin) {
  TORCH_CHECK(q.defined() && k.defined() && cos.defined() && sin.defined(),
              "apply_rope_: q, k, cos and sin must be defined");
  TORCH_CHECK(q.dim() == 3, "apply_rope_: q must be [T, Hq, D], got ", q.sizes());
  TORCH_CHECK(k.dim() == 3, "apply_rope_: k must be [T, Hk, D], got ", k.sizes());
  const std::int64_t t = q.size(0), d = q.size(2);
  TORCH_CHECK(d > 0 && d % 2 == 0, "apply_rope_: head_dim must be even and > 0, got ", d);
  TORCH_CHECK(k.size(0) == t && k.size(2) == d, "apply_rope_: k ", k.sizes(), " does not match q ", q.sizes(),
              " in tokens and head_dim");
  TORCH_CHECK(cos.dim() == 2 && cos.size(0) == t && cos.size(1) == d, "apply_rope_: cos must be [T, D] = [", t, ", ", d,
              "], got ", cos.sizes());
  TORCH_CHECK(sin.sizes() == cos.sizes(), "apply_rope_: sin must be [T, D] = [", t, ", ", d, "], got ", sin.sizes());
  TORCH_CHECK(supported_dtype(q.scalar_type()), "apply_rope_: q must be float32, bfloat16 or float16, got ",
              q.scalar_type());
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && cos.scalar_type() == q.scalar_type() &&
                  sin.scalar_type() == q.scalar_type(),
              "apply_rope_: k, cos and sin must have q's dtype ", q.scalar_type(), ", got ", k.scalar_type(), ", ",
              cos.scalar_type(), ", ", sin.scalar_type());
  TORCH_CHECK(k.device() == q.device() && cos.device() == q.device() && sin.device() == q.device(),
              "apply_rope_: q, k, cos and sin must be on one device");
  TORCH_CHECK(q.stride(2) == 1 && k.stride(2) == 1, "apply_rope_: q and k need a contiguous last dimension, strides ",
              q.strides(), " and ", k.strides());
  TORCH_CHECK(!(q.is_leaf() && q.requires_grad()) && !(k.is_leaf() && k.requires_grad()),
              "apply_rope_: q or k is a leaf that requires grad and cannot be rotated in place");
}

// Rotates q (and k, when defined) in place: the forward rotation with HF's roundings, or
// the inverse rotation (the backward) in fp32 rounded once. cos/sin contiguous [T, D].
// q_out (defined): q's rotation goes there instead, q is only read (q_out has q's sizes and
// strides and does not overlap it).
void rotate(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& cos, const torch::Tensor& sin,
            bool inverse, const torch::Tensor& q_out = {}) {
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  if (q.is_cuda()) {
    const c10::cuda::CUDAGuard guard(q.device());
    const bool has_k = k.defined();
    cuda::rope_apply(q.data_ptr(), q.stride(0), q.stride(1), q.size(1), has_k ? k.data_ptr() : nullptr,
                     has_k ? k.stride(0) : 0, has_k ? k.stride(1) : 0, has_k ? k.size(1) : 0, cos.data_ptr(),
                     sin.data_ptr(), q.size(0), q.size(2), inverse, dtype_code(q.scalar_type()),
                     at::cuda::getCurrentCUDAStream().stream(), q_out.defined() ? q_out.data_ptr() : nullptr);
    return;
  }
#endif
  if (q_out.defined()) {  // the ATen path: copy, then rotate the copy in place
    q_out.copy_(q);
    rotate(q_out, k, cos, sin, inverse);
    return;
  }
  const at::NoGradGuard no_grad;
  const std::int64_t half = q.size(2) / 2;
  const torch::Tensor c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  const torch::Tensor c1 = c.narrow(-1, 0, half), c2 = c.narrow(-1, half, half);
  const torch::Tensor s1 = s.narrow(-1, 0, half), s2 = s.narrow(-1, half, half);
  for (const torch::Tensor& x : {q, k}) {
    if (!x.defined()) continue;
    torch::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
    torch::Tensor o1, o2;
    if (inverse) {
      const torch::Tensor a1 = x1.to(torch::kFloat32), a2 = x2.to(torch::kFloat32);
      o1 = a1 * c1.to(torch::kFloat32) + a2 * s2.to(torch::kFloat32);
      o2 = a2 * c2.to(torch::kFloat32) - a1 * s1.to(torch::kFloat32);
    } else {
      o1 = x1 * c1 - x2 * s1;  // each product and the difference rounded to the dtype, as HF
      o2 = x2 * c2 + x1 * s2;
    }
    x1.copy_(o1);
    x2.copy_(o2);
  }
}

// Whether the inverse rotation may overwrite `g`: a dense, non-overlapping, non-view tensor
// whose storage nobody else references. CppNode::apply keeps the gradients in its own
// backward_inputs and passes backward() a copy of that list, so 2 references are this
// backward's alone; a third means the engine gave the tensor to another node too.
bool may_overwrite(const torch::Tensor& g) {
  return g.stride(-1) == 1 && g.is_non_overlapping_and_dense() && !g.is_view() && g.use_count() <= 2 &&
         g.storage().use_count() == 1;
}

// x: the rotated [T, H, D] tensor itself, or (heads > 0) the whole tensor it is a reshaped
// view of, whose gradient backward views as [T, heads, D] to rotate it.
struct RopeMark : torch::autograd::Function<RopeMark> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, std::int64_t heads) {
    ctx->mark_dirty({x});
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["heads"] = heads;
    ctx->set_materialize_grads(false);
    return {x};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    torch::Tensor g = grads[0];
    if (!g.defined()) return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    const auto saved = ctx->get_saved_variables();
    const std::int64_t heads = ctx->saved_data["heads"].toInt();
    auto as_rows = [&](const torch::Tensor& t) {
      return heads > 0 ? t.view({saved[0].size(0), heads, saved[0].size(1)}) : t;
    };
    if (may_overwrite(g)) {
      rotate(as_rows(g), torch::Tensor(), saved[0], saved[1], /*inverse=*/true);
      return {g, torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    // Shared with another node: rotated into a fresh tensor in one pass (no copy first) when
    // its layout allows, else a contiguous copy rotated in place.
    if (g.stride(-1) == 1 && g.is_contiguous()) {
      const torch::Tensor out = at::empty_like(g, at::MemoryFormat::Contiguous);
      rotate(as_rows(g), torch::Tensor(), saved[0], saved[1], /*inverse=*/true, as_rows(out));
      return {out, torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    g = g.clone(at::MemoryFormat::Contiguous);
    rotate(as_rows(g), torch::Tensor(), saved[0], saved[1], /*inverse=*/true);
    return {g, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The tensor x is a reshaped view of, when it covers all of it (a projection's output seen as
// [T, H, D]): marking that tensor dirty instead of the view spares autograd the view's
// bookkeeping (CopySlices and an as_strided backward: a copy of the base's gradient, a zero
// fill and two more copies per tensor per layer). Undefined otherwise.
torch::Tensor whole_base(const torch::Tensor& x) {
  if (!x.is_view() || !x.is_contiguous()) return torch::Tensor();
  const torch::Tensor base(x._base());
  if (base.is_view() || !base.is_contiguous() || base.numel() != x.numel() || base.data_ptr() != x.data_ptr() ||
      base.scalar_type() != x.scalar_type())
    return torch::Tensor();
  return base;
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> apply_rope_(torch::Tensor q, torch::Tensor k, const torch::Tensor& cos,
                                                    const torch::Tensor& sin) {
  check_inputs(q, k, cos, sin);
  const torch::Tensor c = cos.contiguous(), s = sin.contiguous();
  rotate(q, k, c, s, /*inverse=*/false);
  // Raw CUDA writes do not count as modifications: bump the version counters so autograd
  // catches a use of the old values that something saved.
  for (const torch::Tensor& x : {q, k})
    if (!x.is_inference()) torch::autograd::impl::bump_version(x);
  if (torch::GradMode::is_enabled()) {
    for (torch::Tensor* x : {&q, &k}) {
      if (!x->requires_grad()) continue;
      const torch::Tensor base = whole_base(*x);
      *x = base.defined() ? RopeMark::apply(base, c, s, x->size(1))[0].view(x->sizes())
                          : RopeMark::apply(*x, c, s, std::int64_t{0})[0];
    }
  }
  return {q, k};
}

}  // namespace odyssey::kernels
