// Checkpoint directories (docs/training.md, "Checkpoints"): written under a temporary name,
// every file synced, then renamed into place, so checkpoints/checkpoint-<step>/ is either
// complete or absent. A failure (a full disk) removes the temporary directory and leaves
// every earlier checkpoint as it was.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "common/diagnostic.h"
#include "train/lora.h"
#include "train/step_engine.h"

namespace odyssey::train {

// Where training stands; everything resume needs besides weights and optimizer state.
struct TrainerState {
  std::int64_t step = 0;           // completed optimizer steps
  std::int64_t total_steps = 0;
  std::int64_t micro_batches = 0;  // consumed since the start (the data position)
  std::int64_t tokens_total = 0;
  double elapsed_s = 0;
  std::int64_t seed = 0;
  std::string tuner_type;          // lora|full
  std::string data_fingerprint;    // the tokenized data's key: resume refuses other data
  std::int64_t items_per_epoch = 0;
  double last_loss = 0;
};

struct CheckpointContents {
  std::optional<LoraSettings> lora;  // adapter files; none: full model directory
  std::string base_model;            // the model directory (config.json, tokenizer files)
  // A sharded optimizer (ZeRO): every rank's state file, already written by save_optimizer_shard
  // (saving: moved into the checkpoint instead of optimizer.safetensors), and this rank's
  // place (loading: reads optimizer_shard_name(rank, world)).
  std::vector<std::filesystem::path> optimizer_shards;
  int rank = 0, world = 1;
};

// "optimizer-rank-00001-of-00004.safetensors"
std::string optimizer_shard_name(int rank, int world);

// Writes this rank's optimizer state (a sharded optimizer) to `file`, synced. Returns bytes.
Result<std::int64_t> save_optimizer_shard(const std::filesystem::path& file, StepEngine& engine);

// Writes `final_dir` atomically. Returns the bytes written.
Result<std::int64_t> save_checkpoint(const std::filesystem::path& final_dir, StepEngine& engine,
                                     const CheckpointContents& what, const TrainerState& state);

// trainer_state.json of a checkpoint directory.
Result<TrainerState> read_trainer_state(const std::filesystem::path& dir);

// Restores the trainable weights (adapter or full model files), the optimizer and the RNG
// state of `dir` into an engine built like the one that saved it.
Diagnostics load_checkpoint(const std::filesystem::path& dir, StepEngine& engine, const CheckpointContents& what);

// Removes the oldest checkpoints of `checkpoints_dir` beyond `keep` (0 keeps all); returns
// the removed directories.
std::vector<std::filesystem::path> rotate_checkpoints(const std::filesystem::path& checkpoints_dir, std::int64_t keep);

// Model directory files besides weights that travel with a full checkpoint or an export.
const std::vector<std::string>& model_side_files();

}  // namespace odyssey::train
