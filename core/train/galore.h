// GaLore and Q-GaLore (docs/optimizers.md): AdamW whose targeted 2-D weights keep their Adam
// moments in a rank-r subspace of the gradient.
//
// Per targeted weight W [m, n] (galore-torch's "std" projection): when m >= n the projection
// P [r, n] holds the top-r right singular vectors of the gradient (low = G Pᵀ, [m, r]), else
// P [m, r] the top-r left ones (low = Pᵀ G, [r, n]); P is recomputed by an SVD of the step's
// gradient every update_proj_gap updates of that weight (exact for weights whose smaller side
// is at most GaLoreOptions::exact_svd_max_side, randomized subspace iteration above: measured
// on an H200, an exact SVD of a 18944 x 3584 fp32 gradient takes 0.8 s, and Qwen2.5-7B has 140
// such and 3584 x 3584 weights). Adam runs on `low`; the update
// m̂ / (√v̂ + ε), projected back and scaled by `scale`, is applied with galore-torch's step
// size and decoupled weight decay. The other parameters (embeddings, norms, lm_head,
// biases) use AdamW.
//
// Memory: a hook on each targeted weight runs as soon as autograd has accumulated its
// gradient, projects it to rank r (fp32), adds it to that weight's rank-r accumulator and
// frees the full gradient, so full gradients of targeted weights are never all held. The
// update itself waits for the end of backward: the step's global gradient norm (clipping)
// is known only then. With gradient accumulation the rank-r gradients accumulate (the
// projection is linear); a refresh step takes its SVD from the first micro-batch's gradient.
// Clipping measures the gradient Adam sees: the rank-r gradients of targeted weights and the
// full gradients of the rest.
//
// Data and sequence parallelism: the rank-r gradients are all-reduced (r·max(m, n) values
// instead of m·n); on a refresh micro-batch the full gradient is all-reduced first so every
// rank computes the same SVD.
//
// Q-GaLore: P is stored in int4 with one scale and offset per group (quant.h), Adam's moments
// in 8 bits with one absmax per block, and the lazy subspace rule: after each refresh the
// cosine similarity between the new and the previous first singular vector joins a queue of
// the last queue_size values; when the queue is full and its mean reaches cos_threshold, that
// weight's update_proj_gap is multiplied by gamma_proj.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "train/optim.h"
#include "train/quant.h"
#include "train/step_engine.h"

namespace odyssey::train {

// The projection of one weight.
class GaLoreProjector {
 public:
  enum class Side { Left, Right };
  // An exact SVD when the weight's smaller side is at most exact_svd_max_side, else a
  // randomized one (randomized_svd in galore.cpp).
  GaLoreProjector(std::vector<std::int64_t> shape, std::int64_t rank, bool quantized, int bits, std::int64_t group,
                  std::int64_t exact_svd_max_side = std::int64_t{1} << 62);
  Side side() const { return side_; }
  std::int64_t rank() const { return rank_; }
  std::vector<std::int64_t> low_shape() const;
  bool ready() const { return ready_; }
  // SVD of `grad` (any float dtype; computed in fp32; `seed` draws a randomized SVD's test
  // matrix). Returns the cosine similarity of the new first singular vector with the previous
  // one (none on the first refresh).
  std::optional<double> refresh(const torch::Tensor& grad, std::uint64_t seed = 0);
  torch::Tensor project(const torch::Tensor& grad) const;      // fp32 [low_shape]
  torch::Tensor project_back(const torch::Tensor& low) const;  // fp32 [m, n], unscaled
  torch::Tensor matrix() const;                                // fp32 P (dequantized)
  std::int64_t nbytes() const;
  NamedTensors state(const std::string& name) const;
  // Restores what state() saved, onto `device` (the weight's).
  Diagnostics load_state(const NamedTensors& named, const std::string& name, const std::string& file,
                         const torch::Device& device);

 private:
  std::vector<std::int64_t> shape_;
  std::int64_t rank_;
  Side side_;
  bool quantized_;
  int bits_;
  std::int64_t group_;
  std::int64_t exact_svd_max_side_;
  bool ready_ = false;
  torch::Tensor p_;             // fp32 when not quantized
  GroupQuantized q_;            // quantized
  torch::Tensor first_vector_;  // fp32, for the lazy rule
};

class GaLoreAdamW : public Optimizer {
 public:
  GaLoreAdamW(std::vector<NamedParam> params, AdamWOptions adamw, GaLoreOptions galore, dist::Group* world);
  ~GaLoreAdamW() override;
  std::string name() const override { return galore_.quantized ? "q_galore_adamw8bit" : "galore_adamw"; }
  void begin_step() override;
  void end_micro_batch(bool last) override;
  void reduce_gradients(dist::Group& world) override;
  double clip_grad_norm(double max_norm) override;
  void step(double lr) override;
  void zero_grad() override;
  NamedTensors state() const override;
  Diagnostics load_state(const NamedTensors& named, const std::string& file) override;
  std::int64_t state_bytes() const override;

  // For logs and tests.
  std::size_t targeted_count() const { return targets_.size(); }
  std::int64_t targeted_params() const;
  std::int64_t svd_count() const { return svd_count_; }
  const GaLoreProjector* projector(const std::string& name) const;
  std::int64_t update_proj_gap(const std::string& name) const;

  // Called by the accumulate-grad hook of targeted weight `t` (internal).
  void on_gradient(std::size_t t);

 private:
  struct Target {
    std::string name;
    torch::Tensor param;
    bool decay = true;
    GaLoreProjector projector;
    std::int64_t steps = 0;                // completed updates of this weight
    std::int64_t gap = 200;                // update_proj_gap, grown by the lazy rule
    std::deque<double> queue;              // Q-GaLore: recent cosine similarities
    torch::Tensor acc;                     // fp32 rank-r gradient of this step, this rank's part
    torch::Tensor acc_global;              // fp32 rank-r gradient already summed over the world
    torch::Tensor m, v;                    // fp32 moments (GaLore)
    std::optional<BlockQuantized> qm, qv;  // 8-bit moments (Q-GaLore)
  };
  GaLoreOptions galore_;
  AdamWOptions adamw_;
  dist::Group* world_ = nullptr;
  std::vector<Target> targets_;
  std::unique_ptr<AdamW> rest_;  // every other trainable parameter
  std::vector<torch::Tensor> rest_params_;
  std::int64_t micro_ = 0;  // micro-batches done in this step
  std::int64_t svd_count_ = 0;
};

// Whether `hf_name` is a 2-D weight of one of the (resolved) module names.
bool galore_targets(const std::string& hf_name, const torch::Tensor& param, const std::vector<std::string>& modules);

}  // namespace odyssey::train
