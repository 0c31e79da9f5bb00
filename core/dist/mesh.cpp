#include "dist/mesh.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>

#include "common/text.h"
#include "dist/store_auth.h"

namespace odyssey::dist {

namespace {

bool read_int(const char* name, int* out, std::string* error) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  auto n = text::parse_int(v);
  if (!n || *n < 0 || *n > 1'000'000) {
    if (error && error->empty()) *error = std::string(name) + "=\"" + v + "\" is not a non-negative integer";
    return false;
  }
  *out = static_cast<int>(*n);
  return true;
}

bool truthy(const char* v) {
  if (!v) return false;
  std::string s = v;
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s == "1" || s == "true" || s == "yes";
}

}  // namespace

DistEnv read_dist_env(std::string* error) {
  DistEnv e;
  const bool has_rank = read_int("RANK", &e.rank, error);
  const bool has_world = read_int("WORLD_SIZE", &e.world, error);
  e.from_environment = has_rank && has_world;
  if (has_rank != has_world && error && error->empty())
    *error = "RANK and WORLD_SIZE must be set together (torchrun sets both)";
  if (!read_int("LOCAL_RANK", &e.local_rank, error)) e.local_rank = e.rank;
  if (!read_int("LOCAL_WORLD_SIZE", &e.local_world, error)) e.local_world = e.world;
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) e.master_addr = a;
  read_int("MASTER_PORT", &e.master_port, error);
  e.store_hosted = truthy(std::getenv("TORCHELASTIC_USE_AGENT_STORE"));
  if (error && error->empty()) {
    if (e.world < 1) *error = "WORLD_SIZE must be at least 1";
    else if (e.rank >= e.world)
      *error = "RANK " + std::to_string(e.rank) + " is not below WORLD_SIZE " + std::to_string(e.world);
    else if (e.local_rank >= e.local_world)
      *error = "LOCAL_RANK " + std::to_string(e.local_rank) + " is not below LOCAL_WORLD_SIZE " +
               std::to_string(e.local_world);
    else if (e.master_port < 1 || e.master_port > 65535)
      *error = "MASTER_PORT " + std::to_string(e.master_port) + " is not a TCP port";
  }
  return e;
}

c10::intrusive_ptr<c10d::Store> connect_store(const DistEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(env.master_port);
  o.isServer = !env.store_hosted && env.rank == 0;
  o.numWorkers = env.store_hosted ? std::nullopt : std::optional<std::size_t>(static_cast<std::size_t>(env.world));
  o.waitWorkers = false;
  o.timeout = timeout;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  c10::intrusive_ptr<c10d::Store> tcp;
  try {
    tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
  } catch (const c10::Error& e) {
    throw std::runtime_error("rank " + std::to_string(env.rank) + " could not reach the rendezvous store at " + where +
                             " within " + std::to_string(timeout.count() / 1000) + " s: " + e.what_without_backtrace());
  }
  // Every request of the ranks is authenticated with the run's secret (store_auth.h).
  return authenticate_store(std::move(tcp), env.rank, where, timeout);
}

Mesh single_process_mesh() {
  Mesh m;
  const torch::Device cpu(torch::kCPU);
  m.world_group = make_group(Transport::Store, "world", "world", {}, 0, 1, cpu, {});
  m.dp_group = make_group(Transport::Store, "dp", "dp", {}, 0, 1, cpu, {});
  m.ulysses_group = make_group(Transport::Store, "ulysses", "ulysses", {}, 0, 1, cpu, {});
  m.ring_group = make_group(Transport::Store, "ring", "ring", {}, 0, 1, cpu, {});
  m.sp_group = m.ep_group = m.expert_dp_group = m.ulysses_group;
  return m;
}

Mesh build_mesh(const DistEnv& env, const ParallelLayout& layout, Transport transport,
                const c10::intrusive_ptr<c10d::Store>& store, const torch::Device& device,
                std::chrono::milliseconds timeout) {
  Mesh m;
  m.rank = env.rank;
  m.world = env.world;
  m.sp = static_cast<int>(layout.sp);
  m.ulysses = static_cast<int>(layout.ulysses);
  m.ring = static_cast<int>(layout.ring);
  if (m.ulysses * m.ring != m.sp || m.sp < 1 || m.world % m.sp != 0)
    throw std::runtime_error("the mesh does not fit: world " + std::to_string(m.world) + ", sequence_parallel_size " +
                             std::to_string(m.sp) + " = ulysses " + std::to_string(m.ulysses) + " x ring " +
                             std::to_string(m.ring));
  m.dp = m.world / m.sp;
  m.ep = static_cast<int>(layout.ep);
  if (m.ep < 1 || m.sp % m.ep != 0)
    throw std::runtime_error("the mesh does not fit: expert_parallel_size " + std::to_string(m.ep) +
                             " must divide sequence_parallel_size " + std::to_string(m.sp));
  m.dp_rank = m.rank / m.sp;
  m.sp_rank = m.rank % m.sp;
  m.ring_rank = m.sp_rank / m.ulysses;
  m.ulysses_rank = m.sp_rank % m.ulysses;
  const std::string d = std::to_string(m.dp_rank), s = std::to_string(m.sp_rank);
  const std::string r = std::to_string(m.ring_rank), u = std::to_string(m.ulysses_rank);
  m.world_group = make_group(transport, "world", "odyssey/world", store, m.rank, m.world, device, timeout);
  m.dp_group = make_group(transport, "dp", "odyssey/dp/sp" + s, store, m.dp_rank, m.dp, device, timeout);
  m.ulysses_group = make_group(transport, "ulysses", "odyssey/ulysses/dp" + d + "/ring" + r, store, m.ulysses_rank,
                               m.ulysses, device, timeout);
  m.ring_group =
      make_group(transport, "ring", "odyssey/ring/dp" + d + "/u" + u, store, m.ring_rank, m.ring, device, timeout);
  // Groups that would repeat one already made are that one (an NCCL communicator each costs
  // memory on every GPU).
  m.sp_group = m.ring == 1 ? m.ulysses_group
               : m.ulysses == 1
                   ? m.ring_group
                   : make_group(transport, "sp", "odyssey/sp/dp" + d, store, m.sp_rank, m.sp, device, timeout);
  m.ep_rank = m.sp_rank % m.ep;
  const int block = m.sp_rank / m.ep;  // which block of the sp group
  if (m.ep == m.sp) m.ep_group = m.sp_group;
  else if (m.ep == m.ulysses && m.ring > 1) m.ep_group = m.ulysses_group;  // consecutive sp ranks of one ring rank
  else
    m.ep_group = make_group(transport, "ep", "odyssey/ep/dp" + d + "/b" + std::to_string(block), store, m.ep_rank, m.ep,
                            device, timeout);
  const int replicas = m.world / m.ep;
  if (m.ep == 1) m.expert_dp_group = m.world_group;
  else
    m.expert_dp_group = make_group(transport, "expert_dp", "odyssey/expert_dp/e" + std::to_string(m.ep_rank), store,
                                   m.rank / m.ep, replicas, device, timeout);
  return m;
}

std::vector<run::CollectiveStat> Mesh::take_stats(double* total_seconds, std::vector<double>* transfer_seconds) {
  std::vector<run::CollectiveStat> out;
  if (transfer_seconds) transfer_seconds->clear();
  double total = 0;
  std::vector<std::shared_ptr<Group>> groups;
  for (const auto& g : {world_group, dp_group, ulysses_group, ring_group, sp_group, ep_group, expert_dp_group})
    if (g && g->size() > 1 && std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  for (const auto& g : groups) {
    const auto st = g->stats();
    if (transfer_seconds) {
      // Same calls on every rank of the group (collectives), so the same number of times.
      for (int i = 0; i < kOpCount; ++i) {
        const OpStats& o = st[static_cast<std::size_t>(i)];
        if (o.calls == 0) continue;
        const auto n = static_cast<std::int64_t>(o.call_seconds.size());
        double least = 0;
        if (n > 0 && n == o.calls) {
          const torch::Tensor mine = torch::tensor(o.call_seconds, torch::kFloat64).to(g->device());
          least = std::get<0>(g->all_gather(mine).view({g->size(), n}).min(0)).sum().item<double>();
        }
        transfer_seconds->push_back(least);
      }
    }
    g->reset_stats();  // also drops the gathers above
    for (int i = 0; i < kOpCount; ++i) {
      const OpStats& o = st[static_cast<std::size_t>(i)];
      if (o.calls == 0) continue;
      run::CollectiveStat c;
      c.op = op_name(static_cast<Op>(i));
      c.group = g->name();
      c.group_size = g->size();
      c.calls = o.calls;
      c.bytes = o.bytes;
      c.time_s = o.seconds;
      c.bus_bandwidth_gb_per_s =
          o.seconds > 0 ? static_cast<double>(o.bytes) / o.seconds * bus_factor(static_cast<Op>(i), g->size()) / 1e9
                        : 0;
      total += o.exposed_seconds;  // overlapped send/recv counts only what compute waited for
      out.push_back(std::move(c));
    }
  }
  if (total_seconds) *total_seconds = total;
  return out;
}

}  // namespace odyssey::dist
