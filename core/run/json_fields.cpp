#include "run/json_fields.h"

#include <cmath>
#include <limits>

#include "common/json_dump.h"
#include "common/text.h"

namespace odyssey::run::detail {

using nlohmann::json;

OrderedJson number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

std::string dump_line(const OrderedJson& j) { return dump_json(j); }

std::string dump_pretty(const OrderedJson& j) { return dump_json(j, 2); }

bool convert(const json& v, std::int64_t& out) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
    out = static_cast<std::int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    out = v.get<std::int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    // Some writers (JavaScript, jq) print large integers as floats; accept exact ones.
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d || d < -9.2e18 || d > 9.2e18) return false;
    out = static_cast<std::int64_t>(d);
    return true;
  }
  return false;
}

bool convert(const json& v, int& out) {
  std::int64_t w = 0;
  if (!convert(v, w)) return false;
  if (w < std::numeric_limits<int>::min() || w > std::numeric_limits<int>::max()) return false;
  out = static_cast<int>(w);
  return true;
}

bool convert(const json& v, double& out) {
  if (v.is_number()) {
    out = v.get<double>();
    return true;
  }
  if (v.is_null()) {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "NaN") {
      out = std::numeric_limits<double>::quiet_NaN();
      return true;
    }
    if (s == "Infinity" || s == "-Infinity") {
      out = s[0] == '-' ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
      return true;
    }
  }
  return false;
}

bool convert(const json& v, bool& out) {
  if (!v.is_boolean()) return false;
  out = v.get<bool>();
  return true;
}

bool convert(const json& v, std::string& out) {
  if (!v.is_string()) return false;
  out = v.get_ref<const std::string&>();
  return true;
}

bool convert(const json& v, std::vector<std::string>& out) {
  if (!v.is_array()) return false;
  std::vector<std::string> r;
  r.reserve(v.size());
  for (const auto& x : v) {
    if (!x.is_string()) return false;
    r.push_back(x.get_ref<const std::string&>());
  }
  out = std::move(r);
  return true;
}

bool convert(const json& v, std::optional<int>& out) {
  if (v.is_null()) {
    out.reset();
    return true;
  }
  int i = 0;
  if (!convert(v, i)) return false;
  out = i;
  return true;
}

bool convert(const json& v, std::map<std::string, double>& out) {
  if (!v.is_object()) return false;
  std::map<std::string, double> r;
  for (auto it = v.begin(); it != v.end(); ++it) {
    double d = 0;
    if (!convert(it.value(), d)) return false;
    r[it.key()] = d;
  }
  out = std::move(r);
  return true;
}

const char* expected_kind(const int&) { return "an integer"; }
const char* expected_kind(const std::int64_t&) { return "an integer"; }
const char* expected_kind(const double&) { return "a number (or \"NaN\", \"Infinity\", \"-Infinity\")"; }
const char* expected_kind(const bool&) { return "true or false"; }
const char* expected_kind(const std::string&) { return "a string"; }
const char* expected_kind(const std::vector<std::string>&) { return "a list of strings"; }
const char* expected_kind(const std::optional<int>&) { return "an integer or null"; }
const char* expected_kind(const std::map<std::string, double>&) { return "an object of numbers"; }

FieldReader::FieldReader(const json& object, std::string path, const std::string& file, int line, Diagnostics& out)
    : object_(object), path_(std::move(path)), file_(file), line_(line), out_(out) {}

FieldReader FieldReader::child(const json& object, std::string name) const {
  return FieldReader(object, path_.empty() ? std::move(name) : path_ + "." + name, file_, line_, out_);
}

std::string FieldReader::key_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

void FieldReader::error(std::string_view key, std::string message) {
  Diagnostic d;
  d.severity = Severity::Error;
  d.file = file_;
  d.line = line_;
  d.key = key_path(key);
  d.message = std::move(message);
  out_.push_back(std::move(d));
}

bool FieldReader::has(std::string_view key) const { return object_.is_object() && object_.contains(std::string(key)); }

bool FieldReader::has_string(std::string_view key) const {
  if (!object_.is_object()) return false;
  auto it = object_.find(std::string(key));
  return it != object_.end() && it->is_string();
}

const json* FieldReader::find(std::string_view key, bool is_required) {
  if (!object_.is_object()) return nullptr;
  auto it = object_.find(std::string(key));
  if (it == object_.end()) {
    if (is_required) error(key, "missing required field");
    return nullptr;
  }
  return &*it;
}

void FieldReader::wrong_type(std::string_view key, const json& v, const char* expected) {
  std::string got = v.type_name();
  // Only scalars are quoted: dumping a deeply nested value recurses, and a hostile line
  // could nest a million levels.
  if (v.is_primitive()) got += " " + text::quoted(dump_json(v));
  error(key, std::string("must be ") + expected + ", got " + got);
}

const json* FieldReader::object(std::string_view key, bool is_required) {
  const json* v = find(key, is_required);
  if (v != nullptr && !v->is_object()) {
    wrong_type(key, *v, "an object");
    return nullptr;
  }
  return v;
}

const json* FieldReader::array(std::string_view key, bool is_required) {
  const json* v = find(key, is_required);
  if (v != nullptr && !v->is_array()) {
    wrong_type(key, *v, "a list");
    return nullptr;
  }
  return v;
}

}  // namespace odyssey::run::detail
