// The ATen implementation of dequantize_4bit (quant4.h): what the CPU runs, and the
// reference the CUDA kernel (quant4.cu) is checked against in `odyssey-train selftest`
// (bit-identical: both compute code x absmax in fp32 and round once).
#pragma once

#include "kernels/quant4.h"

namespace odyssey::kernels {

torch::Tensor dequantize_4bit_reference(const Quant4Weight& q, torch::ScalarType dtype);

}  // namespace odyssey::kernels
