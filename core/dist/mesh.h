// The process mesh of a parallel run (docs/parallel.md): rendezvous from torchrun's
// environment, and the dp × sp groups with sp = ring × ulysses.
//
// Rank order: rank = dp_rank · sp + ring_rank · ulysses + ulysses_rank, so the Ulysses
// all-to-alls, the heaviest traffic, run between neighbouring ranks (the GPUs of one
// NVLink island, or one host).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "dist/comm.h"
#include "run/event_schema.h"

namespace odyssey::dist {

// torchrun's variables: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT. The store is hosted by the launcher when TORCHELASTIC_USE_AGENT_STORE is
// True (torchrun's agent, or odyssey-train's own launcher); otherwise rank 0 hosts it.
struct DistEnv {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool store_hosted = false;
  bool from_environment = false;  // RANK and WORLD_SIZE were set
};

// Reads the variables; a malformed or inconsistent value is an error naming the variable.
DistEnv read_dist_env(std::string* error);

// Connects to (or, on rank 0 without a hosting launcher, serves) the TCPStore, and wraps it in
// the run's authentication when ODYSSEY_STORE_SECRET is set (dist/store_auth.h): every key
// the ranks use is then named and tagged with the secret; without it (torchrun's agent store)
// it says once that the store is unauthenticated.
c10::intrusive_ptr<c10d::Store> connect_store(const DistEnv& env, std::chrono::milliseconds timeout);

struct Mesh {
  int rank = 0, world = 1;
  int dp = 1, sp = 1, ulysses = 1, ring = 1, ep = 1;
  int dp_rank = 0, sp_rank = 0, ulysses_rank = 0, ring_rank = 0, ep_rank = 0;
  std::shared_ptr<Group> world_group, dp_group, ulysses_group, ring_group;
  // The sp ranks of one row (the Ulysses or ring group itself when the other degree is 1).
  std::shared_ptr<Group> sp_group;
  // Expert parallelism (docs/moe.md): ep_group is a block of ep consecutive ranks of the
  // sequence-parallel group, which split the experts (ep_rank holds the ep_rank-th share);
  // expert_dp_group holds the world / ep ranks with the same share, over which the experts'
  // gradients are summed. Both are size 1 without expert parallelism / with ep = world.
  std::shared_ptr<Group> ep_group, expert_dp_group;

  bool distributed() const { return world > 1; }
  // Per collective kind and group, since the last call: the run contract's CollectiveStat,
  // with bus bandwidth by nccl-tests' conventions. Also returns the summed seconds.
  // With `transfer_seconds` (every rank of the mesh must ask together: it gathers over each
  // group), one entry per returned stat: the sum over its blocking calls of the call's time on
  // the rank that took least, i.e. the transfer without the wait for a later rank (a rank that
  // calls first waits in the collective for the last; nccl-tests' back-to-back calls have no
  // such wait). 0 where the calls were overlapped.
  std::vector<run::CollectiveStat> take_stats(double* total_seconds, std::vector<double>* transfer_seconds = nullptr);
};

// A mesh of one process (no communication).
Mesh single_process_mesh();

// Builds the groups for `layout` (world = dp × sp must equal env.world).
Mesh build_mesh(const DistEnv& env, const ParallelLayout& layout, Transport transport,
                const c10::intrusive_ptr<c10d::Store>& store, const torch::Device& device,
                std::chrono::milliseconds timeout);

}  // namespace odyssey::dist
