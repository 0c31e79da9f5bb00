// Dispatch of decode_attention.h: CUDA tensors the kernels fit run decode_attention.cu, other
// tensors the reference (decode_attention_ref.cpp).
#include "kernels/decode_attention.h"
#include "kernels/dtype.h"

#ifdef ODYSSEY_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/decode_attention_launch.h"
#endif

namespace odyssey::kernels {
namespace {

void check_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& keep) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 4 && v.sizes() == k.sizes(),
              "decode_attention: q must be [B, Hq, D] and k, v [B, Hkv, L, D], got ", q.sizes(), ", ", k.sizes(), ", ",
              v.sizes());
  TORCH_CHECK(k.size(0) == q.size(0) && k.size(3) == q.size(2) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
              "decode_attention: k ", k.sizes(), " does not match q ", q.sizes(),
              " (rows, head_dim, and query heads a multiple of KV heads)");
  TORCH_CHECK(keep.scalar_type() == torch::kBool && keep.dim() == 2 && keep.size(1) == k.size(2) &&
                  (keep.size(0) == q.size(0) || keep.size(0) == 1),
              "decode_attention: keep must be bool [B or 1, L] = [", q.size(0), ", ", k.size(2), "], got ",
              keep.scalar_type(), " ", keep.sizes());
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              "decode_attention: q, k and v must share a dtype");
  TORCH_CHECK(k.device() == q.device() && v.device() == q.device() && keep.device() == q.device(),
              "decode_attention: q, k, v and keep must be on one device");
}

}  // namespace

bool decode_attention_on_kernel(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& keep) {
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  if (!q.is_cuda() || !supported_dtype(q.scalar_type()) || keep.device() != q.device()) return false;
  const std::int64_t d = q.size(2);
  if (!cuda::decode_attention_fits(d, q.size(1) / k.size(1))) return false;
  // One vector load per lane of D / 32 elements: the rows' starts aligned to that.
  const std::int64_t e = d / 32, bytes = e * static_cast<std::int64_t>(q.element_size());
  for (const torch::Tensor* t : {&q, &k, &v}) {
    if (t->stride(-1) != 1 || reinterpret_cast<std::uintptr_t>(t->data_ptr()) % static_cast<std::uintptr_t>(bytes) != 0)
      return false;
    for (std::int64_t i = 0; i + 1 < t->dim(); ++i)
      if (t->stride(i) % e != 0) return false;
  }
  return true;
#else
  (void)q, (void)k, (void)v, (void)keep;
  return false;
#endif
}

torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& keep, double scale) {
  check_inputs(q, k, v, keep);
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  if (decode_attention_on_kernel(q, k, v, keep)) {
    const c10::cuda::CUDAGuard guard(q.device());
    cuda::DecodeShape s{};
    s.batch = q.size(0), s.q_heads = q.size(1), s.kv_heads = k.size(1), s.length = k.size(2), s.head_dim = q.size(2);
    s.q_b = q.stride(0), s.q_h = q.stride(1);
    s.k_b = k.stride(0), s.k_h = k.stride(1), s.k_l = k.stride(2);
    s.v_b = v.stride(0), s.v_h = v.stride(1), s.v_l = v.stride(2);
    s.keep_b = keep.size(0) == 1 ? 0 : keep.stride(0), s.keep_l = keep.stride(1);
    s.scale = static_cast<float>(scale);
    const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const torch::Tensor ws =
        torch::empty({cuda::decode_attention_workspace(s, sms) / 4}, q.options().dtype(torch::kFloat32));
    torch::Tensor out = torch::empty({s.batch, s.q_heads, s.head_dim}, q.options());
    cuda::decode_attention_fwd(q.data_ptr(), k.data_ptr(), v.data_ptr(), keep.data_ptr<bool>(), out.data_ptr(),
                               ws.data_ptr<float>(), s, dtype_code(q.scalar_type()),
                               at::cuda::getCurrentCUDAStream().stream());
    return out;
  }
#endif
  return decode_attention_reference(q, k, v, keep, scale);
}

}  // namespace odyssey::kernels
