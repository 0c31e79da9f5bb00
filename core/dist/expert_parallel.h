// Expert parallelism over a process group (docs/moe.md): the model's ExpertGroup (moe.h) on
// dist::Group's collectives. Counts travel in one all-to-all of [size, n] integers; rows in
// one uneven all-to-all (all_to_all_v) each way, whose backward is the reverse exchange.
#pragma once

#include <memory>

#include "dist/comm.h"
#include "model/moe.h"

namespace odyssey::dist {

// An ExpertGroup on `group` (which must outlive it).
std::shared_ptr<model::ExpertGroup> expert_group(Group* group);

// The sum of a row's MoE routing statistics over the sequence-parallel `group`
// (CausalLMImpl::set_router_stats_sum); an empty function for a group of one.
std::function<void(torch::Tensor&)> row_statistics_sum(Group* group);

}  // namespace odyssey::dist
