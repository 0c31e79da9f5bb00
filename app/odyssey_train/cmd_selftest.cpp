// `selftest`: every fused kernel against its reference on this machine's GPU (or, without
// one, the fused ops' ATen path on the CPU). docs/kernels.md explains the rule.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/json_dump.h"
#include "common/text.h"

#ifdef ODYSSEY_HAVE_TORCH
#include <torch/torch.h>

#include "kernels/selftest.h"
#endif

namespace odyssey::cli {

CommandSpec selftest_spec() {
  return {"selftest",
          "selftest [--device auto|cuda|cpu] [--json]",
          "Check every fused kernel against its reference (forward and backward, fp32 and bf16).",
          "Runs fused RMSNorm (+ residual), SwiGLU, RoPE and the fused linear cross-entropy on seeded\n"
          "random inputs of Qwen2.5-7B's widths and compares each output and gradient with the exact\n"
          "value (float64). A kernel passes when its error is at most twice the reference\n"
          "implementation's own error in the same dtype plus one unit roundoff (docs/kernels.md).\n"
          "On a machine without CUDA the fused ops' ATen path is checked on small shapes instead.\n"
          "Run it before every benchmark.\n\n"
          "Exit codes: 0 every check passed, 1 a check failed or the device is unusable, 2 usage.",
          {{"device", true, false, "DEV", "auto (default: cuda when available), cuda or cpu"},
           {"json", false, false, "", "one JSON object per check instead of the table"}},
          0,
          0};
}

#ifndef ODYSSEY_HAVE_TORCH
int cmd_selftest(const Args&) {
  std::cerr << "odyssey-train selftest: this build has no LibTorch (configure with Torch)\n";
  return kFailure;
}
#else
int cmd_selftest(const Args& a) {
  const std::string dev = a.value("device", "auto");
  if (dev != "auto" && dev != "cpu" && dev != "cuda") {
    std::cerr << "odyssey-train selftest: --device: found " << text::quoted(dev) << ", expected auto, cuda or cpu\n";
    return kUsage;
  }
  const bool cuda = dev == "cuda" || (dev == "auto" && torch::cuda::is_available());
  if (cuda && !torch::cuda::is_available()) {
    std::cerr << "odyssey-train selftest: --device cuda, but no CUDA device is visible\n";
    return kFailure;
  }
#ifndef ODYSSEY_HAVE_CUDA_KERNELS
  if (cuda) {
    std::cerr << "odyssey-train selftest: this build has no CUDA kernels (configure with a CUDA toolkit)\n";
    return kFailure;
  }
#endif
  const auto rows = kernels::run_selftest(cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU));
  const bool json = a.has("json");
  int failed = 0;
  if (!json)
    std::printf("%-40s %-5s %-9s %-5s %12s %12s %12s %12s  %s\n", "kernel", "dtype", "tensor", "path", "max abs", "rel",
                "ref rel", "bound", "result");
  for (const auto& r : rows) {
    failed += r.ok ? 0 : 1;
    if (json) {
      std::cout << dump_json(nlohmann::json{{"kernel", r.kernel},
                                            {"dtype", r.dtype},
                                            {"tensor", r.tensor},
                                            {"path", r.path},
                                            {"max_abs", r.max_abs},
                                            {"rel", r.rel},
                                            {"ref_rel", r.ref_rel},
                                            {"bound", r.bound},
                                            {"ok", r.ok}})
                << '\n';
    } else {
      std::printf("%-40s %-5s %-9s %-5s %12.3e %12.3e %12.3e %12.3e  %s\n", r.kernel.c_str(), r.dtype.c_str(),
                  r.tensor.c_str(), r.path.c_str(), r.max_abs, r.rel, r.ref_rel, r.bound, r.ok ? "ok" : "FAILED");
    }
  }
  std::fflush(stdout);
  if (!json) std::cout << rows.size() - static_cast<std::size_t>(failed) << " of " << rows.size() << " checks passed\n";
  return failed == 0 ? kOk : kFailure;
}
#endif

}  // namespace odyssey::cli
