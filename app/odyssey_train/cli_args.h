// Command-line parsing for odyssey-train: `odyssey-train <command> [args]`. Each command
// declares its options; unknown options are usage errors with a "did you mean".
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/diagnostic.h"
#include "config/validate.h"

namespace odyssey::cli {

// Documented exit codes (docs/cli.md).
enum ExitCode : int {
  kOk = 0,
  kFailure = 1,        // a runtime failure (I/O, a failed run)
  kUsage = 2,          // bad command-line arguments
  kInvalidConfig = 3,  // the preset or the imported command has errors
  kDoesNotFit = 4,     // `plan --require-fit`: the job does not fit the GPU
};

struct OptionSpec {
  std::string name;  // without dashes: "set", "json"
  bool takes_value = false;
  bool repeatable = false;
  std::string value_name;  // for help: "KEY=VALUE"
  std::string help;
};

struct CommandSpec {
  std::string name;
  std::string synopsis;     // "validate [PRESET...] [--set KEY=VALUE]..."
  std::string summary;      // one line
  std::string description;  // paragraphs for --help
  std::vector<OptionSpec> options;
  int min_positional = 0;
  int max_positional = 0;  // -1 = any
};

struct Args {
  std::string command;
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> options;  // name -> values ("" for flags)
  bool has(const std::string& name) const { return options.count(name) != 0; }
  std::string value(const std::string& name, const std::string& fallback = {}) const;
  std::vector<std::string> values(const std::string& name) const;
};

// Parse argv after the command word. On error returns nullopt and fills `error`.
std::optional<Args> parse_args(const CommandSpec& spec, const std::vector<std::string>& argv, std::string* error);

std::string command_help(const CommandSpec& spec);

// The preset named by the first positional (or the embedded quickstart when none), with
// --set overrides applied. Prints diagnostics to stderr; nullopt on errors.
std::optional<LoadedConfig> load_config_arg(const Args& a, std::size_t positional_index = 0);

// Print diagnostics to stderr, one per line.
void print_diagnostics(const Diagnostics& d);

}  // namespace odyssey::cli
