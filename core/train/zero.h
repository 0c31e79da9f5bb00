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
//    accumulator adds them in fp32, on the parameters' device (with or without offload).
//
// Update. clip_grad_norm: the accumulator's squared norm all-reduced over the group
// (clip_grad_norm_'s global norm); step: fused AdamW (ATen's _fused_adamw_, the kernel of
// torch.optim.AdamW(fused=True)) bucket by bucket, decaying and non-decaying runs in
// separate calls, each bucket's updated masters then cast to the parameter dtype,
// all-gathered and copied into the parameters of every rank.
//
// Offload. Host memory holds the master weights, exp_avg and exp_avg_sq (fp32, pageable:
// 12 bytes per element of the shard) and two staging buffers, each the size of the largest
// bucket slice in fp32 or the parameter dtype, if wider (pinned with CUDA parameters;
// pinned blocks round up to powers of two). The fp32 gradient accumulator (4 bytes per
// element of the shard) stays on the device: backward, accumulation and clipping are those
// without offload, and backward moves nothing to the host. step, bucket by bucket, bucket i
// in staging buffer i % 2:
//  1. wait for bucket i's fp32 gradient slice to land in its buffer (device-to-host, side
//     stream), then issue bucket i+1's into the other buffer;
//  2. fused AdamW on the CPU over bucket i's shard;
//  3. the masters cast into the same buffer in the parameter dtype, copied host-to-device on
//     the side stream; the compute stream waits for that copy (an event), then all-gathers
//     and copies into the parameters. None of this blocks the host.
// On CUDA, bucket i's CPU update overlaps bucket i-1's upload, all-gather and copy into the
// parameters and bucket i+1's gradient download. The first bucket's download and update and
// the last bucket's upload and all-gather overlap nothing. A buffer is rewritten by the
// host only after its last upload has read it (waited on), and by a download only after
// that upload in the side stream's order. An upload also waits for the compute stream's
// earlier work (its device block may come from there), i.e. bucket i-1's all-gather.
// Parameters on the CPU take the same path (pageable buffers, plain copies), so CPU tests
// cover it; with the store transport nothing overlaps (its collectives block).
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

  std::string name() const override {
    if (fp32_master_only_) return "adamw_fp32_master";
    return stage_ == 1 ? "zero1_adamw" : "zero2_adamw";
  }
  // Named adamw_fp32_master: optimizer_dtype fp32 without ZeRO (make_optimizer, a group of one
  // without offload), where nothing is sharded and only the fp32 state is wanted.
  void name_as_fp32_master() { fp32_master_only_ = true; }
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

  // Persistent bytes on the parameters' device (offload: the fp32 gradient accumulator) and
  // in host memory (offload: masters, moments, step and the two staging buffers).
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
  struct Offload;  // staging buffers, side stream and events (zero.cpp)

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
  // accumulator.
  void accumulate(std::size_t b, const torch::Tensor& reduced);
  void reduce_from_grads();
  // Fused AdamW over bucket b's shard with `grad` (its fp32 gradient slice).
  void update_bucket(std::size_t b, double lr, const torch::Tensor& grad);
  // Offload: bucket b's gradient slice into its staging buffer (side stream on CUDA), and
  // the buffer's masters (already cast into it) to the device.
  void fetch_gradient(std::size_t b);
  torch::Tensor upload_bucket(std::size_t b);
  // All-gather the slices `local` (parameter dtype, on the device) into the parameters.
  void gather_bucket(std::size_t b, const torch::Tensor& local);
  torch::Tensor slice_of(const torch::Tensor& flat, std::size_t b) const;

  AdamWOptions options_;
  dist::Group& world_;
  bool fp32_master_only_ = false;
  int stage_ = 2;
  bool offload_ = false;
  std::int64_t bucket_elements_ = kBucketElements;
  torch::Device device_{torch::kCPU};        // the parameters'
  torch::Device state_device_{torch::kCPU};  // masters, moments, step: host with offload
  std::vector<Bucket> buckets_;
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> members_;  // param -> (bucket, entry)
  std::int64_t total_elements_ = 0, shard_total_ = 0, digest_ = 0;
  torch::Tensor master_, exp_avg_, exp_avg_sq_;  // fp32 [shard_total_], on state_device_
  torch::Tensor grad_;                           // fp32 [shard_total_], on device_
  torch::Tensor step_;                           // fp32 scalar
  // Stage 2 bookkeeping.
  bool in_step_ = false;
  bool reduced_ = false;  // gradients reduced since the last zero_grad
  std::size_t next_issue_ = 0;
  std::vector<char> got_;  // per parameter: gradient received this micro-batch
  std::unique_ptr<Offload> off_;
};

}  // namespace odyssey::train
