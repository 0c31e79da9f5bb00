#include "kernels/offload.h"

#if __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#define ODYSSEY_OFFLOAD_CUDA 1
#endif

#include <atomic>
#include <optional>
#include <utility>
#include <vector>

namespace odyssey::kernels {

namespace {
std::atomic<std::int64_t> g_offloaded{0};
}  // namespace

std::int64_t offloaded_bytes_total() { return g_offloaded.load(); }

struct OffloadChain::Impl {
  struct Entry {
    torch::Tensor host;    // pinned copy (CPU tensors: the tensor itself)
    torch::Tensor device;  // the copy back while it exists (prefetched, not yet taken)
    c10::Device where = c10::Device(c10::kCPU);
    bool taken = false;
#ifdef ODYSSEY_OFFLOAD_CUDA
    torch::Tensor source;                       // the GPU tensor while its copy to the host may still read it
    std::optional<at::cuda::CUDAEvent> copied;  // recorded on the side stream after the D2H copy
    std::optional<at::cuda::CUDAEvent> ready;   // recorded on the side stream after the H2D copy
#endif
  };
  std::vector<Entry> entries;
#ifdef ODYSSEY_OFFLOAD_CUDA
  std::optional<c10::cuda::CUDAStream> side;
  std::size_t held_from = 0;  // entries before this hold no source any more

  // Lets go of the entry's GPU source. Its block goes back to the compute stream's pool at once, so
  // the compute stream must not run past the copy that reads it: unless the host already sees
  // the copy done, the compute stream waits for it (on the GPU; the host does not stop).
  static void release(Entry& e) {
    if (!e.source.defined()) return;
    if (!e.copied->query()) e.copied->block(at::cuda::getCurrentCUDAStream(e.where.index()));
    e.source = torch::Tensor();
  }
  // Releases, in order, the entries whose copies the host already sees done (no wait for those).
  void release_done() {
    while (held_from < entries.size() && (!entries[held_from].source.defined() || entries[held_from].copied->query()))
      release(entries[held_from++]);
  }
  // Keeps the sources of the newest `keep` entries, releasing the older ones in order; first,
  // whatever the count, those whose copies are done.
  void release_before(std::size_t keep) {
    release_done();
    const std::size_t end = entries.size() > keep ? entries.size() - keep : 0;
    for (; held_from < end; ++held_from) release(entries[held_from]);
  }
#endif
};

namespace {
#ifdef ODYSSEY_OFFLOAD_CUDA
// Sources held beside the newest push: a layer's gate and up (the MLP tiers push them together)
// stay in flight while the next layer computes, and are released, waiting only if the link is
// behind, when that layer pushes its own.
constexpr std::size_t kHeldSources = 2;
#endif
}  // namespace

OffloadChain::OffloadChain() : impl_(std::make_unique<Impl>()) {}

OffloadChain::~OffloadChain() {
#ifdef ODYSSEY_OFFLOAD_CUDA
  // A prefetched entry never taken: its copy may still be writing the block, which the compute
  // stream could otherwise hand out again (prefetch records no other stream on it).
  for (Impl::Entry& e : impl_->entries) {
    if (e.device.defined() && e.ready) e.ready->block(at::cuda::getCurrentCUDAStream(e.where.index()));
    Impl::release(e);
  }
#endif
}

std::size_t OffloadChain::size() const { return impl_->entries.size(); }

void OffloadChain::release_held() {
#ifdef ODYSSEY_OFFLOAD_CUDA
  impl_->release_before(0);
#endif
}

void OffloadChain::release_done() {
#ifdef ODYSSEY_OFFLOAD_CUDA
  impl_->release_done();
#endif
}

std::size_t OffloadChain::push(const torch::Tensor& x) {
  TORCH_CHECK(x.defined(), "OffloadChain::push: an undefined tensor");
  Impl::Entry e;
  e.where = x.device();
#ifdef ODYSSEY_OFFLOAD_CUDA
  if (x.is_cuda()) {
    const c10::cuda::CUDAGuard guard(x.device());
    auto compute = at::cuda::getCurrentCUDAStream(x.device().index());
    if (!impl_->side) impl_->side = at::cuda::getStreamFromPool(/*isHighPriority=*/false, x.device().index());
    at::cuda::CUDAEvent produced;
    produced.record(compute);
    produced.block(*impl_->side);
    e.host = torch::empty(x.sizes(), x.options().device(torch::kCPU).pinned_memory(true));
    {
      const c10::cuda::CUDAStreamGuard on_side(*impl_->side);
      e.host.copy_(x, /*non_blocking=*/true);
    }
    e.copied.emplace();
    e.copied->record(*impl_->side);
    // The block must not be handed out again before the side stream has read it. The chain
    // holds it until release() instead of recording the side stream on it: a recorded block
    // returns to the cache only once the host, at some later allocation, sees the copy done,
    // and the host runs ahead of the GPU, so every copy still queued held its block (a pair
    // of 2.3 GiB per parked 7B layer at 32K) and under a budget's cap the allocator freed its
    // cache and synchronized the device to find room.
    e.source = x;
    g_offloaded += static_cast<std::int64_t>(x.nbytes());
    impl_->entries.push_back(std::move(e));
    impl_->release_before(kHeldSources + 1);
    return impl_->entries.size() - 1;
  }
#endif
  e.host = x;
  impl_->entries.push_back(std::move(e));
  return impl_->entries.size() - 1;
}

void OffloadChain::prefetch(std::size_t i) {
  if (i >= impl_->entries.size()) return;
  Impl::Entry& e = impl_->entries[i];
  if (e.taken || e.device.defined()) return;
#ifdef ODYSSEY_OFFLOAD_CUDA
  if (e.where.is_cuda()) {
    const c10::cuda::CUDAGuard guard(e.where);
    impl_->release_before(0);  // backward: forward's copies are all queued before this
    auto compute = at::cuda::getCurrentCUDAStream(e.where.index());
    e.device = torch::empty(e.host.sizes(), e.host.options().device(e.where).pinned_memory(false));
    at::cuda::CUDAEvent allocated;  // earlier compute work on this block is done first
    allocated.record(compute);
    allocated.block(*impl_->side);
    {
      const c10::cuda::CUDAStreamGuard on_side(*impl_->side);
      e.device.copy_(e.host, /*non_blocking=*/true);
    }
    e.ready.emplace();
    e.ready->record(*impl_->side);
    // No recordStream on this block: whoever uses it waits for `ready` first (take(), or the
    // destructor for an entry never taken), so the compute stream's own order covers the copy
    // and the block is free again the moment its last user drops it. Recording the side stream
    // instead held every freed pair until the copies queued behind it had run, and the cache
    // grew a block per pair in flight (2.3 GiB each at 7B, 32K): past a budget's cap that is
    // an allocator retry, a device synchronization, per layer.
    g_offloaded += static_cast<std::int64_t>(e.host.nbytes());
    return;
  }
#endif
  e.device = e.host;
}

torch::Tensor OffloadChain::take(std::size_t i) {
  TORCH_CHECK(i < impl_->entries.size(), "OffloadChain::take: entry ", i, " of ", impl_->entries.size());
  TORCH_CHECK(!impl_->entries[i].taken, "OffloadChain::take: entry ", i,
              " was taken already (a second backward through an offloaded activation)");
  prefetch(i);
  Impl::Entry& e = impl_->entries[i];
#ifdef ODYSSEY_OFFLOAD_CUDA
  if (e.ready) e.ready->block(at::cuda::getCurrentCUDAStream(e.where.index()));
#endif
  torch::Tensor out = std::move(e.device);
  e.device = torch::Tensor();
  e.host = torch::Tensor();  // the pinned block returns to the host allocator's cache
  e.taken = true;
  return out;
}

std::shared_ptr<OffloadChain> make_offload_chain() { return std::make_shared<OffloadChain>(); }

void ParkedPair::push(const torch::Tensor& gate, const torch::Tensor& up) {
  if (pushed) return;
  TORCH_CHECK(chain, "ParkedPair::push: no chain");
  first = chain->push(gate);
  chain->push(up);
  pushed = true;
}

std::pair<torch::Tensor, torch::Tensor> ParkedPair::take() {
  TORCH_CHECK(chain && pushed,
              "parked MLP: the layer's recomputation found no parked gate and up (was its forward run without "
              "recording, as a checkpoint's is?)");
  torch::Tensor gate = chain->take(first);
  return {std::move(gate), chain->take(first + 1)};
}

}  // namespace odyssey::kernels
