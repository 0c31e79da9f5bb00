// Saved activations parked in pinned host memory between forward and backward (docs/memory-planner.md, "Offload"):
// an OffloadChain holds the tensors one forward hands it, in order. Forward's push() queues the copy to the host on
// a side CUDA stream as soon as the compute stream has produced the tensor; the chain holds the GPU tensor until a
// later push sees its copy done, or two more entries have been pushed (or release_held()), then drops it, with the
// compute stream waiting for its copy where it still runs, so its block is free again at once in the compute
// stream's order (the caller drops its own references). Holding more while the link is behind does not fit the
// budgets the planner plans for: 2, 4 and 8 GiB more ran out of memory on the 8B QLoRA and 7B LoRA rows
// (docs/benchmarks.md, 2026-12-07). Backward's prefetch() starts the copy back on the side stream, take() makes the
// compute stream wait for it and hands the tensor over. Two users: activation checkpointing keeps each checkpointed
// layer's input in a chain (core/model/activation_checkpoint.h), and swiglu_down can keep gate and up in one (the
// MLP offload tier, CausalLMImpl::set_mlp_offload_layers). CPU tensors stay where they are (the chain only holds
// them), so the same code paths run in CPU tests.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <utility>

namespace odyssey::kernels {

class OffloadChain {
 public:
  OffloadChain();
  ~OffloadChain();
  OffloadChain(const OffloadChain&) = delete;
  OffloadChain& operator=(const OffloadChain&) = delete;

  // Forward: queue the copy of `x` to the host; returns its index in the chain.
  std::size_t push(const torch::Tensor& x);
  // Backward: start bringing entry i back (no-op when already under way, taken, or out of range).
  void prefetch(std::size_t i);
  // Backward: entry i on its device, ready for the current stream; the chain lets go of it.
  // Each entry is taken once.
  torch::Tensor take(std::size_t i);
  // Entries pushed so far.
  std::size_t size() const;
  // Forward is over: lets go of the GPU tensors whose copies to the host may still be running
  // (the compute stream waits for those copies, on the GPU). push() holds the newest few until
  // then; prefetch() and the destructor release them too.
  void release_held();
  // Lets go of the GPU tensors whose copies to the host the host already sees done (no wait);
  // forward calls it at each layer, so a chain that has stopped growing (the MLP park's last
  // parked layer below many that are not) does not hold its newest sources until forward ends.
  void release_done();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::shared_ptr<OffloadChain> make_offload_chain();

// Gate and up of a checkpointed layer's MLP, parked in a chain by the checkpoint's forward
// (which computes them anyway) and taken back by the backward of that layer's recomputation
// instead of recomputing them (the MLP park: kernels::rms_norm_mlp's `parked`,
// CausalLMImpl::set_mlp_offload_layers on a checkpointed layer). One per layer and forward.
struct ParkedPair : torch::CustomClassHolder {
  explicit ParkedPair(std::shared_ptr<OffloadChain> c) : chain(std::move(c)) {}
  std::shared_ptr<OffloadChain> chain;
  std::size_t first = 0;  // gate at first, up at first + 1
  bool pushed = false;    // the first forward pushed them (a segment's rebuild pushes nothing)
  // Forward: queue both copies; a second call does nothing (the pair is parked once).
  void push(const torch::Tensor& gate, const torch::Tensor& up);
  // Backward: both on their device, ready for the current stream. Fails unless pushed.
  std::pair<torch::Tensor, torch::Tensor> take();
};

// Bytes copied to and from the host by offload chains in this process, for tests and events.
std::int64_t offloaded_bytes_total();

}  // namespace odyssey::kernels
