// What LibTorch and which devices the engine sees (for `odyssey-train env` and run_start).
#pragma once

#include <string>

namespace odyssey {

std::string torch_runtime_info();

}  // namespace odyssey

namespace odyssey {

// The CUDA caching allocator's settings for training: expandable segments (one growing
// virtual range per stream instead of fixed blocks, so long-context activations of changing
// sizes do not strand reserved memory), unless the user set PYTORCH_CUDA_ALLOC_CONF or
// PYTORCH_ALLOC_CONF. Call before the first CUDA allocation; returns the settings in effect.
std::string configure_cuda_allocator();

}  // namespace odyssey
