#include "model/safetensors_header.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <array>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "common/regular_file.h"
#include "common/text.h"

namespace odyssey {

namespace {

using json = nlohmann::json;

struct DtypeRow {
  SafetensorsDtype dtype;
  const char* name;
  int bits;
};

// Names and bit sizes from the reference's Dtype enum (tensor.rs, Dtype::bitsize).
using S = SafetensorsDtype;
constexpr std::array<DtypeRow, 22> kDtypes{{
    {S::BOOL, "BOOL", 8},
    {S::U8, "U8", 8},
    {S::I8, "I8", 8},
    {S::F8_E5M2, "F8_E5M2", 8},
    {S::F8_E4M3, "F8_E4M3", 8},
    {S::F8_E8M0, "F8_E8M0", 8},
    {S::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {S::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {S::I16, "I16", 16},
    {S::U16, "U16", 16},
    {S::F16, "F16", 16},
    {S::BF16, "BF16", 16},
    {S::I32, "I32", 32},
    {S::U32, "U32", 32},
    {S::F32, "F32", 32},
    {S::C64, "C64", 64},
    {S::F64, "F64", 64},
    {S::I64, "I64", 64},
    {S::U64, "U64", 64},
    {S::F4, "F4", 4},
    {S::F6_E2M3, "F6_E2M3", 6},
    {S::F6_E3M2, "F6_E3M2", 6},
}};

const DtypeRow& row(SafetensorsDtype d) {
  for (const auto& r : kDtypes)
    if (r.dtype == d) return r;
  return kDtypes[14];  // unreachable: every enumerator has a row
}

// Collects diagnostics for one file; past a cap, counts instead, so that a hostile header
// with a million bad entries costs a bounded report.
class Reporter {
 public:
  Reporter(const std::string& file, Diagnostics& out) : file_(file), out_(out) {}
  void error(const std::string& tensor, std::string message) {
    ++errors_;
    if (errors_ <= kCap) {
      out_.push_back({Severity::Error, file_, 0, 0, tensor, std::move(message)});
      return;
    }
    if (errors_ == kCap + 1) out_.push_back({Severity::Error, file_, 0, 0, "", ""});
    out_.back().message = "and " + std::to_string(errors_ - kCap) + " more problems in this file";
  }
  void warning(const std::string& key, std::string message) {
    if (errors_ <= kCap) out_.push_back({Severity::Warning, file_, 0, 0, key, std::move(message)});
  }
  std::size_t errors() const { return errors_; }

 private:
  static constexpr std::size_t kCap = 20;
  const std::string& file_;
  Diagnostics& out_;
  std::size_t errors_ = 0;
};

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }
std::string span_text(std::uint64_t b, std::uint64_t e) {
  return "[" + std::to_string(b) + ", " + std::to_string(e) + ")";
}

// Parses JSON and records duplicate object keys, which nlohmann (like most parsers) would
// otherwise resolve silently by keeping one of the values. `top_dups` gets duplicated keys
// of the outermost object, `inner_dups` "outer key/inner key" of nested objects.
json parse_checking_duplicates(std::string_view text, std::vector<std::string>& top_dups,
                               std::vector<std::string>& inner_dups) {
  std::vector<std::unordered_set<std::string>> open;
  std::string top_key;
  json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: open.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!open.empty()) open.pop_back();
        break;
      case json::parse_event_t::key: {
        if (open.empty() || !parsed.is_string()) break;
        const auto& k = parsed.get_ref<const std::string&>();
        if (open.size() == 1) top_key = k;
        if (!open.back().insert(k).second) {
          auto& dst = open.size() == 1 ? top_dups : inner_dups;
          if (dst.size() < 20) dst.push_back(open.size() == 1 ? k : top_key + "/" + k);
        }
        break;
      }
      default: break;
    }
    return true;
  };
  return json::parse(text.begin(), text.end(), cb);
}

// "an integer", "a string", ... for messages.
std::string json_type(const json& j) {
  if (j.is_number_float()) return "a floating-point number";
  if (j.is_number()) return "an integer";
  if (j.is_null()) return "null";
  const std::string t = j.type_name();
  return (t == "object" || t == "array" ? "an " : "a ") + t;
}

bool read_dim(const json& v, std::int64_t& out) {
  if (!v.is_number_unsigned()) return false;
  const auto u = v.get<std::uint64_t>();
  if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
  out = static_cast<std::int64_t>(u);
  return true;
}

std::string not_a_count(const json& v) {
  if (v.is_number_integer() && !v.is_number_unsigned())
    return "is negative (" + std::to_string(v.get<std::int64_t>()) + ")";
  if (v.is_number_unsigned()) return "is larger than 2^63 - 1";
  return "is " + json_type(v) + ", expected a non-negative integer";
}

// One tensor entry; false (with the reason reported) when it is unusable.
bool parse_entry(const std::string& name, const json& v, SafetensorsTensorInfo& t, Reporter& rep) {
  t.name = name;
  if (!v.is_object()) {
    rep.error(name, "entry is " + json_type(v) + ", expected an object with dtype, shape and data_offsets");
    return false;
  }
  const auto dt = v.find("dtype"), sh = v.find("shape"), off = v.find("data_offsets");
  bool ok = true;
  if (dt == v.end() || sh == v.end() || off == v.end()) {
    rep.error(name, std::string("entry has no \"") +
                        (dt == v.end()   ? "dtype"
                         : sh == v.end() ? "shape"
                                         : "data_offsets") +
                        "\"");
    return false;
  }
  if (!dt->is_string()) {
    rep.error(name, "dtype is " + json_type(*dt) + ", expected a string such as \"BF16\"");
    ok = false;
  } else if (auto d = dtype_from_name(dt->get_ref<const std::string&>())) {
    t.dtype = *d;
  } else {
    rep.error(name, "unknown dtype " + in_quotes(dt->get_ref<const std::string&>()) +
                        " (the safetensors format defines BOOL, U8, I8, I16, U16, F16, BF16, I32, "
                        "U32, F32, F64, I64, U64, C64 and the F8/F6/F4 types)");
    ok = false;
  }
  if (!sh->is_array()) {
    rep.error(name, "shape is " + json_type(*sh) + ", expected an array of integers");
    ok = false;
  } else {
    t.shape.reserve(sh->size());
    for (std::size_t i = 0; i < sh->size(); ++i) {
      std::int64_t d = 0;
      if (!read_dim((*sh)[i], d)) {
        rep.error(name, "shape dimension " + std::to_string(i) + " " + not_a_count((*sh)[i]));
        ok = false;
        break;
      }
      t.shape.push_back(d);
    }
  }
  if (!off->is_array() || off->size() != 2) {
    rep.error(name, "data_offsets must be an array [begin, end] of two integers");
    return false;
  }
  for (int i = 0; i < 2; ++i) {
    const json& x = (*off)[static_cast<std::size_t>(i)];
    if (!x.is_number_unsigned()) {
      rep.error(name, std::string("data_offsets ") + (i == 0 ? "begin " : "end ") + not_a_count(x));
      return false;
    }
    (i == 0 ? t.begin : t.end) = x.get<std::uint64_t>();
  }
  if (t.begin > t.end) {
    rep.error(name, "data_offsets " + span_text(t.begin, t.end) + " end before they begin");
    return false;
  }
  if (!ok) return false;
  // numel × bits with overflow checks: the limit is what an int64 byte count can hold.
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t numel = 1;
  for (const auto d : t.shape) {
    if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(d), &numel) || numel > kMax) {
      rep.error(name, "shape " + shape_string(t.shape) + " has more than 2^63 - 1 elements");
      return false;
    }
  }
  std::uint64_t bits = 0;
  const bool too_big = __builtin_mul_overflow(numel, static_cast<std::uint64_t>(dtype_bits(t.dtype)), &bits);
  if (!too_big && bits % 8 != 0) {
    rep.error(name, "shape " + shape_string(t.shape) + " of " + dtype_name(t.dtype) +
                        " does not fill a whole number of bytes");
    return false;
  }
  if (too_big || bits / 8 != t.nbytes()) {
    const std::string need = too_big ? std::string("more than 2^64 / 8") : std::to_string(bits / 8);
    rep.error(name, std::string("dtype ") + dtype_name(t.dtype) + " with shape " + shape_string(t.shape) + " needs " +
                        need + " bytes, but data_offsets " + span_text(t.begin, t.end) + " span " +
                        std::to_string(t.nbytes()));
    return false;
  }
  return true;
}

void parse_metadata(const json& v, std::map<std::string, std::string>& out, Reporter& rep) {
  if (v.is_null()) return;  // the reference reads it as an Option
  if (!v.is_object()) {
    rep.error("__metadata__", "is " + json_type(v) + ", expected an object of strings");
    return;
  }
  for (const auto& [k, x] : v.items()) {
    if (!x.is_string()) {
      rep.error("__metadata__", "value of " + in_quotes(k) + " is " + json_type(x) +
                                    ", expected a string (the format allows only strings here)");
      continue;
    }
    out.emplace(k, x.get<std::string>());
  }
}

// The reference (Metadata::validate) sorts entries by data_offsets and requires each to
// begin where the previous one ended, the first at 0, and the last to end at the file's end.
void check_layout(SafetensorsHeader& h, std::uint64_t data_size, Reporter& rep) {
  auto& ts = h.tensors;
  std::sort(ts.begin(), ts.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  std::uint64_t expected = 0;
  const SafetensorsTensorInfo* prev = nullptr;
  for (const auto& t : ts) {
    if (t.begin < expected) {
      rep.error(t.name, "data_offsets " + span_text(t.begin, t.end) + " overlap tensor '" + prev->name + "' at " +
                            span_text(prev->begin, prev->end));
    } else if (t.begin > expected) {
      rep.error(t.name, "data_offsets " + span_text(t.begin, t.end) + " leave a hole of " +
                            std::to_string(t.begin - expected) + " bytes before this tensor" +
                            (prev ? " (after '" + prev->name + "')" : std::string(" (at the start)")) +
                            "; the format requires tensors to cover the data section without gaps");
    }
    if (!prev || t.end >= expected) {
      expected = t.end;
      prev = &t;
    }
  }
  h.data_length = expected;
  if (rep.errors() > 0) return;
  const std::uint64_t file_size = h.data_start() + data_size;
  if (expected > data_size) {
    const auto first = std::find_if(ts.begin(), ts.end(), [&](const auto& t) { return t.end > data_size; });
    const auto more = static_cast<std::size_t>(ts.end() - first) - 1;
    rep.error(first->name,
              "data_offsets " + span_text(first->begin, first->end) + " run past the end of the data section (" +
                  std::to_string(data_size) + " bytes): the file is " + std::to_string(file_size) +
                  " bytes but its header needs " + std::to_string(h.data_start() + expected) +
                  "; the file is truncated" +
                  (more ? " (" + std::to_string(more) + " later tensors are also cut off)" : std::string()));
  } else if (expected < data_size) {
    rep.error("", std::to_string(data_size - expected) +
                      " bytes after the last tensor are not part of any tensor; the format requires the "
                      "data section to end with the last tensor");
  }
}

}  // namespace

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

const char* dtype_name(SafetensorsDtype d) { return row(d).name; }
int dtype_bits(SafetensorsDtype d) { return row(d).bits; }

std::optional<SafetensorsDtype> dtype_from_name(std::string_view name) {
  for (const auto& r : kDtypes)
    if (name == r.name) return r.dtype;
  return std::nullopt;
}

bool dtype_supported(SafetensorsDtype d) {
  return d == SafetensorsDtype::BF16 || d == SafetensorsDtype::F16 || d == SafetensorsDtype::F32;
}

const char* supported_dtypes_text() { return "BF16, F16, F32"; }

std::int64_t SafetensorsTensorInfo::numel() const {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

const SafetensorsTensorInfo* SafetensorsHeader::find(std::string_view name) const {
  const auto it = index.find(std::string(name));
  return it == index.end() ? nullptr : &tensors[it->second];
}

Result<SafetensorsHeader> parse_safetensors_header(std::string_view bytes, std::uint64_t file_size,
                                                   const std::string& file) {
  Result<SafetensorsHeader> r;
  Reporter rep(file, r.diagnostics);
  if (file_size < 8 || bytes.size() < 8) {
    rep.error("", "the file is " + std::to_string(std::min<std::uint64_t>(file_size, bytes.size())) +
                      " bytes, too short for the 8-byte header length; not a safetensors file");
    return r;
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  if (n > kMaxSafetensorsHeaderBytes) {
    rep.error("", "header length " + std::to_string(n) + " is over the format's limit of " +
                      std::to_string(kMaxSafetensorsHeaderBytes) + " bytes; not a safetensors file?");
    return r;
  }
  if (n > file_size - 8) {
    rep.error("", "header length " + std::to_string(n) + " runs past the end of the file (" +
                      std::to_string(file_size) + " bytes); the file is truncated or not a safetensors file");
    return r;
  }
  if (bytes.size() < 8 + n) {
    rep.error("", "only " + std::to_string(bytes.size()) + " of the " + std::to_string(8 + n) +
                      " header bytes could be read");
    return r;
  }
  if (n == 0) {
    rep.error("", "the header is empty (length 0); expected a JSON object");
    return r;
  }
  SafetensorsHeader& h = r.value;
  h.header_length = n;
  std::vector<std::string> dups, inner_dups;
  json j;
  try {
    j = parse_checking_duplicates(bytes.substr(8, n), dups, inner_dups);
  } catch (const json::exception& e) {
    rep.error("", "the header is not valid JSON: " + text::excerpt(e.what()));
    return r;
  }
  if (!j.is_object()) {
    rep.error("", "the header is " + json_type(j) + ", expected an object");
    return r;
  }
  for (const auto& d : dups)
    rep.error(d, "the name appears more than once in the header (a JSON parser would silently keep one)");
  for (const auto& d : inner_dups) rep.error(d, "the key appears more than once in this entry");

  h.tensors.reserve(j.size());
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      parse_metadata(v, h.metadata, rep);
      continue;
    }
    SafetensorsTensorInfo t;
    if (parse_entry(name, v, t, rep)) h.tensors.push_back(std::move(t));
  }
  if (rep.errors() > 0) return r;
  check_layout(h, file_size - 8 - n, rep);
  if (rep.errors() > 0) return r;
  h.index.reserve(h.tensors.size());
  for (std::size_t i = 0; i < h.tensors.size(); ++i) h.index.emplace(h.tensors[i].name, i);
  return r;
}

Result<SafetensorsHeader> read_safetensors_header(const std::string& path) {
  Result<SafetensorsHeader> r;
  std::string why;
  const int fd = open_regular_file(path, &why);  // a FIFO named model.safetensors is refused, not waited on
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    if (fd >= 0) why = std::string("cannot be examined: ") + std::strerror(errno), ::close(fd);
    r.diagnostics.push_back({Severity::Error, path, 0, 0, "", "cannot read the file: " + why});
    return r;
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  auto read_at = [&](char* dst, std::uint64_t n, std::uint64_t offset) {
    std::uint64_t got = 0;
    while (got < n) {
      const ssize_t k = ::pread(fd, dst + got, static_cast<std::size_t>(n - got), static_cast<off_t>(offset + got));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) break;
      got += static_cast<std::uint64_t>(k);
    }
    return got;
  };
  std::string bytes(8, '\0');
  const std::uint64_t head = read_at(bytes.data(), 8, 0);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  if (head == 8 && size >= 8 && n <= kMaxSafetensorsHeaderBytes && n <= size - 8) {
    bytes.resize(static_cast<std::size_t>(8 + n));
    bytes.resize(8 + static_cast<std::size_t>(read_at(bytes.data() + 8, n, 8)));
  }
  ::close(fd);
  return parse_safetensors_header(bytes, size, path);
}

// ---- model.safetensors.index.json ------------------------------------------------------

Result<SafetensorsIndex> parse_safetensors_index(std::string_view json_text, const std::string& file) {
  Result<SafetensorsIndex> r;
  Reporter rep(file, r.diagnostics);
  std::vector<std::string> dups, inner_dups;
  json j;
  try {
    j = parse_checking_duplicates(json_text, dups, inner_dups);
  } catch (const json::exception& e) {
    rep.error("", "not valid JSON: " + text::excerpt(e.what()));
    return r;
  }
  if (!j.is_object()) {
    rep.error("", "is " + json_type(j) + ", expected an object with \"weight_map\"");
    return r;
  }
  for (const auto& d : inner_dups)
    if (d.rfind("weight_map/", 0) == 0) rep.error(d.substr(11), "the tensor is mapped more than once in weight_map");
  const auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) {
    rep.error("weight_map", wm == j.end() ? "missing; expected an object mapping tensor names to shard files"
                                          : "is " + json_type(*wm) + ", expected an object");
    return r;
  }
  std::set<std::string> shards;
  for (const auto& [name, v] : wm->items()) {
    if (!v.is_string()) {
      rep.error(name, "weight_map value is " + json_type(v) + ", expected a shard file name");
      continue;
    }
    const auto& shard = v.get_ref<const std::string&>();
    if (shard.empty() || shard == "." || shard == ".." ||
        shard.find_first_of(std::string("/\\\0", 3)) != std::string::npos) {
      rep.error(name, "shard " + in_quotes(shard) + " is not a plain file name in the checkpoint directory");
      continue;
    }
    r.value.weight_map.emplace(name, shard);
    shards.insert(shard);
  }
  if (wm->empty()) rep.error("weight_map", "is empty; a checkpoint needs at least one tensor");
  r.value.shards.assign(shards.begin(), shards.end());
  if (const auto md = j.find("metadata"); md != j.end() && md->is_object()) {
    if (const auto ts = md->find("total_size"); ts != md->end()) {
      if (ts->is_number_unsigned()) r.value.total_size = ts->get<std::uint64_t>();
      else if (ts->is_number_float() && ts->get<double>() >= 0 && ts->get<double>() < 1.8e19)
        r.value.total_size = static_cast<std::uint64_t>(ts->get<double>());
      else rep.warning("metadata.total_size", "is " + json_type(*ts) + ", ignored");
    }
  }
  return r;
}

Result<SafetensorsFiles> find_safetensors_files(const std::string& path) {
  namespace fs = std::filesystem;
  Result<SafetensorsFiles> r;
  auto& out = r.value;
  std::error_code ec;
  const fs::path dir(path);
  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  auto error = [&](const std::string& file, const std::string& key, std::string message) {
    r.diagnostics.push_back({Severity::Error, file, 0, 0, key, std::move(message)});
  };
  if (fs::is_regular_file(dir, ec) || fs::exists(single, ec)) {
    out.source = fs::is_regular_file(dir, ec) ? path : single.string();
    out.files.push_back(out.source);
  } else if (!fs::is_directory(dir, ec)) {
    error(path, "", "no such model directory or weights file");
  } else if (fs::exists(index, ec)) {
    out.source = index.string();
    std::string text, why;
    if (!read_regular_file(out.source, kMaxSafetensorsHeaderBytes, &text, &why)) {
      error(out.source, "", "cannot be read: " + why);
      return r;
    }
    auto idx = parse_safetensors_index(text, out.source);
    r.diagnostics = std::move(idx.diagnostics);
    if (!r.ok()) return r;
    out.index = std::move(idx.value);
    for (const auto& shard : out.index->shards) {
      if (fs::exists(dir / shard, ec)) {
        out.files.push_back((dir / shard).string());
        continue;
      }
      std::size_t count = 0;
      std::string example;
      for (const auto& [name, s] : out.index->weight_map)
        if (s == shard && count++ == 0) example = name;
      error(out.source, example,
            "shard '" + shard + "' is missing from " + path + "; the index puts " + std::to_string(count) +
                " tensors in it (this one among them)");
    }
  } else {
    const bool bin = fs::exists(dir / "pytorch_model.bin", ec) || fs::exists(dir / "pytorch_model.bin.index.json", ec);
    error(path, "",
          std::string("no model.safetensors or model.safetensors.index.json") +
              (bin ? "; only PyTorch .bin weights are present, which Odyssey does not read (convert "
                     "them to safetensors)"
                   : ""));
  }
  return r;
}

std::string safetensors_shard_name(int index_1based, int count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", index_1based, count);
  return buf;
}

}  // namespace odyssey
