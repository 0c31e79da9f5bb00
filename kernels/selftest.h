// `odyssey-train selftest`: every fused kernel against its reference, forward and backward,
// in fp32 and bf16 (docs/kernels.md, "Selftest"). Run before every benchmark.
//
// For each output and gradient the fused op's result in the working dtype and the
// reference's result in the same dtype are both compared with the reference computed in
// float64 from the same inputs. The rule (the one docs/model.md uses for bf16 parity with
// transformers): the fused op may be no further from the exact value than the reference
// implementation is in the same precision, within a factor 2, plus one unit roundoff u of
// the dtype (2^-8 for bf16, 2^-24 for fp32), normwise:
//   err(fused) <= 2 * err(reference) + u,   err(a) = max|a - exact| / max|exact|.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace odyssey::kernels {

struct SelftestRow {
  std::string kernel;  // the op and its shape: "add_rms_norm 4096x3584", "swiglu 2048x18944", ...
  std::string dtype;   // "fp32", "bf16"
  std::string tensor;  // "y", "sum", "dx", "dweight", "loss", ...
  double max_abs = 0;  // max |fused - exact|
  double rel = 0;      // max |fused - exact| / max |exact|
  double ref_rel = 0;  // the reference implementation's own error in this dtype
  double bound = 0;    // 2 * ref_rel + u
  bool ok = false;
  std::string path;  // "cuda" or "aten" (the fused op's CPU path)
};

// Runs every check on `device` (CUDA: the CUDA kernels; CPU: the fused ops' ATen path,
// smaller shapes). Deterministic inputs (seeded).
std::vector<SelftestRow> run_selftest(const torch::Device& device);

}  // namespace odyssey::kernels
