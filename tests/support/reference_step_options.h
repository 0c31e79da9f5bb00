// The step engine's options from a training oracle's reference.json (tests/reference/
// train_reference.py and fused_parity_reference.py write the same keys): AdamW's lr, betas,
// eps and weight decay, the cosine schedule with warmup over "steps", clipping at "max_norm".
#pragma once

#include <nlohmann/json.hpp>

#include "train/step_engine.h"

namespace odyssey::test {

inline train::StepOptions reference_step_options(const nlohmann::json& hp) {
  train::StepOptions o;
  o.adamw.lr = hp.at("lr").get<double>();
  o.adamw.beta1 = hp.at("betas")[0].get<double>();
  o.adamw.beta2 = hp.at("betas")[1].get<double>();
  o.adamw.eps = hp.at("eps").get<double>();
  o.adamw.weight_decay = hp.at("weight_decay").get<double>();
  o.schedule.type = "cosine";
  o.schedule.base_lr = o.adamw.lr;
  o.schedule.warmup_steps = hp.at("warmup_steps").get<std::int64_t>();
  o.schedule.total_steps = hp.at("steps").get<std::int64_t>();
  o.max_grad_norm = hp.at("max_norm").get<double>();
  o.router_aux_loss_coef = hp.value("router_aux_loss_coef", 0.0);  // MoE references (train_reference.py --arch)
  return o;
}

}  // namespace odyssey::test
