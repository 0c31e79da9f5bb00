#include "common/text.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <system_error>

namespace odyssey::text {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::optional<std::string> closest(std::string_view word, const std::vector<std::string>& candidates) {
  // Setting names are short; a long word is no typo of one, and comparing it would cost
  // O(length) per candidate (a fuzzer found a 1 MB key taking seconds).
  if (word.size() > 64) return std::nullopt;
  std::optional<std::string> best;
  std::size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(word, c);
    // A candidate that contains the word (or the reverse) is a strong hint too:
    // "rank" -> "lora_rank".
    if (d > 2 && word.size() >= 4 && (c.find(word) != std::string::npos || word.find(c) != std::string_view::npos))
      d = 2;
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  if (best && best_d <= limit) return best;
  return std::nullopt;
}

std::string format_double(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  // Keep a float recognisable as one in YAML and shell words ("1" -> "1.0").
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::optional<std::int64_t> parse_int(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  std::int64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_double(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  if (v != v) return std::nullopt;  // NaN is never a valid setting
  return v;
}

std::optional<bool> parse_bool(std::string_view s) {
  std::string l(s);
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (l == "true" || l == "yes" || l == "on" || l == "1") return true;
  if (l == "false" || l == "no" || l == "off" || l == "0") return false;
  return std::nullopt;
}

std::string shell_quote(std::string_view w) {
  if (w.empty()) return "''";
  const bool safe = std::all_of(w.begin(), w.end(), [](unsigned char c) {
    return std::isalnum(c) || std::string_view("@%+=:,./_-#").find(static_cast<char>(c)) != std::string_view::npos;
  });
  // A leading '#' would start a shell comment.
  if (safe && w.front() != '#') return std::string(w);
  std::string out = "'";
  for (char c : w) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::optional<std::vector<std::string>> shell_split(std::string_view line, std::string* error) {
  std::vector<std::string> words;
  std::string cur;
  bool have = false;
  enum { None, Single, Double } q = None;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (q == Single) {
      if (c == '\'') q = None;
      else cur += c;
      continue;
    }
    if (q == Double) {
      if (c == '"') q = None;
      else if (c == '\\' && i + 1 < line.size() &&
               std::string_view("\"\\$`\n").find(line[i + 1]) != std::string_view::npos) {
        if (line[i + 1] != '\n') cur += line[i + 1];
        ++i;
      } else cur += c;
      continue;
    }
    if (c == '\\') {
      if (i + 1 < line.size()) {
        if (line[i + 1] != '\n' && line[i + 1] != '\r') {
          cur += line[i + 1];
          have = true;
        } else if (line[i + 1] == '\r' && i + 2 < line.size() && line[i + 2] == '\n') ++i;
        ++i;
      }
      continue;
    }
    if (c == '\'') {
      q = Single;
      have = true;
      continue;
    }
    if (c == '"') {
      q = Double;
      have = true;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (have) {
        words.push_back(cur);
        cur.clear();
        have = false;
      }
      continue;
    }
    if (c == '#' && !have) {  // comment to end of line
      while (i < line.size() && line[i] != '\n') ++i;
      continue;
    }
    cur += c;
    have = true;
  }
  if (q != None) {
    if (error) *error = q == Single ? "unterminated single quote" : "unterminated double quote";
    return std::nullopt;
  }
  if (have) words.push_back(cur);
  return words;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string trim(std::string_view s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

namespace {

// Bytes of `s` to keep so that at most `max` are kept and no UTF-8 sequence is split.
std::size_t utf8_cut(std::string_view s, std::size_t max) {
  if (s.size() <= max) return s.size();
  std::size_t n = max;
  // Step back over continuation bytes to the lead byte of the cut character, then drop it.
  std::size_t back = 0;
  while (n > 0 && back < 4 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n, ++back;
  return n;
}

std::string total_note(std::size_t total) { return "... (" + std::to_string(total) + " bytes in all)"; }

}  // namespace

std::string excerpt(std::string_view s, std::size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  return std::string(s.substr(0, utf8_cut(s, max_bytes))) + total_note(s.size());
}

std::string quoted(std::string_view v) {
  const std::size_t keep = utf8_cut(v, kExcerptBytes);
  std::string out = "'";
  for (unsigned char c : v.substr(0, keep)) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += "'";
  if (keep < v.size()) out += total_note(v.size());
  return out;
}

bool clean_utf8(std::string_view s, std::size_t* bad_at, std::string* why) {
  auto fail = [&](std::size_t i, const char* what) {
    if (bad_at) *bad_at = i;
    if (why) *why = what;
    return false;
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == 0) return fail(i, "a NUL byte");
    if (c < 0x80) {
      ++i;
      continue;
    }
    // Lengths and ranges of Unicode 15, table 3-7 (no overlongs, no surrogates, <= U+10FFFF).
    int n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c == 0xE0) n = 2, lo = 0xA0;
    else if (c == 0xED) n = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) n = 2;
    else if (c == 0xF0) n = 3, lo = 0x90;
    else if (c == 0xF4) n = 3, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) n = 3;
    else return fail(i, "invalid UTF-8");
    if (i + static_cast<std::size_t>(n) >= s.size()) return fail(i, "invalid UTF-8 (a sequence cut short)");
    for (int k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return fail(i, "invalid UTF-8");
    }
    i += static_cast<std::size_t>(n) + 1;
  }
  return true;
}

}  // namespace odyssey::text
