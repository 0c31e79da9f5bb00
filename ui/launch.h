// Launching odyssey-train from the window and finding jobs that already run. The window
// stages the form's configuration as a preset file with absolute paths under
// <output_dir>/.odyssey-launch/, starts `odyssey-train run <file> --name <name>` detached
// (its own session, so it outlives the window) with stdout and stderr in a log beside the
// file, and learns the run directory from the log's `run directory:` line.
#pragma once

#include <QString>
#include <QStringList>

#include <optional>

namespace odyssey::ui {

class ConfigForm;

// $ODYSSEY_TRAIN_BIN, else odyssey-train beside the running executable, in ../app (a
// build tree's tests) or on PATH; "" when none is found.
QString find_train_binary();

// The form's output_dir, absolute: a relative one resolves against the current directory,
// as `odyssey-train run` started from here would resolve it.
QString resolved_output_dir(const ConfigForm& form);

// The run's name: the stem of the form's preset file, or "quickstart" without one.
QString launch_name(const ConfigForm& form);

struct StagedLaunch {
  QString preset;      // <output_dir>/.odyssey-launch/<time>-<name>.yaml
  QString log;         // the same with .log: the engine's stdout and stderr
  QString output_dir;  // absolute
  QString name;
};

// Writes the staged preset (model, dataset and output paths absolute). On failure returns
// nullopt and sets *error.
std::optional<StagedLaunch> stage_launch(const ConfigForm& form, QString* error);

// Starts `sh -c '<bin> run <preset> --name <name>; echo <exit line>'` detached, appending
// to the log. Returns the shell's pid, or 0 with *error set.
qint64 start_detached_train(const QString& bin, const StagedLaunch& launch, QString* error);

// The path after "run directory: " in the log text; "" until the engine printed it.
QString run_directory_from_log(const QString& log_text);
// The engine's exit status once the shell wrapper recorded it.
std::optional<int> exit_status_from_log(const QString& log_text);
// The last `n` non-empty lines.
QStringList last_lines(const QString& text, int n);

// The newest run directory under `root` whose status.json is not terminal and whose job is
// alive (run::liveness() == Alive); "" when none.
QString newest_alive_run(const QString& root);

}  // namespace odyssey::ui
