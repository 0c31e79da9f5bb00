// Internal to core/run: the JSON number encoding of the run contract and a field reader
// that turns a parsed object into C++ values with diagnostics, never exceptions. Shared by
// the event decoder and status.json so both files follow the same rules.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/diagnostic.h"

namespace odyssey::run::detail {

// Writers keep keys in the order the schema lists them ("v" and "type" first), so a
// person reading events.jsonl sees the same shape on every line.
using OrderedJson = nlohmann::ordered_json;

// A double as JSON: a number when finite, else "NaN", "Infinity" or "-Infinity".
OrderedJson number(double v);

// Serialise without ever throwing: invalid UTF-8 becomes U+FFFD.
std::string dump_line(const OrderedJson& j);
std::string dump_pretty(const OrderedJson& j);

// Conversions from a JSON value; false when the value has the wrong type or range.
// Doubles accept numbers, the three non-finite strings and null (read as NaN: what
// nlohmann and JavaScript write for NaN). Integers accept integral floats such as 1e3.
bool convert(const nlohmann::json& v, int& out);
bool convert(const nlohmann::json& v, std::int64_t& out);
bool convert(const nlohmann::json& v, double& out);
bool convert(const nlohmann::json& v, bool& out);
bool convert(const nlohmann::json& v, std::string& out);
bool convert(const nlohmann::json& v, std::vector<std::string>& out);
bool convert(const nlohmann::json& v, std::optional<int>& out);  // null -> nullopt
bool convert(const nlohmann::json& v, std::map<std::string, double>& out);

const char* expected_kind(const int&);
const char* expected_kind(const std::int64_t&);
const char* expected_kind(const double&);
const char* expected_kind(const bool&);
const char* expected_kind(const std::string&);
const char* expected_kind(const std::vector<std::string>&);
const char* expected_kind(const std::optional<int>&);
const char* expected_kind(const std::map<std::string, double>&);

// Reads the fields of one JSON object. Diagnostics name the field by its path
// ("memory[1].vram_peak_bytes") and the file and line it came from.
class FieldReader {
 public:
  FieldReader(const nlohmann::json& object, std::string path, const std::string& file, int line, Diagnostics& out);

  // A missing required field is an error; a missing optional one leaves `out` as it was
  // (its default), which is how a newer reader reads fields an older writer did not have.
  template <typename T>
  void required(std::string_view key, T& out) {
    field(key, out, true);
  }
  template <typename T>
  void optional(std::string_view key, T& out) {
    field(key, out, false);
  }

  bool has(std::string_view key) const;
  bool has_string(std::string_view key) const;

  // The nested object or array at `key`, or nullptr (with an error when it is required
  // or has the wrong type).
  const nlohmann::json* object(std::string_view key, bool required);
  const nlohmann::json* array(std::string_view key, bool required);

  // A reader for a nested object, e.g. child(*obj, "mesh") or child(a[i], "memory[i]").
  FieldReader child(const nlohmann::json& object, std::string name) const;

  void error(std::string_view key, std::string message);

 private:
  template <typename T>
  void field(std::string_view key, T& out, bool is_required) {
    const nlohmann::json* v = find(key, is_required);
    if (v == nullptr) return;
    if (!convert(*v, out)) wrong_type(key, *v, expected_kind(out));
  }
  const nlohmann::json* find(std::string_view key, bool is_required);
  void wrong_type(std::string_view key, const nlohmann::json& v, const char* expected);
  std::string key_path(std::string_view key) const;

  const nlohmann::json& object_;
  std::string path_;
  const std::string& file_;
  int line_;
  Diagnostics& out_;
};

}  // namespace odyssey::run::detail
