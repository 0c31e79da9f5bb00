// NCCL groups through c10d's ProcessGroupNCCL (LibTorch's CUDA build defines USE_C10D_NCCL).
#include "dist/comm.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#ifdef USE_C10D_NCCL
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <stdexcept>

namespace odyssey::dist {

#ifdef USE_C10D_NCCL

bool nccl_available() { return true; }

namespace {

class NcclGroup final : public Group {
 public:
  NcclGroup(const std::string& name, const std::string& prefix, const c10::intrusive_ptr<c10d::Store>& store, int rank,
            int size, const torch::Device& device)
      : Group(name, rank, size), device_(device) {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>(prefix, store), rank, size,
                                                      opts);
    // Binding the device lets NCCL create the communicator eagerly and on the right GPU.
    pg_->setBoundDeviceId(device_);
  }
  torch::Device device() const override { return device_; }
  ~NcclGroup() override {
    try {
      pg_->shutdown();
    } catch (...) {}
  }

 protected:
  void do_all_reduce(torch::Tensor& t) override {
    std::vector<at::Tensor> v{t};
    pg_->allreduce(v)->wait();
  }
  torch::Tensor do_all_to_all(const torch::Tensor& x) override {
    at::Tensor in = x, out = torch::empty_like(x);
    std::vector<int64_t> even;
    pg_->alltoall_base(out, in, even, even)->wait();
    return out;
  }
  torch::Tensor do_all_to_all_v(const torch::Tensor& x, const std::vector<std::int64_t>& send_rows,
                                const std::vector<std::int64_t>& recv_rows) override {
    std::vector<int64_t> shape = x.sizes().vec();
    shape[0] = 0;
    for (std::int64_t n : recv_rows) shape[0] += n;
    at::Tensor in = x, out = torch::empty(shape, x.options());
    std::vector<int64_t> out_splits(recv_rows.begin(), recv_rows.end()), in_splits(send_rows.begin(), send_rows.end());
    pg_->alltoall_base(out, in, out_splits, in_splits)->wait();
    return out;
  }
  torch::Tensor do_all_gather(const torch::Tensor& x) override {
    std::vector<int64_t> shape = x.sizes().vec();
    shape[0] *= size();
    at::Tensor in = x, out = torch::empty(shape, x.options());
    pg_->_allgather_base(out, in)->wait();
    return out;
  }
  torch::Tensor do_reduce_scatter(const torch::Tensor& x) override {
    std::vector<int64_t> shape = x.sizes().vec();
    shape[0] /= size();
    at::Tensor in = x, out = torch::empty(shape, x.options());
    pg_->_reduce_scatter_base(out, in)->wait();
    return out;
  }
  torch::Tensor do_send_recv(const torch::Tensor& x, int to, int from) override {
    std::vector<at::Tensor> send{x};
    std::vector<at::Tensor> recv{torch::empty_like(x)};
    pg_->startCoalescing();
    pg_->send(send, to, 0);
    pg_->recv(recv, from, 0);
    pg_->endCoalescing()->wait();
    return recv[0];
  }
  void do_barrier() override {
    torch::Tensor one = torch::ones({1}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
    do_all_reduce(one);
    (void)one.item<float>();  // the host waits too: that is what a barrier is for
  }

  // An overlapped exchange: issued from a side stream that first waits for the compute
  // stream (x is ready), so NCCL runs beside the compute issued after it; its transfer time
  // is timed on the side stream, and wait() makes the compute stream wait for the side
  // stream, timing only that wait as exposed.
  class Exchange final : public PendingExchange {
   public:
    Exchange(NcclGroup* g, const torch::Tensor& x, int to, int from) : g_(g), send_(x) {
      const c10::cuda::CUDAStream compute = at::cuda::getCurrentCUDAStream(g->device_.index());
      recv_ = torch::empty_like(x);
      Timed t{std::make_unique<c10::cuda::CUDAEvent>(cudaEventDefault),
              std::make_unique<c10::cuda::CUDAEvent>(cudaEventDefault), /*transfer=*/true, /*exposed=*/false};
      c10::cuda::CUDAEvent ready(cudaEventDisableTiming);
      ready.record(compute);
      ready.block(g->side_);
      t.start->record(g->side_);
      {
        c10::cuda::CUDAStreamGuard guard(g->side_);
        std::vector<at::Tensor> send{x};
        std::vector<at::Tensor> recv{recv_};
        g->pg_->startCoalescing();
        g->pg_->send(send, to, 0);
        g->pg_->recv(recv, from, 0);
        g->pg_->endCoalescing()->wait();  // the side stream waits for NCCL's stream
      }
      t.end->record(g->side_);
      g->pending_[static_cast<int>(Op::SendRecv)].push_back(std::move(t));
      g->stats_[static_cast<int>(Op::SendRecv)].calls += 1;
      g->stats_[static_cast<int>(Op::SendRecv)].bytes += x.numel() * static_cast<std::int64_t>(x.element_size());
    }
    torch::Tensor wait() override {
      const c10::cuda::CUDAStream compute = at::cuda::getCurrentCUDAStream(g_->device_.index());
      Timed t{std::make_unique<c10::cuda::CUDAEvent>(cudaEventDefault),
              std::make_unique<c10::cuda::CUDAEvent>(cudaEventDefault), /*transfer=*/false, /*exposed=*/true};
      t.start->record(compute);
      c10::cuda::CUDAEvent done(cudaEventDisableTiming);
      done.record(g_->side_);
      done.block(compute);
      t.end->record(compute);
      g_->pending_[static_cast<int>(Op::SendRecv)].push_back(std::move(t));
      // Both buffers were made on the compute stream and are used by NCCL's: they stay
      // referenced here until compute is ordered after the transfer, so the caching allocator
      // cannot hand their memory to compute while NCCL still reads or writes it.
      send_ = torch::Tensor();
      return std::move(recv_);
    }

   private:
    NcclGroup* g_;
    torch::Tensor send_, recv_;
  };

  std::unique_ptr<PendingExchange> do_start_send_recv(const torch::Tensor& x, int to, int from) override {
    return std::make_unique<Exchange>(this, x, to, from);
  }

  void begin_timing(Op op) override {
    auto& p = pending_[static_cast<int>(op)];
    p.push_back(Timed{std::make_unique<c10::cuda::CUDAEvent>(cudaEventDefault),
                      std::make_unique<c10::cuda::CUDAEvent>(cudaEventDefault), /*transfer=*/true,
                      /*exposed=*/true});
    p.back().start->record(at::cuda::getCurrentCUDAStream(device_.index()));
  }
  void end_timing(Op op) override {
    auto& p = pending_[static_cast<int>(op)];
    p.back().end->record(at::cuda::getCurrentCUDAStream(device_.index()));
  }
  void settle_timing() override {
    for (int i = 0; i < kOpCount; ++i) {
      for (auto& t : pending_[i]) {
        t.end->synchronize();
        const double s = static_cast<double>(t.start->elapsed_time(*t.end)) / 1000.0;
        if (t.transfer) stats_[i].seconds += s;
        if (t.exposed) stats_[i].exposed_seconds += s;
        if (t.transfer && t.exposed) stats_[i].call_seconds.push_back(s);  // a blocking call
      }
      pending_[i].clear();
    }
  }

 private:
  // A pair of timing events: a transfer's time, the compute stream's wait, or (blocking
  // collectives, timed on the compute stream) both.
  struct Timed {
    std::unique_ptr<c10::cuda::CUDAEvent> start, end;
    bool transfer = false;
    bool exposed = true;
  };
  torch::Device device_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg_;
  c10::cuda::CUDAStream side_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device_.index());
  std::array<std::vector<Timed>, kOpCount> pending_;
};

}  // namespace

std::shared_ptr<Group> make_nccl_group(const std::string& name, const std::string& prefix,
                                       const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       const torch::Device& device) {
  if (!device.is_cuda()) throw std::runtime_error("NCCL groups need a CUDA device, got " + device.str());
  return std::make_shared<NcclGroup>(name, prefix, store, rank, size, device);
}

#else

bool nccl_available() { return false; }

std::shared_ptr<Group> make_nccl_group(const std::string&, const std::string&, const c10::intrusive_ptr<c10d::Store>&,
                                       int, int, const torch::Device&) {
  throw std::runtime_error(
      "this build of odyssey-train has no NCCL (LibTorch without c10d NCCL): "
      "multi-GPU runs need the CUDA build of LibTorch");
}

#endif

}  // namespace odyssey::dist
