#include "commands.h"

#include <iostream>

#include "common/text.h"
#include "config/preset_io.h"
#include "config/validate.h"
#include "run/run_dir.h"
#include "run/run_lock.h"
#include "run/status_file.h"
#ifdef ODYSSEY_HAVE_TORCH
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

#include "dist/launcher.h"
#include "dist/mesh.h"
#include "dist/store_auth.h"
#include "engine/runtime_info.h"
#include "train/trainer.h"
#endif

#include <filesystem>
#include <fstream>

namespace odyssey::cli {

namespace {

const OptionSpec kSet{"set", true, true, "KEY=VALUE", "override a setting (value in YAML syntax)"};

std::string mesh_summary(const CheckedConfig& cc) {
  const TrainConfig& c = cc.loaded.config;
  const auto p = parallel_layout(c, cc.model ? cc.model->num_key_value_heads : 0);
  std::string s = "processes " + std::to_string(p.world_size) + " = data parallel " + std::to_string(p.dp) +
                  " x sequence parallel " + std::to_string(p.sp);
  if (p.sp > 1) {
    s += " (Ulysses " + std::to_string(p.ulysses) + " x ring " + std::to_string(p.ring) + ")";
    s += "; tokens per GPU per sequence " + std::to_string(c.max_length / p.sp);
  }
  return s;
}

void print_resolved(const CheckedConfig& cc, bool only_changed) {
  const TrainConfig resolved = resolve_paths(cc.loaded, cc.location);
  std::cout << "# Resolved from " << (cc.loaded.origin.file.empty() ? "defaults" : cc.loaded.origin.file) << '\n';
  std::cout << "# model: " << cc.location.describe() << '\n';
  if (cc.model)
    std::cout << "# " << cc.model->architecture << ": " << cc.model->num_hidden_layers << " layers, hidden "
              << cc.model->hidden_size << ", heads " << cc.model->num_attention_heads << " (KV "
              << cc.model->num_key_value_heads << "), " << cc.model->parameter_count() << " parameters\n";
  std::cout << "# mesh: " << mesh_summary(cc) << '\n';
  std::cout << save_preset_text(resolved, only_changed);
}

int cmd_keys(bool markdown) {
  static const TrainConfig defaults;
  if (markdown) {
    for (auto group : field_groups()) {
      std::cout << "\n### " << group << "\n\n| key | default | ms-swift | meaning |\n|---|---|---|---|\n";
      for (const auto& f : train_config_fields()) {
        if (f.group != group) continue;
        std::string help(f.help);
        for (std::size_t p; (p = help.find('|')) != std::string::npos;) help.replace(p, 1, "\\|");
        std::cout << "| `" << f.key << "` | `" << field_value_text(defaults, f) << "` | "
                  << (f.swift_name.empty() ? std::string("—") : "`--" + std::string(f.swift_name) + "`") << " | "
                  << help << " |\n";
      }
    }
    return kOk;
  }
  for (auto group : field_groups()) {
    std::cout << "# -- " << group << '\n';
    for (const auto& f : train_config_fields()) {
      if (f.group != group) continue;
      std::cout << f.key << " (default " << field_value_text(defaults, f) << ")";
      if (!f.swift_name.empty()) std::cout << "  [ms-swift --" << f.swift_name << "]";
      std::cout << "\n    " << f.help << '\n';
    }
  }
  return kOk;
}

}  // namespace

int cmd_validate(const Args& a) {
  std::vector<std::string> files = a.positional;
  if (files.empty()) files.push_back("");  // the embedded quickstart
  bool any_error = false;
  for (std::size_t i = 0; i < files.size(); ++i) {
    Result<LoadedConfig> r = files[i].empty() ? load_embedded_quickstart() : load_preset_file(files[i]);
    const std::string name = files[i].empty() ? std::string("<embedded quickstart>") : files[i];
    if (r.ok()) {
      auto d = apply_overrides(r.value, a.values("set"));
      r.diagnostics.insert(r.diagnostics.end(), d.begin(), d.end());
    }
    Diagnostics all = r.diagnostics;
    if (r.ok()) {
      auto cc = check_config(r.value, a.has("check-files"));
      all.insert(all.end(), cc.diagnostics.begin(), cc.diagnostics.end());
    }
    if (a.has("strict"))
      for (auto& d : all)
        if (d.severity == Severity::Warning) d.severity = Severity::Error;
    print_diagnostics(all);
    const bool bad = has_errors(all);
    any_error = any_error || bad;
    std::size_t warnings = 0;
    for (const auto& d : all) warnings += d.severity == Severity::Warning;
    std::cout << name << ": " << (bad ? "invalid" : "valid");
    if (warnings) std::cout << " (" << warnings << " warning" << (warnings > 1 ? "s" : "") << ")";
    std::cout << '\n';
  }
  return any_error ? kInvalidConfig : kOk;
}

int cmd_show(const Args& a) {
  if (a.has("keys")) return cmd_keys(a.has("markdown"));
  auto lc = load_config_arg(a);
  if (!lc) return kInvalidConfig;
  auto cc = check_config(*lc, false);
  print_diagnostics(cc.diagnostics);
  if (!cc.ok()) return kInvalidConfig;
  print_resolved(cc, a.has("only-changed"));
  return kOk;
}

#ifdef ODYSSEY_HAVE_TORCH
namespace {

// Writes config.yaml once (a launcher's ranks find it written; under torchrun rank 0 writes it).
// A hub id is recorded as the snapshot directory and commit it resolved to, with the id itself
// in a comment line above the keys.
bool write_config_once(const run::RunDir& dir, const TrainConfig& resolved, const ModelLocation& loc) {
  std::error_code ec;
  if (std::filesystem::exists(dir.config(), ec)) return true;
  std::ofstream out(dir.config(), std::ios::binary);
  if (!loc.hub_id.empty())
    out << "# model " << loc.hub_id << (loc.requested_revision.empty() ? "" : "@" + loc.requested_revision) << ": "
        << loc.describe() << '\n';
  out << save_preset_text(resolved, false);
  if (out.flush()) return true;
  std::cerr << "odyssey-train run: " << dir.config().string() << ": cannot be written\n";
  return false;
}

// Rank 0 decides which run directory the ranks write to and tells them through the store:
// "ok\n<dir>" or "refused <exit code>\n<why>". Every rank waits for the verdict before
// it touches the directory, so a refused directory gets not even a rank log.
struct RunDirVerdict {
  std::string dir;
  int refused_code = 0;                // kOk: go on
  std::optional<run::RunClaim> claim;  // rank 0's ownership, held for the run's life
};

RunDirVerdict decide_run_dir(const Args& a, const CheckedConfig& cc, const TrainConfig& resolved,
                             const dist::DistEnv& env, c10d::Store& store, pid_t launcher_pid) {
  // One key per torchrun restart: an elastic restart must not read the last attempt's verdict.
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const std::string key = std::string("odyssey/run_dir/") + (restart ? restart : "0");
  RunDirVerdict v;
  v.dir = a.value("run-dir");
  if (env.rank != 0) {
    const auto bytes = store.get(key);
    const std::string text(bytes.begin(), bytes.end());
    store.add(key + "/read", 1);
    const std::size_t nl = text.find('\n');
    const std::string head = text.substr(0, nl), body = nl == std::string::npos ? std::string() : text.substr(nl + 1);
    if (text::starts_with(head, "refused")) {
      v.refused_code = std::atoi(head.c_str() + 8);
      std::cerr << "odyssey-train run: rank " << env.rank << ": rank 0 refused the run directory: " << body << '\n';
    } else if (v.dir.empty()) {
      v.dir = body;
    }
    return v;
  }
  std::string error;
  if (v.dir.empty()) {
    std::string name = a.value("name");
    if (name.empty())
      name = cc.loaded.origin.file.empty() ? "run" : std::filesystem::path(cc.loaded.origin.file).stem().string();
    auto rd = run::create_run_dir(resolved.output_dir, name);
    if (rd.ok()) v.dir = rd.value.root().string();
    else error = format_all(rd.diagnostics);
    v.refused_code = rd.ok() ? kOk : kFailure;
  }
  if (error.empty()) {
    // --run-dir names a directory that must not hold another run: a misuse is a usage error.
    auto claim = run::claim_run_dir(run::RunDir(v.dir), launcher_pid);
    if (claim.ok()) v.claim.emplace(std::move(claim.value));
    else error = format_all(claim.diagnostics);
    if (!claim.ok() && v.refused_code == kOk) v.refused_code = a.has("run-dir") ? kUsage : kFailure;
  }
  if (error.empty() && !write_config_once(run::RunDir(v.dir), resolved, cc.location)) {
    error = v.dir + "/config.yaml: cannot be written";
    v.refused_code = kFailure;
  }
  if (error.empty()) {
    store.set(key, "ok\n" + v.dir);
    if (!a.has("run-dir")) std::cout << "\nrun directory: " << v.dir << "\n" << std::flush;
    return v;
  }
  std::cerr << "odyssey-train run: " << error << '\n';
  store.set(key, "refused " + std::to_string(v.refused_code) + "\n" + error);
  // The store may live in this process (torchrun without an agent store): the others must
  // read the verdict before it goes away with us.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (store.add(key + "/read", 0) < env.world - 1 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return v;
}

// A rank of a parallel run, started by odyssey-train's launcher (--run-dir, the directory
// its launcher owns) or by torchrun (rank 0 creates the run directory, or claims the one
// --run-dir names, and tells the others through the store).
int run_rank(const Args& a, const CheckedConfig& cc, const TrainConfig& resolved, const dist::DistEnv& env) {
  train::TrainerOptions to;
  to.env = env;
  to.preset_base_dir = cc.loaded.origin.base_dir;
  if (a.has("no-token-cache")) to.token_cache_dir = "off";
  if (const char* lp = std::getenv("ODYSSEY_LAUNCHER_PID")) to.launcher_pid = std::atoi(lp);
  // ODYSSEY_COMM_TIMEOUT_S bounds every wait on a peer, the first one too: reaching the
  // rendezvous store (5 minutes when unset, for masters that start late).
  std::chrono::milliseconds rendezvous{std::chrono::minutes(5)};
  if (const char* t = std::getenv("ODYSSEY_COMM_TIMEOUT_S"); t && std::atoll(t) > 0) {
    to.comm_timeout = std::chrono::milliseconds(std::atoll(t) * 1000);
    rendezvous = to.comm_timeout;
  }
  try {
    to.store = dist::connect_store(env, rendezvous);
  } catch (const std::exception& e) {
    std::cerr << "odyssey-train: " << e.what() << '\n';
    return kFailure;
  }
  RunDirVerdict v;
  try {
    v = decide_run_dir(a, cc, resolved, env, *to.store, static_cast<pid_t>(to.launcher_pid));
  } catch (const c10::Error& e) {
    std::cerr << "odyssey-train run: rank " << env.rank
              << ": no word from rank 0 about the run directory: " << e.what_without_backtrace() << '\n';
    return kFailure;
  }
  if (v.refused_code != kOk) return v.refused_code;
  return train::run_training(resolved, run::RunDir(v.dir), to) == 0 ? kOk : kFailure;
}

int int_option(const Args& a, const char* name, const char* slurm, int fallback) {
  const std::string v = a.value(name);
  if (!v.empty()) return std::atoi(v.c_str());
  if (slurm)
    if (const char* s = std::getenv(slurm)) return std::atoi(s);
  return fallback;
}

}  // namespace
#endif

int cmd_run(const Args& a) {
  auto lc = load_config_arg(a);
  if (!lc) return kInvalidConfig;
  auto cc = check_config(*lc, true);
  print_diagnostics(cc.diagnostics);
  if (!cc.ok()) {
    std::cerr << "odyssey-train: the configuration has errors; nothing was started\n";
    return kInvalidConfig;
  }
  const bool launched_rank = a.has("run-dir");
  if (!launched_rank) print_resolved(cc, false);
#ifndef ODYSSEY_HAVE_TORCH
  std::cout << "\nThe configuration is valid and every file it names exists.\n";
  std::cerr << "odyssey-train run: this build has no LibTorch, so it cannot train (configure with Torch)\n";
  return kFailure;
#else
  const TrainConfig resolved = resolve_paths(cc.loaded, cc.location);
  if (cc.location.source != ModelLocation::Directory && cc.location.source != ModelLocation::HuggingFaceCache &&
      cc.location.source != ModelLocation::ModelScopeCache) {
    std::cerr << "odyssey-train run: model " << text::quoted(resolved.model) << ": " << cc.location.describe()
              << "; training needs a model directory with weights and tokenizer.json\n";
    return kInvalidConfig;
  }
  std::string env_error;
  const dist::DistEnv env = dist::read_dist_env(&env_error);
  if (!env_error.empty()) {
    std::cerr << "odyssey-train run: " << env_error << '\n';
    return kInvalidConfig;
  }
  if (env.from_environment && env.world > 1) return run_rank(a, cc, resolved, env);
  if (launched_rank) {
    std::cerr << "odyssey-train run: --run-dir is only for the ranks of a parallel run (RANK and WORLD_SIZE set, "
                 "WORLD_SIZE above 1); this process is not one\n";
    return kUsage;
  }
  const auto nnodes = static_cast<int>(resolved.nnodes);
  const int node_rank = int_option(a, "node-rank", "SLURM_NODEID", 0);
  const auto nproc = static_cast<int>(resolved_nproc_per_node(resolved));
  if (node_rank < 0 || node_rank >= nnodes) {
    std::cerr << "odyssey-train run: --node-rank " << node_rank << " must be below nnodes " << nnodes << '\n';
    return kInvalidConfig;
  }
  if (nnodes > 1)  // the store listens on the network: every node needs the job's secret
    if (const std::string why = dist::multi_node_secret_problem(); !why.empty()) {
      std::cerr << "odyssey-train run: " << why << '\n';
      return kUsage;
    }
  std::string name = a.value("name");
  if (name.empty()) {
    const std::string& file = cc.loaded.origin.file;
    name = file.empty() ? std::string("quickstart") : std::filesystem::path(file).stem().string();
  }
  auto rd = run::create_run_dir(resolved.output_dir, name);
  if (!rd.ok()) {
    print_diagnostics(rd.diagnostics);
    return kFailure;
  }
  // This process owns the new directory for the run's whole life: it trains, or it is the
  // launcher whose ranks recognise their parent as the owner.
  auto claim = run::claim_run_dir(rd.value);
  if (!claim.ok()) {
    print_diagnostics(claim.diagnostics);
    return kFailure;
  }
  if (!write_config_once(rd.value, resolved, cc.location)) return kFailure;
  std::cout << "\nrun directory: " << rd.value.root().string() << "\n" << std::flush;
  if (nproc * nnodes > 1) {
    dist::LaunchOptions lo;
    std::error_code ec;
    lo.executable = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    lo.arguments = {"run", rd.value.config().string(), "--run-dir", rd.value.root().string()};
    if (a.has("no-token-cache")) lo.arguments.push_back("--no-token-cache");
    lo.nproc = nproc;
    lo.nnodes = nnodes;
    lo.node_rank = node_rank;
    lo.master_addr = a.value("master-addr").empty()
                         ? (std::getenv("MASTER_ADDR") ? std::getenv("MASTER_ADDR") : "127.0.0.1")
                         : a.value("master-addr");
    lo.master_port = int_option(a, "master-port", nullptr, nnodes > 1 ? 29500 : 0);
    lo.use_gpus = resolved.device != "cpu" && torch::cuda::is_available();
    for (auto id : resolved.gpu_ids) lo.gpu_ids.push_back(static_cast<long>(id));
    lo.run_dir = rd.value.root();
    if (const char* t = std::getenv("ODYSSEY_STOP_TIMEOUT_S")) lo.stop_timeout_s = std::atof(t);
    return dist::launch(lo) == 0 ? kOk : kFailure;
  }
  train::TrainerOptions to;
  to.preset_base_dir = cc.loaded.origin.base_dir;
  if (a.has("no-token-cache")) to.token_cache_dir = "off";
  if (train::run_training(resolved, rd.value, to) == 0) return kOk;
  // The trainer's log goes to stdout; a failure also goes to stderr, as every failure does.
  const auto st = run::StatusFile(rd.value.status()).read();
  std::cerr << "odyssey-train run: the run failed"
            << (st.ok() && !st.value.reason.empty() ? ": " + run::cut_line(text::trim(st.value.reason), 2000)
                                                    : std::string())
            << " (" << rd.value.status().string() << ")\n";
  return kFailure;
#endif
}

int cmd_env(const Args&) {
  std::cout << "odyssey-train " << ODYSSEY_VERSION << '\n';
  std::cout << "data directory: " << data_dir() << '\n';
#ifdef ODYSSEY_HAVE_TORCH
  std::cout << torch_runtime_info();
#else
  std::cout << "LibTorch: not linked (built with ODYSSEY_WITH_TORCH=OFF or Torch not found)\n";
#endif
  return kOk;
}

const std::vector<Command>& commands() {
  static const std::vector<Command> table = [] {
    std::vector<Command> t;
    t.push_back({{"run",
                  "run [PRESET] [--set KEY=VALUE]...",
                  "Train from a preset (the embedded quickstart when none is given).",
                  "Loads the preset, applies --set overrides, checks every setting and that the model\n"
                  "and datasets exist, prints the resolved configuration, creates a run directory\n"
                  "<output_dir>/<time>-<name>/ (config.yaml, events.jsonl, status.json, logs/,\n"
                  "checkpoints/) and trains on one GPU or the CPU (docs/training.md), or, with more\n"
                  "than one process (nproc_per_node, gpu_ids, nnodes), launches one rank per GPU and\n"
                  "supervises them (docs/parallel.md). Under torchrun each process is one rank.\n"
                  "SIGINT/SIGTERM: the current step finishes, a checkpoint is written, exit 0.\n\n"
                  "Exit codes: 0 completed or stopped on request, 1 the run failed (status.json says\n"
                  "why), 2 a usage error (--run-dir outside a parallel run, or naming a directory\n"
                  "that holds another run), 3 the configuration is invalid.",
                  {kSet,
                   {"name", true, false, "NAME", "run name (default: the preset's file name)"},
                   {"no-token-cache", false, false, "", "tokenize again instead of using the token cache"},
                   {"node-rank", true, false, "K", "this machine's index below nnodes (default: SLURM_NODEID, or 0)"},
                   {"master-addr", true, false, "HOST", "node 0's address (default: MASTER_ADDR, or loopback)"},
                   {"master-port", true, false, "PORT", "the rendezvous port (default: a free one; 29500 multi-node)"},
                   {"run-dir", true, false, "DIR",
                    "a parallel run's rank: the run directory to write to (refused when it holds another run)"}},
                  0,
                  1},
                 cmd_run});
    t.push_back({{"validate",
                  "validate [PRESET...] [--set KEY=VALUE]... [--check-files] [--strict]",
                  "Check presets: syntax, types, ranges, unknown keys and cross-field rules.",
                  "Without --check-files a model or dataset missing on this machine is a warning\n"
                  "(presets travel between machines); with it, an error, as for 'run'.",
                  {kSet,
                   {"check-files", false, false, "", "require the model and dataset files to exist"},
                   {"strict", false, false, "", "treat warnings as errors"}},
                  0,
                  -1},
                 cmd_validate});
    t.push_back({{"show",
                  "show [PRESET] [--set KEY=VALUE]... [--only-changed] | show --keys",
                  "Print the resolved configuration as YAML (paths made absolute, mesh derived).",
                  "",
                  {kSet,
                   {"only-changed", false, false, "", "print only settings that differ from the defaults"},
                   {"keys", false, false, "", "list every key with its default, ms-swift name and meaning"},
                   {"markdown", false, false, "", "with --keys: as the Markdown tables of docs/config.md"}},
                  0,
                  1},
                 cmd_show});
    t.push_back({plan_spec(), cmd_plan});
    t.push_back({import_swift_spec(), cmd_import_swift});
    t.push_back({export_swift_spec(), cmd_export_swift});
    t.push_back({tokenize_spec(), cmd_tokenize});
    t.push_back({template_spec(), cmd_template});
    t.push_back({export_spec(), cmd_export});
    t.push_back({score_spec(), cmd_score});
    t.push_back({generate_spec(), cmd_generate});
    t.push_back({chat_spec(), cmd_chat});
    t.push_back({tensorboard_spec(), cmd_tensorboard});
    t.push_back({selftest_spec(), cmd_selftest});
    t.push_back(
        {{"env", "env", "Print the build and runtime environment (LibTorch, CUDA devices).", "", {}, 0, 0}, cmd_env});
    return t;
  }();
  return table;
}

}  // namespace odyssey::cli
