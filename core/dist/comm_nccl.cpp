// NCCL groups through c10d's ProcessGroupNCCL (LibTorch's CUDA build defines USE_C10D_NCCL).
#include "dist/comm.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#ifdef USE_C10D_NCCL
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <stdexcept>

namespace odyssey::dist {

#ifdef USE_C10D_NCCL

bool nccl_available() { return true; }

namespace {

class NcclGroup final : public Group {
 public:
  NcclGroup(const std::string& name, const std::string& prefix, const c10::intrusive_ptr<c10d::Store>& store,
            int rank, int size, const torch::Device& device)
      : Group(name, rank, size), device_(device) {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>(prefix, store), rank,
                                                      size, opts);
    // Binding the device lets NCCL create the communicator eagerly and on the right GPU.
    pg_->setBoundDeviceId(device_);
  }
  ~NcclGroup() override {
    try {
      pg_->shutdown();
    } catch (...) {
    }
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

  void begin_timing(Op op) override {
    auto& p = pending_[static_cast<int>(op)];
    p.emplace_back(std::make_unique<c10::cuda::CUDAEvent>(cudaEventDefault),
                   std::make_unique<c10::cuda::CUDAEvent>(cudaEventDefault));
    p.back().first->record(at::cuda::getCurrentCUDAStream(device_.index()));
  }
  void end_timing(Op op) override {
    auto& p = pending_[static_cast<int>(op)];
    p.back().second->record(at::cuda::getCurrentCUDAStream(device_.index()));
  }
  void settle_timing() override {
    for (int i = 0; i < kOpCount; ++i) {
      for (auto& [a, b] : pending_[i]) {
        b->synchronize();
        stats_[i].seconds += static_cast<double>(a->elapsed_time(*b)) / 1000.0;
      }
      pending_[i].clear();
    }
  }

 private:
  torch::Device device_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg_;
  std::array<std::vector<std::pair<std::unique_ptr<c10::cuda::CUDAEvent>, std::unique_ptr<c10::cuda::CUDAEvent>>>,
             kOpCount>
      pending_;
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
  throw std::runtime_error("this build of odyssey-train has no NCCL (LibTorch without c10d NCCL): "
                           "multi-GPU runs need the CUDA build of LibTorch");
}

#endif

}  // namespace odyssey::dist
