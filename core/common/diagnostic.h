// Diagnostics: the one way non-torch core code reports bad input. Every message names
// where the problem is (file, line, key), what was found and what is allowed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace odyssey {

enum class Severity { Error, Warning, Note };

struct Diagnostic {
  Severity severity = Severity::Error;
  std::string file;  // the file, "--set", "command line" or "" when not from a file
  int line = 0;      // 1-based; 0 = no line (a default value, a derived quantity)
  int column = 0;    // 1-based; 0 = unknown
  std::string key;   // the config key concerned, "" when none
  std::string message;

  // "file:line:col: error: key: message" with the parts that are known.
  std::string format() const;
};

using Diagnostics = std::vector<Diagnostic>;

// The one factory for diagnostics: an error at `file` and `key` (either may be empty: a value
// from the command line has no file, a whole-file problem no key) ...
Diagnostic error_at(std::string file, std::string key, std::string message);
// ... or any severity with a position; a line or column past int's range is clamped to it.
Diagnostic diagnostic_at(Severity severity, std::string file, std::string key, std::string message,
                         std::int64_t line = 0, std::int64_t column = 0);

bool has_errors(const Diagnostics& d);
std::string format_all(const Diagnostics& d);

// A value or the diagnostics that explain why there is none.
template <typename T>
struct Result {
  T value{};
  Diagnostics diagnostics;
  bool ok() const { return !has_errors(diagnostics); }
};

}  // namespace odyssey
