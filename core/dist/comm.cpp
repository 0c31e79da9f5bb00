#include "dist/comm.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "dist/store_auth.h"
#include "dist/store_message.h"

namespace odyssey::dist {

const char* op_name(Op op) {
  switch (op) {
    case Op::AllReduce: return "all_reduce";
    case Op::AllToAll: return "all_to_all";
    case Op::AllGather: return "all_gather";
    case Op::ReduceScatter: return "reduce_scatter";
    case Op::SendRecv: return "send_recv";
    case Op::Barrier: return "barrier";
  }
  return "unknown";
}

double bus_factor(Op op, int n) {
  if (n <= 1) return 0.0;
  const double dn = n;
  switch (op) {
    case Op::AllReduce: return 2.0 * (dn - 1.0) / dn;
    case Op::AllToAll:
    case Op::AllGather:
    case Op::ReduceScatter: return (dn - 1.0) / dn;
    case Op::SendRecv: return 1.0;
    case Op::Barrier: return 0.0;
  }
  return 0.0;
}

namespace {
std::int64_t nbytes(const torch::Tensor& t) { return t.numel() * static_cast<std::int64_t>(t.element_size()); }

void check_split(const torch::Tensor& x, int size, const char* what) {
  TORCH_CHECK(x.dim() >= 1 && x.size(0) % size == 0, what, ": the first dimension (", x.dim() ? x.size(0) : 0,
              ") must divide by the group size ", size);
}
}  // namespace

void Group::begin_timing(Op) { host_start_ = std::chrono::steady_clock::now(); }

void Group::end_timing(Op op) {
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start_).count();
  stats_[static_cast<int>(op)].seconds += dt;
  stats_[static_cast<int>(op)].exposed_seconds += dt;
  stats_[static_cast<int>(op)].call_seconds.push_back(dt);
}

template <typename F>
auto Group::timed(Op op, std::int64_t bytes, F&& f) {
  OpStats& s = stats_[static_cast<int>(op)];
  s.calls += 1;
  s.bytes += bytes;
  begin_timing(op);
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    end_timing(op);
  } else {
    auto r = f();
    end_timing(op);
    return r;
  }
}

void Group::all_reduce(torch::Tensor& t) {
  if (size_ == 1) return;
  timed(Op::AllReduce, nbytes(t), [&] { do_all_reduce(t); });
}

torch::Tensor Group::all_to_all(const torch::Tensor& x) {
  check_split(x, size_, "all_to_all");
  if (size_ == 1) return x;
  return timed(Op::AllToAll, nbytes(x), [&] { return do_all_to_all(x.contiguous()); });
}

torch::Tensor Group::all_to_all_v(const torch::Tensor& x, const std::vector<std::int64_t>& send_rows,
                                  const std::vector<std::int64_t>& recv_rows) {
  TORCH_CHECK(x.dim() >= 1, "all_to_all_v: a tensor of rows, got a scalar");
  TORCH_CHECK(static_cast<int>(send_rows.size()) == size_ && static_cast<int>(recv_rows.size()) == size_,
              "all_to_all_v: ", size_, " send and receive counts expected, got ", send_rows.size(), " and ",
              recv_rows.size());
  std::int64_t total = 0;
  for (std::int64_t n : send_rows) {
    TORCH_CHECK(n >= 0, "all_to_all_v: a negative row count");
    total += n;
  }
  TORCH_CHECK(total == x.size(0), "all_to_all_v: the send counts add up to ", total, " rows, x has ", x.size(0));
  for (std::int64_t n : recv_rows) TORCH_CHECK(n >= 0, "all_to_all_v: a negative row count");
  if (size_ == 1) return x;
  return timed(Op::AllToAll, nbytes(x), [&] { return do_all_to_all_v(x.contiguous(), send_rows, recv_rows); });
}

torch::Tensor Group::all_gather(const torch::Tensor& x) {
  if (size_ == 1) return x;
  return timed(Op::AllGather, nbytes(x) * size_, [&] { return do_all_gather(x.contiguous()); });
}

torch::Tensor Group::reduce_scatter(const torch::Tensor& x) {
  check_split(x, size_, "reduce_scatter");
  if (size_ == 1) return x;
  return timed(Op::ReduceScatter, nbytes(x), [&] { return do_reduce_scatter(x.contiguous()); });
}

torch::Tensor Group::send_recv(const torch::Tensor& x, int to, int from) {
  TORCH_CHECK(to >= 0 && to < size_ && from >= 0 && from < size_, "send_recv: peers ", to, " and ", from,
              " outside a group of ", size_);
  if (size_ == 1) return x;
  return timed(Op::SendRecv, nbytes(x), [&] { return do_send_recv(x.contiguous(), to, from); });
}

namespace {
class Done final : public PendingExchange {
 public:
  explicit Done(torch::Tensor t) : t_(std::move(t)) {}
  torch::Tensor wait() override { return std::move(t_); }

 private:
  torch::Tensor t_;
};
}  // namespace

std::unique_ptr<PendingExchange> Group::do_start_send_recv(const torch::Tensor& x, int to, int from) {
  return std::make_unique<Done>(send_recv(x, to, from));
}

std::unique_ptr<PendingExchange> Group::start_send_recv(const torch::Tensor& x, int to, int from) {
  TORCH_CHECK(to >= 0 && to < size_ && from >= 0 && from < size_, "start_send_recv: peers ", to, " and ", from,
              " outside a group of ", size_);
  if (size_ == 1) return std::make_unique<Done>(x);
  return do_start_send_recv(x.contiguous(), to, from);
}

void Group::barrier() {
  if (size_ == 1) return;
  timed(Op::Barrier, 0, [&] { do_barrier(); });
}

std::array<OpStats, kOpCount> Group::stats() {
  settle_timing();
  return stats_;
}

void Group::reset_stats() {
  settle_timing();
  stats_ = {};
}

// ---- store transport ---------------------------------------------------------------------

namespace {

// A TCPStore client waits on its socket without a deadline of its own: when the link to the
// store is cut, wait() never returns. Like NCCL's watchdog, this thread ends the process when
// a collective outlives its timeout by a grace period, with the reason on stderr (the
// launcher reports it and stops the other ranks).
class Watchdog {
 public:
  static Watchdog& get() {
    static Watchdog* w = new Watchdog();  // never destroyed: the thread outlives main's statics
    return *w;
  }
  void arm(std::chrono::milliseconds timeout, std::string message) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      message_ = std::move(message);
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout + std::chrono::seconds(5);
    deadline_.store(deadline.time_since_epoch().count());
  }
  void disarm() { deadline_.store(0); }

 private:
  Watchdog() {
    std::thread([this] {
      for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        const auto d = deadline_.load();
        if (d == 0 || std::chrono::steady_clock::now().time_since_epoch().count() < d) continue;
        std::string m;
        {
          std::lock_guard<std::mutex> lock(mu_);
          m = "odyssey: " + message_ + "; ending this process\n";
        }
        (void)!::write(2, m.data(), m.size());
        (void)!::write(1, m.data(), m.size());
        ::_exit(1);
      }
    }).detach();
  }
  std::atomic<std::chrono::steady_clock::rep> deadline_{0};
  std::mutex mu_;
  std::string message_;
};

class StoreGroup final : public Group {
 public:
  StoreGroup(const std::string& name, const std::string& prefix, const c10::intrusive_ptr<c10d::Store>& store, int rank,
             int size, std::chrono::milliseconds timeout)
      : Group(name, rank, size),
        store_(c10::make_intrusive<c10d::PrefixStore>(prefix, store)),
        prefix_(prefix),
        run_id_(store_run_id(store)),
        timeout_(timeout),
        sent_(static_cast<std::size_t>(size), 0),
        received_(static_cast<std::size_t>(size), 0) {}

 protected:
  void do_all_reduce(torch::Tensor& t) override {
    const torch::Tensor src = t.detach().to(torch::kCPU).contiguous();
    const std::vector<torch::Tensor> got =
        exchange(std::vector<torch::Tensor>(static_cast<std::size_t>(size()), src), "all_reduce");
    torch::Tensor sum = got[0].clone();
    for (int j = 1; j < size(); ++j) sum.add_(got[static_cast<std::size_t>(j)]);
    t.copy_(sum);
  }
  torch::Tensor do_all_to_all(const torch::Tensor& x) override {
    const torch::Tensor src = x.to(torch::kCPU);
    const std::vector<torch::Tensor> got = exchange(split(src), "all_to_all");
    return torch::cat(got).to(x.device());
  }
  torch::Tensor do_all_to_all_v(const torch::Tensor& x, const std::vector<std::int64_t>& send_rows,
                                const std::vector<std::int64_t>& recv_rows) override {
    const torch::Tensor src = x.to(torch::kCPU);
    std::vector<torch::Tensor> parts, like;
    for (const auto& p : src.split_with_sizes(send_rows, 0)) parts.push_back(p.contiguous());
    std::vector<std::int64_t> shape = src.sizes().vec();
    for (std::int64_t n : recv_rows) {
      shape[0] = n;
      like.push_back(torch::empty(shape, src.options()));
    }
    return torch::cat(exchange(parts, "all_to_all_v", &like)).to(x.device());
  }
  torch::Tensor do_all_gather(const torch::Tensor& x) override {
    const torch::Tensor src = x.to(torch::kCPU).contiguous();
    return torch::cat(exchange(std::vector<torch::Tensor>(static_cast<std::size_t>(size()), src), "all_gather"))
        .to(x.device());
  }
  torch::Tensor do_reduce_scatter(const torch::Tensor& x) override {
    const std::vector<torch::Tensor> got = exchange(split(x.to(torch::kCPU)), "reduce_scatter");
    torch::Tensor sum = got[0].clone();
    for (int j = 1; j < size(); ++j) sum.add_(got[static_cast<std::size_t>(j)]);
    return sum.to(x.device());
  }
  torch::Tensor do_send_recv(const torch::Tensor& x, int to, int from) override {
    const std::uint64_t seq = seq_++;
    const torch::Tensor src = x.to(torch::kCPU).contiguous();
    if (to == rank()) {
      local_ = src.clone();
    } else {
      send(seq, to, src);
    }
    torch::Tensor out = torch::empty_like(src);
    if (from == rank()) {
      out.copy_(local_);
    } else {
      receive(seq, from, out, "send_recv");
    }
    return out.to(x.device());
  }
  void do_barrier() override {
    const torch::Tensor empty = torch::zeros({1}, torch::kUInt8);
    exchange(std::vector<torch::Tensor>(static_cast<std::size_t>(size()), empty), "barrier");
  }

 private:
  std::vector<torch::Tensor> split(const torch::Tensor& x) const {
    std::vector<torch::Tensor> parts;
    for (const auto& p : x.chunk(size(), 0)) parts.push_back(p.contiguous());
    return parts;
  }

  // A message to `to`: the header says what it is (store_message.h), then the bytes.
  void send(std::uint64_t seq, int to, const torch::Tensor& t) {
    MessageHeader h;
    h.run_id = run_id_;
    h.group = prefix_;
    h.src = rank();
    h.dst = to;
    h.seq = sent_[static_cast<std::size_t>(to)]++;
    store_->set(key(seq, rank(), to), pack_message(describe(h, t), t));
  }

  // The message from `from` into `out`, once its header says it is the one expected here: this
  // run, this group, that sender, the next in its sequence, `out`'s dtype, shape and size.
  void receive(std::uint64_t seq, int from, torch::Tensor& out, const char* what) {
    MessageHeader want;
    want.run_id = run_id_;
    want.group = prefix_;
    want.src = from;
    want.dst = rank();
    want.seq = received_[static_cast<std::size_t>(from)]++;
    unpack_message(take(key(seq, from, rank()), what, from), describe(want, out), out, what);
  }

  std::string key(std::uint64_t seq, int src, int dst) const {
    return std::to_string(seq) + ":" + std::to_string(src) + ">" + std::to_string(dst);
  }

  std::vector<std::uint8_t> take(const std::string& k, const char* what, int peer) {
    Watchdog::get().arm(timeout_, std::string(what) + " on the " + name() + " group: rank " + std::to_string(rank()) +
                                      " got nothing from rank " + std::to_string(peer) + " within " +
                                      std::to_string(timeout_.count() / 1000) +
                                      " s and the rendezvous store does not answer (link cut or store gone)");
    struct Disarm {
      ~Disarm() { Watchdog::get().disarm(); }
    } disarm;
    try {
      store_->wait({k}, timeout_);
      std::vector<std::uint8_t> v = store_->get(k);
      store_->deleteKey(k);
      return v;
    } catch (const StoreAuthError& e) {
      throw std::runtime_error(std::string(what) + " on the " + name() + " group: rank " + std::to_string(rank()) +
                               ", receiving from rank " + std::to_string(peer) + ": " + e.what());
    } catch (const c10::Error& e) {
      throw std::runtime_error(std::string(what) + " on the " + name() + " group: rank " + std::to_string(rank()) +
                               " got nothing from rank " + std::to_string(peer) + " within " +
                               std::to_string(timeout_.count() / 1000) +
                               " s (has that process died?): " + e.what_without_backtrace());
    }
  }

  // Chunk j goes to rank j; returns the chunks received from each rank (own chunk copied),
  // each shaped as what this rank sends to it unless `from_each` gives the shapes.
  std::vector<torch::Tensor> exchange(const std::vector<torch::Tensor>& to_each, const char* what,
                                      const std::vector<torch::Tensor>* from_each = nullptr) {
    const std::uint64_t seq = seq_++;
    for (int j = 0; j < size(); ++j)
      if (j != rank()) send(seq, j, to_each[static_cast<std::size_t>(j)]);
    std::vector<torch::Tensor> got(static_cast<std::size_t>(size()));
    for (int j = 0; j < size(); ++j) {
      const torch::Tensor& mine = to_each[static_cast<std::size_t>(rank())];
      if (j == rank()) {
        got[static_cast<std::size_t>(j)] = mine.clone();
        continue;
      }
      torch::Tensor t = torch::empty_like((from_each ? *from_each : to_each)[static_cast<std::size_t>(j)]);
      receive(seq, j, t, what);
      got[static_cast<std::size_t>(j)] = t;
    }
    return got;
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
  std::string run_id_;
  std::chrono::milliseconds timeout_;
  std::uint64_t seq_ = 0;                       // the group's collectives: part of each key
  std::vector<std::uint64_t> sent_, received_;  // messages per peer, each way: in each header
  torch::Tensor local_;
};

class SingleGroup final : public Group {
 public:
  explicit SingleGroup(const std::string& name) : Group(name, 0, 1) {}

 protected:
  void do_all_reduce(torch::Tensor&) override {}
  torch::Tensor do_all_to_all(const torch::Tensor& x) override { return x; }
  torch::Tensor do_all_to_all_v(const torch::Tensor& x, const std::vector<std::int64_t>&,
                                const std::vector<std::int64_t>&) override {
    return x;
  }
  torch::Tensor do_all_gather(const torch::Tensor& x) override { return x; }
  torch::Tensor do_reduce_scatter(const torch::Tensor& x) override { return x; }
  torch::Tensor do_send_recv(const torch::Tensor& x, int, int) override { return x; }
  void do_barrier() override {}
};

}  // namespace

// Defined in comm_nccl.cpp (or its fallback when LibTorch has no c10d NCCL).
std::shared_ptr<Group> make_nccl_group(const std::string& name, const std::string& prefix,
                                       const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       const torch::Device& device);

std::shared_ptr<Group> make_group(Transport transport, const std::string& name, const std::string& prefix,
                                  const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                  const torch::Device& device, std::chrono::milliseconds timeout) {
  if (size == 1) return std::make_shared<SingleGroup>(name);
  if (transport == Transport::Nccl) return make_nccl_group(name, prefix, store, rank, size, device);
  return std::make_shared<StoreGroup>(name, prefix, store, rank, size, timeout);
}

}  // namespace odyssey::dist
