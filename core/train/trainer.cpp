#include "train/trainer.h"

#include <ATen/DeviceAccelerator.h>
#include <c10/util/Exception.h>
#if __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#define ODYSSEY_HAVE_CUDA_RUNTIME 1
#endif
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "config/model_config.h"
#include "data/dataset.h"
#include "data/packing.h"
#include "data/token_cache.h"
#include "data/tokenize.h"
#include "dist/mesh.h"
#include "dist/sequence_parallel.h"
#include "engine/runtime_info.h"
#include "model/weights.h"
#include "planner/memory_planner.h"
#include "run/event_writer.h"
#include "run/status_file.h"
#include "tokenizer/tokenizer.h"
#include "train/batch.h"
#include "train/checkpoint_io.h"
#include "train/lora.h"
#include "train/step_engine.h"

#ifndef ODYSSEY_VERSION
#define ODYSSEY_VERSION "dev"
#endif

namespace odyssey::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::atomic<int> g_stop_signals{0};

extern "C" void on_stop_signal(int) {
  // The first signal asks for a graceful stop; the second restores the default action so
  // that a third (or a launcher's kill) ends the process at once.
  if (g_stop_signals.fetch_add(1) >= 1) {
    std::signal(SIGTERM, SIG_DFL);
    std::signal(SIGINT, SIG_DFL);
  }
}

// Failures that end the run with a reason (bad data, I/O), as opposed to bugs.
struct RunFailure {
  std::string reason;
};

// Everything printed goes to logs/rank-N.log, and on rank 0 to stdout too.
class Log {
 public:
  Log(const fs::path& file, bool echo) : out_(file, std::ios::app), echo_(echo) {}
  void line(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (echo_) std::cout << s << '\n' << std::flush;
    if (out_) out_ << s << '\n' << std::flush;
  }

 private:
  std::mutex mu_;
  std::ofstream out_;
  bool echo_;
};

// The events file: written by rank 0 only; other ranks' writes go nowhere.
class Events {
 public:
  explicit Events(std::optional<run::EventWriter> w) : w_(std::move(w)) {}
  template <typename E>
  void write(const E& e) {
    if (w_) w_->write(e);
  }
  void set_start(Clock::time_point t) {
    if (w_) w_->set_start(t);
  }

 private:
  std::optional<run::EventWriter> w_;
};

std::string fixed(double v, int digits) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(digits);
  o << v;
  return o.str();
}

// MemAvailable of /proc/meminfo (what can be allocated without swapping); 0 when unknown.
std::int64_t available_host_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

std::string gib(std::int64_t bytes) { return fixed(static_cast<double>(bytes) / double(std::int64_t{1} << 30), 2) + " GiB"; }

// Memory of this process's device: CUDA allocator statistics, or the process RSS on the CPU.
struct MemoryProbe {
  torch::Device device = torch::kCPU;
  void reset_peak() const {
    if (device.is_cuda()) at::accelerator::resetPeakStats(device.index());
  }
  run::RankMemory read() const {
    run::RankMemory m;
    if (device.is_cuda()) {
      const auto s = at::accelerator::getDeviceStats(device.index());
      m.vram_allocated_bytes = s.allocated_bytes[0].current;
      m.vram_peak_bytes = s.allocated_bytes[0].peak;
      m.vram_reserved_bytes = s.reserved_bytes[0].current;
      return m;
    }
    // CPU: resident set size (current and high-water mark) from /proc.
    std::ifstream status("/proc/self/status");
    std::string key;
    std::int64_t kb = 0;
    std::string unit;
    while (status >> key >> kb >> unit) {
      if (key == "VmRSS:") m.vram_allocated_bytes = m.vram_reserved_bytes = kb * 1024;
      if (key == "VmHWM:") m.vram_peak_bytes = kb * 1024;
    }
    return m;
  }
};

// Refreshes status.json every kHeartbeatPeriodS from a thread of its own.
class Heartbeat {
 public:
  Heartbeat(run::StatusFile file, run::RunStatus initial) : file_(std::move(file)), status_(std::move(initial)) {
    file_.write(status_);
    thread_ = std::thread([this] { loop(); });
  }
  ~Heartbeat() { finish(std::nullopt); }
  void update(std::int64_t step, std::int64_t total, run::RunState state = run::RunState::Running) {
    std::lock_guard<std::mutex> lock(mu_);
    status_.step = step;
    status_.total_steps = total;
    status_.state = state;
  }
  // Stops the thread; writes the terminal state when given.
  void finish(std::optional<run::RunStatus> terminal) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (terminal) {
      terminal->heartbeat = run::unix_now();
      file_.write(*terminal);
    }
  }
  run::RunStatus snapshot() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopped_) {
      cv_.wait_for(lock, std::chrono::duration<double>(run::kHeartbeatPeriodS));
      if (stopped_) break;
      status_.heartbeat = run::unix_now();
      const run::RunStatus copy = status_;
      lock.unlock();
      file_.write(copy);
      lock.lock();
    }
  }
  run::StatusFile file_;
  run::RunStatus status_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::thread thread_;
};

// Total memory of a CUDA device (0 when unknown: the planner then assumes an H200).
std::int64_t device_memory_bytes(const torch::Device& d) {
#ifdef ODYSSEY_HAVE_CUDA_RUNTIME
  if (d.is_cuda()) return static_cast<std::int64_t>(at::cuda::getDeviceProperties(d.index())->totalGlobalMem);
#else
  (void)d;
#endif
  return 0;
}

// gpu_memory_budget_gib on a GPU: the caching allocator may hold the budget less what the
// planner counts outside it (the CUDA context), so the process stays within the budget the
// planner planned for. Returns the line for the log, "" without a budget.
std::string apply_memory_budget(const TrainConfig& c, const torch::Device& d) {
  if (c.gpu_memory_budget_gib <= 0 || !d.is_cuda()) return "";
  const std::int64_t total = device_memory_bytes(d);
  const std::int64_t budget = c.gpu_memory_budget_gib * planner::kGiB;
  if (total <= 0 || budget >= total)
    return "gpu_memory_budget_gib " + std::to_string(c.gpu_memory_budget_gib) + " is not below the GPU's " +
           fixed(static_cast<double>(total) / static_cast<double>(planner::kGiB), 1) + " GiB: no cap";
  const std::int64_t pool = std::max<std::int64_t>(budget - planner::kCudaContextBytes, budget / 2);
#ifdef ODYSSEY_HAVE_CUDA_RUNTIME
  (void)torch::empty({1}, torch::TensorOptions().device(d));  // the allocator exists once the device is used
  c10::cuda::CUDACachingAllocator::setMemoryFraction(static_cast<double>(pool) / static_cast<double>(total),
                                                     static_cast<c10::DeviceIndex>(d.index()));
#endif
  return "gpu_memory_budget_gib " + std::to_string(c.gpu_memory_budget_gib) + ": the allocator holds at most " +
         fixed(static_cast<double>(pool) / static_cast<double>(planner::kGiB), 2) + " GiB of the GPU's " +
         fixed(static_cast<double>(total) / static_cast<double>(planner::kGiB), 1) + " (the rest is the CUDA context)";
}

std::string device_name(const torch::Device& d) {
#ifdef ODYSSEY_HAVE_CUDA_RUNTIME
  if (d.is_cuda()) return at::cuda::getDeviceProperties(d.index())->name;
#endif
  return d.str();
}

torch::Device pick_device(const TrainConfig& c, const dist::DistEnv& env) {
  if (c.device == "cuda" && !torch::cuda::is_available())
    throw RunFailure{"device: cuda was asked for, but no CUDA device is visible"};
  if (c.device == "cpu" || !torch::cuda::is_available()) return torch::kCPU;
  if (env.world > 1) {
    // One process per GPU: the launcher (or torchrun) narrowed CUDA_VISIBLE_DEVICES to the
    // chosen GPUs; this rank takes the LOCAL_RANK-th.
    if (env.local_rank >= static_cast<int>(torch::cuda::device_count()))
      throw RunFailure{"LOCAL_RANK " + std::to_string(env.local_rank) + " has no GPU: " +
                       std::to_string(torch::cuda::device_count()) + " CUDA device(s) are visible to this process"};
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  }
  // One process: the first of gpu_ids (CUDA ordinals as this process sees them), else 0.
  const std::int64_t index = c.gpu_ids.empty() ? 0 : c.gpu_ids.front();
  if (index >= static_cast<std::int64_t>(torch::cuda::device_count()))
    throw RunFailure{"gpu_ids: GPU " + std::to_string(index) + " is not visible (" +
                     std::to_string(torch::cuda::device_count()) + " CUDA device(s); CUDA_VISIBLE_DEVICES narrows them)"};
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

torch::Dtype pick_dtype(const TrainConfig& c, const torch::Device& d) {
  if (c.torch_dtype == "float32") return torch::kFloat32;
  if (c.torch_dtype == "float16") return torch::kFloat16;
  if (c.torch_dtype == "bfloat16") return torch::kBFloat16;
  return d.is_cuda() ? torch::kBFloat16 : torch::kFloat32;  // auto
}

std::string dtype_name(torch::Dtype t) {
  if (t == torch::kBFloat16) return "bfloat16";
  if (t == torch::kFloat16) return "float16";
  return "float32";
}

// attn_impl → the SDPA backend put first. auto prefers cuDNN (1.7x flash at 32K on an
// H200, docs/model.md); rows of several samples use varlen flash whatever this says.
model::AttentionBackend attention_backend_for(const std::string& impl) {
  if (impl == "flash_attn") return model::AttentionBackend::Flash;
  if (impl == "sdpa") return model::AttentionBackend::Auto;
  if (impl == "eager") return model::AttentionBackend::Math;
  return model::AttentionBackend::CuDNN;
}

// The memory policy of a run (docs/training.md: activation checkpointing, tiled MLP, kept
// attention): as configured, or the memory planner's choice for auto on a GPU.
struct MemoryPolicy {
  std::vector<bool> checkpoint;      // layers recomputed in backward
  std::vector<bool> keep_attention;  // checkpointed layers keeping their attention output
  std::vector<bool> mlp_recompute;   // layers not checkpointed whose MLP recomputes gate and up
  std::vector<bool> mlp_offload;     // layers not checkpointed whose MLP keeps gate and up on the host
  std::int64_t mlp_offload_lead = 1;
  std::int64_t mlp_tile = 0;
  std::string why;
};

MemoryPolicy memory_policy(const TrainConfig& c, const HfModelConfig& m, const torch::Device& device) {
  const auto n = static_cast<std::size_t>(m.num_hidden_layers);
  CheckpointPolicy policy;
  parse_checkpoint_policy(c.activation_checkpointing, &policy);
  std::optional<MemoryPlan> plan;
  if (device.is_cuda() &&
      (policy.kind == CheckpointPolicy::Auto || c.mlp_tile_tokens == 0 || c.keep_attention == "auto")) {
    PlannerOptions po;
    po.gpu_memory_bytes = device_memory_bytes(device);
    plan = plan_memory(c, m, po);
  }
  MemoryPolicy mp;
  mp.mlp_tile = c.mlp_tile_tokens > 0 ? c.mlp_tile_tokens : plan ? plan->mlp_tile_tokens : 0;
  mp.checkpoint.assign(n, false);
  switch (policy.kind) {
    case CheckpointPolicy::None: mp.why = "none (activation_checkpointing: none)"; break;
    case CheckpointPolicy::All:
      mp.checkpoint.assign(n, true);
      mp.why = "every layer (activation_checkpointing: all)";
      break;
    case CheckpointPolicy::EveryK:
      for (std::size_t i = 0; i < n; i += static_cast<std::size_t>(policy.every)) mp.checkpoint[i] = true;
      mp.why = "every " + std::to_string(policy.every) + "-th layer (activation_checkpointing: every:" + std::to_string(policy.every) + ")";
      break;
    case CheckpointPolicy::Auto:
      if (!plan) {
        mp.why = "none (auto on the CPU: memory is not the limit)";
        break;
      }
      for (std::size_t i = 0; i < n; ++i) mp.checkpoint[i] = checkpoints_layer(*plan, static_cast<std::int64_t>(i));
      mp.why = std::to_string(plan->checkpointed_layers) + " of " + std::to_string(n) +
               " layers (auto: the memory planner's choice for this GPU, predicted peak " +
               gib(plan->peak_bytes) + ")";
      break;
  }
  // Kept attention: every checkpointed layer (all), none, or the last ones the plan keeps
  // (auto; the plan's checkpointed layers are the engine's when both are auto, and otherwise
  // the plan was made for the configured policy).
  mp.keep_attention.assign(n, false);
  std::int64_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool keep = c.keep_attention == "all" ? mp.checkpoint[i]
                      : c.keep_attention == "auto" && plan ? keeps_attention(*plan, static_cast<std::int64_t>(i))
                                                           : false;
    mp.keep_attention[i] = keep && mp.checkpoint[i];
    kept += mp.keep_attention[i] ? 1 : 0;
  }
  if (kept > 0) mp.why += "; " + std::to_string(kept) + " of them keep their attention output";
  // MLP offload and recomputation: the planner's choice under auto (the plan's layers are the
  // engine's then).
  mp.mlp_recompute.assign(n, false);
  mp.mlp_offload.assign(n, false);
  std::int64_t mlps = 0, offloaded = 0;
  if (policy.kind == CheckpointPolicy::Auto && plan) {
    for (std::size_t i = 0; i < n; ++i) {
      const auto layer = static_cast<std::int64_t>(i);
      mp.mlp_recompute[i] = !mp.checkpoint[i] && recomputes_mlp(*plan, layer);
      mp.mlp_offload[i] = !mp.checkpoint[i] && offloads_mlp(*plan, layer);
      mlps += mp.mlp_recompute[i] ? 1 : 0;
      offloaded += mp.mlp_offload[i] ? 1 : 0;
    }
    mp.mlp_offload_lead = planner::mlp_offload_lead(offloaded);
  }
  if (offloaded > 0)
    mp.why += "; " + std::to_string(offloaded) +
              " other layers keep their MLP's gate and up in pinned host memory until backward (offload_activations)";
  if (mlps > 0)
    mp.why += "; " + std::to_string(mlps) + " other layers recompute their MLP's gate and up in backward";
  if (mp.mlp_tile > 0) mp.why += "; tiled MLP, " + std::to_string(mp.mlp_tile) + " tokens per tile";
  return mp;
}

struct Data {
  std::vector<data::TokenizedSample> train, val;
  std::vector<std::vector<std::size_t>> items;  // each item: sample indices of train (one, or a packed bin)
  std::string fingerprint;
  std::int64_t train_tokens = 0;
};

data::LoadOptions load_options(const TrainConfig& c, const std::string& base_dir) {
  data::LoadOptions o;
  o.base_dir = base_dir;
  o.max_bad_sample_ratio = c.max_bad_sample_ratio;
  o.seed = static_cast<std::uint64_t>(c.seed);
  return o;
}

void report_diagnostics(const Diagnostics& d, Log& log, Events& events, const std::string& code) {
  std::size_t shown = 0;
  for (const auto& x : d) {
    if (x.severity == Severity::Error) continue;
    log.line((x.severity == Severity::Warning ? "warning: " : "note: ") + x.format());
    if (x.severity == Severity::Warning && shown++ < 20) {
      run::WarningEvent w;
      w.code = code;
      w.message = x.format();
      events.write(w);
    }
  }
}

Data prepare_data(const TrainConfig& c, const Tokenizer& tok, const ChatTemplate& tmpl, const TrainerOptions& opt,
                  Log& log, Events& events) {
  data::TokenizeOptions to;
  to.max_length = c.max_length;
  to.truncation = data::parse_truncation(c.truncation_strategy).value_or(data::Truncation::Delete);
  to.system = c.system;
  data::TokenCacheOptions co;
  co.enabled = opt.token_cache_dir != "off";
  if (co.enabled) co.dir = opt.token_cache_dir;
  const data::LoadOptions lo = load_options(c, opt.preset_base_dir);
  auto prepared = data::load_tokenized(c.dataset, lo, tok, tmpl, to, co);
  if (!prepared.ok()) throw RunFailure{"the training data could not be used:\n" + format_all(prepared.diagnostics)};
  report_diagnostics(prepared.diagnostics, log, events, "data");
  Data d;
  const auto& P = prepared.value;
  for (const auto& f : P.files) log.line("data: " + data::summary(f));
  log.line("tokenize: " + data::summary(P.report) + (P.from_cache ? " (from the cache " + P.cache_file + ")" : ""));
  d.fingerprint = P.cache_key;
  std::vector<data::TokenizedSample> all = P.samples;
  if (!c.val_dataset.empty()) {
    auto v = data::load_tokenized(c.val_dataset, lo, tok, tmpl, to, co);
    if (!v.ok()) throw RunFailure{"the validation data could not be used:\n" + format_all(v.diagnostics)};
    report_diagnostics(v.diagnostics, log, events, "data");
    for (const auto& f : v.value.files) log.line("val data: " + data::summary(f));
    d.val = v.value.samples;
    d.fingerprint += "+" + v.value.cache_key;
  } else if (c.split_dataset_ratio > 0) {
    auto split = data::split_validation(std::move(all), c.split_dataset_ratio, static_cast<std::uint64_t>(c.seed));
    if (!split.ok()) throw RunFailure{format_all(split.diagnostics)};
    all = std::move(split.value.train);
    d.val = std::move(split.value.val);
    log.line("validation split: " + std::to_string(d.val.size()) + " samples held out (split_dataset_ratio " +
             fixed(c.split_dataset_ratio, 3) + ")");
  }
  d.train = std::move(all);
  if (d.train.empty()) throw RunFailure{"no training sample is left after tokenization (see the report above)"};
  std::vector<std::int32_t> lengths;
  for (const auto& s : d.train) {
    lengths.push_back(static_cast<std::int32_t>(s.ids.size()));
    d.train_tokens += static_cast<std::int64_t>(s.ids.size());
  }
  if (c.packing) {
    d.items = data::pack_bins(lengths, c.max_length);
    const auto pr = data::packing_report(lengths, d.items, c.max_length);
    log.line("packing: " + std::to_string(pr.samples) + " samples into " + std::to_string(pr.bins) + " bins of " +
             std::to_string(c.max_length) + " tokens, " + fixed(100.0 * pr.efficiency, 1) + "% full");
  } else {
    for (std::size_t i = 0; i < d.train.size(); ++i) d.items.push_back({i});
  }
  return d;
}

PackedRow row_of(const std::vector<const data::TokenizedSample*>& samples) {
  const data::Row r = data::make_row(samples);
  return make_packed_row(r.input_ids, r.labels, r.position_ids, r.cu_seqlens);
}

std::string oom_advice(const TrainConfig& c, const std::vector<bool>& ckpt) {
  std::vector<std::string> tips;
  const bool all_ckpt = !ckpt.empty() && std::all_of(ckpt.begin(), ckpt.end(), [](bool b) { return b; });
  if (!all_ckpt) tips.push_back("activation_checkpointing: all");
  if (c.per_device_train_batch_size > 1)
    tips.push_back("per_device_train_batch_size: 1 (with gradient_accumulation_steps x" +
                   std::to_string(c.per_device_train_batch_size) + ")");
  tips.push_back("a smaller max_length (now " + std::to_string(c.max_length) + ")");
  if (c.tuner_type == "full") tips.push_back("tuner_type: lora, or use_galore / zero_stage 2");
  tips.push_back("sequence_parallel_size > 1 over several GPUs");
  if (c.gpu_memory_budget_gib > 0)
    tips.push_back("a larger gpu_memory_budget_gib (now " + std::to_string(c.gpu_memory_budget_gib) + ")");
  std::string s = "settings that reduce memory: ";
  for (std::size_t i = 0; i < tips.size(); ++i) s += (i ? "; " : "") + tips[i];
  return s + " (odyssey-train plan shows the predicted peak)";
}

}  // namespace

void request_stop() { g_stop_signals.fetch_add(1); }

int run_training(const TrainConfig& c, const run::RunDir& dir, const TrainerOptions& opt) {
  const auto t0 = Clock::now();
  const dist::DistEnv& env = opt.env;
  const bool main_rank = env.rank == 0;
  // Ranks of one host share its cores: each would otherwise start one intra-op thread per core
  // and the host-side work (CPU ranks, ZeRO offload's update) would thrash.
  if (env.local_world > 1)
    torch::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / env.local_world));
  g_stop_signals.store(0);
  if (opt.install_signal_handlers) {
    std::signal(SIGTERM, on_stop_signal);
    std::signal(SIGINT, on_stop_signal);
  }
  std::error_code ec;
  fs::create_directories(dir.logs_dir(), ec);
  fs::create_directories(dir.checkpoints_dir(), ec);
  Log log(dir.rank_log(env.rank), main_rank);
  std::optional<run::EventWriter> writer;
  if (main_rank) {
    auto opened = run::EventWriter::open(dir.events());
    if (!opened.ok()) {
      std::cerr << format_all(opened.diagnostics) << '\n';
      return 1;
    }
    writer.emplace(std::move(opened.value));
  }
  Events events(std::move(writer));
  events.set_start(t0);
  run::RunStatus st;
  st.state = run::RunState::Running;
  st.run_id = dir.run_id();
  st.pid = ::getpid();
  st.launcher_pid = opt.launcher_pid;
  st.hostname = run::this_hostname();
  st.started_at = run::unix_now();
  st.heartbeat = st.started_at;
  // status.json is rank 0's; the launcher writes it last when a rank fails.
  std::optional<Heartbeat> hb;
  if (main_rank) hb.emplace(run::StatusFile(dir.status()), st);
  struct HeartbeatRef {
    std::optional<Heartbeat>& h;
    void update(std::int64_t s, std::int64_t t, run::RunState state = run::RunState::Running) {
      if (h) h->update(s, t, state);
    }
    run::RunStatus snapshot() { return h ? h->snapshot() : run::RunStatus{}; }
    void finish(const run::RunStatus& f) {
      if (h) h->finish(f);
    }
  } heartbeat{hb};
  dist::Mesh mesh = dist::single_process_mesh();

  std::int64_t step = 0, total_steps = 0;
  std::vector<bool> ckpt_layers;
  MemoryProbe probe;
  std::optional<StepEngine> engine;
  CheckpointContents contents;
  TrainerState state;
  std::optional<std::int64_t> last_saved;

  auto stage = [&](const std::string& name, const std::string& message) {
    run::StageEvent e;
    e.stage = name;
    e.message = message;
    events.write(e);
    log.line("[" + name + "] " + message);
  };
  auto finish = [&](run::RunState s, int exit_code, const std::string& reason) {
    run::RunEndEvent e;
    e.status = s == run::RunState::Completed ? run::RunOutcome::Completed
               : s == run::RunState::Stopped ? run::RunOutcome::Stopped
                                             : run::RunOutcome::Failed;
    e.reason = reason;
    e.exit_code = exit_code;
    e.step = step;
    events.write(e);
    run::RunStatus fin = heartbeat.snapshot();
    fin.state = s;
    fin.step = step;
    fin.total_steps = total_steps;
    fin.reason = reason;
    fin.exit_code = exit_code;
    heartbeat.finish(fin);
    if (!reason.empty()) log.line((s == run::RunState::Failed ? "failed: " : "stopped: ") + reason);
    return exit_code;
  };
  auto save = [&](std::int64_t at_step) -> bool {
    const auto ts = Clock::now();
    CheckpointContents with = contents;
    if (engine->optimizer().sharded_state()) {
      // ZeRO: every rank writes its optimizer shard beside the checkpoint; rank 0 moves them in
      // and renames the whole directory into place only when every rank succeeded.
      auto shard_path = [&](int r) {
        return dir.checkpoints_dir() / (".checkpoint-" + std::to_string(at_step) + "-" + optimizer_shard_name(r, mesh.world));
      };
      auto mine = save_optimizer_shard(shard_path(mesh.rank), *engine);
      torch::Tensor failed = torch::tensor({mine.ok() ? std::int64_t{0} : std::int64_t{1}}, torch::kInt64)
                                 .to(engine->model()->lm_head_weight().device());
      mesh.world_group->all_reduce(failed);
      const std::int64_t failures = failed.cpu().item<std::int64_t>();
      if (!mine.ok()) log.line("warning: " + format_all(mine.diagnostics));
      if (failures > 0) {
        std::error_code ignore;
        fs::remove(shard_path(mesh.rank), ignore);
        if (!main_rank) return false;
        run::WarningEvent w;
        w.code = "checkpoint_failed";
        w.message = "checkpoint-" + std::to_string(at_step) + " could not be written: " + std::to_string(failures) +
                    " rank(s) could not write their optimizer shard" +
                    (mine.ok() ? std::string() : " (rank 0: " + format_all(mine.diagnostics) + ")") +
                    (last_saved ? "; checkpoint-" + std::to_string(*last_saved) + " is intact" : std::string());
        w.step = at_step;
        events.write(w);
        log.line("warning: " + w.message);
        return false;
      }
      if (!main_rank) {
        last_saved = at_step;
        return true;
      }
      for (int r = 0; r < mesh.world; ++r) with.optimizer_shards.push_back(shard_path(r));
    } else if (!main_rank) {
      return true;  // the weights are the same on every rank
    }
    heartbeat.update(step, total_steps, run::RunState::Running);
    state.step = at_step;
    state.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
    auto saved = save_checkpoint(dir.checkpoint(at_step), *engine, with, state);
    if (!saved.ok()) {
      const std::string msg = "checkpoint-" + std::to_string(at_step) + " could not be written: " +
                              format_all(saved.diagnostics) +
                              (last_saved ? "; checkpoint-" + std::to_string(*last_saved) + " is intact"
                                          : std::string("; no earlier checkpoint exists"));
      run::WarningEvent w;
      w.code = "checkpoint_failed";
      w.message = msg;
      w.step = at_step;
      events.write(w);
      log.line("warning: " + msg);
      return false;
    }
    run::CheckpointEvent e;
    e.step = at_step;
    e.path = "checkpoints/checkpoint-" + std::to_string(at_step);
    e.bytes = saved.value;
    e.duration_s = std::chrono::duration<double>(Clock::now() - ts).count();
    events.write(e);
    last_saved = at_step;
    log.line("saved " + e.path + " (" + fixed(static_cast<double>(saved.value) / 1e6, 1) + " MB in " +
             fixed(e.duration_s, 2) + " s)");
    for (const auto& p : rotate_checkpoints(dir.checkpoints_dir(), c.save_total_limit))
      log.line("removed " + p.filename().string() + " (save_total_limit " + std::to_string(c.save_total_limit) + ")");
    return true;
  };

  try {
    // ---- model
    const std::string alloc_conf = configure_cuda_allocator();
    const torch::Device device = pick_device(c, env);
    probe.device = device;
    if (const std::string budget = apply_memory_budget(c, device); !budget.empty()) log.line(budget);
    const torch::Dtype dtype = pick_dtype(c, device);
    torch::manual_seed(static_cast<std::uint64_t>(c.seed));
    if (device.is_cuda()) torch::cuda::manual_seed_all(static_cast<std::uint64_t>(c.seed));
    stage("load_model", c.model + " on " + device.str() + " in " + dtype_name(dtype) +
                             (device.is_cuda() ? ", allocator " + alloc_conf : std::string()) +
                             (c.fused_kernels ? ", fused kernels" : ", reference ops (fused_kernels: false)"));
    model::DecoderOptions mo;
    mo.device = device;
    mo.dtype = dtype;
    mo.attention = attention_backend_for(c.attn_impl);
    mo.fused_kernels = c.fused_kernels;
    auto loaded = model::load_causal_lm(c.model, mo);
    if (!loaded.ok()) throw RunFailure{"the model could not be loaded:\n" + format_all(loaded.diagnostics)};
    model::CausalLM lm = loaded.value.lm;
    const HfModelConfig& hf = loaded.value.config.hf;
    std::int64_t params = 0;
    for (const auto& p : lm->parameters(true)) params += p.numel();

    // ---- mesh
    ParallelLayout layout = parallel_layout(c, hf.num_key_value_heads);
    if (env.world > 1 || layout.sp > 1) {
      layout.world_size = env.world;
      if (layout.sp < 1 || env.world % layout.sp != 0)
        throw RunFailure{"sequence_parallel_size " + std::to_string(layout.sp) + " does not divide the " +
                         std::to_string(env.world) + " processes of this run"};
      if (layout.ulysses * layout.ring != layout.sp)
        throw RunFailure{"ulysses_size " + std::to_string(layout.ulysses) + " does not divide sequence_parallel_size " +
                         std::to_string(layout.sp)};
      layout.dp = env.world / layout.sp;
      std::string why_heads;
      if (!dist::heads_fit_ulysses(hf.num_attention_heads, hf.num_key_value_heads, static_cast<int>(layout.ulysses),
                                   &why_heads))
        throw RunFailure{why_heads};
      if (env.world > 1) {
        const auto transport = device.is_cuda() ? dist::Transport::Nccl : dist::Transport::Store;
        if (!opt.store) throw RunFailure{"a parallel run needs the rendezvous store (started without a launcher?)"};
        mesh = dist::build_mesh(env, layout, transport, opt.store, device, opt.comm_timeout);
        log.line("mesh: " + std::to_string(mesh.world) + " ranks = dp " + std::to_string(mesh.dp) + " x ulysses " +
                 std::to_string(mesh.ulysses) + " x ring " + std::to_string(mesh.ring) + " over " +
                 (device.is_cuda() ? "NCCL" : "the store transport (CPU)") + "; this is rank " +
                 std::to_string(mesh.rank) + " on " + device.str());
      }
    }
    const std::int64_t pad_token_id = loaded.value.config.pad_token_id.value_or(0);

    // ---- tokenizer and template
    const std::string tok_file = (fs::path(c.model) / "tokenizer.json").string();
    auto tok = Tokenizer::load(tok_file);
    if (!tok.ok()) throw RunFailure{"the tokenizer could not be loaded:\n" + format_all(tok.diagnostics)};
    auto tmpl = data::template_for(c.template_name, tok.value, hf.family);
    if (!tmpl.ok()) throw RunFailure{format_all(tmpl.diagnostics)};
    report_diagnostics(tmpl.diagnostics, log, events, "template");

    // ---- data
    stage("load_data", std::to_string(c.dataset.size()) + " dataset(s), template " + std::string(tmpl.value.name()) +
                           ", max_length " + std::to_string(c.max_length));
    // Rank 0 tokenizes first and fills the token cache; the others then read it.
    if (!main_rank) mesh.world_group->barrier();
    Data data = prepare_data(c, tok.value, tmpl.value, opt, log, events);
    if (main_rank) mesh.world_group->barrier();

    // ---- tuner
    if (c.tuner_type == "lora") {
      auto targets = resolve_target_modules(c.target_modules);
      if (!targets.ok()) throw RunFailure{format_all(targets.diagnostics)};
      LoraSettings ls;
      ls.rank = c.lora_rank;
      ls.alpha = c.lora_alpha;
      ls.dropout = c.lora_dropout;
      ls.rslora = c.use_rslora;
      ls.target_modules = targets.value;
      apply_lora(lm, ls);
      contents.lora = ls;
    }
    contents.base_model = c.model;
    const MemoryPolicy memory = memory_policy(c, hf, device);
    const std::string& why = memory.why;
    ckpt_layers = memory.checkpoint;
    lm->set_checkpoint_layers(ckpt_layers);
    lm->set_keep_attention_layers(memory.keep_attention);
    lm->set_mlp_recompute_layers(memory.mlp_recompute);
    lm->set_mlp_offload_layers(memory.mlp_offload, memory.mlp_offload_lead);
    lm->set_offload_checkpoints(c.offload_activations);
    lm->set_mlp_tile_tokens(memory.mlp_tile);

    // ---- schedule
    const std::int64_t batch = c.per_device_train_batch_size, accum = c.gradient_accumulation_steps;
    const std::int64_t global_batch = batch * mesh.dp;  // items per global micro-batch
    const auto items = static_cast<std::int64_t>(data.items.size());
    if (mesh.dp > 1 && items < global_batch)
      throw RunFailure{std::to_string(items) + (c.packing ? " packed bins" : " samples") + " cannot feed dp " +
                       std::to_string(mesh.dp) + " x per_device_train_batch_size " + std::to_string(batch)};
    // With dp > 1 an epoch's last partial global micro-batch is dropped (every rank needs rows).
    const std::int64_t micro_per_epoch_all =
        mesh.dp > 1 ? items / global_batch : (items + global_batch - 1) / global_batch;
    const std::int64_t steps_per_epoch = std::max<std::int64_t>(1, micro_per_epoch_all / accum);
    const std::int64_t micro_per_epoch = steps_per_epoch * accum;
    total_steps = c.max_steps > 0 ? c.max_steps
                                  : std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(
                                                                  c.num_train_epochs * static_cast<double>(steps_per_epoch))));
    StepOptions so;
    so.adamw = {c.learning_rate, c.adam_beta1, c.adam_beta2, c.adam_epsilon, c.weight_decay};
    so.schedule.type = c.lr_scheduler_type;
    so.schedule.base_lr = c.learning_rate;
    so.schedule.total_steps = total_steps;
    so.schedule.warmup_steps = warmup_steps_for(c.warmup_steps, c.warmup_ratio, total_steps);
    so.max_grad_norm = c.max_grad_norm;
    set_memory_optimizer(so, c);
    if (c.offload_optimizer) {
      // fp32 master weights and moments of this rank's shard (the gradient shard stays on the
      // GPU), for every rank on this host.
      std::int64_t trainable = 0;
      for (const auto& p : lm->parameters(true))
        if (p.requires_grad()) trainable += p.numel();
      const std::int64_t need = 12 * ((trainable + mesh.world - 1) / mesh.world) * std::max(1, env.local_world);
      const std::int64_t have = available_host_bytes();
      if (have > 0 && need > have * 9 / 10)
        throw RunFailure{"offload_optimizer: the offloaded optimizer state of " + std::to_string(trainable) +
                         " trainable parameters over " + std::to_string(mesh.world) + " ranks needs " +
                         gib(need) + " of host memory on this host (" +
                         std::to_string(std::max(1, env.local_world)) + " ranks x 12 bytes per parameter of a shard), " +
                         "but " + gib(have) + " is available; use more ranks, offload_optimizer: false, or free host memory"};
    }
    try {
      engine.emplace(lm, so, mesh.distributed() ? mesh.world_group.get() : nullptr);
    } catch (const std::invalid_argument& e) {
      throw RunFailure{std::string("optimizer: ") + e.what()};
    }
    state.total_steps = total_steps;
    state.seed = c.seed;
    state.tuner_type = c.tuner_type;
    state.data_fingerprint = data.fingerprint;
    state.items_per_epoch = items;
    std::int64_t micro = 0;
    if (!c.resume_from_checkpoint.empty()) {
      const fs::path from = c.resume_from_checkpoint;
      stage("resume", "from " + from.string());
      auto prev = read_trainer_state(from);
      if (!prev.ok()) throw RunFailure{format_all(prev.diagnostics)};
      const TrainerState& p = prev.value;
      auto mismatch = [&](const std::string& what, const std::string& was, const std::string& now) {
        throw RunFailure{"resume_from_checkpoint: " + from.string() + " was trained with " + what + " " + was +
                         ", this run has " + now + "; resume needs the same setting"};
      };
      if (p.tuner_type != c.tuner_type) mismatch("tuner_type", p.tuner_type, c.tuner_type);
      if (p.data_fingerprint != data.fingerprint) mismatch("data (tokenized cache key)", p.data_fingerprint, data.fingerprint);
      if (p.seed != c.seed) mismatch("seed", std::to_string(p.seed), std::to_string(c.seed));
      if (p.total_steps != total_steps)
        mismatch("total steps", std::to_string(p.total_steps), std::to_string(total_steps));
      CheckpointContents at = contents;
      at.rank = mesh.rank;
      at.world = mesh.world;
      auto d = load_checkpoint(from, *engine, at);
      if (has_errors(d)) throw RunFailure{"resume_from_checkpoint: " + format_all(d)};
      engine->set_completed_steps(p.step);
      step = p.step;
      micro = p.micro_batches;
      state.tokens_total = p.tokens_total;
      log.line("resumed at step " + std::to_string(step) + " of " + std::to_string(total_steps));
    }

    // ---- run_start
    run::RunStartEvent rs;
    rs.run_id = dir.run_id();
    rs.odyssey_version = ODYSSEY_VERSION;
    rs.config_path = "config.yaml";
    rs.hostname = run::this_hostname();
    rs.mesh.world = mesh.world;
    rs.mesh.dp = mesh.dp;
    rs.mesh.sp = mesh.sp;
    rs.mesh.ulysses = mesh.ulysses;
    rs.mesh.ring = mesh.ring;
    rs.mesh.nnodes = std::max(1, env.world / std::max(1, env.local_world));
    rs.mesh.nproc_per_node = env.local_world;
    run::DeviceInfo di;
    if (device.is_cuda()) {
      di.name = device_name(device);
      di.memory_bytes = device_memory_bytes(device);
    } else {
      di.name = "CPU (" + std::to_string(std::thread::hardware_concurrency()) + " threads)";
      di.memory_bytes = host_memory_bytes();
    }
    for (int r = 0; r < mesh.world; ++r) {  // rank 0's device stands for all (one kind per run)
      di.rank = r;
      rs.devices.push_back(di);
    }
    rs.totals.samples = static_cast<std::int64_t>(data.train.size());
    rs.totals.tokens = data.train_tokens;
    rs.totals.total_steps = total_steps;
    rs.totals.epochs = static_cast<double>(total_steps) / static_cast<double>(steps_per_epoch);
    rs.model.name = c.model;
    rs.model.params = params;
    rs.model.trainable_params = engine->trainable_params();
    Optimizer& optimizer = engine->optimizer();
    rs.optimizer.name = optimizer.name();
    rs.optimizer.state_bytes = optimizer.state_bytes();
    rs.optimizer.host_state_bytes = optimizer.host_state_bytes();
    rs.optimizer.sharded_over = c.zero_stage > 0 ? mesh.world : 1;
    events.write(rs);
    log.line("optimizer: " + optimizer.name() + ", state " + gib(optimizer.state_bytes()) + " on the device" +
             (optimizer.host_state_bytes() > 0 ? ", " + gib(optimizer.host_state_bytes()) + " in host memory"
                                               : std::string()) +
             (c.zero_stage > 0 ? " per rank (sharded over " + std::to_string(mesh.world) + ")" : std::string()) +
             (c.use_galore ? "; GaLore rank " + std::to_string(c.galore_rank) + ", projection refreshed every " +
                                 std::to_string(c.galore_update_proj_gap) + " steps"
                           : std::string()));
    log.line("model: " + std::to_string(params) + " parameters, " + std::to_string(engine->trainable_params()) +
             " trainable (" + c.tuner_type + "); activation checkpointing: " + why);
    log.line("schedule: " + std::to_string(total_steps) + " steps (" + std::to_string(steps_per_epoch) +
             " per epoch: " + std::to_string(items) + (c.packing ? " packed bins" : " samples") + " / batch " +
             std::to_string(batch) + (mesh.dp > 1 ? " x dp " + std::to_string(mesh.dp) : std::string()) +
             " / accumulation " + std::to_string(accum) + "), " + c.lr_scheduler_type +
             " with " + std::to_string(so.schedule.warmup_steps) + " warmup steps");

    // A whole row of this rank's dp slice, as this rank computes it: its sp shard.
    auto local_rows = [&](PackedRow row) {
      row = row.to(device);
      if (mesh.sp == 1) return row;
      return dist::shard_row(row, mesh.ulysses_group.get(), mesh.ring_group.get(), pad_token_id);
    };
    // Validation rows: batch samples per row, in order; row i belongs to dp rank i mod dp.
    std::vector<PackedRow> val_rows;
    for (std::size_t i = 0, n = 0; i < data.val.size(); i += static_cast<std::size_t>(batch), ++n) {
      if (static_cast<int>(n % static_cast<std::size_t>(mesh.dp)) != mesh.dp_rank) continue;
      std::vector<const data::TokenizedSample*> ptrs;
      for (std::size_t j = i; j < std::min(data.val.size(), i + static_cast<std::size_t>(batch)); ++j)
        ptrs.push_back(&data.val[j]);
      val_rows.push_back(local_rows(row_of(ptrs)));
    }
    const bool any_val = !data.val.empty();
    auto evaluate = [&]() {
      if (!any_val) return;
      const auto te = Clock::now();
      const auto [loss, targets] = engine->evaluate(val_rows);
      run::EvalEvent e;
      e.step = step;
      e.loss = loss;
      e.tokens = targets;
      e.samples = static_cast<std::int64_t>(data.val.size());
      e.duration_s = std::chrono::duration<double>(Clock::now() - te).count();
      events.write(e);
      log.line("eval step " + std::to_string(step) + ": loss " + fixed(loss, 4) + " over " + std::to_string(targets) +
               " tokens");
    };
    const std::int64_t eval_every = c.eval_steps > 0 ? c.eval_steps : c.save_steps;

    // Items of global micro-batch m: the epoch's permutation, then consecutive runs of
    // `global_batch`; this rank's are the dp_rank-th run of `batch` within it.
    std::int64_t perm_epoch = -1;
    std::vector<std::size_t> perm;
    auto micro_batch = [&](std::int64_t m) {
      const std::int64_t epoch = m / micro_per_epoch, k = m % micro_per_epoch;
      if (epoch != perm_epoch) {
        perm = data::seeded_permutation(data.items.size(),
                                        data::mix_seed(static_cast<std::uint64_t>(c.seed), 1000 + static_cast<std::uint64_t>(epoch)));
        perm_epoch = epoch;
      }
      std::vector<const data::TokenizedSample*> ptrs;
      for (std::int64_t b = 0; b < batch; ++b) {
        const auto pos = static_cast<std::size_t>(k * global_batch + mesh.dp_rank * batch + b);
        if (pos >= perm.size()) break;
        for (std::size_t s : data.items[perm[pos]]) ptrs.push_back(&data.train[s]);
      }
      if (ptrs.empty())  // an epoch's last global micro-batch may leave a dp rank without items
        throw RunFailure{"dp rank " + std::to_string(mesh.dp_rank) + " has no data in micro-batch " +
                         std::to_string(m) + "; the dataset is too small for per_device_train_batch_size x dp"};
      return local_rows(row_of(ptrs));
    };

    stage("train", std::to_string(total_steps - step) + " steps to go");
    heartbeat.update(step, total_steps);
    double avg_step_s = 0;
    // All ranks agree on stopping (they may see SIGTERM at different steps).
    auto stop_agreed = [&]() {
      bool stop = g_stop_signals.load() > 0;
      if (!mesh.distributed()) return stop;
      torch::Tensor f = torch::tensor({stop ? 1.0f : 0.0f}).to(device);
      mesh.world_group->all_reduce(f);
      return f.cpu().item<float>() > 0;
    };
    bool stopping = false;
    mesh.take_stats(nullptr);
    while (step < total_steps) {
      if ((stopping = stop_agreed())) break;
      const auto ts = Clock::now();
      probe.reset_peak();
      std::vector<PackedRow> rows;
      for (std::int64_t a = 0; a < accum; ++a) rows.push_back(micro_batch(micro + a));
      const StepResult r = engine->step(rows);
      if (device.is_cuda()) torch::cuda::synchronize(device.index());
      const double dt = std::chrono::duration<double>(Clock::now() - ts).count();
      double step_comm_s = 0;
      std::vector<run::CollectiveStat> step_collectives = mesh.take_stats(&step_comm_s);
      if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
        run::StepEvent e;
        e.step = step + 1;
        e.total_steps = total_steps;
        e.loss = r.loss;
        e.lr = r.lr;
        e.grad_norm = r.grad_norm;
        events.write(e);
        run::WarningEvent w;
        w.code = "nan_loss";
        w.step = step + 1;
        const bool loss_bad = !std::isfinite(r.loss);
        const double bad = loss_bad ? r.loss : r.grad_norm;
        w.message = std::string(loss_bad ? "the loss" : "the gradient norm") + " is " +
                    (std::isnan(bad) ? "NaN" : "infinite") + " at step " + std::to_string(step + 1);
        events.write(w);
        return finish(run::RunState::Failed, 1,
                      w.message + "; the update was not applied. Lower learning_rate (now " +
                          fixed(c.learning_rate, 8) + "), keep max_grad_norm > 0 (now " + fixed(c.max_grad_norm, 3) +
                          "), check the data, or use bfloat16 instead of float16");
      }
      micro += accum;
      ++step;
      state.micro_batches = micro;
      state.tokens_total += r.tokens;
      state.last_loss = r.loss;
      avg_step_s = step == 1 ? dt : 0.9 * avg_step_s + 0.1 * dt;
      heartbeat.update(step, total_steps);
      if (step % c.logging_steps == 0 || step == 1 || step == total_steps) {
        run::StepEvent e;
        e.step = step;
        e.total_steps = total_steps;
        e.epoch = static_cast<double>(micro) / static_cast<double>(micro_per_epoch);
        e.loss = r.loss;
        e.lr = r.lr;
        e.grad_norm = r.grad_norm;
        e.tokens = r.tokens;
        e.tokens_total = state.tokens_total;
        e.step_time_s = dt;
        e.tokens_per_s = dt > 0 ? static_cast<double>(r.tokens) / dt : 0;
        e.eta_s = avg_step_s * static_cast<double>(total_steps - step);
        const run::RankMemory mine = probe.read();
        if (mesh.distributed()) {
          torch::Tensor m = torch::tensor({mine.vram_allocated_bytes, mine.vram_peak_bytes, mine.vram_reserved_bytes},
                                          torch::kInt64)
                                .to(device);
          m = mesh.world_group->all_gather(m).cpu().view({mesh.world, 3});
          for (int rk = 0; rk < mesh.world; ++rk) {
            run::RankMemory rm;
            rm.rank = rk;
            rm.vram_allocated_bytes = m[rk][0].item<std::int64_t>();
            rm.vram_peak_bytes = m[rk][1].item<std::int64_t>();
            rm.vram_reserved_bytes = m[rk][2].item<std::int64_t>();
            e.memory.push_back(rm);
          }
        } else {
          e.memory.push_back(mine);
          e.memory.back().rank = 0;
        }
        e.collectives = std::move(step_collectives);
        e.comm_wait_s = step_comm_s;
        events.write(e);
        log.line("step " + std::to_string(step) + "/" + std::to_string(total_steps) + "  loss " + fixed(r.loss, 4) +
                 "  lr " + fixed(r.lr * 1e6, 2) + "e-6  grad_norm " + fixed(r.grad_norm, 3) + "  " +
                 std::to_string(static_cast<std::int64_t>(e.tokens_per_s)) + " tok/s  " + fixed(dt * 1000, 0) + " ms");
      }
      if (eval_every > 0 && step % eval_every == 0 && step != total_steps) evaluate();
      if (step % c.save_steps == 0 && step != total_steps) save(step);
    }
    if (stopping && step < total_steps) {
      stage("save", "stop requested: saving step " + std::to_string(step));
      heartbeat.update(step, total_steps, run::RunState::Stopping);
      if (step > 0 && last_saved != step && !save(step))
        return finish(run::RunState::Failed, 1, "stop requested, but the checkpoint could not be written");
      return finish(run::RunState::Stopped, 0,
                    "stopped on request after step " + std::to_string(step) +
                        (step > 0 ? "; resume with resume_from_checkpoint: " + dir.checkpoint(step).string() : std::string()));
    }
    evaluate();
    stage("save", "final checkpoint of step " + std::to_string(step));
    if (last_saved != step && !save(step)) return finish(run::RunState::Failed, 1, "the final checkpoint could not be written");
    log.line("done: " + std::to_string(step) + " steps in " +
             fixed(std::chrono::duration<double>(Clock::now() - t0).count(), 1) + " s; final loss " +
             fixed(state.last_loss, 4) + "; output " + dir.checkpoint(step).string());
    return finish(run::RunState::Completed, 0, "");
  } catch (const RunFailure& f) {
    return finish(run::RunState::Failed, 1, f.reason);
  } catch (const c10::OutOfMemoryError& e) {
    const run::RankMemory m = probe.read();
    std::string first = e.what_without_backtrace();
    first = first.substr(0, first.find('\n'));
    return finish(run::RunState::Failed, 1,
                  "CUDA out of memory at step " + std::to_string(step + 1) + " (peak allocated " +
                      gib(m.vram_peak_bytes) + ", reserved " + gib(m.vram_reserved_bytes) + "): " + first + ". " +
                      oom_advice(c, ckpt_layers));
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    return finish(run::RunState::Failed, 1, "LibTorch error at step " + std::to_string(step + 1) + ": " + msg);
  } catch (const std::exception& e) {
    return finish(run::RunState::Failed, 1, std::string("error at step ") + std::to_string(step + 1) + ": " + e.what());
  }
}

}  // namespace odyssey::train
