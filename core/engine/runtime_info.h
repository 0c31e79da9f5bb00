// What LibTorch and which devices the engine sees (for `odyssey-train env` and run_start).
#pragma once

#include <string>

namespace odyssey {

std::string torch_runtime_info();

}  // namespace odyssey
