#include "engine/runtime_info.h"

#include <torch/torch.h>

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
