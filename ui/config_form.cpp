#include "config_form.h"

#include <QFileInfo>
#include <array>
#include <filesystem>

#include "async.h"
#include "config/swift_bridge.h"
#include "config/validate.h"
#include "data/dataset.h"

namespace odyssey::ui {
namespace fs = std::filesystem;
namespace {

// Keys that mean something only while another key enables them. Switching the enabling
// key off in the window stashes their values and returns them to the defaults, so the
// saved preset never carries a LoRA setting for a full fine-tune (an error for the CLI);
// switching it back on restores them.
constexpr std::array<const char*, 5> kLoraKeys{"lora_rank", "lora_alpha", "lora_dropout", "use_rslora",
                                               "target_modules"};
constexpr std::array<const char*, 5> kGaloreKeys{"galore_quantization", "galore_rank", "galore_update_proj_gap",
                                                 "galore_scale", "galore_target_modules"};
constexpr std::array<const char*, 4> kQuantKeys{"quant_method", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant",
                                                "bnb_4bit_compute_dtype"};

const TrainConfig& defaults() {
  static const TrainConfig d;
  return d;
}

std::string text_of(const TrainConfig& c, std::string_view key) {
  const FieldSpec* f = find_field(key);
  return f ? field_value_text(c, *f) : std::string();
}

// How a saved preset writes a local path, the same rule for the model, the datasets, the
// template file and the checkpoint, however each was entered (typed relative, picked with
// Browse… as absolute): relative to the preset's folder when the file lies under that folder
// or its parent (a project's presets/ beside its data/), absolute otherwise. A path that does
// not exist (a hub id, a file of another machine) is written as it is.
std::string portable(const std::string& p, const std::string& from_dir, const std::string& to_dir) {
  if (p.empty()) return p;
  std::error_code ec;
  fs::path abs(p);
  if (abs.is_relative()) abs = (from_dir.empty() ? fs::current_path(ec) : fs::path(from_dir)) / abs;
  if (ec || !fs::exists(abs, ec)) return p;
  abs = fs::weakly_canonical(abs, ec);
  const fs::path to = fs::weakly_canonical(to_dir, ec);
  if (ec) return p;
  const fs::path rel = abs.lexically_relative(to);
  int ups = 0;
  for (const auto& part : rel) ups += part == "..";
  const bool near = !rel.empty() && ups <= 1 && (ups == 0 || *rel.begin() == "..");
  return near ? rel.generic_string() : abs.string();
}

}  // namespace

ConfigForm::ConfigForm(QObject* parent) : QObject(parent), check_timer_(new QTimer(this)) {
  check_timer_->setSingleShot(true);
  check_timer_->setInterval(kCheckDelayMs);
  connect(check_timer_, &QTimer::timeout, this, &ConfigForm::start_check);
  auto q = load_embedded_quickstart();
  if (q.ok()) current_ = q.value;  // the embedded default always parses (tested in core)
  baseline_ = current_.config;
  baseline_origin_ = current_.origin;
  revalidate();
  start_model_lookup();
}

std::string ConfigForm::value_text(std::string_view key) const { return text_of(current_.config, key); }

void ConfigForm::mark_set(const std::string& key) {
  const std::string now = value_text(key);
  auto b = baseline_origin_.keys.find(key);
  if (now == text_of(defaults(), key))
    current_.origin.keys.erase(key);  // at its default: as if not written (saving leaves it out)
  else if (b != baseline_origin_.keys.end() && now == text_of(baseline_, key))
    current_.origin.keys[key] = b->second;  // back to the file's value: the file's line again
  else current_.origin.keys[key] = SourcePos{};
}

void ConfigForm::stash_dependents(const std::string& key, const TrainConfig& before) {
  auto move = [&](const auto& keys, bool on) {
    for (const char* k : keys) {
      if (!on) {
        stash_[k] = text_of(before, k);
        set_field_from_text(current_.config, k, text_of(defaults(), k), {});
      } else if (auto it = stash_.find(k); it != stash_.end()) {
        set_field_from_text(current_.config, k, it->second, {});
        stash_.erase(it);
      }
      edit_errors_.erase(k);
      mark_set(k);
    }
  };
  if (key == "tuner_type" && uses_lora(before) != uses_lora(current_.config))
    move(kLoraKeys, uses_lora(current_.config));
  if (key == "use_galore" && before.use_galore != current_.config.use_galore)
    move(kGaloreKeys, current_.config.use_galore);
  if (key == "quant_bits" && (before.quant_bits == 4) != (current_.config.quant_bits == 4))
    move(kQuantKeys, current_.config.quant_bits == 4);
}

Diagnostics ConfigForm::set_text(const std::string& key, const std::string& yaml_value) {
  const TrainConfig before = current_.config;
  Diagnostics d = set_field_from_text(current_.config, key, yaml_value, SourcePos{});
  if (odyssey::has_errors(d)) {
    edit_errors_[key] = d;
    revalidate();
    return d;
  }
  const bool had_error = edit_errors_.erase(key) > 0;
  if (current_.config == before) {
    if (had_error) revalidate();
    return d;
  }
  mark_set(key);
  stash_dependents(key, before);
  revalidate();
  if (key == "model") start_model_lookup();
  emit changed();
  emit file_changed();
  return d;
}

Diagnostics ConfigForm::load_file(const QString& path) {
  auto r = load_preset_file(path.toStdString());
  if (!r.ok()) return r.diagnostics;
  load(std::move(r.value), QFileInfo(path).absoluteFilePath());
  return r.diagnostics;
}

Diagnostics ConfigForm::import_swift(const QString& command_text) {
  auto r = import_swift_command(command_text.toStdString());
  if (!r.ok()) return r.diagnostics;
  load(std::move(r.value), QString());
  return r.diagnostics;
}

void ConfigForm::load(LoadedConfig lc, const QString& file) {
  current_ = std::move(lc);
  baseline_ = current_.config;
  baseline_origin_ = current_.origin;
  file_ = file;
  edit_errors_.clear();
  stash_.clear();
  revalidate();
  start_model_lookup();
  emit reloaded();
  emit changed();
  emit file_changed();
}

Diagnostics ConfigForm::save_file(const QString& path) {
  const std::string to_dir = QFileInfo(path).absolutePath().toStdString();
  TrainConfig c = current_.config;
  const std::string& from_dir = current_.origin.base_dir;
  c.model = portable(c.model, from_dir, to_dir);
  for (auto* list : {&c.dataset, &c.val_dataset})
    for (auto& spec : *list) {
      DatasetSpec ds;
      if (!parse_dataset_spec(spec, &ds, nullptr)) continue;
      spec = portable(ds.path, from_dir, to_dir) + (ds.samples > 0 ? "#" + std::to_string(ds.samples) : "");
    }
  c.template_file = portable(c.template_file, from_dir, to_dir);
  c.resume_from_checkpoint = portable(c.resume_from_checkpoint, from_dir, to_dir);
  Diagnostics d = save_preset_file(c, path.toStdString(), true);
  if (odyssey::has_errors(d)) return d;
  // Read it back: positions for diagnostics, and proof the file loads to the same config.
  auto r = load_preset_file(path.toStdString());
  if (!r.ok()) return r.diagnostics;
  load(std::move(r.value), QFileInfo(path).absoluteFilePath());
  return {};
}

Diagnostics ConfigForm::diagnostics_for(std::string_view key) const {
  Diagnostics out;
  for (const auto& d : diagnostics_)
    if (d.key == key) out.push_back(d);
  return out;
}

bool ConfigForm::has_errors() const { return odyssey::has_errors(diagnostics_); }

void ConfigForm::start_model_lookup() {
  const std::string model = current_.config.model;
  const std::string base = current_.origin.base_dir;
  const std::string revision = current_.config.model_revision;
  const std::string what = model + '\n' + base + '\n' + revision;
  if (what == looked_up_model_) return;  // same model, same folder: the lookup stands
  looked_up_model_ = what;
  const int gen = ++model_generation_;
  model_pending_ = true;
  model_problem_.clear();
  emit model_changed();
  run_off_gui_thread(
      this,
      [model, base, revision]() {
        ModelLookup r;
        if (model.empty()) return r;
        r.location = locate_model(model, base, revision);
        if (r.location.source != ModelLocation::NotFound) r.config = load_located_model_config(r.location);
        return r;
      },
      [this, gen](ModelLookup r) { apply_model_lookup(gen, r); });
}

void ConfigForm::apply_model_lookup(int generation, const ModelLookup& r) {
  if (generation != model_generation_) return;  // the model changed since: stale
  model_pending_ = false;
  location_ = r.location;
  model_.reset();
  model_diagnostics_.clear();
  const std::string& m = current_.config.model;
  if (m.empty()) {
    model_problem_ = tr("No model chosen.");
  } else if (r.location.source == ModelLocation::NotFound && !r.location.problem.empty()) {
    model_problem_ = QString::fromStdString(r.location.problem);
  } else if (r.location.source == ModelLocation::NotFound) {
    model_problem_ = tr("No directory with config.json at \"%1\" (relative paths resolve against %2), and no such "
                        "id in the Hugging Face or ModelScope cache.")
                         .arg(QString::fromStdString(m), current_.origin.base_dir.empty()
                                                             ? tr("the current directory")
                                                             : QString::fromStdString(current_.origin.base_dir));
  } else if (!r.config.ok()) {
    model_problem_ = QString::fromStdString(format_all(r.config.diagnostics));
  } else {
    model_ = r.config.value;
    model_problem_.clear();
  }
  if (!model_problem_.isEmpty() && !m.empty()) {
    Diagnostic d;
    // A model found whose config.json Odyssey cannot train (an architecture it does not
    // support, a malformed file) is an error: Start stays disabled. One not found (yet: the
    // name may be half typed) is a warning until Start checks the files.
    const bool found = r.location.source != ModelLocation::NotFound;
    d.severity = found ? Severity::Error : Severity::Warning;
    d.key = "model";
    d.message =
        found ? model_problem_.toStdString()
              : tr("%1 The head checks and the memory plan need its config.json.").arg(model_problem_).toStdString();
    model_diagnostics_.push_back(d);
  }
  revalidate();
  emit model_changed();
}

namespace {
bool same_check_input(const LoadedConfig& a, const LoadedConfig& b) {
  return a.config == b.config && a.origin.base_dir == b.origin.base_dir;
}
}  // namespace

void ConfigForm::revalidate() {
  Diagnostics all;
  for (const auto& [key, d] : edit_errors_) all.insert(all.end(), d.begin(), d.end());
  if (checked_ && same_check_input(*checked_, current_)) {
    all.insert(all.end(), check_diagnostics_.begin(), check_diagnostics_.end());
  } else {
    all.insert(all.end(), model_diagnostics_.begin(), model_diagnostics_.end());
    Diagnostics v = validate_config(current_, model());
    all.insert(all.end(), v.begin(), v.end());
    // A new check only for new values: a revalidation for another reason (the model lookup
    // ending) leaves the check of these values running.
    if (!check_input_ || !same_check_input(*check_input_, current_)) schedule_check();
  }
  diagnostics_ = std::move(all);
  emit diagnostics_changed();
}

void ConfigForm::schedule_check() {
  ++check_generation_;  // a check in flight saw other values: its result is dropped
  check_input_ = current_;
  check_timer_->start();
  if (!check_pending_) {
    check_pending_ = true;
    emit files_check_changed();
  }
}

void ConfigForm::recheck_files() {
  checked_.reset();
  check_input_.reset();
  revalidate();
}

void ConfigForm::start_check() {
  const int gen = check_generation_;
  run_off_gui_thread(
      this,
      [cfg = *check_input_]() {
        CheckedConfig r = check_config(cfg, true);
        // Problems inside a file name that file, not a key: give them the key that names the
        // file, so the window shows them at its field (the dataset table, the model picker).
        std::vector<std::pair<std::string, std::string>> owners;  // file or folder, key
        for (const auto* list : {&cfg.config.dataset, &cfg.config.val_dataset})
          for (const auto& spec : *list) {
            DatasetSpec ds;
            if (parse_dataset_spec(spec, &ds, nullptr))
              owners.emplace_back(data::resolve_dataset_path(ds.path, cfg.origin.base_dir),
                                  list == &cfg.config.dataset ? "dataset" : "val_dataset");
          }
        if (!r.location.path.empty()) owners.emplace_back(r.location.path, "model");
        for (auto& d : r.diagnostics) {
          if (!d.key.empty() || d.file.empty()) continue;
          std::error_code ec;
          const fs::path f = fs::weakly_canonical(d.file, ec);
          for (const auto& [owner, key] : owners) {
            const fs::path o = fs::weakly_canonical(owner, ec);
            const auto rel = f.lexically_relative(o);
            if (f == o || (!rel.empty() && *rel.begin() != "..")) {
              d.key = key;
              break;
            }
          }
        }
        return r;
      },
      [this, gen](CheckedConfig r) {
        if (gen != check_generation_) return;  // values changed since: another check follows
        checked_ = std::move(r.loaded);
        check_input_.reset();
        check_diagnostics_ = std::move(r.diagnostics);
        check_pending_ = false;
        revalidate();
        emit files_check_changed();
      });
}

}  // namespace odyssey::ui
