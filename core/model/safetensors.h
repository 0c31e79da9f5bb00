// Safetensors tensors for the engine: memory-mapped reading straight into tensors of the
// configured dtype and device, sharded checkpoints, and the writer. The header rules are in
// model/safetensors_header.h; memory behaviour and sharding in docs/safetensors.md.
//
// Reading maps the file read-only (MAP_PRIVATE, PROT_READ). view() is a zero-copy CPU
// tensor over the mapping that keeps it alive; it must not be written to (the pages are
// read-only). load() fills a new tensor of the requested dtype on the requested device in
// 16 MiB chunks and drops each chunk's source pages once converted, so that a load costs
// the output tensor plus one chunk, not the output plus the file.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/diagnostic.h"
#include "model/safetensors_header.h"

namespace odyssey {

// BF16/F16/F32 <-> torch; other safetensors dtypes have no entry here (refused by name).
std::optional<torch::Dtype> to_torch_dtype(SafetensorsDtype d);
std::optional<SafetensorsDtype> from_torch_dtype(torch::Dtype d);

class SafetensorsFile {
 public:
  // Maps `path` and validates its header (a file shorter than its header says is reported
  // as truncated). Tensors of any dtype are listed; view()/load() refuse all but BF16, F16
  // and F32, naming the tensor and its dtype.
  static Result<std::shared_ptr<const SafetensorsFile>> open(const std::string& path);

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  std::vector<std::string> names() const;  // in file order
  const SafetensorsTensorInfo* info(std::string_view name) const { return header_.find(name); }

  // Zero-copy, read-only CPU tensor over the mapping, in the file's dtype. The mapping lives
  // as long as any view does. (Should a writer other than the reference's have placed the
  // tensor at an offset misaligned for its dtype, the view is an aligned copy instead.)
  Result<torch::Tensor> view(std::string_view name) const;
  // A copy on the CPU in the dtype it was stored in: BF16, F16, F32, I64, I32 or U8.
  // For optimizer state (8-bit codes, step counters), not for model weights.
  Result<torch::Tensor> load_as_stored(std::string_view name) const;
  // A new contiguous tensor of `dtype` (a floating-point type) on `device`. CPU: converted
  // from the mapping chunk by chunk into the output, no intermediate. CUDA: each chunk is
  // copied to the device in the file's dtype and converted there.
  Result<torch::Tensor> load(std::string_view name, torch::Dtype dtype,
                             const torch::Device& device = torch::kCPU) const;
  // The same into an existing contiguous tensor of the tensor's shape (a parameter, say),
  // with no temporary of the tensor's size; converted to dst's dtype on dst's device.
  Diagnostics load_into(std::string_view name, torch::Tensor& dst) const;

  struct Mapping;

 private:
  SafetensorsFile() = default;
  Diagnostic error(const std::string& tensor, std::string message) const;
  Result<const SafetensorsTensorInfo*> loadable(std::string_view name, std::optional<torch::Dtype> target) const;
  const char* data_of(const SafetensorsTensorInfo& t) const;
  void fill(const SafetensorsTensorInfo& info, torch::Tensor& dst) const;

  std::string path_;
  SafetensorsHeader header_;
  std::shared_ptr<Mapping> map_;
};

// The weights of a model directory: model.safetensors, or else the shards listed by
// model.safetensors.index.json (the order transformers looks for them in). Opening maps
// every shard and checks the set: each shard present and complete, each tensor in exactly
// one shard and in the shard the index names, no tensor in a shard that the index omits.
class SafetensorsCheckpoint {
 public:
  // `path`: a model directory or a single .safetensors file.
  static Result<SafetensorsCheckpoint> open(const std::string& path);

  const std::vector<std::string>& names() const { return names_; }  // sorted
  const SafetensorsTensorInfo* info(std::string_view name) const;
  // The file holding `name` ("" when absent).
  std::string file_of(std::string_view name) const;
  Result<torch::Tensor> view(std::string_view name) const;
  Result<torch::Tensor> load(std::string_view name, torch::Dtype dtype,
                             const torch::Device& device = torch::kCPU) const;
  Diagnostics load_into(std::string_view name, torch::Tensor& dst) const;
  // What was opened, for messages: the index of a sharded checkpoint, else the file.
  const std::string& source() const { return source_; }
  const std::vector<std::shared_ptr<const SafetensorsFile>>& files() const { return files_; }
  std::uint64_t tensor_bytes() const;  // sum of the tensors' sizes on disk

  // Presents the tensors under other names: `name_of` maps a stored name to the name callers
  // use, or to "" to hide the tensor (a multimodal checkpoint's vision tower, read as its text
  // model: HfModelConfig::text_model_of). names(), info(), load() ... then take the new names;
  // hidden() lists the stored names left out, stored_name() maps back.
  void rename(const std::function<std::string(const std::string&)>& name_of);
  const std::vector<std::string>& hidden() const { return hidden_; }
  std::string stored_name(std::string_view name) const;

 private:
  const SafetensorsFile* holder(std::string_view name) const;
  Diagnostic missing(std::string_view name) const;

  std::string path_;
  std::string source_;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::unordered_map<std::string, std::size_t> where_;   // stored name -> index in files_
  std::vector<std::string> names_;                       // as callers name them (sorted)
  std::unordered_map<std::string, std::string> stored_;  // caller's name -> stored name, after rename()
  std::vector<std::string> hidden_;
};

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Writes one file atomically (a temporary beside it, then rename). Tensors may be on any
// device and non-contiguous; only BF16, F16 and F32 are written, others refused by name.
// They are stored grouped by element size (largest first), in the given order within a
// size: the format allows no padding between tensors, and this is how the reference
// implementation keeps every tensor aligned for its dtype. `metadata` goes to __metadata__
// with "format": "pt" added when absent (transformers refuses files whose format is not
// pt/tf/flax/mlx). Returns the bytes written.
Result<std::uint64_t> save_safetensors(const std::string& path, const NamedTensors& tensors,
                                       const std::map<std::string, std::string>& metadata = {});

// Writes a checkpoint as transformers' save_pretrained does: shards of at most
// `max_shard_bytes` (a larger tensor gets a shard of its own), filled in the given order,
// named model-00001-of-0000N.safetensors, and model.safetensors.index.json written last;
// a single shard is written as model.safetensors without an index. Weight files of an
// earlier save in `dir` that the new set does not use are removed. Returns the file names.
Result<std::vector<std::string>> save_sharded(const std::string& dir, const NamedTensors& tensors,
                                              std::uint64_t max_shard_bytes,
                                              const std::map<std::string, std::string>& metadata = {});

}  // namespace odyssey
