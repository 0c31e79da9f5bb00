// Internal to the ms-swift bridge (swift_import.cpp, swift_script.cpp): one argument as
// given, and the Importer that maps arguments and environment assignments into a
// LoadedConfig. Not part of the public API; see config/swift_bridge.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/swift_bridge.h"

namespace odyssey::swift_detail {

// One `--name values…` (or YAML key) as given.
struct Arg {
  std::string name;                 // without dashes, '-' normalised to '_'
  std::vector<std::string> values;  // may hold unexpanded-shell markers (see ScriptReader)
  std::vector<std::string> shown;   // the values as the user wrote them
  int line = 0;
  bool needs_shell = false;
};

// Turns args and env assignments into a LoadedConfig, collecting what does not map.
class Importer {
 public:
  Importer(std::string file, bool with_lines) : file_(std::move(file)), lines_(with_lines) {
    out_.config = swift_import_baseline();
    out_.origin.file = file_;
  }

  void env(const std::string& name, const std::string& value, const std::string& shown, int line, bool needs_shell);
  void arg(const Arg& a);
  Result<LoadedConfig> finish();
  Result<LoadedConfig> abort() {  // after a structural error: only the diagnostics so far
    Result<LoadedConfig> r;
    r.value.origin.file = file_;
    r.diagnostics = std::move(d_);
    return r;
  }
  void error(int line, const std::string& key, std::string msg) { add(Severity::Error, line, key, std::move(msg)); }
  void note(std::string msg) { notes_.push_back(std::move(msg)); }
  // Diagnostics and origins name `file` (lines when with_lines) until the next call: a
  // script's `swift sft x.yaml` reads the YAML's keys under the YAML's name.
  // While on, an ENV entry for a variable already set (by the script) is ignored with a
  // note: ms-swift lets the script's environment win over a config file's ENV.
  void env_defers(bool on) { env_defers_ = on; }
  std::pair<std::string, bool> source(std::string file, bool with_lines) {
    auto before = std::make_pair(std::move(file_), lines_);
    file_ = std::move(file);
    lines_ = with_lines;
    return before;
  }

 private:
  void add(Severity s, int line, const std::string& key, std::string msg) {
    d_.push_back({s, file_, lines_ ? line : 0, 0, key, std::move(msg)});
  }
  std::string where(int line) const { return lines_ && line > 0 ? " (line " + std::to_string(line) + ")" : ""; }
  bool set(const std::string& key, const std::string& yaml, int line, const std::string& from);
  bool set_values(const FieldSpec& f, const Arg& a, std::vector<std::string> values);
  void deepspeed(const Arg& a);
  bool cannot_honour(const Arg& a, const std::string& name);

  std::string file_;
  bool lines_;
  LoadedConfig out_;
  Diagnostics d_;
  std::vector<std::string> unsupported_, needs_shell_, launcher_, notes_;
  std::vector<std::string> not_honoured_;  // arguments that would train something else: errors
  int deepspeed_line_ = 0;
  std::set<std::string> env_names_;
  bool env_defers_ = false;
  std::map<std::string, int> seen_;
  std::optional<std::int64_t> nproc_env_;
  std::string celoss_;
  bool hf_constant_ = false;
};

// Feeds an ms-swift YAML config's keys (and its ENV mapping) into `im`; false after a
// structural error (reported).
bool feed_swift_yaml(Importer& im, std::string_view yaml);

}  // namespace odyssey::swift_detail
