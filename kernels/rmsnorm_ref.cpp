// The reference for add_rms_norm and the one place RMSNorm's formula is written: Hugging Face's
// residual add and *RMSNorm.forward (LlamaRMSNorm, Qwen2RMSNorm; Gemma's with plus_one, OLMo's
// with weight_fp32) in
// plain ATen ops, differentiated by autograd. core/model/decoder.cpp's unfused RMSNorm, the
// CPU path of add_rms_norm and the selftest's exact float64 run all call it.
#include "kernels/rmsnorm.h"

namespace odyssey::kernels {

torch::Tensor rms_inverse(const torch::Tensor& h, double eps) { return torch::rsqrt(h.pow(2).mean(-1, true) + eps); }

std::pair<torch::Tensor, torch::Tensor> add_rms_norm_reference(const torch::Tensor& x, const torch::Tensor& residual,
                                                               const torch::Tensor& weight, double eps, bool plus_one,
                                                               bool weight_fp32) {
  const torch::Tensor sum = residual.defined() ? x + residual : x;
  const auto in_dtype = sum.scalar_type();
  const auto stat_dtype = in_dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  torch::Tensor h = sum.to(stat_dtype);
  h = h * rms_inverse(h, eps);
  if (plus_one) return {(h * (1.0 + weight.to(stat_dtype))).to(in_dtype), sum};  // Gemma: (x * (1 + w)).to(dtype)
  if (weight_fp32) return {(weight.to(stat_dtype) * h).to(in_dtype), sum};       // OLMo: (w * x).to(dtype)
  return {weight * h.to(in_dtype), sum};
}

}  // namespace odyssey::kernels
