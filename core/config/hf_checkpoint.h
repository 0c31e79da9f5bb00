// Telling a Hugging Face Trainer checkpoint from an Odyssey one, for resume_from_checkpoint:
// one rule for `validate` (core/config/validate.cpp) and `run` (core/train/checkpoint_io.cpp).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>

namespace odyssey {

// `state` is the parsed trainer_state.json of checkpoint directory `dir`, which has no
// odyssey_state.json. In transformers' TrainerState schema (global_step, no micro_batches, which
// Odyssey's own state before odyssey_state.json had) it is an HF Trainer checkpoint: returns
// the message saying so and what to do instead (to follow the file's name). nullopt otherwise.
std::optional<std::string> hf_trainer_checkpoint_problem(const nlohmann::json& state, const std::string& dir);

}  // namespace odyssey
