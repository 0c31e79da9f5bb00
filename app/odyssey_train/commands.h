// One function per odyssey-train command; each returns an ExitCode. The table of
// CommandSpecs (names, options, help) is in commands.cpp.
#pragma once

#include <vector>

#include "cli_args.h"

namespace odyssey::cli {

int cmd_run(const Args& a);
int cmd_validate(const Args& a);
int cmd_show(const Args& a);
int cmd_env(const Args& a);
int cmd_plan(const Args& a);          // cmd_plan.cpp
int cmd_import_swift(const Args& a);  // cmd_swift.cpp
int cmd_export_swift(const Args& a);  // cmd_swift.cpp
int cmd_score(const Args& a);         // cmd_score.cpp
int cmd_tokenize(const Args& a);      // cmd_tokenize.cpp
int cmd_template(const Args& a);      // cmd_template.cpp
int cmd_export(const Args& a);        // cmd_export.cpp
int cmd_selftest(const Args& a);      // cmd_selftest.cpp
int cmd_tensorboard(const Args& a);   // cmd_tensorboard.cpp
int cmd_generate(const Args& a);      // cmd_generate.cpp
int cmd_chat(const Args& a);          // cmd_chat.cpp

struct Command {
  CommandSpec spec;
  int (*run)(const Args&);
};
const std::vector<Command>& commands();

// The spec of each command is defined next to its implementation.
CommandSpec plan_spec();
CommandSpec import_swift_spec();
CommandSpec export_swift_spec();
CommandSpec score_spec();
CommandSpec tokenize_spec();
CommandSpec template_spec();
CommandSpec export_spec();
CommandSpec selftest_spec();
CommandSpec tensorboard_spec();
CommandSpec generate_spec();
CommandSpec chat_spec();

}  // namespace odyssey::cli
