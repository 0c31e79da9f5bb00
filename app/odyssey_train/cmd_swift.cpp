// `import-swift` and `export-swift`: the ms-swift bridge (core/config/swift_bridge.h) on the
// command line. Import prints or writes an Odyssey preset and checks it; export prints the
// equivalent `swift sft` command of a preset.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "common/text.h"
#include "config/swift_bridge.h"

namespace odyssey::cli {
namespace fs = std::filesystem;
namespace {

// The text of FILE, "-" (stdin) or --command; nullopt after printing why.
std::optional<std::string> read_source(const Args& a, std::string* name) {
  if (a.has("command")) {
    *name = std::string(kSwiftCommandFile);
    return a.value("command");
  }
  const std::string path = a.positional[0];
  std::ostringstream ss;
  if (path == "-") {
    *name = "<stdin>";
    ss << std::cin.rdbuf();
  } else {
    *name = path;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      std::cerr << path << ": error: " << (fs::exists(path, ec) ? "not a regular file" : "no such file") << '\n';
      return std::nullopt;
    }
    if (static_cast<std::int64_t>(fs::file_size(path, ec)) > kMaxPresetBytes) {
      std::cerr << path << ": error: larger than " << kMaxPresetBytes << " bytes; expected a command or config\n";
      return std::nullopt;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::cerr << path << ": error: cannot be opened for reading\n";
      return std::nullopt;
    }
    ss << in.rdbuf();
  }
  return ss.str();
}

// An ms-swift config (YAML or JSON) rather than shell text: by extension, else by whether
// the first line that says anything is `key: ...` or `{`.
bool looks_like_config(const std::string& name, const std::string& text) {
  const std::string ext = fs::path(name).extension().string();
  if (ext == ".yaml" || ext == ".yml" || ext == ".json") return true;
  if (ext == ".sh" || ext == ".txt" || ext == ".bash") return false;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::string t = text::trim(line);
    if (t.empty() || t[0] == '#') continue;
    if (t[0] == '{') return true;
    const auto colon = t.find(':');
    if (colon == std::string::npos || colon == 0) return false;
    const std::string key = t.substr(0, colon);
    const bool name_like =
        key.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == std::string::npos;
    return name_like && (colon + 1 == t.size() || t[colon + 1] == ' ');
  }
  return false;
}

}  // namespace

CommandSpec import_swift_spec() {
  return {"import-swift",
          "import-swift [FILE|-] [--command TEXT] [-o|--output PRESET.yaml] [--force]",
          "Turn an ms-swift 'swift sft' command or ms-swift YAML config into an Odyssey preset.",
          "FILE is a shell script (.sh, .txt) holding the command, or an ms-swift .yaml/.json\n"
          "config; '-' reads standard input; --command takes the command itself. The env prefix\n"
          "(NPROC_PER_NODE, CUDA_VISIBLE_DEVICES, NNODES) is imported too. Arguments Odyssey does\n"
          "not support are listed in a warning; nothing is run. The preset goes to standard\n"
          "output, or atomically to --output; then it is checked as 'validate' would.\n"
          "See docs/swift-bridge.md for the mapping.",
          {{"command", true, false, "TEXT", "the swift command line, instead of FILE"},
           {"output", true, false, "PRESET.yaml", "write the preset here instead of standard output"},
           {"force", false, false, "", "replace --output when it exists"}},
          0,
          1};
}

CommandSpec export_swift_spec() {
  return {"export-swift",
          "export-swift [PRESET] [--set KEY=VALUE]...",
          "Print the ms-swift 'swift sft' command equivalent to a preset.",
          "Every value is shell-quoted. Model and dataset paths are made absolute where they\n"
          "exist, so the command runs from any directory. Settings ms-swift cannot express are\n"
          "listed in a trailing comment. See docs/swift-bridge.md.",
          {{"set", true, true, "KEY=VALUE", "override a setting (value in YAML syntax)"}},
          0,
          1};
}

int cmd_import_swift(const Args& a) {
  if (a.has("command") == !a.positional.empty()) {
    std::cerr << "odyssey-train: import-swift needs exactly one of FILE, '-' or --command TEXT\n";
    return kUsage;
  }
  const std::string out = a.value("output");
  std::error_code ec;
  if (!out.empty() && fs::exists(out, ec) && !a.has("force")) {
    std::cerr << out << ": error: exists; use --force to replace it\n";
    return kFailure;
  }
  std::string name;
  auto textv = read_source(a, &name);
  if (!textv) return kFailure;
  auto r = looks_like_config(name, *textv)
               ? import_swift_yaml(*textv, name)
               : import_swift_command(*textv, a.has("command") || name == "-" ? std::string() : name);
  print_diagnostics(r.diagnostics);
  if (!r.ok()) {
    std::cerr << "odyssey-train: " << name << " was not imported (errors above)\n";
    return kInvalidConfig;
  }
  if (r.value.config.description.empty())
    r.value.config.description =
        a.has("command") ? std::string("Imported from an ms-swift command") : "Imported from ms-swift: " + name;
  auto cc = check_config(r.value, false);
  print_diagnostics(cc.diagnostics);
  if (out.empty()) {
    std::cout << save_preset_text(r.value.config);
  } else {
    // The preset's relative paths would resolve against its own directory: pin them down.
    const TrainConfig pinned = resolve_paths(cc.loaded, cc.location);
    auto d = save_preset_file(pinned, out);
    print_diagnostics(d);
    if (has_errors(d)) return kFailure;
    std::cerr << "odyssey-train: wrote " << out << '\n';
  }
  if (!cc.ok()) {
    std::cerr << "odyssey-train: the imported settings have errors (above); fix them before 'run'\n";
    return kInvalidConfig;
  }
  return kOk;
}

int cmd_export_swift(const Args& a) {
  auto lc = load_config_arg(a);
  if (!lc) return kInvalidConfig;
  std::cout << export_swift_command(
      resolve_paths(*lc, locate_model(lc->config.model, lc->origin.base_dir, lc->config.model_revision)));
  return kOk;
}

}  // namespace odyssey::cli
