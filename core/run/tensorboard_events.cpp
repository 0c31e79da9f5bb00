// From events.jsonl events to TensorBoard records: the tag mapping, the live sink EventWriter
// feeds, and the converter of finished runs (docs/tensorboard.md).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <variant>

#include "run/event_reader.h"
#include "run/run_dir.h"
#include "run/status_file.h"
#include "run/tensorboard.h"

namespace odyssey::run {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// A config file larger than this is not a config; the text says so instead of holding it.
constexpr std::uintmax_t kMaxConfigBytes = std::uintmax_t{1} << 20;

// A double as TensorBoard's float32. Converting a finite double beyond float's range is
// undefined behaviour in C++; IEEE rounding (what numpy's float32() does) takes it to ±FLT_MAX
// below half a float ulp (2^103) past FLT_MAX and to ±inf from there on.
float to_float(double v) {
  constexpr float kMax = std::numeric_limits<float>::max();
  if (std::isfinite(v) && std::fabs(v) > static_cast<double>(kMax)) {
    const float big = std::fabs(v) >= static_cast<double>(kMax) + std::ldexp(1.0, 103)
                          ? std::numeric_limits<float>::infinity()
                          : kMax;
    return v < 0 ? -big : big;
  }
  return static_cast<float>(v);
}

void add(TbRecord& r, std::string tag, double v) { r.scalars.push_back({std::move(tag), to_float(v)}); }

// `body` as a Markdown code block whose fence no run of backticks inside it can close.
std::string code_block(const std::string& body, const std::string& language) {
  std::size_t longest = 0, run = 0;
  for (char c : body) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(std::max<std::size_t>(3, longest + 1), '`');
  std::string out = fence + language + "\n" + body;
  if (!body.empty() && body.back() != '\n') out += '\n';
  return out + fence;
}

std::string config_text(const RunStartEvent& e, const std::filesystem::path& run_dir) {
  const std::string rel = e.config_path.empty() ? std::string("config.yaml") : e.config_path;
  const std::filesystem::path file = run_dir / rel;
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  if (ec) return "The run's configuration `" + rel + "` could not be read: " + ec.message() + ".";
  if (size > kMaxConfigBytes)
    return "The run's configuration `" + rel + "` is " + std::to_string(size) + " bytes, too large to show here.";
  std::ifstream in(file, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in && !in.eof()) return "The run's configuration `" + rel + "` could not be read.";
  const std::string ext = file.extension().string();
  return code_block(ss.str(), ext == ".json" ? "json" : "yaml");
}

void add_step(TbRecord& r, const StepEvent& e) {
  r.step = e.step;
  add(r, "train/loss", e.loss);
  add(r, "train/learning_rate", e.lr);
  add(r, "train/grad_norm", e.grad_norm);
  if (e.aux_loss) add(r, "train/aux_loss", *e.aux_loss);
  add(r, "train/epoch", e.epoch);
  add(r, "train/tokens_per_second", e.tokens_per_s);
  add(r, "train/num_input_tokens_seen", static_cast<double>(e.tokens_total));
  add(r, "train/step_time_seconds", e.step_time_s);
  for (const RankMemory& m : e.memory) {
    const std::string rank = "/rank" + std::to_string(m.rank);
    add(r, "memory/vram_peak_gib" + rank, static_cast<double>(m.vram_peak_bytes) / kGiB);
    add(r, "memory/vram_reserved_gib" + rank, static_cast<double>(m.vram_reserved_bytes) / kGiB);
  }
  for (const CollectiveStat& c : e.collectives)
    if (c.calls > 0) add(r, "comm/" + c.op + "_" + c.group + "_busbw_gbps", c.bus_bandwidth_gb_per_s);
  if (!e.collectives.empty() || e.comm_wait_s != 0) add(r, "comm/wait_seconds", e.comm_wait_s);
}

void add_eval(TbRecord& r, const EvalEvent& e) {
  r.step = e.step;
  add(r, "eval/loss", e.loss);
  add(r, "eval/runtime", e.duration_s);
  // Extra metrics beside them, as transformers logs eval_<name>; one that would take the
  // place of loss or runtime goes one level down.
  for (const auto& [name, value] : e.metrics)
    add(r, (name == "loss" || name == "runtime" ? "eval/metrics/" : "eval/") + name, value);
}

}  // namespace

std::optional<TbRecord> tensorboard_record(const Event& e, const std::filesystem::path& run_dir) {
  TbRecord r;
  r.wall_time = event_time(e);
  if (const auto* s = std::get_if<StepEvent>(&e)) {
    add_step(r, *s);
  } else if (const auto* v = std::get_if<EvalEvent>(&e)) {
    add_eval(r, *v);
  } else if (const auto* st = std::get_if<RunStartEvent>(&e)) {
    r.step = 0;
    r.texts.push_back({"config", config_text(*st, run_dir)});
  } else if (const auto* w = std::get_if<WarningEvent>(&e)) {
    r.step = std::max<std::int64_t>(w->step, 0);
    std::string text = "**" + w->code + "**";
    if (w->rank >= 0) text += " (rank " + std::to_string(w->rank) + ")";
    r.texts.push_back({"warnings", text + ": " + w->message});
  } else {
    return std::nullopt;
  }
  return r;
}

TensorBoardSink::TensorBoardSink(std::filesystem::path run_dir, std::filesystem::path out_dir)
    : run_dir_(std::move(run_dir)), out_dir_(std::move(out_dir)) {}

bool TensorBoardSink::stopped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopped_;
}

Diagnostics TensorBoardSink::add(const Event& e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return {};
  const std::optional<TbRecord> rec = tensorboard_record(e, run_dir_);
  if (!rec) return {};
  if (!writer_) {
    auto opened = TensorBoardWriter::open(out_dir_, rec->wall_time > 0 ? rec->wall_time : unix_now());
    if (!opened.ok()) {
      stopped_ = true;
      return opened.diagnostics;
    }
    writer_.emplace(std::move(opened.value));
  }
  Diagnostics d = writer_->write(*rec);
  if (!d.empty()) {
    stopped_ = true;
    writer_.reset();
  }
  return d;
}

namespace {

// The reader's diagnostics worded for a converter, which refuses a file instead of skipping
// lines: "line skipped" notes go, and a line that is not JSON says what a line must be.
Diagnostics refusal_reasons(const Diagnostics& read) {
  Diagnostics out;
  constexpr std::string_view kSkipped = "; line skipped";
  for (Diagnostic d : read) {
    if (d.severity != Severity::Error) continue;
    if (d.message.size() >= kSkipped.size() &&
        d.message.compare(d.message.size() - kSkipped.size(), kSkipped.size(), kSkipped) == 0)
      d.message.resize(d.message.size() - kSkipped.size());
    if (d.message.rfind("not valid JSON", 0) == 0 || d.message.rfind("not a JSON object", 0) == 0)
      d.message += "; expected one JSON event object a line (docs/run-contract.md)";
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

Result<std::filesystem::path> convert_events_to_tensorboard(const std::filesystem::path& run_dir,
                                                            std::filesystem::path out_dir) {
  Result<std::filesystem::path> r;
  std::error_code ec;
  if (!std::filesystem::is_directory(run_dir, ec)) {
    r.diagnostics.push_back(error_at(
        run_dir.string(), {}, std::filesystem::exists(run_dir, ec) ? "is not a directory" : "no such run directory"));
    return r;
  }
  const RunDir dir(run_dir);
  if (!std::filesystem::exists(dir.events(), ec)) {
    r.diagnostics.push_back(error_at(dir.events().string(), {}, "not found: a run directory holds events.jsonl"));
    return r;
  }
  EventReader reader(dir.events());
  const PollResult read = reader.poll();
  r.diagnostics = refusal_reasons(read.diagnostics);
  if (!r.ok()) return r;
  if (reader.has_partial_line()) {
    Diagnostic d = error_at(dir.events().string(), {},
                            "the last line has no end (the run stopped while writing it); "
                            "converted without it");
    d.severity = Severity::Warning;
    d.line = reader.lines_read() + 1;
    r.diagnostics.push_back(std::move(d));
  }
  std::vector<TbRecord> records;
  bool any_step = false;
  for (const EventRecord& er : read.events) {
    any_step = any_step || std::holds_alternative<StepEvent>(er.event);
    if (auto rec = tensorboard_record(er.event, run_dir)) records.push_back(std::move(*rec));
  }
  if (!any_step) {
    r.diagnostics.push_back(error_at(
        dir.events().string(), {}, "has no step events (the run never finished a training step): nothing to convert"));
    return r;
  }
  if (out_dir.empty()) out_dir = dir.tensorboard_dir();
  if (std::filesystem::is_directory(out_dir, ec))
    for (const auto& entry : std::filesystem::directory_iterator(out_dir, ec))
      if (entry.path().filename().string().find("tfevents") != std::string::npos) {
        r.diagnostics.push_back(error_at(entry.path().string(), {},
                                         "TensorBoard events are already here; remove them to convert the run again"));
        return r;
      }
  auto writer =
      TensorBoardWriter::open(out_dir, records.front().wall_time > 0 ? records.front().wall_time : unix_now());
  if (!writer.ok()) {
    r.diagnostics.insert(r.diagnostics.end(), writer.diagnostics.begin(), writer.diagnostics.end());
    return r;
  }
  for (const TbRecord& rec : records)
    if (Diagnostics d = writer.value.write(rec); !d.empty()) {
      std::filesystem::remove(writer.value.path(), ec);  // no half conversion left behind
      r.diagnostics.insert(r.diagnostics.end(), d.begin(), d.end());
      return r;
    }
  r.value = writer.value.path();
  return r;
}

}  // namespace odyssey::run
