// Activation checkpointing as a LibTorch autograd function (the reentrant scheme of
// torch.utils.checkpoint): forward runs `fn` without recording, keeping only its input;
// backward re-runs `fn` with recording on, from the same random-number state (so dropout
// draws the same masks), and back-propagates the incoming gradient through it. Gradients
// of the parameters `fn` uses are accumulated into their .grad by that inner backward;
// the input's gradient is returned to the outer graph.
//
// The input must require grad (the output would otherwise have no backward at all);
// CausalLM makes a frozen embedding's output require grad before the first checkpointed
// layer. `fn` must be a pure function of its input and of state that does not change
// between forward and backward (parameters are not updated in between).
#pragma once

#include <torch/torch.h>

#include "kernels/offload.h"

#include <functional>
#include <memory>
#include <vector>

namespace odyssey::model {

// CPU offload of checkpointed inputs for one forward/backward (offload_activations): each
// checkpointed layer's input goes to an OffloadChain (kernels/offload.h) as soon as forward
// has produced it, and the GPU copy is released; backward brings each input back one layer
// ahead of its recomputation, so at most two checkpointed inputs are on the GPU at a time and
// the copies overlap compute. CPU tensors: no effect.
using kernels::make_offload_chain;
using kernels::OffloadChain;
using kernels::offloaded_bytes_total;

torch::Tensor checkpointed(std::function<torch::Tensor(const torch::Tensor&)> fn, const torch::Tensor& input,
                           const std::shared_ptr<OffloadChain>& offload = nullptr);

// True on the calling thread while a checkpoint's backward re-runs one of its functions with
// recording on. That re-run's output is only back-propagated through, never read, so an op
// whose output feeds nothing but a sum with other branches may leave its value uncomputed
// (zeros) and do in backward only what backward needs: the fused MLP of a checkpointed layer
// skips its three forward GEMMs this way (MlpImpl, kernels::rms_norm_mlp's skip_output), since
// its backward recomputes gate and up anyway. Not set while a segment rebuilds its later inputs
// (those values are read).
bool recomputing_for_backward();

// A checkpoint segment (layers_per_checkpoint, docs/training.md "Checkpoint segments"):
// fns[0], fns[1], … applied in turn, keeping only the first one's input (on the GPU or in
// `offload`), one stored input for fns.size() layers. Backward first re-runs fns[0 .. k-2]
// without recording to rebuild the inputs of the later ones, then treats each function as
// checkpointed() does, from the last: re-run with recording from its input and the RNG state
// it had in forward, back-propagate, drop its input, hand its input's gradient down. So one
// function's intermediates exist at a time, plus the segment's k inputs while its backward
// runs; the price is one more forward of the first k − 1 functions. Gradients equal
// checkpointing each function on its own, bit for bit (the same ops in the same order).
torch::Tensor checkpointed_segment(std::vector<std::function<torch::Tensor(const torch::Tensor&)>> fns,
                                   const torch::Tensor& input, const std::shared_ptr<OffloadChain>& offload = nullptr);

}  // namespace odyssey::model
