#include "engine/runtime_info.h"

#include <torch/torch.h>

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
