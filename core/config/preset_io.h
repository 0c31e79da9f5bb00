// YAML presets: load (with file:line diagnostics), save (exact round trip), --set overrides.
// A preset is data: values are only ever read as scalars and lists; nothing in a preset is
// executed, expanded or looked up in the environment.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/diagnostic.h"
#include "config/train_config.h"

namespace odyssey {

struct SourcePos {
  std::string file;
  int line = 0;
  int column = 0;
};

// Where the config came from and where each key was set (for diagnostics).
struct ConfigOrigin {
  std::string file;                       // the preset file, "" for defaults/embedded
  std::string base_dir;                   // relative model/dataset paths resolve here
  std::map<std::string, SourcePos> keys;  // key -> where it was set
  bool is_set(const std::string& key) const { return keys.count(key) != 0; }
};

struct LoadedConfig {
  TrainConfig config;
  ConfigOrigin origin;
};

// Presets larger than this are refused before parsing (a preset is a page of settings).
constexpr std::int64_t kMaxPresetBytes = 1 << 20;

// Parse YAML text. `file` names it in diagnostics; `base_dir` is where relative paths in
// it resolve (normally the file's directory).
Result<LoadedConfig> load_preset_text(std::string_view yaml, const std::string& file, const std::string& base_dir);
Result<LoadedConfig> load_preset_file(const std::string& path);

// Apply "key=value" overrides (value parsed as a YAML scalar or flow list).
Diagnostics apply_overrides(LoadedConfig& cfg, const std::vector<std::string>& assignments);

// Set one key from YAML text (the GUI and the bridge use this too).
Diagnostics set_field_from_text(TrainConfig& c, std::string_view key, std::string_view yaml_value,
                                const SourcePos& where);

// Canonical YAML: every key, grouped, with a comment per group. With `only_changed`,
// keys equal to their default are left out (a shorter preset to share).
std::string save_preset_text(const TrainConfig& c, bool only_changed = false);
// Atomic write (temporary file + rename), so a crash never leaves half a preset.
Diagnostics save_preset_file(const TrainConfig& c, const std::string& path, bool only_changed = false);

// A field's value as the text save_preset_text writes for it.
std::string field_value_text(const TrainConfig& c, const FieldSpec& f);

// The number a numeric field's special word stands for (auto 0, none -1); none without one.
std::optional<double> special_number(const FieldSpec& f);

// The embedded default (presets/quickstart.yaml compiled in) and where its paths resolve.
std::string_view embedded_quickstart_yaml();
Result<LoadedConfig> load_embedded_quickstart();

// Odyssey's data folder holding presets/ and resources/: $ODYSSEY_DATA_DIR, the install
// prefix's share/odyssey, or the source tree this binary was built from.
std::string data_dir();

}  // namespace odyssey
