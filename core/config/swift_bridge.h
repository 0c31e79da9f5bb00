// The ms-swift bridge: a `swift sft` command line (with its environment prefix) or an
// ms-swift YAML/JSON config in, a TrainConfig out; and a TrainConfig out as the equivalent
// `swift sft` command. Nothing ms-swift is told is dropped silently: arguments Odyssey does
// not support come back as one warning listing them with their values, and settings
// ms-swift cannot express are listed in a trailing comment of the exported command.
//
// Import is text processing only: nothing is run and nothing is looked up in the
// environment. A script's own plain assignments (`nproc=2` … `NPROC_PER_NODE=$nproc`) are
// substituted; anything that needs a shell to compute ($(…), `…`, unknown $VARS) is
// reported and not imported. docs/swift-bridge.md has the mapping table.
#pragma once

#include <string>
#include <string_view>

#include "config/preset_io.h"

namespace odyssey {

// What diagnostics of an imported command name as their file.
inline constexpr std::string_view kSwiftCommandFile = "swift command";

// Parse shell text holding one `swift sft …` command: env assignments before it (or
// exported earlier in the script), backslash continuations, comments, `--key value`,
// `--key=value`, multi-value arguments and bare boolean flags. `swift pt`, `swift rlhf`,
// `swift infer` and other subcommands are errors. Diagnostics carry the script's line when
// the text spans several lines. `swift sft x.yaml …` and `--config x.yaml` read the file's
// arguments first (relative paths: the current directory, else beside `script_file`), the
// command line's over them, with the script's environment. Diagnostics name `script_file`
// when given, else kSwiftCommandFile.
Result<LoadedConfig> import_swift_command(std::string_view text, const std::string& script_file = {});

// Parse an ms-swift YAML (or JSON) config file's text: keys are argument names, with an
// optional ENV mapping. Diagnostics carry `file` and the key's line.
Result<LoadedConfig> import_swift_yaml(std::string_view yaml, const std::string& file);

// The equivalent command, one argument per line joined with ` \` continuations, every value
// shell-quoted. Settings without an ms-swift spelling end up in a trailing comment
// "# Odyssey-only settings not expressible in swift: …".
std::string export_swift_command(const TrainConfig& c);

// Where an import starts before the command's arguments apply: Odyssey's defaults, with
// ms-swift's defaults for what is trained (num_train_epochs 3, save_total_limit keep-all).
// Export leaves out arguments equal to this, which makes export -> import exact for every
// field that maps.
TrainConfig swift_import_baseline();

}  // namespace odyssey
