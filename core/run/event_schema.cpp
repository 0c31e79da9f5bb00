// Event names, helpers and the encoder. The decoder is in event_decode.cpp.
#include "run/event_schema.h"

#include <charconv>
#include <type_traits>

#include "run/json_fields.h"

namespace odyssey::run {

using detail::number;
using detail::OrderedJson;

namespace {

template <typename T>
constexpr std::string_view type_name_of() {
  if constexpr (std::is_same_v<T, RunStartEvent>) return event_type::kRunStart;
  if constexpr (std::is_same_v<T, StageEvent>) return event_type::kStage;
  if constexpr (std::is_same_v<T, StepEvent>) return event_type::kStep;
  if constexpr (std::is_same_v<T, EvalEvent>) return event_type::kEval;
  if constexpr (std::is_same_v<T, CheckpointEvent>) return event_type::kCheckpoint;
  if constexpr (std::is_same_v<T, WarningEvent>) return event_type::kWarning;
  if constexpr (std::is_same_v<T, RunEndEvent>) return event_type::kRunEnd;
  return {};
}

// The members of each event after the common head, in the order of docs/run-contract.md.
void put_fields(OrderedJson& j, const RunStartEvent& e) {
  j["run_id"] = e.run_id;
  j["odyssey_version"] = e.odyssey_version;
  j["config_path"] = e.config_path;
  j["hostname"] = e.hostname;
  j["mesh"] = {
      {"world", e.mesh.world}, {"dp", e.mesh.dp}, {"sp", e.mesh.sp},         {"ulysses", e.mesh.ulysses},
      {"ring", e.mesh.ring},   {"ep", e.mesh.ep}, {"nnodes", e.mesh.nnodes}, {"nproc_per_node", e.mesh.nproc_per_node}};
  OrderedJson devices = OrderedJson::array();
  for (const auto& d : e.devices)
    devices.push_back({{"rank", d.rank}, {"name", d.name}, {"memory_bytes", d.memory_bytes}});
  j["devices"] = std::move(devices);
  j["totals"] = {{"samples", e.totals.samples},
                 {"tokens", e.totals.tokens},
                 {"total_steps", e.totals.total_steps},
                 {"epochs", number(e.totals.epochs)}};
  j["model"] = {{"name", e.model.name}, {"params", e.model.params}, {"trainable_params", e.model.trainable_params}};
  if (!e.optimizer.name.empty())
    j["optimizer"] = {{"name", e.optimizer.name},
                      {"state_bytes", e.optimizer.state_bytes},
                      {"host_state_bytes", e.optimizer.host_state_bytes},
                      {"sharded_over", e.optimizer.sharded_over}};
}

void put_fields(OrderedJson& j, const StageEvent& e) {
  j["stage"] = e.stage;
  j["message"] = e.message;
}

void put_fields(OrderedJson& j, const StepEvent& e) {
  j["step"] = e.step;
  j["total_steps"] = e.total_steps;
  j["epoch"] = number(e.epoch);
  j["loss"] = number(e.loss);
  j["lr"] = number(e.lr);
  j["grad_norm"] = number(e.grad_norm);
  if (e.aux_loss) j["aux_loss"] = number(*e.aux_loss);
  j["tokens"] = e.tokens;
  j["tokens_total"] = e.tokens_total;
  j["tokens_per_s"] = number(e.tokens_per_s);
  j["step_time_s"] = number(e.step_time_s);
  j["eta_s"] = number(e.eta_s);
  OrderedJson memory = OrderedJson::array();
  for (const auto& m : e.memory)
    memory.push_back({{"rank", m.rank},
                      {"vram_allocated_bytes", m.vram_allocated_bytes},
                      {"vram_peak_bytes", m.vram_peak_bytes},
                      {"vram_reserved_bytes", m.vram_reserved_bytes},
                      {"vram_fragmentation_bytes", m.fragmentation_bytes()}});
  j["memory"] = std::move(memory);
  OrderedJson coll = OrderedJson::array();
  for (const auto& c : e.collectives)
    coll.push_back({{"op", c.op},
                    {"group", c.group},
                    {"group_size", c.group_size},
                    {"calls", c.calls},
                    {"bytes", c.bytes},
                    {"time_s", number(c.time_s)},
                    {"bus_bandwidth_gb_per_s", number(c.bus_bandwidth_gb_per_s)}});
  j["collectives"] = std::move(coll);
  if (!e.collectives.empty()) j["comm_wait_s"] = number(e.comm_wait_s);
}

void put_fields(OrderedJson& j, const EvalEvent& e) {
  j["step"] = e.step;
  j["loss"] = number(e.loss);
  j["tokens"] = e.tokens;
  j["samples"] = e.samples;
  j["duration_s"] = number(e.duration_s);
  OrderedJson metrics = OrderedJson::object();
  for (const auto& [k, v] : e.metrics) metrics[k] = number(v);
  j["metrics"] = std::move(metrics);
}

void put_fields(OrderedJson& j, const CheckpointEvent& e) {
  j["step"] = e.step;
  j["path"] = e.path;
  j["bytes"] = e.bytes;
  j["duration_s"] = number(e.duration_s);
}

void put_fields(OrderedJson& j, const WarningEvent& e) {
  j["code"] = e.code;
  j["message"] = e.message;
  j["rank"] = e.rank;
  j["step"] = e.step;
}

void put_fields(OrderedJson& j, const RunEndEvent& e) {
  j["status"] = std::string(to_string(e.status));
  j["reason"] = e.reason;
  j["exit_code"] = e.exit_code;
  j["step"] = e.step;
  j["failed_rank"] = e.failed_rank;
}

}  // namespace

std::string_view event_type_name(const Event& e) {
  return std::visit(
      [](const auto& x) -> std::string_view {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, UnknownEvent>) return x.type;
        else return type_name_of<T>();
      },
      e);
}

double event_time(const Event& e) {
  return std::visit([](const auto& x) { return x.time; }, e);
}

double event_elapsed(const Event& e) {
  return std::visit([](const auto& x) { return x.elapsed_s; }, e);
}

std::string_view to_string(RunOutcome o) {
  switch (o) {
    case RunOutcome::Completed: return "completed";
    case RunOutcome::Failed: return "failed";
    case RunOutcome::Stopped: return "stopped";
    case RunOutcome::Killed: return "killed";
  }
  return "failed";
}

std::optional<RunOutcome> parse_run_outcome(std::string_view s) {
  for (auto o : {RunOutcome::Completed, RunOutcome::Failed, RunOutcome::Stopped, RunOutcome::Killed})
    if (to_string(o) == s) return o;
  return std::nullopt;
}

double bus_bandwidth_factor(std::string_view op, int group_size) {
  if (group_size <= 1) return op == collective_op::kBarrier ? 0.0 : 1.0;
  const double n = group_size;
  if (op == collective_op::kAllReduce) return 2.0 * (n - 1) / n;
  if (op == collective_op::kAllGather || op == collective_op::kReduceScatter || op == collective_op::kAllToAll)
    return (n - 1) / n;
  if (op == collective_op::kBarrier) return 0.0;  // moves no payload
  return 1.0;
}

std::string encode_event(const Event& e) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, UnknownEvent>) {
          return x.raw;
        } else {
          OrderedJson j = OrderedJson::object();
          j["v"] = std::string(kSchemaVersion);
          j["type"] = std::string(type_name_of<T>());
          j["time"] = number(x.time);
          j["elapsed_s"] = number(x.elapsed_s);
          put_fields(j, x);
          return detail::dump_line(j);
        }
      },
      e);
}

std::optional<std::pair<int, int>> parse_schema_version(std::string_view v) {
  const auto dot = v.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == v.size()) return std::nullopt;
  auto parse_part = [](std::string_view s, int& out) {
    if (s.size() > 6) return false;  // no version needs more, and it keeps int in range
    for (char c : s)
      if (c < '0' || c > '9') return false;
    auto r = std::from_chars(s.data(), s.data() + s.size(), out);
    return r.ec == std::errc() && r.ptr == s.data() + s.size();
  };
  int major = 0, minor = 0;
  if (!parse_part(v.substr(0, dot), major) || !parse_part(v.substr(dot + 1), minor)) return std::nullopt;
  return std::pair{major, minor};
}

}  // namespace odyssey::run
