// ConfigForm: the single source of truth behind every page. It holds one LoadedConfig (the
// TrainConfig plus where each key was set); widgets change it only through set_text(),
// which goes through core's set_field_from_text, so the window accepts exactly what a
// preset line or `odyssey-train --set` accepts. After each change it re-validates with
// core's validate_config (diagnostics carry the key, so pages mark the field) and looks the
// model up off the GUI thread (its config.json feeds the head checks and the planner).
#pragma once

#include <QObject>
#include <QString>
#include <QTimer>
#include <map>
#include <optional>
#include <string>

#include "config/model_config.h"
#include "config/preset_io.h"

namespace odyssey::ui {

class ConfigForm : public QObject {
  Q_OBJECT
 public:
  explicit ConfigForm(QObject* parent = nullptr);

  const TrainConfig& config() const { return current_.config; }
  const LoadedConfig& loaded() const { return current_; }
  // The preset file the form was loaded from or saved to ("" for an import or a new form).
  const QString& file() const { return file_; }
  // The config as it was loaded or last saved (what `odyssey-train run FILE` would get).
  const TrainConfig& baseline() const { return baseline_; }
  bool modified() const { return current_.config != baseline_; }

  // Set one key from YAML text. On an error the config keeps its old value and the
  // error is kept for the key (the field shows it) until a valid value arrives.
  Diagnostics set_text(const std::string& key, const std::string& yaml_value);
  // The key's value as a preset writes it.
  std::string value_text(std::string_view key) const;

  // Whole-config operations. On load errors nothing changes and the diagnostics (with
  // file:line) are returned; warnings are returned too on success.
  Diagnostics load_file(const QString& path);
  Diagnostics import_swift(const QString& command_text);
  void load(LoadedConfig lc, const QString& file);
  // Writes the keys that differ from the defaults (a short preset, like the bundled
  // ones). Every local path (model, datasets, template file, checkpoint) is written by one
  // rule: relative to the preset's folder when it lies under that folder or its parent,
  // absolute otherwise.
  Diagnostics save_file(const QString& path);
  // The text save_file writes.
  std::string preset_text() const { return save_preset_text(current_.config, true); }

  const Diagnostics& diagnostics() const { return diagnostics_; }
  Diagnostics diagnostics_for(std::string_view key) const;
  bool has_errors() const;
  // Whether the last text typed for `key` was refused (the config kept its old value).
  bool has_edit_error(const std::string& key) const { return edit_errors_.count(key) != 0; }

  // The model's shape once located (nullptr while unknown or not found).
  const HfModelConfig* model() const { return model_ ? &*model_ : nullptr; }
  const ModelLocation& location() const { return location_; }
  bool model_pending() const { return model_pending_; }
  // Why the model has no shape ("" when it has one or while looking).
  const QString& model_problem() const { return model_problem_; }

  // The engine's own check (what `odyssey-train validate --check-files` and `run` run: the model
  // located and its weights' headers and tokenizer read, the chat template compiled, every
  // dataset parsed against max_bad_sample_ratio) runs off the GUI thread kCheckDelayMs after
  // the last change. Until it ends the diagnostics are the quick ones (validate_config); then
  // they are the engine's. Start is offered exactly when the engine's check passed.
  static constexpr int kCheckDelayMs = 250;
  bool files_pending() const { return check_pending_; }
  bool ready_to_start() const { return !check_pending_ && !has_errors(); }
  // Check again now (files may have changed on disk: the window calls it when it is activated).
  void recheck_files();

 signals:
  void changed();   // a value changed (an edit or a load)
  void reloaded();  // the whole config was replaced: refill every field
  void diagnostics_changed();
  void model_changed();        // model lookup finished (or started)
  void file_changed();         // file path or modified state changed
  void files_check_changed();  // the engine's check started or ended

 private:
  struct ModelLookup {
    ModelLocation location;
    Result<HfModelConfig> config;
  };
  void stash_dependents(const std::string& key, const TrainConfig& before);
  void mark_set(const std::string& key);
  void start_model_lookup();
  void apply_model_lookup(int generation, const ModelLookup& r);
  void revalidate();
  void schedule_check();
  void start_check();

  LoadedConfig current_;
  TrainConfig baseline_;
  ConfigOrigin baseline_origin_;
  QString file_;
  std::map<std::string, Diagnostics> edit_errors_;
  std::map<std::string, std::string> stash_;  // LoRA/GaLore values kept while switched off
  Diagnostics diagnostics_;
  std::optional<HfModelConfig> model_;
  Diagnostics model_diagnostics_;
  ModelLocation location_;
  QString model_problem_;
  std::string looked_up_model_;
  bool model_pending_ = false;
  int model_generation_ = 0;
  QTimer* check_timer_ = nullptr;
  int check_generation_ = 0;
  bool check_pending_ = true;
  std::optional<LoadedConfig> check_input_;  // the values the scheduled or running check sees
  std::optional<LoadedConfig> checked_;      // the values the last finished check saw
  Diagnostics check_diagnostics_;            // and what it found
};

}  // namespace odyssey::ui
