// The launcher of a parallel run (docs/parallel.md): one process per GPU (or CPU rank) with
// torchrun's environment, the rendezvous store hosted here, and supervision.
//
//  - Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
//    TORCHELASTIC_USE_AGENT_STORE=True (the store lives in the launcher, as under torchrun),
//    CUDA_VISIBLE_DEVICES narrowed to the chosen GPUs (entries of the launcher's own
//    CUDA_VISIBLE_DEVICES when it has one, so ids stay the machine's), and dies with the
//    launcher (PR_SET_PDEATHSIG): no orphans.
//  - A rank that exits abnormally (non-zero code or a signal) gets every other rank killed at
//    once (they would wait on it in a collective); status.json then names the rank, its exit
//    status and its last output lines.
//  - SIGTERM/SIGINT to the launcher are forwarded (graceful: the ranks agree on a step, rank 0
//    checkpoints); a second one, or `stop_timeout` after the first, kills every rank.
//  - The store binds to loopback for one node; with several nodes, to the master address.
//  - Each run's ranks get ODYSSEY_STORE_SECRET in their environment (dist/store_auth.h): a
//    fresh one from getrandom(2) on one node; with several, the one the job exported (the
//    same on every node), and the launch is refused without it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace odyssey::dist {

struct LaunchOptions {
  std::string executable;              // the program each rank runs (normally this one)
  std::vector<std::string> arguments;  // its arguments
  int nproc = 1;                       // ranks on this node
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;        // 0 = a free port (single node only)
  std::vector<long> gpu_ids;  // ordinals as the launcher sees them; empty = CPU or all
  bool use_gpus = false;
  std::filesystem::path run_dir;  // status.json, events.jsonl, logs/ live here
  double stop_timeout_s = 300;    // after the first SIGTERM
  double rank_exit_grace_s = 10;  // after a rank fails: the others are killed within this
};

// Runs the ranks to the end; returns the launcher's exit code (0 when every rank exited 0).
// Errors before any rank started (port in use, unknown GPU id) are printed and return 1
// with status.json written as failed.
int launch(const LaunchOptions& options);

}  // namespace odyssey::dist
