// libFuzzer target for bitsandbytes' packed quant state (model/quant_state.h), the JSON bytes a
// "-bnb-4bit" checkpoint carries beside each 4-bit weight. Whatever the bytes, parsing must not
// crash or hang, and a state it accepts must be one the loader can use safely:
//  1. quant_type is nf4 or fp4 and agrees with the tensor's name;
//  2. blocksize is a power of two in [32, 4096]; shape has 1 to 4 positive sizes whose product
//     (numel) does not overflow and is at most 2^40;
//  3. dtype is float32, float16 or bfloat16; a nested state has a positive blocksize and a
//     finite offset, a plain one neither;
//  4. the state written back as JSON parses to the same fields.
// Errors must name the tensor. The seeds (tests/fuzz/corpus/fuzz_quant_state/) are states
// transformers 5.17 + bitsandbytes 0.50.2 saved for a tiny random Llama (nf4 with double
// quantization, fp4 without).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/quant_state.h"

using namespace odyssey;

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_quant_state: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

int check(std::string_view bytes, const std::string& tensor);

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // Under both tensor names: at most one agrees with the state's quant_type.
  int accepted = 0;
  for (const char* type : {"nf4", "fp4"}) {
    const std::string tensor = std::string("model.layers.0.mlp.up_proj.weight.quant_state.bitsandbytes__") + type;
    accepted += check(bytes, tensor);
  }
  if (accepted > 1) fail("accepted under both names", std::string(bytes));
  return 0;
}

int check(std::string_view bytes, const std::string& tensor) {
  const Result<QuantStateInfo> r = parse_quant_state(bytes, "f.safetensors", tensor);
  if (!r.ok()) {
    for (const auto& d : r.diagnostics)
      if (d.key != tensor || d.file != "f.safetensors") fail("an error that does not name the tensor", d.format());
    return 0;
  }
  const QuantStateInfo& q = r.value;
  if (q.quant_type != "nf4" && q.quant_type != "fp4") fail("quant_type", q.quant_type);
  if (tensor.substr(tensor.size() - 3) != q.quant_type) fail("quant_type against the name", q.quant_type);
  if (q.blocksize < 32 || q.blocksize > 4096 || (q.blocksize & (q.blocksize - 1)) != 0)
    fail("blocksize", std::to_string(q.blocksize));
  if (q.shape.empty() || q.shape.size() > 4) fail("shape rank", std::to_string(q.shape.size()));
  std::int64_t n = 1;
  for (std::int64_t s : q.shape) {
    if (s <= 0) fail("shape size", std::to_string(s));
    if (n > (std::int64_t{1} << 40) / s) fail("shape product", "over 2^40");
    n *= s;
  }
  if (q.numel() != n) fail("numel", std::to_string(q.numel()));
  if (q.dtype != "float32" && q.dtype != "float16" && q.dtype != "bfloat16") fail("dtype", q.dtype);
  if (q.nested && (q.nested_blocksize <= 0 || !std::isfinite(q.nested_offset)))
    fail("nested", std::to_string(q.nested_blocksize));
  if (!q.nested && q.nested_blocksize != 0) fail("plain state with a nested blocksize", "");
  nlohmann::json j = {{"quant_type", q.quant_type}, {"blocksize", q.blocksize}, {"shape", q.shape}, {"dtype", q.dtype}};
  if (q.nested) {
    j["nested_blocksize"] = q.nested_blocksize;
    j["nested_offset"] = q.nested_offset;
  }
  const std::string again = j.dump();
  const Result<QuantStateInfo> r2 = parse_quant_state(again, "f.safetensors", tensor);
  if (!r2.ok()) fail("the written state does not parse", again);
  const QuantStateInfo& b = r2.value;
  if (b.quant_type != q.quant_type || b.blocksize != q.blocksize || b.shape != q.shape || b.dtype != q.dtype ||
      b.nested != q.nested || b.nested_blocksize != q.nested_blocksize || b.nested_offset != q.nested_offset)
    fail("round trip", again);
  return 1;
}
