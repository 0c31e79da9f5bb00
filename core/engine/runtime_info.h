// What LibTorch and which devices the engine sees (for `odyssey-train env` and run_start).
#pragma once

#include <cstdint>
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

// A memory budget for one GPU (gpu_memory_budget_gib; odyssey-bench --memory-gib): the caching
// allocator of CUDA device `device` may then hold at most the budget less what the planner
// counts outside it (the CUDA context; at least half the budget), so the process stays within
// the budget the planner planned for and a job that needs more fails as it would on that card.
// Returns the line for the log: the cap set, or why none was (a budget not below the GPU's
// memory); "" for no budget or no CUDA device.
std::string cap_gpu_memory(double budget_gib, int device);

// Total memory of CUDA device `device` in bytes; 0 for -1, no CUDA device or a build without
// the CUDA runtime (the planner then assumes an H200).
std::int64_t gpu_memory_bytes(int device);

}  // namespace odyssey

namespace odyssey {

// The CPUs this process may run on: its affinity mask (which taskset, Slurm and container
// cpusets narrow), not the machine's count that std::thread::hardware_concurrency reports.
int usable_cpus();

// Intra-op threads for each of `processes` ranks of one job on this host: usable_cpus()
// shared among them, at least 1; 0 when OMP_NUM_THREADS is set (the user's choice, which
// LibTorch applied at start and which stands).
int intra_op_threads_per_rank(int processes);

}  // namespace odyssey
