#include <stdexcept>

#include "train/galore.h"
#include "train/step_engine.h"
#include "train/zero.h"

namespace odyssey::train {

void set_memory_optimizer(StepOptions& o, const TrainConfig& c, bool weights_16bit) {
  o.galore.enabled = c.use_galore;
  o.galore.quantized = c.galore_quantization;
  o.galore.rank = c.galore_rank;
  o.galore.update_proj_gap = c.galore_update_proj_gap;
  o.galore.scale = c.galore_scale;
  o.galore.target_modules = c.galore_target_modules;
  o.zero.stage = static_cast<int>(optimizer_zero_stage(c, weights_16bit));
  o.zero.offload = c.offload_optimizer;
  o.zero.fp32_master_only = c.zero_stage == 0 && o.zero.stage > 0;
}

std::unique_ptr<Optimizer> make_optimizer(std::vector<NamedParam> params, const StepOptions& options,
                                          dist::Group* world) {
  if (options.galore.enabled && options.zero.stage > 0)
    throw std::invalid_argument("GaLore and ZeRO sharding cannot be combined");
  if (options.galore.enabled)
    return std::make_unique<GaLoreAdamW>(std::move(params), options.adamw, options.galore, world);
  if (options.zero.stage == 1 || options.zero.stage == 2) {
    // One process shards nothing; with offload it still moves the state to host memory
    // (ZeRO-Offload on one GPU).
    if (!world || (world->size() < 2 && !options.zero.offload && !options.zero.fp32_master_only))
      throw std::invalid_argument("ZeRO needs more than one process to shard over, or optimizer offload");
    if (options.zero.fp32_master_only && world->size() > 1)
      throw std::invalid_argument("fp32 master weights without ZeRO run on one process; over " +
                                  std::to_string(world->size()) + " set zero_stage 1 or 2");
    auto zero =
        std::make_unique<ZeroAdamW>(std::move(params), options.adamw, *world, options.zero.stage, options.zero.offload);
    if (options.zero.fp32_master_only && !options.zero.offload) zero->name_as_fp32_master();
    return zero;
  }
  if (options.zero.stage != 0) throw std::invalid_argument("zero_stage must be 0, 1 or 2");
  return std::make_unique<AdamW>(std::move(params), options.adamw);
}

}  // namespace odyssey::train
