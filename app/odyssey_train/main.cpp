// odyssey-train: the engine's command line. `odyssey-train <command> [args]`; every
// command has --help; exit codes are documented in docs/cli.md.
#include <exception>
#include <iostream>

#include "commands.h"
#include "common/text.h"

using namespace odyssey::cli;

namespace {

void usage(std::ostream& os) {
  os << "usage: odyssey-train <command> [options]\n\n"
        "Odyssey's training engine. Commands:\n";
  for (const auto& c : commands()) {
    std::string name = "  " + c.spec.name;
    name.resize(18, ' ');
    os << name << c.spec.summary << '\n';
  }
  os << "\n'odyssey-train <command> --help' describes a command; 'odyssey-train run' with no preset\n"
        "runs the embedded quickstart. Docs: docs/cli.md, docs/config.md.\n";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) {
      usage(std::cerr);
      return kUsage;
    }
    const std::string cmd = argv[1];
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      if (argc > 2)
        for (const auto& c : commands())
          if (c.spec.name == argv[2]) {
            std::cout << command_help(c.spec);
            return kOk;
          }
      usage(std::cout);
      return kOk;
    }
    if (cmd == "--version") {
      std::cout << "odyssey-train " << ODYSSEY_VERSION << '\n';
      return kOk;
    }
    for (const auto& c : commands()) {
      if (c.spec.name != cmd) continue;
      std::string error;
      auto args = parse_args(c.spec, std::vector<std::string>(argv + 2, argv + argc), &error);
      if (!args) {
        std::cerr << "odyssey-train: " << error << "\n(see 'odyssey-train " << cmd << " --help')\n";
        return kUsage;
      }
      if (args->has("help")) {
        std::cout << command_help(c.spec);
        return kOk;
      }
      return c.run(*args);
    }
    std::vector<std::string> names;
    for (const auto& c : commands()) names.push_back(c.spec.name);
    std::cerr << "odyssey-train: unknown command '" << cmd << "'";
    if (auto near = odyssey::text::closest(cmd, names)) std::cerr << "; did you mean '" << *near << "'?";
    std::cerr << '\n';
    usage(std::cerr);
    return kUsage;
  } catch (const std::exception& e) {
    std::cerr << "odyssey-train: error: " << e.what() << '\n';
    return kFailure;
  } catch (...) {
    std::cerr << "odyssey-train: error: unknown exception\n";
    return kFailure;
  }
}
