#include "common/diagnostic.h"

#include <algorithm>
#include <limits>

#include "common/text.h"

namespace odyssey {

namespace {
// format() cuts a longer message (with its length named): readers of events.jsonl skip
// lines over 1 MiB, and a message quoting a whole malformed input line would be one.
constexpr std::size_t kMaxDiagnosticMessageBytes = 4096;
}  // namespace

Diagnostic error_at(std::string file, std::string key, std::string message) {
  return diagnostic_at(Severity::Error, std::move(file), std::move(key), std::move(message));
}

Diagnostic diagnostic_at(Severity severity, std::string file, std::string key, std::string message, std::int64_t line,
                         std::int64_t column) {
  auto clamp = [](std::int64_t v) {
    return static_cast<int>(std::clamp<std::int64_t>(v, 0, std::numeric_limits<int>::max()));
  };
  Diagnostic d;
  d.severity = severity;
  d.file = std::move(file);
  d.line = clamp(line);
  d.column = clamp(column);
  d.key = std::move(key);
  d.message = std::move(message);
  return d;
}

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
  // Callers quote input through text::quoted/excerpt; this bound is the last line of
  // defence, so that no single diagnostic can fill stdout or an events.jsonl line.
  out += message.size() > kMaxDiagnosticMessageBytes ? text::excerpt(message, kMaxDiagnosticMessageBytes) : message;
  return out;
}

bool has_errors(const Diagnostics& d) {
  return std::any_of(d.begin(), d.end(), [](const Diagnostic& x) { return x.severity == Severity::Error; });
}

std::string format_all(const Diagnostics& d) {
  std::string out;
  for (const auto& x : d) out += x.format() + '\n';
  return out;
}

}  // namespace odyssey
