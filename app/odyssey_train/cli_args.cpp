#include "cli_args.h"

#include <iostream>

#include "common/text.h"

namespace odyssey::cli {

std::string Args::value(const std::string& name, const std::string& fallback) const {
  auto it = options.find(name);
  return it == options.end() || it->second.empty() ? fallback : it->second.back();
}

std::vector<std::string> Args::values(const std::string& name) const {
  auto it = options.find(name);
  return it == options.end() ? std::vector<std::string>{} : it->second;
}

std::optional<Args> parse_args(const CommandSpec& spec, const std::vector<std::string>& argv, std::string* error) {
  Args a;
  a.command = spec.name;
  bool only_positional = false;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& w = argv[i];
    if (only_positional || w.size() < 2 || w[0] != '-' || w == "-") {
      a.positional.push_back(w);
      continue;
    }
    if (w == "--") {
      only_positional = true;
      continue;
    }
    std::string name = w.substr(w[1] == '-' ? 2 : 1);
    std::optional<std::string> inline_value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const OptionSpec* opt = nullptr;
    for (const auto& o : spec.options)
      if (o.name == name || (name.size() == 1 && o.name[0] == name[0] && w[1] != '-')) opt = &o;
    if (name == "h" || name == "help") {
      a.options["help"].push_back("");
      continue;
    }
    if (!opt) {
      std::vector<std::string> names;
      for (const auto& o : spec.options) names.push_back(o.name);
      *error = "unknown option '" + w + "' for '" + spec.name + "'";
      if (auto near = text::closest(name, names)) *error += "; did you mean '--" + *near + "'?";
      return std::nullopt;
    }
    std::string value;
    if (opt->takes_value) {
      if (inline_value) value = *inline_value;
      else if (i + 1 < argv.size()) value = argv[++i];
      else {
        *error = "option '--" + opt->name + "' needs a value (" + opt->value_name + ")";
        return std::nullopt;
      }
    } else if (inline_value) {
      *error = "option '--" + opt->name + "' takes no value";
      return std::nullopt;
    }
    if (!opt->repeatable && a.options.count(opt->name)) {
      *error = "option '--" + opt->name + "' given twice";
      return std::nullopt;
    }
    a.options[opt->name].push_back(value);
  }
  if (a.has("help")) return a;
  const int np = static_cast<int>(a.positional.size());
  if (np < spec.min_positional) {
    *error = "'" + spec.name + "' needs more arguments: " + spec.synopsis;
    return std::nullopt;
  }
  if (spec.max_positional >= 0 && np > spec.max_positional) {
    *error = "'" + spec.name + "' takes at most " + std::to_string(spec.max_positional) + " argument(s), found " +
             text::quoted(a.positional[static_cast<std::size_t>(spec.max_positional)]) + ": " + spec.synopsis;
    return std::nullopt;
  }
  return a;
}

std::string command_help(const CommandSpec& spec) {
  std::string out = "usage: odyssey-train " + spec.synopsis + "\n\n" + spec.summary + "\n";
  if (!spec.description.empty()) out += "\n" + spec.description + "\n";
  if (!spec.options.empty()) {
    out += "\noptions:\n";
    for (const auto& o : spec.options) {
      std::string left = "  --" + o.name + (o.takes_value ? " " + o.value_name : "");
      if (left.size() < 28) left += std::string(28 - left.size(), ' ');
      else left += "\n" + std::string(28, ' ');
      out += left + o.help + (o.repeatable ? " (repeatable)" : "") + "\n";
    }
  }
  out += "  --help                    show this help\n";
  out +=
      "\nexit codes: 0 ok, 1 failure, 2 usage error, 3 invalid configuration, 4 does not fit "
      "(plan --require-fit); see docs/cli.md\n";
  return out;
}

void print_diagnostics(const Diagnostics& d) {
  for (const auto& x : d) std::cerr << x.format() << '\n';
}

std::optional<LoadedConfig> load_config_arg(const Args& a, std::size_t idx) {
  Result<LoadedConfig> r = idx < a.positional.size() ? load_preset_file(a.positional[idx]) : load_embedded_quickstart();
  if (r.ok()) {
    auto d = apply_overrides(r.value, a.values("set"));
    r.diagnostics.insert(r.diagnostics.end(), d.begin(), d.end());
  }
  print_diagnostics(r.diagnostics);
  if (!r.ok()) return std::nullopt;
  return r.value;
}

}  // namespace odyssey::cli
