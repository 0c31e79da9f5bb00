// The reference for add_rms_norm: Hugging Face's residual add and *RMSNorm.forward in plain
// ATen ops (as core/model/decoder.cpp's RMSNormImpl::forward), differentiated by autograd.
#include "kernels/rmsnorm.h"

namespace odyssey::kernels {

std::pair<torch::Tensor, torch::Tensor> add_rms_norm_reference(const torch::Tensor& x, const torch::Tensor& residual,
                                                               const torch::Tensor& weight, double eps) {
  const torch::Tensor sum = residual.defined() ? x + residual : x;
  const auto in_dtype = sum.scalar_type();
  torch::Tensor h = sum.to(torch::kFloat32);
  const torch::Tensor variance = h.pow(2).mean(-1, true);
  h = h * torch::rsqrt(variance + eps);
  return {weight * h.to(in_dtype), sum};
}

}  // namespace odyssey::kernels
