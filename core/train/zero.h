// ZeRO stage 1 and 2 AdamW (DeepSpeed's semantics), optionally with the optimizer state in
// host memory (ZeRO-Offload). The oracle is the unsharded AdamW of optim.h (torch's fused
// AdamW + clip_grad_norm_). With fp32 parameters the same per-element kernel runs on the same
// gradient sums, so the parameters agree to rounding: ZeRO-1's gradients are the oracle's
// bit for bit; ZeRO-2 reduces every micro-batch, i.e. sums (a1 + b1) + (a2 + b2) where the
// oracle sums (a1 + a2) + (b1 + b2); the norm is summed in fp64 per bucket, and offload runs
// ATen's CPU kernel instead of the CUDA one. Rounding matters only where Adam amplifies it:
// gradients near eps (Adam's g / (|g| + eps)), such as a k_proj bias whose true gradient is 0.
//
// Layout. All trainable parameters, in reverse registration order (about the order backward
// produces their gradients), are laid end to end and cut into buckets of at most
// `bucket_elements` elements of one dtype (a parameter may span buckets). Each bucket is
// padded to a multiple of the world size; rank r owns slice r of every bucket, so the
// reduce-scatter of gradients and the all-gather of updated parameters act on whole buckets.
// The rank keeps, for its slices laid end to end (the "flat shard"): fp32 master weights,
// exp_avg, exp_avg_sq and the fp32 gradient accumulator. Padding stays zero throughout.
//
// Gradients.
//  - Stage 1: backward accumulates .grad as usual; reduce_gradients reduce-scatters each
//    bucket (built from the .grad tensors, missing ones as zeros) into the accumulator and
//    drops the .grad tensors.
//  - Stage 2: a post-accumulate-grad hook on every parameter copies its gradient into its
//    bucket's staging buffer and drops .grad at once, so the full gradients never all exist.
//    A bucket is reduce-scattered (into the accumulator) as soon as it is complete and every
//    lower-index bucket has been issued; end_micro_batch issues whatever is left, so every
//    rank issues the same collectives in bucket order, once per micro-batch (DeepSpeed
//    reduces every micro-batch too). The staging buffer is freed after its reduce-scatter.
//    The hooks act only between begin_step and the last end_micro_batch; a step driven
//    without them (no begin_step) falls back to stage 1's reduction in reduce_gradients.
//  - Collectives are in the parameters' dtype (torch's DDP and DeepSpeed's default); the
//    accumulator adds them in fp32.
//
// Update. clip_grad_norm: the accumulator's squared norm all-reduced over the group
// (clip_grad_norm_'s global norm); step: fused AdamW (ATen's _fused_adamw_, the kernel of
// torch.optim.AdamW(fused=True)) over the flat shard, decaying and non-decaying runs in
// separate calls, then bucket by bucket: the updated masters cast to the parameter dtype,
// all-gathered and copied into the parameters of every rank.
//
// Offload. The four fp32 shard tensors live in host memory and the update runs on the CPU.
// What overlaps, on CUDA:
//  - backward: right after each bucket's reduce-scatter its reduced slice is copied to a
//    pinned host buffer on a side stream (non-blocking, ordered after the collective by an
//    event), so the copy runs under the rest of backward; the host adds it into the fp32
//    accumulator at the end of the micro-batch (after waiting for the copy). The copy of the
//    last bucket issued in a micro-batch overlaps nothing.
//  - step: bucket i's CPU update runs while bucket i-1's host-to-device copy (side stream),
//    all-gather and copy into the parameters run on the GPU: none of them blocks the host
//    (NCCL's wait only orders streams). The first bucket's update and the last bucket's copy
//    and all-gather overlap nothing. Non-fp32 parameters are cast on the host first, so the
//    copy moves parameter-sized bytes.
//  - Pinned memory holds what DMA touches (the landing buffers of reduced gradients, the cast
//    masters, and the fp32 masters when a bucket is fp32); exp_avg, exp_avg_sq and the
//    accumulator stay pageable (pinned blocks round up to powers of two).
// Parameters on the CPU take the same path (host buffers, the same order, plain copies), so
// CPU tests cover it; with the store transport nothing overlaps (its collectives block).
// The CPU update runs on torch's intra-op threads: with several ranks on a host, give each
// rank its share of the cores (oversubscribed OpenMP threads made it ~50x slower).
//
// Checkpoints: state() is this rank's shard (sharded_state()); load_state refuses a state
// written for another world size, rank, bucket layout or parameter set.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/diagnostic.h"
#include "dist/comm.h"
#include "train/optim.h"

namespace odyssey::train {

struct ZeroGradHook;

class ZeroAdamW : public Optimizer {
 public:
  // DeepSpeed's reduce_bucket_size order of magnitude: one collective per 64 Mi elements.
  static constexpr std::int64_t kBucketElements = std::int64_t{1} << 26;

  // Shards over `world` (kept by reference; it must outlive the optimizer). stage: 1 or 2,
  // else std::invalid_argument; so are parameters on more than one device, non-contiguous
  // parameters or bucket_elements < 1.
  ZeroAdamW(std::vector<NamedParam> params, AdamWOptions options, dist::Group& world, int stage, bool offload,
            std::int64_t bucket_elements = kBucketElements);
  ~ZeroAdamW() override;
  ZeroAdamW(const ZeroAdamW&) = delete;
  ZeroAdamW& operator=(const ZeroAdamW&) = delete;

  std::string name() const override { return stage_ == 1 ? "zero1_adamw" : "zero2_adamw"; }
  void begin_step() override;
  void end_micro_batch(bool last) override;
  // Stage 1: the bucketed reduce-scatter of .grad (over the construction group; `world` is
  // the same group in the step engine). Stage 2: nothing left to do.
  void reduce_gradients(dist::Group& world) override;
  double clip_grad_norm(double max_norm) override;
  void step(double lr) override;
  void zero_grad() override;

  // zero.master.rank<r>, zero.exp_avg.rank<r>, zero.exp_avg_sq.rank<r> (fp32 flat shards),
  // zero.step (fp32 [1]) and zero.layout (int64, see layout()).
  NamedTensors state() const override;
  Diagnostics load_state(const NamedTensors& named, const std::string& file) override;
  // One optimizer file per rank.
  bool sharded_state() const override { return true; }

  // Persistent bytes on the parameters' device (none with offload) and in host memory
  // (offload: the shard tensors and the pinned transfer buffers).
  std::int64_t state_bytes() const override;
  std::int64_t host_state_bytes() const override;

  int stage() const { return stage_; }
  bool offload() const { return offload_; }
  std::size_t bucket_count() const { return buckets_.size(); }
  std::int64_t shard_elements() const { return shard_total_; }
  // {version, world size, rank, stage, total elements, bucket count, bucket_elements,
  //  parameter digest, padded elements of each bucket...}
  torch::Tensor layout() const;

 private:
  friend struct ZeroGradHook;
  struct Offload;  // host buffers, side stream and events (zero.cpp)

  // A run of one parameter inside a bucket.
  struct Entry {
    std::size_t param = 0;
    std::int64_t param_offset = 0, bucket_offset = 0, length = 0;
  };
  // A run of elements of this rank's slice of a bucket with one weight-decay rule.
  struct Segment {
    std::int64_t offset = 0, length = 0;  // in the bucket's slice
    bool decay = false;
  };
  // A run of one parameter inside this rank's slice (to initialize the masters).
  struct Piece {
    std::size_t param = 0;
    std::int64_t param_offset = 0, slice_offset = 0, length = 0;
  };
  struct Bucket {
    torch::ScalarType dtype = torch::kFloat32;
    std::vector<Entry> entries;
    std::int64_t elements = 0, padded = 0, slice = 0;  // slice = padded / world size
    std::int64_t shard_offset = 0;                     // the slice's place in the flat shard
    std::vector<Piece> pieces;
    std::vector<Segment> segments;
    // Stage 2, this micro-batch.
    torch::Tensor staging;
    std::size_t arrived = 0;  // entries whose gradient is in staging
    bool issued = false;
  };

  void on_gradient(std::size_t index, const torch::Tensor& param);
  void issue_ready();
  void issue(std::size_t b);
  void reset_micro_batch();
  // The reduced slice of bucket b (parameter dtype, on the parameters' device) into the
  // accumulator: directly, or through the host with offload.
  void accumulate(std::size_t b, const torch::Tensor& reduced);
  void settle();  // offload: wait for the gradient copies and add them up
  void reduce_from_grads();
  void update_bucket(std::size_t b, double lr);
  void publish_bucket(std::size_t b);  // all-gather the masters into the parameters
  torch::Tensor slice_of(const torch::Tensor& flat, std::size_t b) const;

  AdamWOptions options_;
  dist::Group& world_;
  int stage_ = 2;
  bool offload_ = false;
  std::int64_t bucket_elements_ = kBucketElements;
  torch::Device device_{torch::kCPU};        // the parameters'
  torch::Device state_device_{torch::kCPU};  // the shard's: host with offload
  std::vector<Bucket> buckets_;
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> members_;  // param -> (bucket, entry)
  std::int64_t total_elements_ = 0, shard_total_ = 0, digest_ = 0;
  torch::Tensor master_, exp_avg_, exp_avg_sq_, grad_;  // fp32 [shard_total_]
  torch::Tensor step_;                                  // fp32 scalar
  // Stage 2 bookkeeping.
  bool in_step_ = false;
  bool reduced_ = false;  // gradients reduced since the last zero_grad
  std::size_t next_issue_ = 0;
  std::vector<char> got_;  // per parameter: gradient received this micro-batch
  std::unique_ptr<Offload> off_;
};

}  // namespace odyssey::train
