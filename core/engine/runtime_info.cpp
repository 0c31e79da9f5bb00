#include "engine/runtime_info.h"

#include <torch/torch.h>
#if __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#define ODYSSEY_HAVE_CUDA_RUNTIME 1
#endif

#include <sched.h>

#include <algorithm>
#include <thread>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "planner/memory_planner.h"

namespace odyssey {

std::string torch_runtime_info() {
  std::ostringstream o;
  o << "LibTorch: " << TORCH_VERSION << '\n';
  const bool cuda = torch::cuda::is_available();
  o << "CUDA available: " << (cuda ? "yes" : "no") << '\n';
  if (cuda) o << "CUDA devices: " << static_cast<int>(torch::cuda::device_count()) << '\n';
  o << "CPU threads: " << at::get_num_threads() << '\n';
  return o.str();
}

}  // namespace odyssey

namespace odyssey {

std::string configure_cuda_allocator() {
  for (const char* name : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"})
    if (const char* v = std::getenv(name); v && *v) return v;
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 0);
  return "expandable_segments:True";
}

std::int64_t gpu_memory_bytes(int device) {
#ifdef ODYSSEY_HAVE_CUDA_RUNTIME
  if (device >= 0 && torch::cuda::is_available())
    return static_cast<std::int64_t>(
        at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device))->totalGlobalMem);
#else
  (void)device;
#endif
  return 0;
}

std::string cap_gpu_memory(double budget_gib, int device) {
  if (budget_gib <= 0) return "";
#ifdef ODYSSEY_HAVE_CUDA_RUNTIME
  if (device < 0 || !torch::cuda::is_available()) return "";
  const auto gib = [](double bytes, int digits) {
    char b[32];
    std::snprintf(b, sizeof b, "%.*f", digits, bytes / static_cast<double>(planner::kGiB));
    return std::string(b);
  };
  const auto index = static_cast<c10::DeviceIndex>(device);
  const auto total = static_cast<double>(gpu_memory_bytes(device));
  const auto budget = static_cast<double>(planner::budget_bytes(budget_gib));   // as the planner plans it
  (void)torch::empty({1}, torch::TensorOptions().device(torch::kCUDA, index));  // the allocator exists once used
  if (budget >= total) {
    c10::cuda::CUDACachingAllocator::setMemoryFraction(1.0, index);  // a process may lift an earlier cap
    return "memory budget " + gib(budget, 2) + " GiB is not below the GPU's " + gib(total, 1) + " GiB: no cap";
  }
  const double pool = std::max(budget - static_cast<double>(planner::kCudaContextBytes), budget / 2);
  c10::cuda::CUDACachingAllocator::setMemoryFraction(pool / total, index);
  return "memory budget " + gib(budget, 2) + " GiB: the allocator holds at most " + gib(pool, 2) +
         " GiB of the GPU's " + gib(total, 1) + " (the rest is the CUDA context)";
#else
  (void)device;
  return "";
#endif
}

}  // namespace odyssey

namespace odyssey {

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int intra_op_threads_per_rank(int processes) {
  if (const char* v = std::getenv("OMP_NUM_THREADS"); v && *v) return 0;
  return std::max(1, usable_cpus() / std::max(1, processes));
}

}  // namespace odyssey
