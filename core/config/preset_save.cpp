// Saving presets: canonical YAML that loads back to an identical TrainConfig.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include "common/text.h"
#include "config/preset_io.h"

namespace odyssey {
namespace fs = std::filesystem;

namespace {

bool plain_safe(const std::string& s) {
  if (s.empty()) return false;
  const unsigned char c0 = static_cast<unsigned char>(s[0]);
  if (!(std::isalnum(c0) || c0 == '/' || c0 == '.' || c0 == '_')) return false;
  for (unsigned char ch : s)
    if (!(std::isalnum(ch) || std::string_view("_./#@+-").find(static_cast<char>(ch)) != std::string_view::npos))
      return false;
  if (text::parse_double(s) || text::parse_int(s) || text::parse_bool(s)) return false;
  static const std::set<std::string> reserved{"null", "Null", "NULL", "~", "y", "Y", "n", "N", ".inf", ".nan"};
  if (reserved.count(s)) return false;
  if (s.find(" #") != std::string::npos) return false;
  return true;
}

std::string yaml_scalar(const std::string& s) {
  if (plain_safe(s)) return s;
  std::string out = "\"";
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (ch < 0x20 || ch == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out + "\"";
}

}  // namespace

std::optional<double> special_number(const FieldSpec& f) {
  if (f.special == "auto") return 0.0;
  if (f.special == "none") return -1.0;
  return std::nullopt;
}

std::string field_value_text(const TrainConfig& c, const FieldSpec& f) {
  return std::visit(
      [&](auto member) -> std::string {
        using M = std::remove_cvref_t<decltype(c.*member)>;
        const auto& v = c.*member;
        if constexpr (std::is_same_v<M, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<M, std::int64_t> || std::is_same_v<M, double>) {
          if (const std::optional<double> n = special_number(f); n && static_cast<double>(v) == *n)
            return std::string(f.special);
          if constexpr (std::is_same_v<M, double>) return text::format_double(v);
          else return std::to_string(v);
        } else if constexpr (std::is_same_v<M, std::string>) {
          // A choice goes bare (offload_activations: true): the loader compares the scalar's text.
          for (auto ch : f.choices)
            if (ch == v) return v;
          return yaml_scalar(v);
        } else if constexpr (std::is_same_v<M, std::vector<std::string>>) {
          std::vector<std::string> parts;
          for (const auto& s : v) parts.push_back(yaml_scalar(s));
          return "[" + text::join(parts, ", ") + "]";
        } else {
          std::vector<std::string> parts;
          for (auto i : v) parts.push_back(std::to_string(i));
          return "[" + text::join(parts, ", ") + "]";
        }
      },
      f.member);
}

std::string save_preset_text(const TrainConfig& c, bool only_changed) {
  static const TrainConfig defaults;
  std::string out =
      "# Odyssey preset (odyssey-train validate FILE checks it; keys are documented\n"
      "# in docs/config.md and by 'odyssey-train show --keys').\n";
  for (auto group : field_groups()) {
    bool header = false;
    for (const auto& f : train_config_fields()) {
      if (f.group != group) continue;
      const std::string val = field_value_text(c, f);
      if (only_changed && val == field_value_text(defaults, f)) continue;
      if (!header && group != "preset") {
        out += "\n# -- " + std::string(group) + "\n";
        header = true;
      }
      out += std::string(f.key) + ": " + val + "\n";
    }
  }
  return out;
}

Diagnostics save_preset_file(const TrainConfig& c, const std::string& path, bool only_changed) {
  const std::string body = save_preset_text(c, only_changed);
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << body;
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return {error_at(path, {}, "cannot write the preset (disk full or no permission)")};
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return {error_at(path, {}, "cannot replace the file: " + ec.message())};
  }
  return {};
}

}  // namespace odyssey
