// config.json against the weights, before anything is allocated. A config.json naming 10^9
// layers where the safetensors files hold 24 passed `validate --check-files`, then grew
// `run` and `plan` past 4 GB; here the sizes are read from the tensors' shapes in the
// headers (no tensor data is read) and each disagreement names config.json, the key, and
// what the weights say. No LibTorch: validate and the engine's loader both call it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/diagnostic.h"
#include "config/model_config.h"
#include "model/safetensors_header.h"

namespace odyssey {

// `headers`: each weight file's path and parsed header. Checks, where the tensors exist
// (a missing tensor is the loader's to report): model.embed_tokens.weight and lm_head.weight
// against [vocab_size, hidden_size]; the model.layers.N indices against num_hidden_layers;
// layer 0's q/k/v projections against the heads x head_dim, its gate_proj against
// intermediate_size.
Diagnostics check_config_against_weights(const HfModelConfig& m, const std::string& config_file,
                                         const std::vector<std::pair<std::string, const SafetensorsHeader*>>& headers);

// The same for a model directory on disk: finds its weight files (model.safetensors or the
// index's shards), refuses any that is not a regular file (a FIFO, a device), reads their
// headers and checks. Errors from finding or reading the files are returned as they are.
Diagnostics check_model_weights(const HfModelConfig& m, const std::string& config_file, const std::string& model_dir);

}  // namespace odyssey
