// The dtypes the fused ops take, and the code their CUDA launchers expect (the *_launch.h
// headers: 0 = f32, 1 = bf16, 2 = f16).
#pragma once

#include <torch/torch.h>

namespace odyssey::kernels {

inline bool supported_dtype(torch::ScalarType t) {
  return t == torch::kFloat32 || t == torch::kBFloat16 || t == torch::kFloat16;
}

inline int dtype_code(torch::ScalarType t) { return t == torch::kFloat32 ? 0 : t == torch::kBFloat16 ? 1 : 2; }

}  // namespace odyssey::kernels
