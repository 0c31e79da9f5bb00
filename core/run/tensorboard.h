// TensorBoard output of a run (docs/tensorboard.md): tfevents files written without
// libprotobuf, and the mapping from events.jsonl events to TensorBoard tags.
//
// A tfevents file is a sequence of TFRecord frames, each holding one serialized
// tensorboard.Event protobuf:
//   uint64 length | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
// all little-endian; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32), CRC-32C
// being the Castagnoli CRC (reflected polynomial 0x82f63b78). The first record carries only
// file_version "brain.Event:2". The messages and field numbers encoded (tensorboard's
// compat/proto event.proto, summary.proto, tensor.proto, tensor_shape.proto, types.proto):
//   Event           wall_time 1 (double), step 2 (int64), file_version 3 (string), summary 5
//   Summary         value 1 (repeated Value)
//   Summary.Value   tag 1, simple_value 2 (float), tensor 8 (TensorProto), metadata 9
//   SummaryMetadata plugin_data 1 {plugin_name 1}
//   TensorProto     dtype 1 (DT_STRING = 7), tensor_shape 2 (empty: a scalar), string_val 8
// A scalar is a Value with simple_value; a text is a scalar string tensor with plugin_name
// "text", as the text plugin's own summary writer makes it. tests/core/tst_tensorboard.cpp
// reads the files back with TensorBoard's EventAccumulator.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/diagnostic.h"
#include "run/event_schema.h"

namespace odyssey::run {

std::uint32_t crc32c(std::string_view data);
std::uint32_t masked_crc32c(std::string_view data);
// `data` framed as one TFRecord.
std::string tfrecord(std::string_view data);

struct TbScalar {
  std::string tag;
  float value = 0;  // TensorBoard keeps scalars as float32; NaN and ±inf are kept
};
struct TbText {
  std::string tag;
  std::string text;  // Markdown, as the text plugin renders it
};
// One tensorboard.Event with a summary: what one events.jsonl event becomes.
struct TbRecord {
  double wall_time = 0;  // unix seconds
  std::int64_t step = 0;
  std::vector<TbScalar> scalars;
  std::vector<TbText> texts;
  bool empty() const { return scalars.empty() && texts.empty(); }
};

// The serialized Event protobufs (without their TFRecord frame).
std::string encode_file_version_event(double wall_time);
std::string encode_summary_event(const TbRecord& r);

// What TensorBoard shows of `e` (docs/tensorboard.md, "Tags"); nullopt for events it has
// nothing for (stage, checkpoint, run_end). A run_start's text is the config file it names,
// read from `run_dir`.
std::optional<TbRecord> tensorboard_record(const Event& e, const std::filesystem::path& run_dir);

// Appends records to a new tfevents file. Every record is one write(2) of a whole frame on a
// freshly opened O_APPEND descriptor (append_whole, event_writer.h), so a live TensorBoard
// sees each step when write returns and never reads half a record: a failed or short write
// is cut back. Thread-safe.
class TensorBoardWriter {
 public:
  TensorBoardWriter() = default;
  // Creates `dir` (and its parents) and in it events.out.tfevents.<unix s>.<host>.<pid>.<n>,
  // n = 0 or the next number free, and writes the file_version record.
  static Result<TensorBoardWriter> open(const std::filesystem::path& dir, double wall_time);

  bool is_open() const { return mu_ != nullptr; }
  const std::string& path() const { return path_; }
  // Returns no diagnostics on success; the diagnostics name the file.
  Diagnostics write(const TbRecord& r);

 private:
  std::string path_;
  std::unique_ptr<std::mutex> mu_;  // non-null while open
};

// Events going to TensorBoard while a run writes them (EventWriter's sink). The file is
// created with the first event that has something to show, so a writer that only appends a
// run_end (the launcher's, for a rank 0 that died) leaves no empty file. After its first
// failure the sink is quiet for good. Thread-safe.
class TensorBoardSink {
 public:
  TensorBoardSink(std::filesystem::path run_dir, std::filesystem::path out_dir);
  // The diagnostics of the failure that stopped the sink, from the call it happened in;
  // nothing from any other call.
  Diagnostics add(const Event& e);
  bool stopped() const;

 private:
  std::filesystem::path run_dir_;
  std::filesystem::path out_dir_;
  mutable std::mutex mu_;
  std::optional<TensorBoardWriter> writer_;
  bool stopped_ = false;
};

// `odyssey-train tensorboard`: writes a tfevents file into `out_dir` (the run's tensorboard/
// when empty) from the run's events.jsonl. Refuses, writing nothing, when the run directory or
// its events.jsonl is missing, a line does not decode (file:line and why), there is no step
// event, or out_dir already holds tfevents files. Returns the file written.
Result<std::filesystem::path> convert_events_to_tensorboard(const std::filesystem::path& run_dir,
                                                            std::filesystem::path out_dir = {});

}  // namespace odyssey::run
