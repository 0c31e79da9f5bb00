#include "common/diagnostic.h"

#include <algorithm>

namespace odyssey {

std::string Diagnostic::format() const {
  std::string out;
  if (!file.empty()) {
    out += file;
    if (line > 0) {
      out += ':' + std::to_string(line);
      if (column > 0) out += ':' + std::to_string(column);
    }
    out += ": ";
  }
  switch (severity) {
    case Severity::Error: out += "error: "; break;
    case Severity::Warning: out += "warning: "; break;
    case Severity::Note: out += "note: "; break;
  }
  if (!key.empty()) out += key + ": ";
  out += message;
  return out;
}

bool has_errors(const Diagnostics& d) {
  return std::any_of(d.begin(), d.end(),
                     [](const Diagnostic& x) { return x.severity == Severity::Error; });
}

std::string format_all(const Diagnostics& d) {
  std::string out;
  for (const auto& x : d) out += x.format() + '\n';
  return out;
}

}  // namespace odyssey
