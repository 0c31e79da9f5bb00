// Sequence parallelism (docs/parallel.md): one packed row spread over the sp = ring ×
// ulysses ranks of a mesh, attention across them, and the loss terms each rank owns.
//
// Layout of a row (every rank computes it from the whole row, so no metadata travels):
//  1. targets are shifted once over the whole row (labels[i+1]) before anything is split;
//  2. with ring > 1 each sample is padded to a multiple of 2·ring (pad tokens continue the
//     sample's positions, have no target, and only later tokens could see them — none do);
//     a final padding sample makes the row divide into ring shards that divide by ulysses;
//  3. ring shard r holds chunks r and 2·ring−1−r of every sample (zigzag: causal work is
//     balanced over the ring); without ring the whole row is one shard;
//  4. ulysses rank u holds the u-th contiguous slice of its ring shard.
//
// Attention on a rank: Q, K and V (RoPE applied with the tokens' global positions) go
// through one all-to-all from sequence-sharded to head-sharded over the Ulysses group (KV
// heads replicated first when there are fewer than the Ulysses degree), so each rank sees
// its ring shard whole for Hq/ulysses heads; then varlen attention over the gathered shard
// (ring = 1) or ring attention over the ring group; the output goes back by the inverse
// all-to-all. The all-to-all is its own adjoint, so backward is the same collective.
//
// Ring attention: K/V blocks rotate around the ring (send to the next rank, receive from the
// previous); each block's contribution is masked by (same sample, key position <= query
// position) and merged in fp32 with the log-sum-exp form. Backward recomputes each block
// with the final log-sum-exp and sends the K/V gradient around the ring with the block, so
// after `ring` hops it is back with its owner.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "model/attention.h"
#include "train/batch.h"

namespace odyssey::dist {

struct SpLayout {
  int ulysses = 1, ring = 1;
  std::int64_t tokens = 0;               // of the row before padding
  std::int64_t padded = 0;               // after padding
  std::vector<std::int64_t> source;      // per padded position: index in the row, -1 = padding
  std::vector<std::int64_t> sample;      // per padded position: sample index (padding sample last)
  std::vector<std::int64_t> position;    // per padded position: position within its sample
  std::vector<std::int32_t> cu_seqlens;  // samples of the padded row (padding sample included)
  std::int64_t max_seqlen = 0;
  // shard_order[r]: padded positions held by ring shard r, in order.
  std::vector<std::vector<std::int64_t>> shard_order;
};

// Errors (std::invalid_argument) on ulysses/ring < 1.
SpLayout plan_sp_layout(const std::vector<std::int32_t>& cu_seqlens, std::int64_t tokens, int ulysses, int ring);

// Whether Hq query heads and Hkv KV heads can be split over `ulysses` ranks; when not,
// *why says what would work.
bool heads_fit_ulysses(std::int64_t q_heads, std::int64_t kv_heads, int ulysses, std::string* why);

// The shard of `row` (a whole row, on any device) for ring rank `ring_rank` and Ulysses rank
// `ulysses_rank`, with targets shifted globally and the attention that spans the groups.
// `pad_token_id` fills padding. Groups must outlive the returned row.
train::PackedRow shard_row(const train::PackedRow& row, Group* ulysses, Group* ring, std::int64_t pad_token_id);

// The pieces, for tests: the Ulysses all-to-all as a differentiable function, and ring
// attention over q [n, H, D], k/v [n, Hkv, D] with per-token sample ids and positions of
// every ring shard ([ring, n] int64).
torch::Tensor all_to_all_autograd(Group* group, const torch::Tensor& x);

// The zigzag segments of a ring shard: each sample of the padded row (the padding sample
// too) holds 2·c_s tokens on every rank, its chunk `rank` then its chunk 2R-1-rank. Derived
// from the per-token sample ids of one shard; the same on every rank.
struct ZigzagRows;  // the segments' row indices on the device (sequence_parallel.cpp)
struct RingSegments {
  std::vector<std::int64_t> half;          // c_s per sample, in shard order
  std::shared_ptr<const ZigzagRows> rows;  // made by ring_segments on the shard's device
  std::int64_t tokens() const;             // 2 · sum c_s
};
RingSegments ring_segments(std::vector<std::int64_t> half, const torch::Device& device);
RingSegments ring_segments(const torch::Tensor& shard_sample_ids);  // from one shard's [n] sample ids

// Ring attention on fused attention kernels (CUDA, bf16/fp16, head dim <= 256): per step one
// kernel call on the part of the block the zigzag layout makes visible (the diagonal block
// causal, the others whole on half of Q or half of K/V), partial results merged in fp32 by
// log-sum-exp; K/V of the next step (and in backward dK/dV of the last) travel while the
// block computes. Kernel: cuDNN's SDPA when the shard is one sample and `prefer` is not
// Flash, varlen flash attention otherwise. Exact like the reference path (ring_attention).
// `segments` must outlive the backward pass.
// Writes the kernel's at::SDPBackend to *ran when given. Needs LseAttention::fused_supported(q).
// `stash` (kept attention, both functions): without grad mode the call keeps its output, merged
// LSE and kernel state there; with grad mode it takes them from there instead of running the
// ring, and its backward is the ring backward from them.
torch::Tensor ring_flash_attention(Group* ring, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const RingSegments& segments, double scale, model::AttentionBackend prefer,
                                   std::int64_t* ran = nullptr, model::AttentionStash* stash = nullptr);
// The reference ring (fp32 scores of one block at a time, any device and dtype). It also
// computes the layers the fused ring does not: a sliding window (window > 0: keys fewer than
// `window` positions behind the query; blocks wholly outside it are skipped) and Gemma-2's
// attention-logit soft-capping (softcap > 0: tanh(s / cap) * cap before the softmax).
torch::Tensor ring_attention(Group* ring, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& sample_ids, const torch::Tensor& positions, double scale,
                             model::AttentionStash* stash = nullptr, std::int64_t window = 0, double softcap = 0.0);

}  // namespace odyssey::dist
