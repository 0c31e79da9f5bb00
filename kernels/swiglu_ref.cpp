// The reference for swiglu: Hugging Face's MLP activation `act_fn(gate) * up` (as
// core/model/decoder.cpp's MlpImpl::forward), differentiated by autograd.
#include "kernels/swiglu.h"

namespace odyssey::kernels {

torch::Tensor swiglu_reference(const torch::Tensor& gate, const torch::Tensor& up) { return torch::silu(gate) * up; }

}  // namespace odyssey::kernels
