// decode_event_line: one events.jsonl line to an Event, or diagnostics saying why not.
// The decoder is the part that sees whatever is on disk (a dying writer's half line, a
// disk full of zeros, a newer Odyssey's events), so it never throws and never trusts a
// type: every field goes through detail::FieldReader.
#include <cmath>
#include <exception>

#include "common/text.h"
#include "run/event_schema.h"
#include "run/json_fields.h"

namespace odyssey::run {

using detail::FieldReader;
using nlohmann::json;

namespace {

// Common head of every event. `time` is required: an event without a time cannot be placed.
template <typename E>
void read_head(FieldReader& r, E& e) {
  r.required("time", e.time);
  r.optional("elapsed_s", e.elapsed_s);
}

// Reads each element of the list at `key` (an optional list: absent = empty).
template <typename T, typename ReadOne>
void read_list(FieldReader& r, std::string_view key, std::vector<T>& out, ReadOne read_one) {
  const json* a = r.array(key, false);
  if (a == nullptr) return;
  out.clear();
  out.reserve(a->size());
  for (std::size_t i = 0; i < a->size(); ++i) {
    const json& item = (*a)[i];
    const std::string name = std::string(key) + "[" + std::to_string(i) + "]";
    if (!item.is_object()) {
      r.error(name, std::string("must be an object, got ") + item.type_name());
      continue;
    }
    FieldReader c = r.child(item, name);
    T t;
    read_one(c, t);
    out.push_back(std::move(t));
  }
}

void read_body(FieldReader& r, RunStartEvent& e) {
  r.required("run_id", e.run_id);
  r.optional("odyssey_version", e.odyssey_version);
  r.optional("config_path", e.config_path);
  r.optional("hostname", e.hostname);
  if (const json* m = r.object("mesh", false)) {
    FieldReader c = r.child(*m, "mesh");
    c.optional("world", e.mesh.world);
    c.optional("dp", e.mesh.dp);
    c.optional("sp", e.mesh.sp);
    c.optional("ulysses", e.mesh.ulysses);
    c.optional("ring", e.mesh.ring);
    c.optional("ep", e.mesh.ep);
    c.optional("nnodes", e.mesh.nnodes);
    c.optional("nproc_per_node", e.mesh.nproc_per_node);
  }
  read_list(r, "devices", e.devices, [](FieldReader& c, DeviceInfo& d) {
    c.required("rank", d.rank);
    c.optional("name", d.name);
    c.optional("memory_bytes", d.memory_bytes);
  });
  if (const json* t = r.object("totals", false)) {
    FieldReader c = r.child(*t, "totals");
    c.optional("samples", e.totals.samples);
    c.optional("tokens", e.totals.tokens);
    c.optional("total_steps", e.totals.total_steps);
    c.optional("epochs", e.totals.epochs);
  }
  if (const json* m = r.object("model", false)) {
    FieldReader c = r.child(*m, "model");
    c.optional("name", e.model.name);
    c.optional("params", e.model.params);
    c.optional("trainable_params", e.model.trainable_params);
  }
  if (const json* o = r.object("optimizer", false)) {
    FieldReader c = r.child(*o, "optimizer");
    c.optional("name", e.optimizer.name);
    c.optional("state_bytes", e.optimizer.state_bytes);
    c.optional("host_state_bytes", e.optimizer.host_state_bytes);
    c.optional("sharded_over", e.optimizer.sharded_over);
  }
}

void read_body(FieldReader& r, StageEvent& e) {
  r.required("stage", e.stage);
  r.optional("message", e.message);
}

void read_body(FieldReader& r, StepEvent& e) {
  r.required("step", e.step);
  r.required("loss", e.loss);
  r.optional("total_steps", e.total_steps);
  r.optional("epoch", e.epoch);
  r.optional("lr", e.lr);
  r.optional("grad_norm", e.grad_norm);
  if (r.has("aux_loss")) {
    double a = 0;
    r.optional("aux_loss", a);
    e.aux_loss = a;
  }
  r.optional("tokens", e.tokens);
  r.optional("tokens_total", e.tokens_total);
  r.optional("tokens_per_s", e.tokens_per_s);
  r.optional("step_time_s", e.step_time_s);
  r.optional("comm_wait_s", e.comm_wait_s);
  r.optional("eta_s", e.eta_s);
  read_list(r, "memory", e.memory, [](FieldReader& c, RankMemory& m) {
    c.required("rank", m.rank);
    c.optional("vram_allocated_bytes", m.vram_allocated_bytes);
    c.optional("vram_peak_bytes", m.vram_peak_bytes);
    c.optional("vram_reserved_bytes", m.vram_reserved_bytes);
  });
  read_list(r, "collectives", e.collectives, [](FieldReader& c, CollectiveStat& s) {
    c.required("op", s.op);
    c.optional("group", s.group);
    c.optional("group_size", s.group_size);
    c.optional("calls", s.calls);
    c.optional("bytes", s.bytes);
    c.optional("time_s", s.time_s);
    c.optional("bus_bandwidth_gb_per_s", s.bus_bandwidth_gb_per_s);
  });
}

void read_body(FieldReader& r, EvalEvent& e) {
  r.required("step", e.step);
  r.required("loss", e.loss);
  r.optional("tokens", e.tokens);
  r.optional("samples", e.samples);
  r.optional("duration_s", e.duration_s);
  r.optional("metrics", e.metrics);
}

void read_body(FieldReader& r, CheckpointEvent& e) {
  r.required("step", e.step);
  r.required("path", e.path);
  r.optional("bytes", e.bytes);
  r.optional("duration_s", e.duration_s);
}

void read_body(FieldReader& r, WarningEvent& e) {
  r.required("message", e.message);
  r.optional("code", e.code);
  r.optional("rank", e.rank);
  r.optional("step", e.step);
}

void read_body(FieldReader& r, RunEndEvent& e) {
  std::string status;
  r.required("status", status);
  if (r.has("status")) {
    if (auto o = parse_run_outcome(status)) e.status = *o;
    else if (r.has_string("status"))
      r.error("status", "unknown run status " + text::quoted(status) + "; allowed: completed, failed, stopped, killed");
  }
  r.optional("reason", e.reason);
  r.optional("exit_code", e.exit_code);
  r.optional("step", e.step);
  r.optional("failed_rank", e.failed_rank);
}

template <typename E>
std::optional<Event> read_event(FieldReader& r, Diagnostics& diags) {
  const std::size_t before = diags.size();
  E e;
  read_head(r, e);
  read_body(r, e);
  for (std::size_t i = before; i < diags.size(); ++i)
    if (diags[i].severity == Severity::Error) return std::nullopt;
  return Event{std::move(e)};
}

DecodedLine decode(std::string_view line, const std::string& file, int line_no) {
  DecodedLine out;
  const json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    out.diagnostics.push_back(diagnostic_at(Severity::Error, file, {}, "not valid JSON; line skipped", line_no));
    return out;
  }
  if (!j.is_object()) {
    out.diagnostics.push_back(diagnostic_at(Severity::Error, file, {},
                                            std::string("not a JSON object (got ") + j.type_name() + "); line skipped",
                                            line_no));
    return out;
  }
  FieldReader r(j, "", file, line_no, out.diagnostics);

  // The version decides everything else, so it is checked before any other field.
  std::string v;
  r.required("v", v);
  if (has_errors(out.diagnostics)) return out;
  const auto ver = parse_schema_version(v);
  if (!ver) {
    r.error("v", "schema version " + text::quoted(v) + " is not of the form MAJOR.MINOR");
    return out;
  }
  out.major = ver->first;
  out.minor = ver->second;
  if (out.major != kSchemaMajor) {
    out.refused = true;
    const std::string ours = std::to_string(kSchemaMajor) + ".x";
    out.diagnostics.push_back(diagnostic_at(
        Severity::Error, file, {},
        out.major > kSchemaMajor
            ? "schema version " + std::to_string(out.major) + ".x is newer than this Odyssey understands (" + ours +
                  "); update Odyssey to read this run"
            : "schema version " + std::to_string(out.major) + ".x is older than this Odyssey reads (" + ours +
                  "); open the run with the Odyssey that wrote it",
        line_no));
    return out;
  }

  std::string type;
  r.required("type", type);
  if (has_errors(out.diagnostics)) return out;

  Diagnostics& d = out.diagnostics;
  if (type == event_type::kStep) out.event = read_event<StepEvent>(r, d);
  else if (type == event_type::kRunStart) out.event = read_event<RunStartEvent>(r, d);
  else if (type == event_type::kStage) out.event = read_event<StageEvent>(r, d);
  else if (type == event_type::kEval) out.event = read_event<EvalEvent>(r, d);
  else if (type == event_type::kCheckpoint) out.event = read_event<CheckpointEvent>(r, d);
  else if (type == event_type::kWarning) out.event = read_event<WarningEvent>(r, d);
  else if (type == event_type::kRunEnd) out.event = read_event<RunEndEvent>(r, d);
  else {
    // A type from a newer minor version: keep it, so a monitor can list what it skipped.
    UnknownEvent u;
    u.type = type;
    u.raw = std::string(line);
    r.optional("time", u.time);
    r.optional("elapsed_s", u.elapsed_s);
    if (!has_errors(d)) out.event = Event{std::move(u)};
  }
  if (!out.event && has_errors(d)) {
    Diagnostic note = diagnostic_at(Severity::Error, file, {}, "line skipped", line_no);
    note.severity = Severity::Note;
    d.push_back(std::move(note));
  }
  return out;
}

}  // namespace

DecodedLine decode_event_line(std::string_view line, const std::string& file, int line_no) {
  // Blank lines (and a stray '\r' of CRLF files) carry nothing and are not an error.
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return {};
  try {
    return decode(line, file, line_no);
  } catch (const std::exception& e) {
    // Unreachable by design (nothing above throws on bad input), but a reader that crashes
    // the monitor over one line is worse than one that reports it.
    DecodedLine out;
    out.diagnostics.push_back(
        diagnostic_at(Severity::Error, file, {}, std::string("cannot decode line: ") + e.what(), line_no));
    return out;
  }
}

}  // namespace odyssey::run
