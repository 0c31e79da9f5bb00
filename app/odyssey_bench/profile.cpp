#include "bench.h"

#include <ATen/DeviceAccelerator.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "common/json_dump.h"

namespace odyssey::bench {

// One step under the Kineto profiler (GPU activity only); appends to `path` one line per kernel
// name with its calls and device time, largest first, under the record's keys. Every rank
// takes the step (the collectives need all of them); `write` says whether this one writes.
void profile_step(const std::string& path, const nlohmann::ordered_json& rec, bool write,
                  const std::function<void()>& step) {
  namespace kp = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  // CPU ops too (with their inputs' shapes): which op launched the small copies and adds.
  const std::set<ActivityType> acts{ActivityType::CPU, ActivityType::CUDA};
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO,
                                                     /*report_input_shapes=*/true);
  kp::prepareProfiler(config, acts);
  kp::enableProfiler(config, acts);
  const auto t0 = std::chrono::steady_clock::now();
  step();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::unique_ptr<kp::ProfilerResult> result = kp::disableProfiler();
  if (!write) return;
  std::map<std::string, std::pair<std::int64_t, double>> by_name;  // calls, ns
  double total = 0;
  struct Span {
    std::uint64_t start, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    auto& [calls, ns] = by_name[e.name()];
    calls += 1;
    ns += static_cast<double>(e.durationNs());
    total += static_cast<double>(e.durationNs());
    spans.push_back({e.startNs(), e.endNs(), e.name()});
  }
  // Idle device time inside the step: the span from the first kernel's start to the last one's
  // end, less the union of all kernels (any stream). The longest gaps name the kernels around
  // them, which tells where the host held the device back (a sync, a slow launch sequence).
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  double idle_ns = 0, span_ns = 0;
  std::vector<std::tuple<double, std::string, std::string>> gaps;  // ns, before, after
  if (!spans.empty()) {
    std::uint64_t reach = spans[0].end;
    std::string last = spans[0].name;
    for (std::size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].start > reach) {
        const double g = static_cast<double>(spans[i].start - reach);
        idle_ns += g;
        gaps.emplace_back(g, last, spans[i].name);
      }
      if (spans[i].end > reach) {
        reach = spans[i].end;
        last = spans[i].name;
      }
    }
    span_ns = static_cast<double>(reach - spans[0].start);
  }
  std::sort(gaps.begin(), gaps.end(), [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
  // Elementwise ops (copies, adds, fills, sums) by the op that called them: the innermost
  // enclosing CPU event of the same thread that is not itself such a helper (an autograd
  // node's backward, a fused op, a module's op), with the first input's shape.
  struct CpuOp {
    std::uint64_t start, end, thread;
    std::string name;
    std::string shape;
  };
  std::vector<CpuOp> cpu;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CPU) continue;
    std::string shape;
    if (e.hasShapes() && !e.shapes().empty()) {
      for (std::int64_t d : e.shapes()[0]) shape += (shape.empty() ? "" : "x") + std::to_string(d);
    }
    cpu.push_back({e.startNs(), e.endNs(), e.startThreadId(), e.name(), shape});
  }
  std::sort(cpu.begin(), cpu.end(), [](const CpuOp& a, const CpuOp& b) { return a.start < b.start; });
  const std::set<std::string> helpers{"aten::copy_", "aten::to",         "aten::_to_copy",  "aten::contiguous",
                                      "aten::clone", "aten::reshape",    "aten::add",       "aten::add_",
                                      "aten::fill_", "aten::zero_",      "aten::zeros",     "aten::sum",
                                      "aten::empty", "aten::empty_like", "aten::view",      "aten::_unsafe_view",
                                      "aten::copy",  "aten::expand",     "aten::as_strided"};
  const std::set<std::string> counted{"aten::copy_", "aten::add", "aten::add_", "aten::fill_", "aten::sum"};
  std::map<std::string, std::int64_t> callers;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    if (!counted.count(cpu[i].name)) continue;
    std::string parent = "(top level)";
    for (std::size_t j = i; j-- > 0;) {  // the latest-starting enclosing non-helper event
      if (cpu[j].thread != cpu[i].thread || cpu[j].end < cpu[i].end) continue;
      if (helpers.count(cpu[j].name)) continue;
      parent = cpu[j].name;
      break;
    }
    callers[cpu[i].name + " [" + cpu[i].shape + "] in " + parent.substr(0, 100)] += 1;
  }
  std::vector<std::pair<std::string, std::int64_t>> by_caller(callers.begin(), callers.end());
  std::sort(by_caller.begin(), by_caller.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::pair<std::string, std::pair<std::int64_t, double>>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  std::ofstream f(path, std::ios::app);
  nlohmann::ordered_json head;
  for (const char* k : {"label", "shape", "mode", "seq", "commit", "time", "lease"})
    if (rec.contains(k)) head[k] = rec[k];
  nlohmann::ordered_json sum = head;
  sum["profile"] = "step";
  sum["wall_ms"] = sig(wall * 1e3, 5);
  sum["device_ms"] = sig(total * 1e-6, 5);  // kernels and copies on every stream, summed
  sum["kernels"] = static_cast<std::int64_t>(rows.size());
  sum["span_ms"] = sig(span_ns * 1e-6, 5);  // first kernel's start to last one's end
  sum["idle_ms"] = sig(idle_ns * 1e-6, 4);  // no kernel running on any stream, inside the span
  sum["gaps"] = static_cast<std::int64_t>(gaps.size());
  nlohmann::ordered_json longest = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < gaps.size() && i < 12; ++i)
    longest.push_back({{"ms", sig(std::get<0>(gaps[i]) * 1e-6, 3)},
                       {"after", std::get<1>(gaps[i]).substr(0, 90)},
                       {"before", std::get<2>(gaps[i]).substr(0, 90)}});
  sum["longest_gaps"] = longest;
  nlohmann::ordered_json ops = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < by_caller.size() && i < 30; ++i)
    ops.push_back({{"op", by_caller[i].first}, {"calls", by_caller[i].second}});
  sum["elementwise_callers"] = ops;
  f << dump_json(sum) << "\n";
  for (const auto& [name, v] : rows) {
    nlohmann::ordered_json j = head;
    j["kernel"] = name.substr(0, 160);
    j["calls"] = v.first;
    j["ms"] = sig(v.second * 1e-6, 4);
    j["share"] = sig(total > 0 ? v.second / total : 0, 3);
    f << dump_json(j) << "\n";
  }
}

}  // namespace odyssey::bench
