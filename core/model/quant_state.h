// bitsandbytes' packed quant state of a 4-bit weight: the tensor
// "<module>.weight.quant_state.bitsandbytes__nf4" (or __fp4) holds, as UTF-8 bytes, the JSON of
// the state's non-tensor items (QuantState.as_dict(packed=True)): quant_type, blocksize, dtype,
// shape and, when double-quantized, nested_blocksize, nested_offset and nested_dtype. Parsed
// without LibTorch (the loader, weights.cpp, and a libFuzzer target read it); docs/qlora.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/diagnostic.h"

namespace odyssey {

struct QuantStateInfo {
  std::string quant_type;             // nf4 | fp4
  std::int64_t blocksize = 64;        // 32, 64, ..., 4096
  std::vector<std::int64_t> shape;    // 1 to 4 positive sizes, at most 2^40 values in all
  std::string dtype;                  // float32 | float16 | bfloat16: what was quantized
  bool nested = false;                // double quantization
  std::int64_t nested_blocksize = 0;  // positive when nested
  double nested_offset = 0.0;         // finite when nested
  std::int64_t numel() const;
};

// `bytes`: the tensor's content; `tensor` its name, whose suffix (nf4 or fp4) must agree with
// quant_type; `file` the safetensors file. Every problem is an error naming file and tensor.
Result<QuantStateInfo> parse_quant_state(std::string_view bytes, const std::string& file, const std::string& tensor);

}  // namespace odyssey
