#include "dataset_scan.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace odyssey::ui {
namespace {

std::string format_of(const nlohmann::json& o) {
  if (!o.is_object()) return "unknown";
  if (o.contains("messages")) return "messages";
  if (o.contains("conversations")) return "sharegpt";
  if (o.contains("instruction") || (o.contains("input") && o.contains("output"))) return "alpaca";
  if (o.contains("query") && o.contains("response")) return "query-response";
  return "unknown";
}

void note_format(DatasetScan& s, const std::string& f) {
  if (s.format.empty()) s.format = f;
  else if (s.format != f) s.format = "mixed";
}

std::string thousands(std::int64_t v) {
  std::string d = std::to_string(v), out;
  for (std::size_t i = 0; i < d.size(); ++i) {
    if (i > 0 && (d.size() - i) % 3 == 0) out += ',';
    out += d[i];
  }
  return out;
}

}  // namespace

DatasetScan scan_dataset(const std::string& path, const std::atomic<bool>* cancel) {
  namespace fs = std::filesystem;
  DatasetScan s;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    s.error = fs::exists(path, ec) ? "not a file" : "no such file";
    return s;
  }
  const auto size = static_cast<std::int64_t>(fs::file_size(path, ec));
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    s.error = "cannot be read";
    return s;
  }
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".json") {
    if (size > kFullParseBytes) {
      s.error = "a JSON array this large is not scanned; use JSONL";
      return s;
    }
    auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_array()) {
      s.error = j.is_discarded() ? "not valid JSON" : "not a JSON array of samples";
      return s;
    }
    for (const auto& o : j) {
      if (o.is_object()) {
        ++s.samples;
        note_format(s, format_of(o));
      } else {
        ++s.broken;
      }
    }
    if (s.format.empty()) s.format = "unknown";
    s.ok = true;
    return s;
  }
  std::string line;
  std::int64_t n = 0;
  const bool parse_all = size <= kFullParseBytes;
  while (std::getline(in, line)) {
    ++n;
    if ((n & 1023) == 0 && cancel && cancel->load()) {
      s.error = "cancelled";
      return s;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!parse_all && s.samples + s.broken >= 1000) {
      ++s.samples;  // beyond the sampled head, a non-empty line counts as a sample
      continue;
    }
    auto o = nlohmann::json::parse(line, nullptr, false);
    if (o.is_discarded() || !o.is_object()) {
      if (s.broken++ == 0) s.first_broken_line = n;
      continue;
    }
    ++s.samples;
    note_format(s, format_of(o));
  }
  if (s.format.empty()) s.format = "unknown";
  s.ok = true;
  return s;
}

std::string describe_scan(const DatasetScan& s) {
  if (!s.ok) return s.error;
  std::string out = s.format + ", " + thousands(s.samples) + (s.samples == 1 ? " sample" : " samples");
  if (s.broken > 0)
    out += "; " + thousands(s.broken) + " broken (first at line " + std::to_string(s.first_broken_line) + ")";
  return out;
}

}  // namespace odyssey::ui
