// The events.jsonl schema: the one definition that the engine's writer and the GUI's
// reader share (docs/run-contract.md is its prose). Version rules: a minor bump only adds
// optional fields or event types, which older readers ignore; a major bump changes the
// meaning of something, and older readers refuse such a file with a message rather than
// draw wrong charts.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/diagnostic.h"

namespace odyssey::run {

inline constexpr int kSchemaMajor = 1;
inline constexpr int kSchemaMinor = 0;
// Every events.jsonl line and status.json carry this as "v".
inline constexpr std::string_view kSchemaVersion = "1.0";

// The "type" of each line.
namespace event_type {
inline constexpr std::string_view kRunStart = "run_start";
inline constexpr std::string_view kStage = "stage";
inline constexpr std::string_view kStep = "step";
inline constexpr std::string_view kEval = "eval";
inline constexpr std::string_view kCheckpoint = "checkpoint";
inline constexpr std::string_view kWarning = "warning";
inline constexpr std::string_view kRunEnd = "run_end";
}  // namespace event_type

// Known CollectiveStat::op and ::group values. They are open sets (plain strings), so a
// writer that learns a new collective does not break older readers.
namespace collective_op {
inline constexpr std::string_view kAllReduce = "all_reduce";
inline constexpr std::string_view kAllToAll = "all_to_all";
inline constexpr std::string_view kAllGather = "all_gather";
inline constexpr std::string_view kReduceScatter = "reduce_scatter";
inline constexpr std::string_view kSendRecv = "send_recv";
inline constexpr std::string_view kBroadcast = "broadcast";
inline constexpr std::string_view kBarrier = "barrier";
}  // namespace collective_op
namespace collective_group {
inline constexpr std::string_view kDp = "dp";
inline constexpr std::string_view kSp = "sp";
inline constexpr std::string_view kUlysses = "ulysses";
inline constexpr std::string_view kRing = "ring";
inline constexpr std::string_view kWorld = "world";
}  // namespace collective_group

// Every event carries both clocks: `time` (unix seconds, comparable across machines and
// with logs) and `elapsed_s` (monotonic seconds since the run started, immune to clock
// steps, what the charts use as x when not plotting against step).
// EventWriter stamps both when `time` is 0 (see event_writer.h).

struct MeshShape {
  int world = 1;
  int dp = 1;
  int sp = 1;  // sp = ulysses × ring
  int ulysses = 1;
  int ring = 1;
  int ep = 1;  // expert parallelism: ranks of a sequence-parallel group that split the experts
  int nnodes = 1;
  int nproc_per_node = 1;
};

struct DeviceInfo {
  int rank = 0;
  std::string name;  // e.g. "NVIDIA H200"
  std::int64_t memory_bytes = 0;
};

struct RunTotals {
  std::int64_t samples = 0;  // training samples per epoch after filtering
  std::int64_t tokens = 0;   // training tokens per epoch
  std::int64_t total_steps = 0;
  double epochs = 0;
};

struct ModelSummary {
  std::string name;  // model id or directory
  std::int64_t params = 0;
  std::int64_t trainable_params = 0;
};

// The optimizer and the memory its state takes on each rank (docs/optimizers.md).
struct OptimizerSummary {
  std::string name;                   // adamw, galore_adamw, q_galore_adamw8bit, zero1_adamw, zero2_adamw
  std::int64_t state_bytes = 0;       // per rank, on the device: moments, master weights, projections
  std::int64_t host_state_bytes = 0;  // per rank, in host memory (ZeRO offload)
  int sharded_over = 1;               // ranks the state is split across (ZeRO: world)
};

struct RunStartEvent {
  double time = 0;
  double elapsed_s = 0;
  std::string run_id;  // the run directory's name
  std::string odyssey_version;
  std::string config_path;  // relative to the run directory, normally "config.yaml"
  std::string hostname;     // rank 0's host
  MeshShape mesh;
  std::vector<DeviceInfo> devices;  // one per rank
  RunTotals totals;
  ModelSummary model;
  OptimizerSummary optimizer;  // written when name is set
};

// What the engine is doing before and between steps (loading the model, tokenising),
// so a monitor has something to say before the first step.
struct StageEvent {
  double time = 0;
  double elapsed_s = 0;
  std::string stage;  // load_model, load_data, tokenize, train, save, ...
  std::string message;
};

struct RankMemory {
  int rank = 0;
  std::int64_t vram_allocated_bytes = 0;  // live tensors at the end of the step
  std::int64_t vram_peak_bytes = 0;       // peak allocated during the step
  std::int64_t vram_reserved_bytes = 0;   // held by the caching allocator
  // Cached but unused memory: what fragmentation costs.
  std::int64_t fragmentation_bytes() const { return vram_reserved_bytes - vram_allocated_bytes; }
};

// One collective on one group, summed over a step as seen by one rank (all ranks issue
// the same sequence). time_s is the slowest rank's total, since it sets the pace.
struct CollectiveStat {
  std::string op;     // collective_op::*
  std::string group;  // collective_group::*
  int group_size = 1;
  std::int64_t calls = 0;
  std::int64_t bytes = 0;  // per rank, nccl-tests' "size"
  double time_s = 0;
  double bus_bandwidth_gb_per_s = 0;  // nccl-tests' busbw, 1 GB = 1e9 bytes
};

struct StepEvent {
  double time = 0;
  double elapsed_s = 0;
  std::int64_t step = 0;  // 1-based optimizer step
  std::int64_t total_steps = 0;
  double epoch = 0;  // fractional progress, 1.5 = half way through the second epoch
  double loss = 0;   // may be NaN or ±inf: a monitor must show it
  double lr = 0;
  double grad_norm = 0;           // before clipping
  std::int64_t tokens = 0;        // tokens of this step, all ranks
  std::int64_t tokens_total = 0;  // tokens since the run started
  double tokens_per_s = 0;
  double step_time_s = 0;
  double eta_s = 0;
  std::vector<RankMemory> memory;  // one per rank, gathered by rank 0
  std::vector<CollectiveStat> collectives;
  // Seconds of the step rank 0 spent waiting on collectives compute did not hide.
  double comm_wait_s = 0;
  // MoE with the load-balancing loss on: that loss, unweighted, averaged over the step's
  // micro-batches and ranks (each micro-batch adds router_aux_loss_coef times its own to `loss`).
  std::optional<double> aux_loss;
};

struct EvalEvent {
  double time = 0;
  double elapsed_s = 0;
  std::int64_t step = 0;
  double loss = 0;
  std::int64_t tokens = 0;
  std::int64_t samples = 0;
  double duration_s = 0;
  std::map<std::string, double> metrics;  // extra metrics by name, e.g. "accuracy"
};

struct CheckpointEvent {
  double time = 0;
  double elapsed_s = 0;
  std::int64_t step = 0;
  std::string path;  // relative to the run directory
  std::int64_t bytes = 0;
  double duration_s = 0;
};

struct WarningEvent {
  double time = 0;
  double elapsed_s = 0;
  std::string code;  // stable identifier, e.g. "loss_spike", "grad_overflow"
  std::string message;
  int rank = -1;           // -1: not about one rank
  std::int64_t step = -1;  // -1: not about one step
};

enum class RunOutcome { Completed, Failed, Stopped, Killed };

struct RunEndEvent {
  double time = 0;
  double elapsed_s = 0;
  RunOutcome status = RunOutcome::Completed;
  std::string reason;     // human-readable, empty when completed
  int exit_code = 0;      // the engine's documented exit code; 128+N for signal N
  std::int64_t step = 0;  // last finished step
  int failed_rank = -1;
};

// A line of a type this reader does not know (a newer minor version). Kept so that a
// monitor can list it; `raw` is the line as read.
struct UnknownEvent {
  double time = 0;
  double elapsed_s = 0;
  std::string type;
  std::string raw;
};

using Event = std::variant<RunStartEvent, StageEvent, StepEvent, EvalEvent, CheckpointEvent, WarningEvent, RunEndEvent,
                           UnknownEvent>;

std::string_view event_type_name(const Event& e);
double event_time(const Event& e);
double event_elapsed(const Event& e);

std::string_view to_string(RunOutcome o);
std::optional<RunOutcome> parse_run_outcome(std::string_view s);

// nccl-tests' factor from algorithm bandwidth (bytes / time) to bus bandwidth for a
// group of n ranks: all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n;
// others 1.
double bus_bandwidth_factor(std::string_view op, int group_size);

// One events.jsonl line without its '\n'. Non-finite doubles are written as the strings
// "NaN", "Infinity" and "-Infinity" (JSON has no NaN); invalid UTF-8 in strings becomes
// U+FFFD. An UnknownEvent is written back as its raw line.
std::string encode_event(const Event& e);

// One line decoded. Never throws, whatever the bytes.
struct DecodedLine {
  std::optional<Event> event;  // absent for blank, malformed and refused lines
  Diagnostics diagnostics;     // why there is no event
  bool refused = false;        // the line's major version is not kSchemaMajor
  int major = 0;               // the line's "v", when it has a readable one
  int minor = 0;
};
// `file` and `line_no` only label the diagnostics.
DecodedLine decode_event_line(std::string_view line, const std::string& file, int line_no);

// "1.0" -> {1, 0}; nullopt unless it is <digits>.<digits>.
std::optional<std::pair<int, int>> parse_schema_version(std::string_view v);

}  // namespace odyssey::run
