#include "run_fixture.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "config/preset_io.h"
#include "run/run_dir.h"

namespace odyssey::testing {

namespace fs = std::filesystem;

run::StepEvent make_step(int step, const FakeRun& f, std::mt19937& rng) {
  std::normal_distribution<double> noise(0.0, 1.0);
  const double t = static_cast<double>(step) / std::max(1, f.total_steps);
  run::StepEvent s;
  s.time = 1732900000.0 + step * 2.1;
  s.elapsed_s = 30.0 + step * 2.1;
  s.step = step;
  s.total_steps = f.total_steps;
  s.epoch = t;
  s.loss = 1.15 + 1.4 * std::exp(-6.0 * t) + 0.06 * noise(rng) * (1.2 - t);
  if (step == f.nan_step) s.loss = std::nan("");
  const double warm = std::min(1.0, step / 25.0);
  s.lr = f.learning_rate * warm * 0.5 * (1 + std::cos(M_PI * t));
  s.grad_norm = std::max(0.05, 0.35 + 1.2 * std::exp(-8 * t) + 0.05 * noise(rng));
  s.tokens = 2 * 32768;
  s.tokens_total = static_cast<std::int64_t>(step) * s.tokens;
  s.step_time_s = 2.1 + 0.05 * noise(rng);
  s.tokens_per_s = static_cast<double>(s.tokens) / s.step_time_s;
  s.eta_s = (f.total_steps - step) * 2.1;
  for (int r = 0; r < f.ranks; ++r) {
    run::RankMemory m;
    m.rank = r;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    m.vram_allocated_bytes = static_cast<std::int64_t>((18.0 + r * 0.4) * gib);
    m.vram_peak_bytes = static_cast<std::int64_t>((41.5 + r * 0.8 + 0.3 * noise(rng)) * gib);
    m.vram_reserved_bytes = static_cast<std::int64_t>((46.0 + r * 0.8 + std::min(2.0, step / 100.0)) * gib);
    s.memory.push_back(m);
  }
  run::CollectiveStat a2a{"all_to_all", "ulysses", f.ranks, 112, 112LL * 64 << 20, 0, 0};
  a2a.time_s = 112 * 0.000135 * (1 + 0.05 * std::abs(noise(rng)));
  a2a.bus_bandwidth_gb_per_s =
      static_cast<double>(a2a.bytes) / a2a.time_s * run::bus_bandwidth_factor(a2a.op, a2a.group_size) / 1e9;
  run::CollectiveStat ar{"all_reduce", "world", f.ranks, 4, 4LL * 256 << 20, 0, 0};
  ar.time_s = 4 * 0.0018 * (1 + 0.05 * std::abs(noise(rng)));
  ar.bus_bandwidth_gb_per_s =
      static_cast<double>(ar.bytes) / ar.time_s * run::bus_bandwidth_factor(ar.op, ar.group_size) / 1e9;
  s.collectives = {a2a, ar};
  return s;
}

void append_raw(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::app);
  out << bytes;
}

fs::path write_run(const fs::path& root, const std::string& name, const FakeRun& f) {
  const run::RunDir dir(root / name);
  fs::create_directories(dir.logs_dir());
  fs::create_directories(dir.checkpoints_dir());
  TrainConfig cfg;
  cfg.model = "Qwen/Qwen2.5-7B-Instruct";
  cfg.dataset = {"data/long-docs.jsonl#20000"};
  cfg.max_length = 65536;
  cfg.learning_rate = f.learning_rate;
  cfg.sequence_parallel_size = f.ranks;
  cfg.max_steps = f.total_steps;
  std::ofstream(dir.config()) << save_preset_text(cfg);

  auto w = run::EventWriter::open(dir.events());
  run::RunStartEvent start;
  start.time = 1732900000.0;
  start.run_id = name;
  start.hostname = "gpu-node-1";
  start.mesh.world = start.mesh.sp = start.mesh.ulysses = start.mesh.nproc_per_node = f.ranks;
  for (int r = 0; r < f.ranks; ++r) start.devices.push_back({r, f.device, 150754820096});
  start.totals.total_steps = f.total_steps;
  start.model = {"Qwen2.5-7B-Instruct", 7615616512, 40370176};
  start.optimizer = f.optimizer;
  w.value.write(start);
  w.value.write(run::StageEvent{1732900001.0, 1.0, "load_model", "7.6B parameters"});
  std::mt19937 rng(f.seed);
  std::ofstream log(dir.rank_log(0));
  for (int step = 1; step <= f.steps; ++step) {
    run::StepEvent s = make_step(step, f, rng);
    for (int i = 0; i < f.log_lines_per_step; ++i)
      log << "[rank0] step " << step << "/" << f.total_steps << " loss " << s.loss << " lr " << s.lr << " tok/s "
          << static_cast<long>(s.tokens_per_s) << "\n";
    w.value.write(s);
    if (f.eval_every > 0 && step % f.eval_every == 0)
      w.value.write(run::EvalEvent{s.time + 1, s.elapsed_s + 1, step, s.loss + 0.08, 1 << 20, 64, 12.0, {}});
    if (f.checkpoint_every > 0 && step % f.checkpoint_every == 0)
      w.value.write(run::CheckpointEvent{s.time + 2, s.elapsed_s + 2, step,
                                         "checkpoints/checkpoint-" + std::to_string(step), 80 << 20, 3.0});
  }
  run::RunStatus st;
  st.run_id = name;
  st.hostname = run::this_hostname();
  st.started_at = run::unix_now() - (30.0 + f.steps * 2.1);  // as the events' elapsed_s says
  st.heartbeat = run::unix_now();
  st.step = f.steps;
  st.total_steps = f.total_steps;
  st.pid = 0;
  st.state = run::RunState::Running;
  if (f.write_run_end) {
    run::RunEndEvent e;
    e.time = 1732900000.0 + f.steps * 2.1 + 5;
    e.elapsed_s = f.steps * 2.1 + 35;
    e.step = f.steps;
    e.status = f.final_state == run::RunState::Failed    ? run::RunOutcome::Failed
               : f.final_state == run::RunState::Stopped ? run::RunOutcome::Stopped
                                                         : run::RunOutcome::Completed;
    e.reason = f.reason;
    e.exit_code = f.final_state == run::RunState::Failed ? 1 : 0;
    w.value.write(e);
    st.state = f.final_state;
    st.reason = f.reason;
    st.exit_code = e.exit_code;
    if (f.final_state == run::RunState::Failed) {
      st.failed_rank = 1;
      st.last_error_lines = {"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.28 GiB.",
                             "GPU 1 has a total capacity of 139.72 GiB of which 3.10 GiB is free."};
    }
  } else {
    // A live run: point the liveness check at this very process, so it reads as alive.
    st.pid = ::getpid();
  }
  run::StatusFile(dir.status()).write(st);
  return dir.root();
}

namespace {
double status_field_mib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(std::string(key).size())) / 1024.0;
  return -1;
}
}  // namespace

double peak_rss_mib() { return status_field_mib("VmHWM:"); }
double current_rss_mib() { return status_field_mib("VmRSS:"); }

}  // namespace odyssey::testing
