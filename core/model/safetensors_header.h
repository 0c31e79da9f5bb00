// The safetensors file format without LibTorch: the header parser and validator (fuzzed)
// and the parser of a sharded checkpoint's model.safetensors.index.json. The engine maps
// the tensors (core/model/safetensors.h); the GUI and the fuzzer use this part alone.
//
// A file is: u64 little-endian N, N bytes of UTF-8 JSON, then the data section. The rules
// enforced are those of the reference implementation (huggingface/safetensors,
// safetensors/src/tensor.rs, Metadata::validate and SafeTensors::read_metadata); see
// docs/safetensors.md for the list and where each comes from.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/diagnostic.h"

namespace odyssey {

// Every dtype name the reference implementation knows, so that a file holding one Odyssey
// does not load is refused by that name rather than as "unknown".
enum class SafetensorsDtype {
  BOOL,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  F8_E8M0,
  F8_E4M3FNUZ,
  F8_E5M2FNUZ,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  C64,
  F64,
  I64,
  U64,
  F4,
  F6_E2M3,
  F6_E3M2
};

const char* dtype_name(SafetensorsDtype d);
std::optional<SafetensorsDtype> dtype_from_name(std::string_view name);
int dtype_bits(SafetensorsDtype d);  // 4 for F4, 6 for F6_*, else 8 × bytes
// Odyssey reads and writes BF16, F16 and F32 tensors only.
bool dtype_supported(SafetensorsDtype d);
const char* supported_dtypes_text();  // "BF16, F16, F32"

// "[2, 3]", "[]" for messages.
std::string shape_string(const std::vector<std::int64_t>& shape);

struct SafetensorsTensorInfo {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<std::int64_t> shape;  // empty: a 0-d tensor (one element)
  std::uint64_t begin = 0;          // data_offsets, relative to the data section
  std::uint64_t end = 0;
  std::int64_t numel() const;  // validated not to overflow
  std::uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::uint64_t header_length = 0;              // N, the JSON bytes (padding included)
  std::uint64_t data_length = 0;                // bytes of the data section (end of the last tensor)
  std::vector<SafetensorsTensorInfo> tensors;   // in file order (by data offset)
  std::map<std::string, std::string> metadata;  // "__metadata__"
  std::uint64_t data_start() const { return 8 + header_length; }
  const SafetensorsTensorInfo* find(std::string_view name) const;
  std::unordered_map<std::string, std::size_t> index;  // name -> position in tensors
};

// The reference's limit on N (MAX_HEADER_SIZE).
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parse and validate a header. `bytes` starts at the file's first byte and holds at least
// the 8 + N header bytes (the whole file is fine); `file_size` is the size of the file on
// disk, against which the data section is checked. `file` names the file in diagnostics,
// whose `key` is the tensor concerned ("" for the file as a whole). Checks: N within the
// file and the limit; UTF-8 JSON object without duplicate keys; each entry an object with a
// known dtype name, a shape of non-negative integers, data_offsets [begin, end] with
// begin <= end; numel × itemsize without overflow and equal to end - begin; sorted by
// offset, tensors tile the data section from 0 with no hole and no overlap; the last
// tensor ends exactly at the end of the file (a shorter file is reported as truncated);
// __metadata__ a map of strings to strings.
Result<SafetensorsHeader> parse_safetensors_header(std::string_view bytes, std::uint64_t file_size,
                                                   const std::string& file);

// Read the header of a file on disk with plain reads (no mapping, no tensor data).
Result<SafetensorsHeader> read_safetensors_header(const std::string& path);

// model.safetensors.index.json of a sharded checkpoint.
struct SafetensorsIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::vector<std::string> shards;                // distinct shard files, sorted
  std::optional<std::uint64_t> total_size;        // metadata.total_size when present
};

// Errors: invalid JSON, no weight_map object, a non-string shard, a tensor named twice, a
// shard name that is not a plain file name in the checkpoint directory ("../x", "/x").
Result<SafetensorsIndex> parse_safetensors_index(std::string_view json_text, const std::string& file);

// The weight files of a model directory, looked for as transformers does: model.safetensors,
// else the shards that model.safetensors.index.json lists; or `path` itself when it is a
// file. Errors: no such path, no weights (naming PyTorch .bin files when those are all
// there is), an invalid index, a shard the index names that is absent (naming a tensor
// the index puts in it). The files' headers are not read here.
struct SafetensorsFiles {
  std::vector<std::string> files;         // paths, in the index's shard order
  std::optional<SafetensorsIndex> index;  // when sharded
  std::string source;                     // the index when sharded, else the file
};
Result<SafetensorsFiles> find_safetensors_files(const std::string& path);

// Shard file names as written by transformers' save_pretrained: model-00001-of-00003.safetensors.
std::string safetensors_shard_name(int index_1based, int count);

}  // namespace odyssey
