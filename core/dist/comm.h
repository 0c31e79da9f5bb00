// Collectives for the parallel engine (docs/parallel.md): one small interface, two
// transports.
//
//  - NCCL (GPUs): c10d's ProcessGroupNCCL over a c10d TCPStore rendezvous. Its collectives
//    run on NCCL's stream; Work::wait makes the compute stream wait for them, and c10d
//    records the tensors on its stream so the caching allocator cannot reuse them early.
//  - Store (CPU, tests and CPU runs only): every collective is an exchange of tensor bytes
//    through the same TCPStore (set by the sender, get + delete by the receiver), reduced in
//    rank order so every rank gets bit-identical sums. Each message carries a header (run id,
//    group, sender, receiver, per-pair sequence number, dtype, shape, bytes) that the receiver
//    checks before using a byte (store_message.h); the store itself authenticates every value
//    with the run's secret (store_auth.h). The PyTorch wheel ships no gloo
//    headers and Debian's libgloo is older than the gloo inside libtorch, so ProcessGroupGloo
//    is out of reach from C++; a store transport needs nothing beyond libtorch and behaves
//    the same on one host and across hosts.
//
// Every call is counted per collective kind: calls, bytes (nccl-tests' "size"), and time.
// On CUDA the time is taken with CUDA events on the compute stream around issue + wait,
// i.e. the time compute waited for the collective; read it after the step. A send/recv
// started with start_send_recv runs beside compute: its time is the transfer's (events on a
// side stream) and its exposed time only what compute waited for it in wait().
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/torch.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace odyssey::dist {

enum class Op { AllReduce = 0, AllToAll, AllGather, ReduceScatter, SendRecv, Barrier };
inline constexpr int kOpCount = 6;
const char* op_name(Op op);  // the run contract's names: all_reduce, all_to_all, ...

// nccl-tests' bus-bandwidth factor for a group of n ranks (PERFORMANCE.md there):
// all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; send/recv 1.
double bus_factor(Op op, int n);

struct OpStats {
  std::int64_t calls = 0;
  std::int64_t bytes = 0;
  double seconds = 0;                // the collectives' own time (bandwidth = bytes / seconds)
  double exposed_seconds = 0;        // of it, what compute waited for (all of it unless overlapped)
  std::vector<double> call_seconds;  // each blocking call's time, in call order (overlapped ones are not here)
};

// A send/recv in flight (Group::start_send_recv). wait() returns what the peer sent, once;
// on CUDA the compute stream then waits for the transfer, the host does not.
class PendingExchange {
 public:
  virtual ~PendingExchange() = default;
  virtual torch::Tensor wait() = 0;
};

class Group {
 public:
  Group(std::string name, int rank, int size) : name_(std::move(name)), rank_(rank), size_(size) {}
  virtual ~Group() = default;
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  const std::string& name() const { return name_; }  // dp, sp, ulysses, ring, world
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Where the group's collectives take their tensors (NCCL: the rank's GPU).
  virtual torch::Device device() const { return torch::Device(torch::kCPU); }

  // Sum over the group, in place.
  void all_reduce(torch::Tensor& t);
  // x [size * n, ...]: slice j goes to rank j; returns [size * n, ...] whose slice j came
  // from rank j.
  torch::Tensor all_to_all(const torch::Tensor& x);
  // The same with uneven slices (expert parallelism's token dispatch, docs/moe.md): the first
  // send_rows[j] rows of x (after the earlier slices) go to rank j; returns the recv_rows[j]
  // rows from each rank j, in rank order. Every rank's send_rows[j] must equal rank j's
  // recv_rows[rank()]; the caller exchanges the counts first.
  torch::Tensor all_to_all_v(const torch::Tensor& x, const std::vector<std::int64_t>& send_rows,
                             const std::vector<std::int64_t>& recv_rows);
  // x [n, ...] -> [size * n, ...], slice j from rank j.
  torch::Tensor all_gather(const torch::Tensor& x);
  // x [size * n, ...] -> [n, ...]: the sum over ranks of their slice `rank()`.
  torch::Tensor reduce_scatter(const torch::Tensor& x);
  // Sends `x` to rank `to` and returns what rank `from` sent (same shape and dtype), as one
  // batched pair, so a ring rotation cannot deadlock.
  torch::Tensor send_recv(const torch::Tensor& x, int to, int from);
  // The same exchange, started now and finished by wait(): compute issued in between overlaps
  // the transfer where the transport is asynchronous (NCCL); the store transport exchanges
  // at once. Exchanges must be started and waited in the same order on every rank.
  std::unique_ptr<PendingExchange> start_send_recv(const torch::Tensor& x, int to, int from);
  void barrier();

  // Counters since the last reset; on CUDA this waits for the timed events.
  std::array<OpStats, kOpCount> stats();
  void reset_stats();

 protected:
  virtual void do_all_reduce(torch::Tensor& t) = 0;
  virtual torch::Tensor do_all_to_all(const torch::Tensor& x) = 0;
  virtual torch::Tensor do_all_to_all_v(const torch::Tensor& x, const std::vector<std::int64_t>& send_rows,
                                        const std::vector<std::int64_t>& recv_rows) = 0;
  virtual torch::Tensor do_all_gather(const torch::Tensor& x) = 0;
  virtual torch::Tensor do_reduce_scatter(const torch::Tensor& x) = 0;
  virtual torch::Tensor do_send_recv(const torch::Tensor& x, int to, int from) = 0;
  // Default: the blocking exchange, done before returning (counted by send_recv()).
  virtual std::unique_ptr<PendingExchange> do_start_send_recv(const torch::Tensor& x, int to, int from);
  virtual void do_barrier() = 0;
  // Timing hooks: the default is the host clock (CPU). CUDA groups time with events.
  virtual void begin_timing(Op op);
  virtual void end_timing(Op op);
  virtual void settle_timing() {}

  std::array<OpStats, kOpCount> stats_{};

 private:
  template <typename F>
  auto timed(Op op, std::int64_t bytes, F&& f);
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  std::chrono::steady_clock::time_point host_start_{};
};

enum class Transport { Store, Nccl };

// Whether this build can make NCCL groups (LibTorch built with c10d NCCL).
bool nccl_available();

// A group of `size` ranks, this one being `rank`, rendezvousing under `prefix` in `store`.
// Size 1 never communicates. Store-transport groups time out after `timeout` waiting for
// a peer, with a message naming the group, the collective and the peer.
std::shared_ptr<Group> make_group(Transport transport, const std::string& name, const std::string& prefix,
                                  const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                  const torch::Device& device, std::chrono::milliseconds timeout);

}  // namespace odyssey::dist
