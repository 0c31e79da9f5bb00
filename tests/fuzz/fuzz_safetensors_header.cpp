// libFuzzer target for the safetensors header parser: the input is a whole file. Whatever
// the bytes, parsing must not crash or hang, and a header it accepts must describe a file
// that can be mapped safely:
//  1. every tensor lies inside the file, tensors tile the data section from 0 to its end
//     in order, and each span is exactly numel × itemsize;
//  2. find() returns each tensor by name and names are unique;
//  3. parsing from the 8 + N header bytes alone gives the same result as from the file;
//  4. a header re-encoded from the parsed result parses to the same tensors.
// The same bytes also go through the index.json parser, which must not crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/safetensors_header.h"

using namespace odyssey;

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_safetensors_header: %s: %s\n", what, detail.c_str());
  std::abort();
}

bool same(const SafetensorsHeader& a, const SafetensorsHeader& b) {
  if (a.tensors.size() != b.tensors.size() || a.metadata != b.metadata || a.data_length != b.data_length) return false;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& x = a.tensors[i];
    const auto& y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.begin != y.begin || x.end != y.end)
      return false;
  }
  return true;
}

void check_accepted(const SafetensorsHeader& h, std::string_view bytes) {
  const std::uint64_t size = bytes.size();
  if (h.data_start() + h.data_length != size) fail("data section does not end at the file's end", "");
  std::uint64_t at = 0;
  for (const auto& t : h.tensors) {
    if (t.begin != at || t.end < t.begin || t.end > h.data_length) fail("tensors do not tile the data", t.name);
    at = t.end;
    const auto bits = static_cast<std::uint64_t>(t.numel()) * static_cast<std::uint64_t>(dtype_bits(t.dtype));
    if (bits / 8 != t.nbytes()) fail("span does not match numel × itemsize", t.name);
    if (h.find(t.name) != &t) fail("find() does not return the tensor", t.name);
  }
  if (at != h.data_length) fail("data_length is not the last tensor's end", "");
  if (h.index.size() != h.tensors.size()) fail("duplicate names accepted", "");

  const auto prefix = parse_safetensors_header(bytes.substr(0, h.data_start()), size, "fuzz");
  if (!prefix.ok() || !same(prefix.value, h)) fail("header bytes alone parse differently", "");

  nlohmann::json j = nlohmann::json::object();
  if (!h.metadata.empty()) j["__metadata__"] = h.metadata;
  for (const auto& t : h.tensors)
    j[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  std::string header = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  while (header.size() % 8 != 0) header += ' ';
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  file += header;
  file.append(static_cast<std::size_t>(h.data_length), '\0');
  const auto again = parse_safetensors_header(file, file.size(), "fuzz");
  if (!again.ok()) fail("re-encoded header is refused", format_all(again.diagnostics));
  if (!same(again.value, h)) fail("re-encoded header parses differently", header);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto r = parse_safetensors_header(bytes, size, "fuzz");
  if (r.ok()) {
    check_accepted(r.value, bytes);
  } else if (r.diagnostics.empty()) {
    fail("refused without a diagnostic", "");
  }
  (void)parse_safetensors_index(bytes, "fuzz.index.json");
  return 0;
}
