#include "engine/runtime_info.h"

#include <torch/torch.h>

#include <sched.h>

#include <algorithm>
#include <thread>

#include <cstdlib>
#include <sstream>
#include <string>

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
