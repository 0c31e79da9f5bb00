// Dispatch of band_attention.h: CUDA 16-bit tensors run band_attention.cu's kernels.
#include "kernels/band_attention.h"
#include "kernels/dtype.h"

#include <atomic>
#include <cstdlib>
#include <string>

#ifdef ODYSSEY_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/band_attention_launch.h"
#endif

namespace odyssey::kernels {
namespace {

std::atomic<bool> g_band_attention{true};

std::atomic<bool> g_band_fast_tanh{[] {
  const char* e = std::getenv("ODYSSEY_BAND_TANH");
  return e == nullptr || std::string(e) != "exact";
}()};

void check_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                  const torch::Tensor& first_key) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.sizes() == k.sizes() && q.size(0) == k.size(0) &&
                  q.size(2) == k.size(2) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
              "band attention: q ", q.sizes(), ", k ", k.sizes(), " and v ", v.sizes(), " do not fit");
  TORCH_CHECK(
      first_key.scalar_type() == torch::kInt64 && first_key.numel() == q.size(0) && first_key.device() == q.device(),
      "band attention: first_key must be int64 [", q.size(0), "] on the inputs' device");
}

#ifdef ODYSSEY_HAVE_CUDA_KERNELS
// x as the kernels read it: last dimension contiguous, row and head strides multiples of 8
// elements, 16-byte aligned.
torch::Tensor kernel_layout(const torch::Tensor& x) {
  const bool ok = x.stride(2) == 1 && x.stride(0) % 8 == 0 && x.stride(1) % 8 == 0 &&
                  reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 == 0;
  return ok ? x : x.contiguous();
}

cuda::BandShape shape_of(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                         double softcap, bool fast_tanh) {
  cuda::BandShape s;
  s.T = q.size(0);
  s.hq = static_cast<int>(q.size(1));
  s.hkv = static_cast<int>(k.size(1));
  s.d = static_cast<int>(q.size(2));
  s.q_st = q.stride(0);
  s.q_sh = q.stride(1);
  s.k_st = k.stride(0);
  s.k_sh = k.stride(1);
  s.v_st = v.stride(0);
  s.v_sh = v.stride(1);
  s.scale = static_cast<float>(scale);
  s.softcap = static_cast<float>(softcap);
  s.fast_tanh = fast_tanh ? 1 : 0;
  return s;
}
#endif

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct BandAttentionFn : public torch::autograd::Function<BandAttentionFn> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& first_key, double scale, double softcap,
                               bool fast_tanh) {
    auto [out, lse] = band_attention_forward(q, k, v, first_key, scale, softcap, fast_tanh);
    ctx->save_for_backward({q, k, v, first_key, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["fast_tanh"] = fast_tanh;
    ctx->mark_non_differentiable({lse});
    return {out, lse};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    auto [dq, dk, dv] =
        band_attention_backward(grads[0], s[0], s[1], s[2], s[4], s[5], s[3], ctx->saved_data.at("scale").toDouble(),
                                ctx->saved_data.at("softcap").toDouble(), ctx->saved_data.at("fast_tanh").toBool());
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void set_band_attention(bool on) { g_band_attention = on; }
bool band_attention_enabled() { return g_band_attention.load(); }
void set_band_fast_tanh(bool on) { g_band_fast_tanh = on; }
bool band_fast_tanh() { return g_band_fast_tanh.load(); }

bool band_attention_supported(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return g_band_attention.load() && band_kernels_take(q, k, v);
}

bool band_kernels_take(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  const torch::ScalarType dt = q.scalar_type();
  return q.is_cuda() && (dt == torch::kBFloat16 || dt == torch::kFloat16) && k.scalar_type() == dt &&
         v.scalar_type() == dt && k.device() == q.device() && v.device() == q.device() && q.dim() == 3 &&
         k.dim() == 3 && (q.size(2) == 64 || q.size(2) == 128 || q.size(2) == 256);
#else
  (void)q;
  (void)k;
  (void)v;
  return false;
#endif
}

std::pair<torch::Tensor, torch::Tensor> band_attention_forward(const torch::Tensor& q, const torch::Tensor& k,
                                                               const torch::Tensor& v, const torch::Tensor& first_key,
                                                               double scale, double softcap, bool fast_tanh) {
  check_inputs(q, k, v, first_key);
  TORCH_CHECK(band_kernels_take(q, k, v), "band attention: the kernels do not take ", q.scalar_type(), " ", q.device(),
              " head dim ", q.size(2));
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(q.device());
  const torch::Tensor qc = kernel_layout(q), kc = kernel_layout(k), vc = kernel_layout(v), fk = first_key.contiguous();
  torch::Tensor out =
      torch::empty({q.size(0), q.size(1), q.size(2)}, q.options().memory_format(torch::MemoryFormat::Contiguous));
  torch::Tensor lse = torch::empty({q.size(1), q.size(0)}, q.options().dtype(torch::kFloat32));
  cuda::band_attention_fwd(qc.data_ptr(), kc.data_ptr(), vc.data_ptr(), out.data_ptr(), lse.data_ptr<float>(),
                           fk.data_ptr<std::int64_t>(), shape_of(qc, kc, vc, scale, softcap, fast_tanh),
                           dtype_code(q.scalar_type()), at::cuda::getCurrentCUDAStream().stream());
  return {out, lse};
#else
  (void)scale;
  (void)softcap;
  (void)fast_tanh;
  return {};
#endif
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> band_attention_backward(
    const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, const torch::Tensor& first_key, double scale, double softcap,
    bool fast_tanh) {
  check_inputs(q, k, v, first_key);
  TORCH_CHECK(band_kernels_take(q, k, v), "band attention backward: the kernels do not take ", q.scalar_type(), " ",
              q.device(), " head dim ", q.size(2));
  TORCH_CHECK(dout.sizes() == q.sizes() && out.sizes() == q.sizes() && lse.numel() == q.size(0) * q.size(1),
              "band attention backward: dout ", dout.sizes(), ", out ", out.sizes(), " and lse ", lse.sizes(),
              " do not fit q ", q.sizes());
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(q.device());
  const torch::Tensor qc = kernel_layout(q), kc = kernel_layout(k), vc = kernel_layout(v), fk = first_key.contiguous();
  const torch::Tensor oc = out.to(q.scalar_type()).contiguous(), gc = dout.to(q.scalar_type()).contiguous();
  const torch::Tensor l = lse.to(torch::kFloat32).contiguous();
  torch::Tensor delta = torch::empty({q.size(1), q.size(0)}, q.options().dtype(torch::kFloat32));
  torch::Tensor dq = torch::empty(q.sizes(), q.options().memory_format(torch::MemoryFormat::Contiguous));
  torch::Tensor dk = torch::empty(k.sizes(), k.options().memory_format(torch::MemoryFormat::Contiguous));
  torch::Tensor dv = torch::empty(v.sizes(), v.options().memory_format(torch::MemoryFormat::Contiguous));
  cuda::band_attention_bwd(qc.data_ptr(), kc.data_ptr(), vc.data_ptr(), oc.data_ptr(), gc.data_ptr(),
                           l.data_ptr<float>(), delta.data_ptr<float>(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
                           fk.data_ptr<std::int64_t>(), shape_of(qc, kc, vc, scale, softcap, fast_tanh),
                           dtype_code(q.scalar_type()), at::cuda::getCurrentCUDAStream().stream());
  return {dq, dk, dv};
#else
  (void)dout;
  (void)out;
  (void)lse;
  (void)scale;
  (void)softcap;
  (void)fast_tanh;
  return {};
#endif
}

std::pair<torch::Tensor, torch::Tensor> band_attention(const torch::Tensor& q, const torch::Tensor& k,
                                                       const torch::Tensor& v, const torch::Tensor& first_key,
                                                       double scale, double softcap, bool fast_tanh) {
  check_inputs(q, k, v, first_key);
  if (!band_kernels_take(q, k, v)) {
    auto [out, lse] = band_attention_reference(q, k, v, first_key, scale, softcap);
    return {out, lse.detach()};
  }
  const variable_list r = BandAttentionFn::apply(q, k, v, first_key, scale, softcap, fast_tanh);
  return {r[0], r[1]};
}

}  // namespace odyssey::kernels
