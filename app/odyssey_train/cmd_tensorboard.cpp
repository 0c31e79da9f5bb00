// `tensorboard`: TensorBoard event files for a run made before runs wrote them as they went
// (core/run/tensorboard.h; docs/tensorboard.md).
#include <iostream>

#include "commands.h"
#include "common/text.h"
#include "run/tensorboard.h"

namespace odyssey::cli {

CommandSpec tensorboard_spec() {
  return {"tensorboard",
          "tensorboard RUN_DIR [--out DIR]",
          "Write TensorBoard event files from a run's events.jsonl.",
          "Reads RUN_DIR/events.jsonl and writes one TensorBoard event file with the tags a run\n"
          "writes as it goes (train/loss, train/learning_rate, eval/loss, memory/..., comm/...,\n"
          "the config as text; docs/tensorboard.md) into RUN_DIR/tensorboard, or into DIR with\n"
          "--out. Runs started by this Odyssey write that file themselves; this is for older runs.\n"
          "Then: tensorboard --logdir RUN_DIR/tensorboard\n\n"
          "Nothing is written when RUN_DIR or its events.jsonl is missing, a line of events.jsonl\n"
          "does not decode (the message names file:line and what the line must hold), the run has\n"
          "no step events, or the directory already holds TensorBoard events (converting twice\n"
          "would draw every point twice). A last line the run did not finish is left out, with a\n"
          "warning.\n\n"
          "Exit codes: 0 written, 1 nothing written (the reason is on stderr), 2 usage.",
          {{"out", true, false, "DIR", "write the event file into DIR instead of RUN_DIR/tensorboard"}},
          1,
          1};
}

int cmd_tensorboard(const Args& a) {
  const auto r = run::convert_events_to_tensorboard(a.positional[0], a.value("out"));
  print_diagnostics(r.diagnostics);
  if (!r.ok()) {
    std::cerr << "odyssey-train tensorboard: nothing written\n";
    return kFailure;
  }
  std::cout << "wrote " << r.value.string() << '\n'
            << "view it with: tensorboard --logdir " << text::shell_quote(r.value.parent_path().string()) << '\n';
  return kOk;
}

}  // namespace odyssey::cli
