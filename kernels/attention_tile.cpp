// Dispatch of attention_tile.h: CUDA fp32 scores run attention_tile.cu's kernels, other
// tensors the reference (attention_tile_ref.cpp).
#include "kernels/attention_tile.h"
#include "kernels/dtype.h"

#ifdef ODYSSEY_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/attention_tile_launch.h"
#endif

namespace odyssey::kernels {
namespace {

void check_tile(const torch::Tensor& s, const AttentionTile& t) {
  TORCH_CHECK(s.dim() == 2 && t.rows > 0 && s.size(0) % t.rows == 0, "attention tile: scores ", s.sizes(),
              " are not whole groups of ", t.rows, " rows");
  TORCH_CHECK(t.first_key.scalar_type() == torch::kInt64 && t.first_key.device() == s.device() && t.row0 >= 0 &&
                  t.row0 + t.rows <= t.first_key.numel(),
              "attention tile: first_key must be int64 on the scores' device and cover rows ", t.row0, "..",
              t.row0 + t.rows);
}

#ifdef ODYSSEY_HAVE_CUDA_KERNELS
bool on_kernel(const torch::Tensor& s, torch::ScalarType out_dtype) {
  return s.is_cuda() && s.scalar_type() == torch::kFloat32 && supported_dtype(out_dtype);
}

cuda::TileShape shape_of(const torch::Tensor& s, const AttentionTile& t) {
  return {s.size(0), s.size(1), t.rows, t.row0, t.key0, static_cast<float>(t.scale), static_cast<float>(t.softcap)};
}
#endif

}  // namespace

std::pair<torch::Tensor, torch::Tensor> tile_softmax(const torch::Tensor& s, const AttentionTile& t,
                                                     torch::ScalarType out_dtype) {
  check_tile(s, t);
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  if (on_kernel(s, out_dtype)) {
    const c10::cuda::CUDAGuard guard(s.device());
    const torch::Tensor sc = s.contiguous(), fk = t.first_key.contiguous();
    torch::Tensor p = torch::empty(sc.sizes(), sc.options().dtype(out_dtype));
    torch::Tensor lse = torch::empty({sc.size(0)}, sc.options());
    cuda::tile_softmax_fwd(sc.data_ptr<float>(), p.data_ptr(), lse.data_ptr<float>(), fk.data_ptr<std::int64_t>(),
                           shape_of(sc, t), dtype_code(out_dtype), at::cuda::getCurrentCUDAStream().stream());
    return {p, lse};
  }
#endif
  return tile_softmax_reference(s, t, out_dtype);
}

std::pair<torch::Tensor, torch::Tensor> tile_softmax_backward(const torch::Tensor& s, const torch::Tensor& dp,
                                                              const torch::Tensor& lse, const torch::Tensor& delta,
                                                              const AttentionTile& t, torch::ScalarType out_dtype) {
  check_tile(s, t);
  TORCH_CHECK(dp.sizes() == s.sizes() && lse.numel() == s.size(0) && delta.numel() == s.size(0),
              "attention tile backward: dp ", dp.sizes(), ", lse ", lse.sizes(), " and delta ", delta.sizes(),
              " do not fit scores ", s.sizes());
#ifdef ODYSSEY_HAVE_CUDA_KERNELS
  if (on_kernel(s, out_dtype) && dp.scalar_type() == torch::kFloat32) {
    const c10::cuda::CUDAGuard guard(s.device());
    const torch::Tensor sc = s.contiguous(), dpc = dp.contiguous(), fk = t.first_key.contiguous();
    const torch::Tensor l = lse.to(torch::kFloat32).contiguous(), d = delta.to(torch::kFloat32).contiguous();
    torch::Tensor p = torch::empty(sc.sizes(), sc.options().dtype(out_dtype));
    torch::Tensor ds = torch::empty(sc.sizes(), sc.options().dtype(out_dtype));
    cuda::tile_softmax_bwd(sc.data_ptr<float>(), dpc.data_ptr<float>(), l.data_ptr<float>(), d.data_ptr<float>(),
                           p.data_ptr(), ds.data_ptr(), fk.data_ptr<std::int64_t>(), shape_of(sc, t),
                           dtype_code(out_dtype), at::cuda::getCurrentCUDAStream().stream());
    return {p, ds};
  }
#endif
  return tile_softmax_backward_reference(s, dp, lse.reshape({-1}), delta.reshape({-1}), t, out_dtype);
}

}  // namespace odyssey::kernels
