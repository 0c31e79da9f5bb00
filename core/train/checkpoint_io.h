// Checkpoint directories (docs/training.md, "Checkpoints"): written under a temporary name,
// every file synced, then renamed into place, so checkpoints/checkpoint-<step>/ is either
// complete or absent. A failure (a full disk) removes the temporary directory and leaves
// every earlier checkpoint as it was.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/diagnostic.h"
#include "train/lora.h"
#include "train/step_engine.h"

namespace odyssey::train {

// A file of a checkpoint as saved: odyssey_state.json lists every other file with its size
// and checksum, and resume refuses a checkpoint whose files differ.
struct SavedFile {
  std::string name;  // relative to the checkpoint directory
  std::int64_t bytes = 0;
  std::string checksum64;  // file_checksum64 as 16 hex digits
};

// One entry of transformers' TrainerState.log_history: a logged training step (loss,
// learning_rate, grad_norm) or an evaluation (eval_loss).
struct HfLogEntry {
  std::int64_t step = 0;
  double epoch = 0;
  bool eval = false;
  double loss = 0;           // eval_loss when eval
  double learning_rate = 0;  // training entries only
  double grad_norm = 0;
  std::int64_t num_input_tokens_seen = 0;
};

// What trainer_state.json records besides the step, in transformers' TrainerState schema.
struct HfTrainerInfo {
  double epoch = 0;
  std::int64_t logging_steps = 0, eval_steps = 0, save_steps = 0, train_batch_size = 0;
  double num_train_epochs = 0;
  std::vector<HfLogEntry> log_history;
};

// Where training stands; everything resume needs besides weights and optimizer state.
// Saved as odyssey_state.json (Odyssey's manifest); trainer_state.json beside it is
// transformers' TrainerState (TrainerState.load_from_json reads it), written from `hf`.
struct TrainerState {
  std::int64_t step = 0;  // completed optimizer steps
  std::int64_t total_steps = 0;
  std::int64_t micro_batches = 0;  // consumed since the start (the data position)
  std::int64_t tokens_total = 0;
  double elapsed_s = 0;
  std::int64_t seed = 0;
  std::string tuner_type;        // lora|full
  std::string data_fingerprint;  // the tokenized data's key: resume refuses other data
  std::int64_t items_per_epoch = 0;
  double last_loss = 0;
  // Read back only: the checkpoint's files (empty in checkpoints of Odyssey before 1.0's
  // file list, has_file_list false).
  std::vector<SavedFile> files;
  bool has_file_list = false;
  HfTrainerInfo hf;  // read back from trainer_state.json where it is transformers' (log_history)
};

// Odyssey's own state file of a checkpoint (before 0.1's HF-compatible trainer_state.json,
// Odyssey wrote this content under the name trainer_state.json; both are read).
inline constexpr const char* kOdysseyStateFile = "odyssey_state.json";

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

// Writes `final_dir` atomically: under a temporary name, every file synced, then renamed into
// place. An existing `final_dir` is never deleted or replaced: the save fails naming it
// (checked first, and again by the rename itself, RENAME_NOREPLACE). Returns the bytes written.
Result<std::int64_t> save_checkpoint(const std::filesystem::path& final_dir, StepEngine& engine,
                                     const CheckpointContents& what, const TrainerState& state);

// odyssey_state.json of a checkpoint directory (or an older Odyssey checkpoint's
// trainer_state.json), with trainer_state.json's log_history where it is transformers'.
Result<TrainerState> read_trainer_state(const std::filesystem::path& dir);

// What resume checks before it loads anything from `dir` (errors name the file, the key and
// what was expected): not a temporary `.tmp-` directory of an unfinished save; `step` within
// 0..total_steps and `micro_batches` = step x gradient_accumulation_steps; every file of the
// file list present with its size and checksum. A checkpoint without a file list (older
// Odyssey) gets a warning that its files are not verified.
Diagnostics validate_resume_source(const std::filesystem::path& dir, const TrainerState& state,
                                   std::int64_t total_steps, std::int64_t accumulation);

// A 64-bit checksum of a file's bytes (16 hex digits), at memory speed. It tells a truncated,
// corrupted or swapped file from the one saved; it is no defence against a forger, who could
// rewrite trainer_state.json as well. nullopt (and `error`) when the file cannot be read.
std::optional<std::string> file_checksum64(const std::filesystem::path& file, std::string* error);

// Restores the trainable weights (adapter or full model files), the optimizer and the RNG
// state of `dir` into an engine built like the one that saved it.
Diagnostics load_checkpoint(const std::filesystem::path& dir, StepEngine& engine, const CheckpointContents& what);

// Removes the oldest checkpoints of `checkpoints_dir` beyond `keep` (0 keeps all); returns
// the removed directories.
std::vector<std::filesystem::path> rotate_checkpoints(const std::filesystem::path& checkpoints_dir, std::int64_t keep);

// Model directory files besides weights that travel with a full checkpoint or an export.
const std::vector<std::string>& model_side_files();

}  // namespace odyssey::train
