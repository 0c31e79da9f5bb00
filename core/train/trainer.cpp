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
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "common/text.h"
#include "config/model_config.h"
#include "data/dataset.h"
#include "data/packing.h"
#include "data/token_cache.h"
#include "data/tokenize.h"
#include "dist/expert_parallel.h"
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
#include "train/memory_policy.h"
#include "train/run_outputs.h"
#include "train/step_engine.h"

#ifndef ODYSSEY_VERSION
#define ODYSSEY_VERSION "dev"
#endif

namespace odyssey::train {
namespace {

// "4-bit base: N projections [and M layers' experts] in NF4 with double quantization, X GiB
// (16-bit: Y GiB)" (MiB below 1 GiB) for a model with 4-bit weights; "" otherwise.
std::string quant4_summary(model::CausalLM& lm) {
  std::int64_t n = 0, stacks = 0, bytes = 0, numel = 0;
  std::string type;
  bool nested = false;
  for (const auto& [name, q] : model::quant4_weights(lm)) {
    ++(name.ends_with(".weight") ? n : stacks);
    bytes += q->nbytes();
    numel += q->numel();
    type = kernels::quant4_type_name(q->type);
    nested = q->nested;
  }
  if (n + stacks == 0) return {};
  auto size = [](double b) {
    char s[32];
    if (b >= double(1 << 30)) std::snprintf(s, sizeof s, "%.2f GiB", b / double(1 << 30));
    else std::snprintf(s, sizeof s, "%.1f MiB", b / double(1 << 20));
    return std::string(s);
  };
  const std::string experts = stacks > 0 ? " and " + std::to_string(stacks / 2) + " layers' experts" : "";
  return "4-bit base: " + std::to_string(n) + " projections" + experts + " in " + (type == "nf4" ? "NF4" : "FP4") +
         (nested ? " with double quantization" : "") + ", " + size(static_cast<double>(bytes)) +
         " (16-bit: " + size(static_cast<double>(numel) * 2) + ")";
}

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

// A stop requested before training began (SIGTERM during loading or tokenization): there is
// nothing to checkpoint, and the run ends "stopped" at once.
struct StopBeforeTraining {
  std::string stage;
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

std::string gib(std::int64_t bytes) {
  return fixed(static_cast<double>(bytes) / double(std::int64_t{1} << 30), 2) + " GiB";
}

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
                     std::to_string(torch::cuda::device_count()) +
                     " CUDA device(s); CUDA_VISIBLE_DEVICES narrows them)"};
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

torch::Dtype pick_dtype(const TrainConfig& c, const torch::Device& d) {
  if (c.torch_dtype == "float32") return torch::kFloat32;
  if (c.torch_dtype == "float16") return torch::kFloat16;
  if (c.torch_dtype == "bfloat16") return torch::kBFloat16;
  // auto: a 4-bit base's compute dtype when given (the run computes in one dtype), else
  // bfloat16 on a GPU and float32 on the CPU.
  if (c.quant_bits == 4 && c.bnb_4bit_compute_dtype == "float32") return torch::kFloat32;
  if (c.quant_bits == 4 && c.bnb_4bit_compute_dtype == "float16") return torch::kFloat16;
  if (c.quant_bits == 4 && c.bnb_4bit_compute_dtype == "bfloat16") return torch::kBFloat16;
  return d.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
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

void report_diagnostics(const Diagnostics& d, RunOutputs& out, const std::string& code) {
  std::size_t shown = 0;
  for (const auto& x : d) {
    if (x.severity == Severity::Error) continue;
    out.log((x.severity == Severity::Warning ? "warning: " : "note: ") + x.format());
    if (x.severity == Severity::Warning && shown++ < 20) {
      run::WarningEvent w;
      w.code = code;
      w.message = x.format();
      out.event(w);
    }
  }
}

Data prepare_data(const TrainConfig& c, const Tokenizer& tok, const ChatTemplate& tmpl, const TrainerOptions& opt,
                  RunOutputs& out) {
  data::TokenizeOptions to;
  to.max_length = c.max_length;
  to.truncation = data::parse_truncation(c.truncation_strategy).value_or(data::Truncation::Delete);
  to.system = c.system;
  // SIGTERM during tokenization ends a single-process run at once; the ranks of a parallel run
  // stop together at their first step instead (a rank leaving early would strand the others
  // at the barrier after tokenization).
  if (opt.env.world <= 1) to.cancelled = [] { return g_stop_signals.load() > 0; };
  to.on_start = [&out](std::size_t samples) {
    run::StageEvent e;
    e.stage = "tokenize";
    e.message = std::to_string(samples) + " samples";
    out.event(e);
    out.log("[tokenize] " + e.message);
  };
  data::TokenCacheOptions co;
  co.enabled = opt.token_cache_dir != "off";
  if (co.enabled) co.dir = opt.token_cache_dir;
  const data::LoadOptions lo = load_options(c, opt.preset_base_dir);
  auto prepared = data::load_tokenized(c.dataset, lo, tok, tmpl, to, co);
  if (!prepared.ok() && g_stop_signals.load() > 0) throw StopBeforeTraining{"tokenizing the data"};
  if (!prepared.ok()) throw RunFailure{"the training data could not be used:\n" + format_all(prepared.diagnostics)};
  report_diagnostics(prepared.diagnostics, out, "data");
  Data d;
  const auto& P = prepared.value;
  for (const auto& f : P.files) out.log("data: " + data::summary(f));
  out.log("tokenize: " + data::summary(P.report) + (P.from_cache ? " (from the cache " + P.cache_file + ")" : ""));
  d.fingerprint = P.cache_key;
  std::vector<data::TokenizedSample> all = P.samples;
  if (!c.val_dataset.empty()) {
    auto v = data::load_tokenized(c.val_dataset, lo, tok, tmpl, to, co);
    if (!v.ok() && g_stop_signals.load() > 0) throw StopBeforeTraining{"tokenizing the data"};
    if (!v.ok()) throw RunFailure{"the validation data could not be used:\n" + format_all(v.diagnostics)};
    report_diagnostics(v.diagnostics, out, "data");
    for (const auto& f : v.value.files) out.log("val data: " + data::summary(f));
    d.val = v.value.samples;
    d.fingerprint += "+" + v.value.cache_key;
  } else if (c.split_dataset_ratio > 0) {
    auto split = data::split_validation(std::move(all), c.split_dataset_ratio, static_cast<std::uint64_t>(c.seed));
    if (!split.ok()) throw RunFailure{format_all(split.diagnostics)};
    all = std::move(split.value.train);
    d.val = std::move(split.value.val);
    out.log("validation split: " + std::to_string(d.val.size()) + " samples held out (split_dataset_ratio " +
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
    out.log("packing: " + std::to_string(pr.samples) + " samples into " + std::to_string(pr.bins) + " bins of " +
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
  if (c.tuner_type == "full" && c.optimizer_dtype == "fp32" && c.zero_stage == 0)
    tips.push_back("optimizer_dtype: bf16 (10 bytes per parameter less: no fp32 master, moments or gradients)");
  if (c.tuner_type == "full") tips.push_back("tuner_type: lora, or use_galore / zero_stage 2");
  if (c.tuner_type == "lora" && c.zero_stage == 0)
    tips.push_back("zero_stage: 2 with offload_optimizer: true (the AdamW moments in host memory, on one GPU too)");
  tips.push_back("sequence_parallel_size > 1 over several GPUs");
  if (c.gpu_memory_budget_gib > 0)
    tips.push_back("a larger gpu_memory_budget_gib (now " + text::format_double(c.gpu_memory_budget_gib) + ")");
  std::string s = "settings that reduce memory: ";
  for (std::size_t i = 0; i < tips.size(); ++i) s += (i ? "; " : "") + tips[i];
  return s + " (odyssey-train plan shows the predicted peak)";
}

// ---- the run as named stages -------------------------------------------------------------
// run_training is the sequence open_run_directory, load_model, load_data, build_optimizer,
// resume, train_loop, final_save. Each stage throws RunFailure with its reason (or
// StopBeforeTraining); run_training turns every exception into the run's end in one place,
// and between stages (and after every step) check_outputs ends the run when a write to the
// run directory failed.

// What the stages share: the configuration, the outputs, the mesh and where training stands.
struct RunContext {
  RunContext(const TrainConfig& config, const run::RunDir& run_dir, const TrainerOptions& options)
      : c(config), dir(run_dir), opt(options) {}
  const TrainConfig& c;
  const run::RunDir& dir;
  const TrainerOptions& opt;
  Clock::time_point t0 = Clock::now();
  bool main_rank = true;
  std::unique_ptr<RunOutputs> out;
  dist::Mesh mesh = dist::single_process_mesh();
  run::RunStartEvent start;  // filled as the stages learn the run's shape
  std::int64_t step = 0, total_steps = 0;
  std::vector<bool> ckpt_layers;
  MemoryProbe probe;

  void stage(const std::string& name, const std::string& message) {
    run::StageEvent e;
    e.stage = name;
    e.message = message;
    out->event(e);
    out->log("[" + name + "] " + message);
  }
  void progress(run::RunState state = run::RunState::Running) { out->progress(step, total_steps, state); }
  // A failed write to events.jsonl, status.json or the log ends the run here.
  void check_outputs() const {
    if (auto f = out->failure()) throw RunFailure{*f};
  }
  // Between stages before training, a stop request ends a single-process run before the next
  // stage. The ranks of a parallel run stop together at their first step (they agree on it),
  // since one leaving early would strand the others in a collective.
  void check_stop(const std::string& stage_name) const {
    check_outputs();
    if (opt.env.world <= 1 && g_stop_signals.load() > 0) throw StopBeforeTraining{stage_name};
  }
  int finish(run::RunState s, int exit_code, const std::string& reason) {
    return out->finish(s, exit_code, reason, step, total_steps, start);
  }
};

// The model as loaded, on its device.
struct LoadedModel {
  torch::Device device = torch::kCPU;
  torch::Dtype dtype = torch::kFloat32;
  model::CausalLM lm{nullptr};
  HfModelConfig hf;
  std::int64_t params = 0;
  std::int64_t pad_token_id = 0;
};

// The optimizer schedule: batches, epochs and steps.
struct Schedule {
  std::int64_t batch = 1, accum = 1, global_batch = 1, items = 0;
  std::int64_t steps_per_epoch = 1, micro_per_epoch = 1;
  StepOptions so;
  std::string why_memory;  // the memory policy, for the log
};

// What the train loop and the saves work on.
struct Training {
  Schedule sched;
  std::optional<StepEngine> engine;
  CheckpointContents contents;
  TrainerState state;
  std::int64_t micro = 0;
  std::optional<std::int64_t> last_saved;
};

// Stage 1: the run directory's outputs (log, events.jsonl, status.json "running"). The
// identity half of run_start is known here; it is written once the run's shape is known.
void open_run_directory(RunContext& run) {
  const dist::DistEnv& env = run.opt.env;
  run.main_rank = env.rank == 0;
  // Ranks of one host share its cores: each would otherwise start one intra-op thread per core
  // and the host-side work (CPU ranks, ZeRO offload's update) would thrash. The cores are
  // those this process may use (taskset, a cpuset), and OMP_NUM_THREADS, when set, stands:
  // this used to override it with all the machine's cores divided among the ranks.
  if (env.local_world > 1)
    if (const int threads = intra_op_threads_per_rank(env.local_world); threads > 0) torch::set_num_threads(threads);
  g_stop_signals.store(0);
  if (run.opt.install_signal_handlers) {
    std::signal(SIGTERM, on_stop_signal);
    std::signal(SIGINT, on_stop_signal);
    // A file size limit (RLIMIT_FSIZE) reached by a write is then that write's error
    // (EFBIG), reported like a full disk, instead of SIGXFSZ killing the process.
    std::signal(SIGXFSZ, SIG_IGN);
  }
  std::error_code ec;
  fs::create_directories(run.dir.logs_dir(), ec);
  fs::create_directories(run.dir.checkpoints_dir(), ec);
  run::RunStatus st;
  st.state = run::RunState::Running;
  st.run_id = run.dir.run_id();
  st.pid = ::getpid();
  st.launcher_pid = run.opt.launcher_pid;
  st.hostname = run::this_hostname();
  st.started_at = run::unix_now();
  st.heartbeat = st.started_at;
  // status.json is rank 0's; the launcher writes it last when a rank fails.
  const auto& reports = run.c.report_to;
  run.out = std::make_unique<RunOutputs>(run.dir, env.rank, run.main_rank, st, run.t0,
                                         std::find(reports.begin(), reports.end(), "tensorboard") != reports.end());
  run.start.run_id = run.dir.run_id();
  run.start.odyssey_version = ODYSSEY_VERSION;
  run.start.config_path = "config.yaml";
  run.start.hostname = st.hostname;
  run.start.mesh.world = env.world;
  run.start.mesh.nnodes = std::max(1, env.world / std::max(1, env.local_world));
  run.start.mesh.nproc_per_node = env.local_world;
}

// The mesh of a parallel run (dp x ulysses x ring), checked against the model's heads.
void build_run_mesh(RunContext& run, const LoadedModel& m) {
  const TrainConfig& c = run.c;
  const dist::DistEnv& env = run.opt.env;
  ParallelLayout layout = parallel_layout(c, m.hf.num_key_value_heads);
  if (env.world <= 1 && layout.sp <= 1) return;
  layout.world_size = env.world;
  if (layout.sp < 1 || env.world % layout.sp != 0)
    throw RunFailure{"sequence_parallel_size " + std::to_string(layout.sp) + " does not divide the " +
                     std::to_string(env.world) + " processes of this run"};
  if (layout.ulysses * layout.ring != layout.sp)
    throw RunFailure{"ulysses_size " + std::to_string(layout.ulysses) + " does not divide sequence_parallel_size " +
                     std::to_string(layout.sp)};
  layout.dp = env.world / layout.sp;
  std::string why_heads;
  if (!dist::heads_fit_ulysses(m.hf.num_attention_heads, m.hf.num_key_value_heads, static_cast<int>(layout.ulysses),
                               &why_heads))
    throw RunFailure{why_heads};
  if (env.world <= 1) return;
  const auto transport = m.device.is_cuda() ? dist::Transport::Nccl : dist::Transport::Store;
  if (!run.opt.store) throw RunFailure{"a parallel run needs the rendezvous store (started without a launcher?)"};
  run.mesh = dist::build_mesh(env, layout, transport, run.opt.store, m.device, run.opt.comm_timeout);
  run.out->log("mesh: " + std::to_string(run.mesh.world) + " ranks = dp " + std::to_string(run.mesh.dp) +
               " x ulysses " + std::to_string(run.mesh.ulysses) + " x ring " + std::to_string(run.mesh.ring) +
               (run.mesh.ep > 1 ? " (experts split over " + std::to_string(run.mesh.ep) + ")" : std::string()) +
               " over " + (m.device.is_cuda() ? "NCCL" : "the store transport (CPU)") + "; this is rank " +
               std::to_string(run.mesh.rank) + " on " + m.device.str());
}

// Stage 2: the device, the model's weights, and the mesh.
LoadedModel load_model(RunContext& run) {
  const TrainConfig& c = run.c;
  LoadedModel m;
  const std::string alloc_conf = configure_cuda_allocator();
  m.device = pick_device(c, run.opt.env);
  run.probe.device = m.device;
  if (const std::string budget = cap_gpu_memory(
          c.gpu_memory_budget_gib, m.device.is_cuda() ? (m.device.has_index() ? m.device.index() : 0) : -1);
      !budget.empty())
    run.out->log("gpu_memory_budget_gib: " + budget);
  m.dtype = pick_dtype(c, m.device);
  torch::manual_seed(static_cast<std::uint64_t>(c.seed));
  if (m.device.is_cuda()) torch::cuda::manual_seed_all(static_cast<std::uint64_t>(c.seed));
  run.stage("load_model", c.model + " on " + m.device.str() + " in " + dtype_name(m.dtype) +
                              (m.device.is_cuda() ? ", allocator " + alloc_conf : std::string()) +
                              (c.fused_kernels ? ", fused kernels" : ", reference ops (fused_kernels: false)"));
  model::DecoderOptions mo;
  mo.device = m.device;
  mo.dtype = m.dtype;
  mo.attention = attention_backend_for(c.attn_impl);
  mo.fused_kernels = c.fused_kernels;
  mo.quant.bits = static_cast<int>(c.quant_bits);
  mo.quant.type = c.bnb_4bit_quant_type;
  mo.quant.double_quant = c.bnb_4bit_use_double_quant;
  mo.quant.compute_dtype = c.bnb_4bit_compute_dtype;
  auto loaded = model::load_causal_lm(c.model, mo);
  if (!loaded.ok()) throw RunFailure{"the model could not be loaded:\n" + format_all(loaded.diagnostics)};
  if (const std::string q = quant4_summary(loaded.value.lm); !q.empty()) run.out->log(q);
  if (c.fused_kernels)
    for (const std::string& op : fused_kernel_gaps(loaded.value.config.hf))
      run.out->log("fused kernels: " + loaded.value.config.hf.architecture + " falls back to the unfused path for " +
                   op);
  m.lm = loaded.value.lm;
  m.hf = loaded.value.config.hf;
  for (const auto& p : m.lm->parameters(true)) m.params += p.numel();
  for (const auto& [name, q] : model::quant4_weights(m.lm)) m.params += q->numel();  // not parameters
  m.pad_token_id = loaded.value.config.pad_token_id.value_or(0);
  build_run_mesh(run, m);
  run.start.mesh.dp = run.mesh.dp;
  run.start.mesh.sp = run.mesh.sp;
  run.start.mesh.ulysses = run.mesh.ulysses;
  run.start.mesh.ring = run.mesh.ring;
  run.start.mesh.ep = run.mesh.ep;
  run.start.mesh.world = run.mesh.world;
  run::DeviceInfo di;
  if (m.device.is_cuda()) {
    di.name = device_name(m.device);
    di.memory_bytes = gpu_memory_bytes(m.device.index());
  } else {
    di.name = "CPU (" + std::to_string(std::thread::hardware_concurrency()) + " threads)";
    di.memory_bytes = host_memory_bytes();
  }
  for (int r = 0; r < run.mesh.world; ++r) {  // rank 0's device stands for all (one kind per run)
    di.rank = r;
    run.start.devices.push_back(di);
  }
  run.start.model.name = c.model;
  run.start.model.params = m.params;
  return m;
}

// Stage 3: the tokenizer, the chat template and the tokenized (and packed) data. Rank 0
// tokenizes first and fills the token cache; the others then read it.
Data load_data(RunContext& run, const LoadedModel& m) {
  const TrainConfig& c = run.c;
  const std::string tok_file = (fs::path(c.model) / "tokenizer.json").string();
  auto tok = Tokenizer::load(tok_file);
  if (!tok.ok()) throw RunFailure{"the tokenizer could not be loaded:\n" + format_all(tok.diagnostics)};
  // An id the embedding cannot hold would surface at step 1 as LibTorch's "index out of range
  // in self"; here it names tokenizer.json and the token.
  if (const auto vocab = tok.value.check_vocab(m.hf.vocab_size, (fs::path(c.model) / "config.json").string());
      has_errors(vocab))
    throw RunFailure{"the tokenizer does not fit the model:\n" + format_all(vocab)};
  auto tmpl = data::template_for(c.template_name, tok.value, m.hf.family, c.template_file);
  if (!tmpl.ok()) throw RunFailure{format_all(tmpl.diagnostics)};
  report_diagnostics(tmpl.diagnostics, *run.out, "template");
  run.stage("load_data", std::to_string(c.dataset.size()) + " dataset(s), template " + std::string(tmpl.value.name()) +
                             ", max_length " + std::to_string(c.max_length));
  if (!run.main_rank) run.mesh.world_group->barrier();
  Data data = prepare_data(c, tok.value, tmpl.value, run.opt, *run.out);
  if (run.main_rank) run.mesh.world_group->barrier();
  return data;
}

// adapters: a PEFT LoRA adapter to start from (ms-swift's --adapters): its settings must be
// this run's (validate compares rank and alpha; the targets are compared here, where the
// model's modules are known), then its weights replace the fresh initialisation.
void load_start_adapter(RunContext& run, LoadedModel& m, const LoraSettings& ls) {
  const std::string& dir = run.c.adapters.front();
  auto theirs = read_adapter_config(dir);
  if (!theirs.ok()) throw RunFailure{"adapters: " + format_all(theirs.diagnostics)};
  const LoraSettings& a = theirs.value;
  // The targets that exist in this model ("all-linear" also names other families' modules).
  const std::vector<std::string> present = linear_module_names(m.hf);
  auto in_model = [&](std::vector<std::string> v) {
    std::erase_if(v,
                  [&](const std::string& x) { return std::find(present.begin(), present.end(), x) == present.end(); });
    std::sort(v.begin(), v.end());
    return v;
  };
  const std::vector<std::string> ours_t = in_model(ls.target_modules), theirs_t = in_model(a.target_modules);
  if (a.rank != ls.rank || a.alpha != ls.alpha || a.rslora != ls.rslora || ours_t != theirs_t)
    throw RunFailure{"adapters: " + dir + "/adapter_config.json was trained with r " + std::to_string(a.rank) +
                     ", lora_alpha " + fixed(a.alpha, 2) + ", use_rslora " + (a.rslora ? "true" : "false") +
                     ", target_modules " + text::join(theirs_t, " ") + "; this run has r " + std::to_string(ls.rank) +
                     ", lora_alpha " + fixed(ls.alpha, 2) + ", use_rslora " + (ls.rslora ? "true" : "false") +
                     ", target_modules " + text::join(ours_t, " ") + "; set the same to continue it"};
  auto d = load_adapter_weights(m.lm, dir);
  if (has_errors(d)) throw RunFailure{"adapters: " + format_all(d)};
  run.out->log("adapter weights loaded from " + dir + " (training continues them)");
}

// The tuner (LoRA adapters) and the memory policy (checkpointed layers, offload, tiling).
void apply_tuner_and_memory(RunContext& run, LoadedModel& m, Training& t) {
  const TrainConfig& c = run.c;
  if (c.tuner_type == "lora") {
    auto targets = resolve_target_modules(c.target_modules);
    if (!targets.ok()) throw RunFailure{format_all(targets.diagnostics)};
    LoraSettings ls;
    ls.rank = c.lora_rank;
    ls.alpha = c.lora_alpha;
    ls.dropout = c.lora_dropout;
    ls.rslora = c.use_rslora;
    ls.target_modules = targets.value;
    ls.target_parameters = c.target_parameters;
    if (apply_lora(m.lm, ls) == 0)  // PEFT's rule: at least one targeted module must exist
      throw RunFailure{"target_modules: none of " + text::join(c.target_modules, ", ") + " is a module of " +
                       m.hf.architecture + " (its linear modules: " + text::join(linear_module_names(m.hf), ", ") +
                       ")"};
    t.contents.lora = ls;
    if (!c.adapters.empty()) load_start_adapter(run, m, ls);
  }
  t.contents.base_model = c.model;
  std::optional<PlannerOptions> gpu;
  if (m.device.is_cuda()) {
    gpu.emplace();
    gpu->gpu_memory_bytes = gpu_memory_bytes(m.device.index());
  }
  MemoryPolicy memory;
  try {
    memory = memory_policy(c, m.hf, gpu);
  } catch (const MemoryPolicyRefused& e) {
    throw RunFailure{e.what()};
  }
  t.sched.why_memory = memory.why;
  if (!memory.over_capacity.empty()) run.out->log(memory.over_capacity);
  // A host that runs out kills the process without a message of its own: say so first.
  if (const std::string short_host = host_shortfall(memory, run.opt.env.local_world, available_host_bytes());
      !short_host.empty()) {
    run::WarningEvent w;
    w.code = "host_memory_short";
    w.message = short_host;
    run.out->event(w);
    run.out->log("warning: " + w.message);
  }
  run.ckpt_layers = memory.checkpoint;
  apply_memory_policy(m.lm, memory);
  // MoE: transformers' load-balancing loss when config.json asks for it (docs/moe.md); under
  // sequence parallelism its statistic is the whole row's; expert parallelism keeps this
  // rank's share of the experts (after the adapters exist, before the optimizer takes them).
  // router_aux_loss_coef > 0 turns it on with that weight (ms-swift's rule).
  t.sched.so.router_aux_loss_coef = !m.hf.is_moe()               ? 0.0
                                    : c.router_aux_loss_coef > 0 ? c.router_aux_loss_coef
                                    : m.hf.output_router_logits  ? m.hf.router_aux_loss_coef
                                                                 : 0.0;
  if (c.freeze_router && c.tuner_type == "full" && m.hf.is_moe()) {
    std::int64_t frozen = 0;
    for (auto& p : m.lm->named_parameters(true))
      if (p.key().find(".mlp.gate.") != std::string::npos) {
        p.value().set_requires_grad(false);
        ++frozen;
      }
    run.out->log("freeze_router: " + std::to_string(frozen) + " routers frozen");
  }
  if (m.hf.is_moe() && run.mesh.sp > 1)
    m.lm->set_router_stats_sum(dist::row_statistics_sum(run.mesh.sp_group.get()), run.mesh.sp);
  if (run.mesh.ep > 1) {
    try {
      m.lm->split_experts(dist::expert_group(run.mesh.ep_group.get()));
    } catch (const c10::Error& e) {
      throw RunFailure{std::string("expert_parallel_size: ") + e.what_without_backtrace()};
    }
    const std::int64_t share = m.hf.num_experts / run.mesh.ep;
    run.out->log("experts: " + std::to_string(share) + " of " + std::to_string(m.hf.num_experts) +
                 " per MoE layer on this rank (" + std::to_string(run.mesh.ep_rank * share) + " .. " +
                 std::to_string((run.mesh.ep_rank + 1) * share - 1) + ")");
  }
}

// Steps per epoch and in all, and the optimizer's and schedule's options.
Schedule plan_schedule(RunContext& run, const Data& data, Schedule s, bool weights_16bit) {
  const TrainConfig& c = run.c;
  const dist::Mesh& mesh = run.mesh;
  s.batch = c.per_device_train_batch_size;
  s.accum = c.gradient_accumulation_steps;
  s.global_batch = s.batch * mesh.dp;  // items per global micro-batch
  s.items = static_cast<std::int64_t>(data.items.size());
  if (mesh.dp > 1 && s.items < s.global_batch)
    throw RunFailure{std::to_string(s.items) + (c.packing ? " packed bins" : " samples") + " cannot feed dp " +
                     std::to_string(mesh.dp) + " x per_device_train_batch_size " + std::to_string(s.batch)};
  // With dp > 1 an epoch's last partial global micro-batch is dropped (every rank needs rows).
  const std::int64_t micro_per_epoch_all =
      mesh.dp > 1 ? s.items / s.global_batch : (s.items + s.global_batch - 1) / s.global_batch;
  s.steps_per_epoch = std::max<std::int64_t>(1, micro_per_epoch_all / s.accum);
  s.micro_per_epoch = s.steps_per_epoch * s.accum;
  run.total_steps =
      c.max_steps > 0
          ? c.max_steps
          : std::max<std::int64_t>(
                1, static_cast<std::int64_t>(std::ceil(c.num_train_epochs * static_cast<double>(s.steps_per_epoch))));
  s.so.adamw = {c.learning_rate, c.adam_beta1, c.adam_beta2, c.adam_epsilon, c.weight_decay};
  s.so.schedule.type = c.lr_scheduler_type;
  s.so.schedule.base_lr = c.learning_rate;
  s.so.schedule.total_steps = run.total_steps;
  s.so.schedule.warmup_steps = warmup_steps_for(c.warmup_steps, c.warmup_ratio, run.total_steps);
  s.so.max_grad_norm = c.max_grad_norm;
  set_memory_optimizer(s.so, c, weights_16bit);
  return s;
}

// offload_optimizer keeps fp32 master weights and moments of this rank's shard in host
// memory, for every rank on this host: refused before allocating when the host lacks it.
void check_offload_memory(const RunContext& run, const LoadedModel& m) {
  if (!run.c.offload_optimizer) return;
  const int local_world = std::max(1, run.opt.env.local_world);
  std::int64_t trainable = 0;
  for (const auto& p : m.lm->parameters(true))
    if (p.requires_grad()) trainable += p.numel();
  const std::int64_t need = 12 * ((trainable + run.mesh.world - 1) / run.mesh.world) * local_world;
  const std::int64_t have = available_host_bytes();
  if (have > 0 && need > have * 9 / 10)
    throw RunFailure{"offload_optimizer: the offloaded optimizer state of " + std::to_string(trainable) +
                     " trainable parameters over " + std::to_string(run.mesh.world) + " ranks needs " + gib(need) +
                     " of host memory on this host (" + std::to_string(local_world) +
                     " ranks x 12 bytes per parameter of a shard), but " + gib(have) +
                     " is available; use more ranks, offload_optimizer: false, or free host memory"};
}

// Stage 4: tuner, memory policy, schedule and the step engine with its optimizer; then
// run_start, the first line of events.jsonl, now that the run's shape is known.
Training build_optimizer(RunContext& run, LoadedModel& m, const Data& data) {
  const TrainConfig& c = run.c;
  Training t;
  apply_tuner_and_memory(run, m, t);
  t.sched = plan_schedule(run, data, std::move(t.sched), m.dtype != torch::kFloat32);
  check_offload_memory(run, m);
  try {
    t.engine.emplace(m.lm, t.sched.so, step_group(run.mesh, t.sched.so.zero.stage));
    if (run.mesh.ep > 1) t.engine->set_expert_parallel(run.mesh.ep_group.get(), run.mesh.expert_dp_group.get());
  } catch (const std::invalid_argument& e) {
    throw RunFailure{std::string("optimizer: ") + e.what()};
  }
  t.state.total_steps = run.total_steps;
  t.state.seed = c.seed;
  t.state.tuner_type = c.tuner_type;
  t.state.data_fingerprint = data.fingerprint;
  t.state.items_per_epoch = t.sched.items;
  t.state.hf.logging_steps = c.logging_steps;
  t.state.hf.eval_steps = c.eval_steps > 0 ? c.eval_steps : c.save_steps;
  t.state.hf.save_steps = c.save_steps;
  t.state.hf.train_batch_size = t.sched.batch;
  t.state.hf.num_train_epochs =
      static_cast<double>(run.total_steps) / static_cast<double>(std::max<std::int64_t>(1, t.sched.steps_per_epoch));

  run::RunStartEvent& rs = run.start;
  rs.totals.samples = static_cast<std::int64_t>(data.train.size());
  rs.totals.tokens = data.train_tokens;
  rs.totals.total_steps = run.total_steps;
  rs.totals.epochs = static_cast<double>(run.total_steps) / static_cast<double>(t.sched.steps_per_epoch);
  rs.model.trainable_params = t.engine->trainable_params();
  Optimizer& optimizer = t.engine->optimizer();
  rs.optimizer.name = optimizer.name();
  rs.optimizer.state_bytes = optimizer.state_bytes();
  rs.optimizer.host_state_bytes = optimizer.host_state_bytes();
  rs.optimizer.sharded_over = c.zero_stage > 0 ? run.mesh.world : 1;
  run.out->write_run_start(rs);
  run.out->log("optimizer: " + optimizer.name() + ", state " + gib(optimizer.state_bytes()) + " on the device" +
               (optimizer.host_state_bytes() > 0 ? ", " + gib(optimizer.host_state_bytes()) + " in host memory"
                                                 : std::string()) +
               (c.zero_stage > 0 ? " per rank (sharded over " + std::to_string(run.mesh.world) + ")" : std::string()) +
               (t.sched.so.zero.fp32_master_only ? " (optimizer_dtype fp32: fp32 master weights, moments and gradients)"
                : c.tuner_type == "full" && m.dtype != torch::kFloat32 && t.sched.so.zero.stage == 0 && !c.use_galore
                    ? " (moments and update in " + dtype_name(m.dtype) + ", optimizer_dtype " + c.optimizer_dtype + ")"
                    : std::string()) +
               (c.use_galore ? "; GaLore rank " + std::to_string(c.galore_rank) + ", projection refreshed every " +
                                   std::to_string(c.galore_update_proj_gap) + " steps"
                             : std::string()));
  run.out->log("model: " + std::to_string(m.params) + " parameters, " + std::to_string(t.engine->trainable_params()) +
               " trainable (" + c.tuner_type + "); activation checkpointing: " + t.sched.why_memory);
  const Schedule& s = t.sched;
  run.out->log("schedule: " + std::to_string(run.total_steps) + " steps (" + std::to_string(s.steps_per_epoch) +
               " per epoch: " + std::to_string(s.items) + (c.packing ? " packed bins" : " samples") + " / batch " +
               std::to_string(s.batch) + (run.mesh.dp > 1 ? " x dp " + std::to_string(run.mesh.dp) : std::string()) +
               " / accumulation " + std::to_string(s.accum) + "), " + c.lr_scheduler_type + " with " +
               std::to_string(s.so.schedule.warmup_steps) + " warmup steps");
  return t;
}

// Stage 5: resume_from_checkpoint. The checkpoint is checked before anything is loaded from
// it (a finished checkpoint, its step within this schedule, its files as saved, the same
// tuner, seed, steps and data), then weights, optimizer and generator states are restored.
void resume(RunContext& run, const Data& data, Training& t) {
  const TrainConfig& c = run.c;
  if (c.resume_from_checkpoint.empty()) return;
  const fs::path from = c.resume_from_checkpoint;
  run.stage("resume", "from " + from.string());
  auto prev = read_trainer_state(from);
  if (!prev.ok()) throw RunFailure{format_all(prev.diagnostics)};
  const TrainerState& p = prev.value;
  auto mismatch = [&](const std::string& what, const std::string& was, const std::string& now) {
    throw RunFailure{"resume_from_checkpoint: " + from.string() + " was trained with " + what + " " + was +
                     ", this run has " + now + "; resume needs the same setting"};
  };
  if (p.tuner_type != c.tuner_type) mismatch("tuner_type", p.tuner_type, c.tuner_type);
  if (p.data_fingerprint != data.fingerprint)
    mismatch("data (tokenized cache key)", p.data_fingerprint, data.fingerprint);
  if (p.seed != c.seed) mismatch("seed", std::to_string(p.seed), std::to_string(c.seed));
  if (p.total_steps != run.total_steps)
    mismatch("total steps", std::to_string(p.total_steps), std::to_string(run.total_steps));
  const Diagnostics checked = validate_resume_source(from, p, run.total_steps, t.sched.accum);
  if (has_errors(checked)) throw RunFailure{"resume_from_checkpoint: " + format_all(checked)};
  report_diagnostics(checked, *run.out, "resume");
  CheckpointContents at = t.contents;
  at.rank = run.mesh.rank;
  at.world = run.mesh.world;
  auto d = load_checkpoint(from, *t.engine, at);
  if (has_errors(d)) throw RunFailure{"resume_from_checkpoint: " + format_all(d)};
  t.engine->set_completed_steps(p.step);
  run.step = p.step;
  t.micro = p.micro_batches;
  t.state.tokens_total = p.tokens_total;
  for (const HfLogEntry& e : p.hf.log_history)  // the history up to the checkpoint, as HF's Trainer keeps it
    if (e.step <= p.step) t.state.hf.log_history.push_back(e);
  run.out->log("resumed at step " + std::to_string(run.step) + " of " + std::to_string(run.total_steps));
}

// A ZeRO checkpoint: every rank writes its optimizer shard beside the checkpoint, and all
// agree whether every rank succeeded. Returns the shards' paths for rank 0 to move in.
std::vector<fs::path> save_optimizer_shards(RunContext& run, Training& t, std::int64_t at_step) {
  auto shard_path = [&](int r) {
    return run.dir.checkpoints_dir() /
           (".checkpoint-" + std::to_string(at_step) + "-" + optimizer_shard_name(r, run.mesh.world));
  };
  auto mine = save_optimizer_shard(shard_path(run.mesh.rank), *t.engine);
  torch::Tensor failed = torch::tensor({mine.ok() ? std::int64_t{0} : std::int64_t{1}}, torch::kInt64)
                             .to(t.engine->model()->lm_head_weight().device());
  run.mesh.world_group->all_reduce(failed);
  const std::int64_t failures = failed.cpu().item<std::int64_t>();
  if (failures > 0) {
    std::error_code ignore;
    fs::remove(shard_path(run.mesh.rank), ignore);
    throw RunFailure{"checkpoint-" + std::to_string(at_step) + " could not be written: " + std::to_string(failures) +
                     " rank(s) could not write their optimizer shard" +
                     (mine.ok()
                          ? std::string()
                          : " (rank " + std::to_string(run.mesh.rank) + ": " + format_all(mine.diagnostics) + ")") +
                     (t.last_saved ? "; checkpoint-" + std::to_string(*t.last_saved) + " is intact" : std::string())};
  }
  std::vector<fs::path> shards;
  for (int r = 0; r < run.mesh.world; ++r) shards.push_back(shard_path(r));
  return shards;
}

// Writes checkpoint-<at_step>; a checkpoint that cannot be written ends the run (its reason
// names the last checkpoint that is intact).
void save(RunContext& run, Training& t, std::int64_t at_step) {
  const auto ts = Clock::now();
  CheckpointContents with = t.contents;
  // Expert parallelism: each rank's optimizer state holds its own experts' (one file per rank,
  // as ZeRO's), and the experts join rank 0's model for the save (a collective gather of what
  // the checkpoint writes: the expert adapters, or the whole experts of a full fine-tune), each
  // rank back to its share afterwards, also when the save fails.
  if (t.engine->optimizer().sharded_state() || run.mesh.ep > 1) {
    with.optimizer_shards = save_optimizer_shards(run, t, at_step);
  }
  struct WholeExperts {
    model::CausalLM lm;
    bool on, adapters_only;
    WholeExperts(model::CausalLM m, bool o, bool a) : lm(std::move(m)), on(o), adapters_only(a) {
      if (on) lm->set_experts_whole(true, adapters_only);
    }
    ~WholeExperts() {
      if (on) lm->set_experts_whole(false, adapters_only);
    }
  } whole(t.engine->model(), run.mesh.ep > 1, t.contents.lora.has_value());
  if (!run.main_rank) {  // the weights are the same on every rank; rank 0 writes them
    t.last_saved = at_step;
    return;
  }
  run.progress();
  t.state.step = at_step;
  t.state.elapsed_s = std::chrono::duration<double>(Clock::now() - run.t0).count();
  t.state.hf.epoch = static_cast<double>(t.micro) / static_cast<double>(t.sched.micro_per_epoch);
  auto saved = save_checkpoint(run.dir.checkpoint(at_step), *t.engine, with, t.state);
  if (!saved.ok())
    throw RunFailure{"checkpoint-" + std::to_string(at_step) +
                     " could not be written: " + text::trim(format_all(saved.diagnostics)) +
                     (t.last_saved ? "; checkpoint-" + std::to_string(*t.last_saved) + " is intact"
                                   : std::string("; no earlier checkpoint exists"))};
  run::CheckpointEvent e;
  e.step = at_step;
  e.path = "checkpoints/checkpoint-" + std::to_string(at_step);
  e.bytes = saved.value;
  e.duration_s = std::chrono::duration<double>(Clock::now() - ts).count();
  run.out->event(e);
  t.last_saved = at_step;
  run.out->log("saved " + e.path + " (" + fixed(static_cast<double>(saved.value) / 1e6, 1) + " MB in " +
               fixed(e.duration_s, 2) + " s)");
  for (const auto& p : rotate_checkpoints(run.dir.checkpoints_dir(), run.c.save_total_limit))
    run.out->log("removed " + p.filename().string() + " (save_total_limit " + std::to_string(run.c.save_total_limit) +
                 ")");
}

// The rows the train loop and evaluation feed the engine: a whole row of this rank's dp
// slice, as this rank computes it (its sp shard), in the order of the epochs' permutations.
class Feeder {
 public:
  Feeder(const RunContext& run, const LoadedModel& m, const Data& data, const Schedule& s)
      : run_(run), m_(m), data_(data), s_(s) {}

  PackedRow local(PackedRow row) const {
    row = row.to(m_.device);
    if (run_.mesh.sp == 1) return row;
    return dist::shard_row(row, run_.mesh.ulysses_group.get(), run_.mesh.ring_group.get(), m_.pad_token_id);
  }

  // Validation rows: batch samples per row, in order; row i belongs to dp rank i mod dp.
  std::vector<PackedRow> validation_rows() const {
    std::vector<PackedRow> rows;
    const auto batch = static_cast<std::size_t>(s_.batch);
    for (std::size_t i = 0, n = 0; i < data_.val.size(); i += batch, ++n) {
      if (static_cast<int>(n % static_cast<std::size_t>(run_.mesh.dp)) != run_.mesh.dp_rank) continue;
      std::vector<const data::TokenizedSample*> ptrs;
      for (std::size_t j = i; j < std::min(data_.val.size(), i + batch); ++j) ptrs.push_back(&data_.val[j]);
      rows.push_back(local(row_of(ptrs)));
    }
    return rows;
  }

  // Items of global micro-batch m: the epoch's permutation, then consecutive runs of
  // `global_batch`; this rank's are the dp_rank-th run of `batch` within it.
  PackedRow micro_batch(std::int64_t m) {
    const std::int64_t epoch = m / s_.micro_per_epoch, k = m % s_.micro_per_epoch;
    if (epoch != perm_epoch_) {
      perm_ = data::seeded_permutation(data_.items.size(), data::mix_seed(static_cast<std::uint64_t>(run_.c.seed),
                                                                          1000 + static_cast<std::uint64_t>(epoch)));
      perm_epoch_ = epoch;
    }
    std::vector<const data::TokenizedSample*> ptrs;
    for (std::int64_t b = 0; b < s_.batch; ++b) {
      const auto pos = static_cast<std::size_t>(k * s_.global_batch + run_.mesh.dp_rank * s_.batch + b);
      if (pos >= perm_.size()) break;
      for (std::size_t i : data_.items[perm_[pos]]) ptrs.push_back(&data_.train[i]);
    }
    if (ptrs.empty())  // an epoch's last global micro-batch may leave a dp rank without items
      throw RunFailure{"dp rank " + std::to_string(run_.mesh.dp_rank) + " has no data in micro-batch " +
                       std::to_string(m) + "; the dataset is too small for per_device_train_batch_size x dp"};
    return local(row_of(ptrs));
  }

 private:
  const RunContext& run_;
  const LoadedModel& m_;
  const Data& data_;
  const Schedule& s_;
  std::int64_t perm_epoch_ = -1;
  std::vector<std::size_t> perm_;
};

// Eval loss over the validation rows (nothing without validation data).
void evaluate(RunContext& run, Training& t, const Data& data, const std::vector<PackedRow>& val_rows) {
  if (data.val.empty()) return;
  const auto te = Clock::now();
  const auto [loss, targets] = t.engine->evaluate(val_rows);
  run::EvalEvent e;
  e.step = run.step;
  e.loss = loss;
  e.tokens = targets;
  e.samples = static_cast<std::int64_t>(data.val.size());
  e.duration_s = std::chrono::duration<double>(Clock::now() - te).count();
  run.out->event(e);
  HfLogEntry h;
  h.step = run.step;
  h.epoch = static_cast<double>(t.micro) / static_cast<double>(t.sched.micro_per_epoch);
  h.eval = true;
  h.loss = loss;
  t.state.hf.log_history.push_back(h);
  run.out->log("eval step " + std::to_string(run.step) + ": loss " + fixed(loss, 4) + " over " +
               std::to_string(targets) + " tokens");
}

// Every rank's memory for a step event (gathered to rank 0 in a parallel run).
std::vector<run::RankMemory> gather_memory(const RunContext& run, const torch::Device& device) {
  const run::RankMemory mine = run.probe.read();
  std::vector<run::RankMemory> all;
  if (!run.mesh.distributed()) {
    all.push_back(mine);
    all.back().rank = 0;
    return all;
  }
  torch::Tensor m =
      torch::tensor({mine.vram_allocated_bytes, mine.vram_peak_bytes, mine.vram_reserved_bytes}, torch::kInt64)
          .to(device);
  m = run.mesh.world_group->all_gather(m).cpu().view({run.mesh.world, 3});
  for (int rk = 0; rk < run.mesh.world; ++rk) {
    run::RankMemory rm;
    rm.rank = rk;
    rm.vram_allocated_bytes = m[rk][0].item<std::int64_t>();
    rm.vram_peak_bytes = m[rk][1].item<std::int64_t>();
    rm.vram_reserved_bytes = m[rk][2].item<std::int64_t>();
    all.push_back(rm);
  }
  return all;
}

// A non-finite loss or gradient norm: the step's event, a nan_loss warning, and the run fails
// (the update was not applied).
[[noreturn]] void fail_non_finite(RunContext& run, const StepResult& r) {
  const TrainConfig& c = run.c;
  run::StepEvent e;
  e.step = run.step + 1;
  e.total_steps = run.total_steps;
  e.loss = r.loss;
  e.lr = r.lr;
  e.grad_norm = r.grad_norm;
  run.out->event(e);
  run::WarningEvent w;
  w.code = "nan_loss";
  w.step = run.step + 1;
  const bool loss_bad = !std::isfinite(r.loss);
  const double bad = loss_bad ? r.loss : r.grad_norm;
  w.message = std::string(loss_bad ? "the loss" : "the gradient norm") + " is " +
              (std::isnan(bad) ? "NaN" : "infinite") + " at step " + std::to_string(run.step + 1);
  run.out->event(w);
  throw RunFailure{w.message + "; the update was not applied. Lower learning_rate (now " + fixed(c.learning_rate, 8) +
                   "), keep max_grad_norm > 0 (now " + fixed(c.max_grad_norm, 3) +
                   "), check the data, or use bfloat16 instead of float16"};
}

// The step event and log line of a finished step.
void report_step(RunContext& run, Training& t, const StepResult& r, double dt, double avg_step_s,
                 const torch::Device& device, std::vector<run::CollectiveStat> collectives, double comm_s) {
  run::StepEvent e;
  e.step = run.step;
  e.total_steps = run.total_steps;
  e.epoch = static_cast<double>(t.micro) / static_cast<double>(t.sched.micro_per_epoch);
  e.loss = r.loss;
  e.lr = r.lr;
  e.grad_norm = r.grad_norm;
  if (t.sched.so.router_aux_loss_coef > 0) e.aux_loss = r.aux_loss;
  e.tokens = r.tokens;
  e.tokens_total = t.state.tokens_total;
  e.step_time_s = dt;
  e.tokens_per_s = dt > 0 ? static_cast<double>(r.tokens) / dt : 0;
  e.eta_s = avg_step_s * static_cast<double>(run.total_steps - run.step);
  e.memory = gather_memory(run, device);
  e.collectives = std::move(collectives);
  e.comm_wait_s = comm_s;
  run.out->event(e);
  HfLogEntry h;
  h.step = run.step;
  h.epoch = e.epoch;
  h.loss = r.loss;
  h.learning_rate = r.lr;
  h.grad_norm = r.grad_norm;
  h.num_input_tokens_seen = t.state.tokens_total;
  t.state.hf.log_history.push_back(h);
  run.out->log("step " + std::to_string(run.step) + "/" + std::to_string(run.total_steps) + "  loss " +
               fixed(r.loss, 4) + "  lr " + fixed(r.lr * 1e6, 2) + "e-6  grad_norm " + fixed(r.grad_norm, 3) + "  " +
               std::to_string(static_cast<std::int64_t>(e.tokens_per_s)) + " tok/s  " + fixed(dt * 1000, 0) + " ms");
}

// Stage 6: optimizer steps until the schedule ends or a stop is agreed (all ranks agree: they
// may see SIGTERM at different steps). Returns true when stopped on request.
bool train_loop(RunContext& run, const LoadedModel& m, const Data& data, Training& t,
                const std::vector<PackedRow>& val_rows, Feeder& feed) {
  const TrainConfig& c = run.c;
  run.stage("train", std::to_string(run.total_steps - run.step) + " steps to go");
  run.progress();
  const std::int64_t eval_every = c.eval_steps > 0 ? c.eval_steps : c.save_steps;
  double avg_step_s = 0;
  auto stop_agreed = [&]() {
    bool stop = g_stop_signals.load() > 0;
    if (!run.mesh.distributed()) return stop;
    torch::Tensor f = torch::tensor({stop ? 1.0f : 0.0f}).to(m.device);
    run.mesh.world_group->all_reduce(f);
    return f.cpu().item<float>() > 0;
  };
  run.mesh.take_stats(nullptr);
  while (run.step < run.total_steps) {
    run.check_outputs();
    if (stop_agreed()) return true;
    const auto ts = Clock::now();
    run.probe.reset_peak();
    std::vector<PackedRow> rows;
    for (std::int64_t a = 0; a < t.sched.accum; ++a) rows.push_back(feed.micro_batch(t.micro + a));
    const StepResult r = t.engine->step(rows);
    if (m.device.is_cuda()) torch::cuda::synchronize(m.device.index());
    const double dt = std::chrono::duration<double>(Clock::now() - ts).count();
    double step_comm_s = 0;
    std::vector<run::CollectiveStat> step_collectives = run.mesh.take_stats(&step_comm_s);
    if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) fail_non_finite(run, r);
    t.micro += t.sched.accum;
    ++run.step;
    t.state.micro_batches = t.micro;
    t.state.tokens_total += r.tokens;
    t.state.last_loss = r.loss;
    avg_step_s = run.step == 1 ? dt : 0.9 * avg_step_s + 0.1 * dt;
    run.progress();
    if (run.step % c.logging_steps == 0 || run.step == 1 || run.step == run.total_steps)
      report_step(run, t, r, dt, avg_step_s, m.device, std::move(step_collectives), step_comm_s);
    if (eval_every > 0 && run.step % eval_every == 0 && run.step != run.total_steps) evaluate(run, t, data, val_rows);
    if (run.step % c.save_steps == 0 && run.step != run.total_steps) save(run, t, run.step);
  }
  return false;
}

// Stage 7: the end of training. Stopped on request: a checkpoint of the step reached (if any
// step was taken), status "stopped". Else the final evaluation and checkpoint, "completed".
int final_save(RunContext& run, Training& t, const Data& data, const std::vector<PackedRow>& val_rows, bool stopped) {
  if (stopped && run.step < run.total_steps) {
    run.stage("save", "stop requested: saving step " + std::to_string(run.step));
    run.progress(run::RunState::Stopping);
    if (run.step > 0 && t.last_saved != run.step) save(run, t, run.step);
    run.check_outputs();
    return run.finish(
        run::RunState::Stopped, 0,
        "stopped on request after step " + std::to_string(run.step) +
            (run.step > 0 ? "; resume with resume_from_checkpoint: " + run.dir.checkpoint(run.step).string()
                          : std::string()));
  }
  evaluate(run, t, data, val_rows);
  run.stage("save", "final checkpoint of step " + std::to_string(run.step));
  if (t.last_saved != run.step) save(run, t, run.step);
  run.out->log("done: " + std::to_string(run.step) + " steps in " +
               fixed(std::chrono::duration<double>(Clock::now() - run.t0).count(), 1) + " s; final loss " +
               fixed(t.state.last_loss, 4) + "; output " + run.dir.checkpoint(run.step).string());
  run.check_outputs();
  return run.finish(run::RunState::Completed, 0, "");
}

// The stages in order; between them, a failed write or a stop request ends the run.
int run_stages(RunContext& run) {
  LoadedModel model = load_model(run);
  run.check_stop("loading the model");
  const Data data = load_data(run, model);
  run.check_stop("loading the data");
  Training t = build_optimizer(run, model, data);
  run.check_stop("building the optimizer");
  resume(run, data, t);
  run.check_outputs();
  Feeder feed(run, model, data, t.sched);
  const std::vector<PackedRow> val_rows = feed.validation_rows();
  const bool stopped = train_loop(run, model, data, t, val_rows, feed);
  return final_save(run, t, data, val_rows, stopped);
}

}  // namespace

void request_stop() { g_stop_signals.fetch_add(1); }

int run_training(const TrainConfig& c, const run::RunDir& dir, const TrainerOptions& opt) {
  RunContext run(c, dir, opt);
  open_run_directory(run);
  // Every failure of every stage ends here, in one place: the reason goes to events.jsonl's
  // run_end, status.json and the log, whichever of them still works.
  try {
    run.check_outputs();
    return run_stages(run);
  } catch (const RunFailure& f) {
    return run.finish(run::RunState::Failed, 1, f.reason);
  } catch (const StopBeforeTraining& s) {
    return run.finish(run::RunState::Stopped, 0,
                      "stopped on request while " + s.stage +
                          ", before the first step; nothing was trained, so there "
                          "is no checkpoint to resume from");
  } catch (const c10::OutOfMemoryError& e) {
    const run::RankMemory m = run.probe.read();
    std::string first = e.what_without_backtrace();
    first = first.substr(0, first.find('\n'));
    return run.finish(run::RunState::Failed, 1,
                      "CUDA out of memory at step " + std::to_string(run.step + 1) + " (peak allocated " +
                          gib(m.vram_peak_bytes) + ", reserved " + gib(m.vram_reserved_bytes) + "): " + first + ". " +
                          oom_advice(c, run.ckpt_layers));
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    return run.finish(run::RunState::Failed, 1, "LibTorch error at step " + std::to_string(run.step + 1) + ": " + msg);
  } catch (const std::exception& e) {
    return run.finish(run::RunState::Failed, 1,
                      std::string("error at step ") + std::to_string(run.step + 1) + ": " + e.what());
  }
}

}  // namespace odyssey::train
