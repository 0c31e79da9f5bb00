// The plan as a table for the CLI and as JSON for the GUI, scripts and `plan --json`.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "planner/memory_planner.h"

namespace odyssey {
namespace {

// GiB with two decimals; smaller amounts in MiB or KiB so the quickstart's rows say something.
std::string size(std::int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes < 0 ? -bytes : bytes);
  if (b >= 0.01 * static_cast<double>(planner::kGiB))
    std::snprintf(buf, sizeof buf, "%8.2f GiB", b / static_cast<double>(planner::kGiB));
  else if (b >= 0.1 * static_cast<double>(planner::kMiB))
    std::snprintf(buf, sizeof buf, "%8.1f MiB", b / static_cast<double>(planner::kMiB));
  else std::snprintf(buf, sizeof buf, "%8.1f KiB", b / 1024.0);
  return buf;
}

std::string text_trim(const std::string& s) { return s.substr(s.find_first_not_of(' ')); }

std::string pad(std::string s, std::size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

std::string row(const MemoryItem& it) {
  return "  " + pad(it.group, 14) + pad(it.name, 34) + size(it.bytes) + "  " + it.detail + "\n";
}

}  // namespace

std::string format_plan_table(const MemoryPlan& p) {
  std::string out;
  const ParallelLayout& l = p.layout;
  out += "Memory plan per " + std::string(p.device == "cuda" ? "GPU" : "process") + " (" + p.device +
         "): " + std::to_string(l.world_size) + " process(es) = dp " + std::to_string(l.dp) + " x sp " +
         std::to_string(l.sp) + " (ulysses " + std::to_string(l.ulysses) + " x ring " + std::to_string(l.ring) +
         (l.ep > 1 ? ", experts split over " + std::to_string(l.ep) : std::string()) + "), " +
         std::to_string(p.tokens_per_gpu) + " tokens per " + (p.device == "cuda" ? "GPU" : "process") +
         " per micro-step\n\n";
  out += "  " + pad("group", 14) + pad("item", 34) + "        size  detail\n";
  for (const auto& it : p.items)
    if (it.at_peak) out += row(it);
  out += "  " + std::string(56, '-') + "\n";
  out += "  " + pad("peak (" + p.peak_phase + ")", 48) + size(p.peak_bytes) + "\n";
  out += "  " + pad("capacity", 48) + size(p.capacity_bytes) + "\n";
  const std::int64_t left = p.capacity_bytes - p.peak_bytes;
  out += "  " + pad(p.fits ? "fits, headroom" : "DOES NOT FIT, short by", 48) + size(left < 0 ? -left : left) + "\n";
  out += "  checkpointed layers: " + std::to_string(p.checkpointed_layers) + " of " + std::to_string(p.total_layers) +
         (p.checkpoint_every > 0 ? " (every " + std::to_string(p.checkpoint_every) + ")" : "") +
         (p.stored_checkpoints < p.checkpointed_layers
              ? ", " + std::to_string(p.stored_checkpoints) + " inputs stored (up to " +
                    std::to_string(p.layers_per_checkpoint) + " layers per input)"
              : std::string()) +
         (p.offload_activations && p.checkpointed_layers > 0 ? ", inputs in pinned host memory (offload_activations)"
                                                             : std::string()) +
         "\n";
  if (p.host_bytes > 0)
    out += "  on the host per process: " + text_trim(size(p.host_bytes)) + " of " +
           text_trim(size(p.host_capacity_bytes)) + " it may pin\n";
  bool header = false;
  for (const auto& it : p.items)
    if (!it.at_peak) {
      if (!header) out += "\nNot live at the peak (other phases of the step):\n";
      header = true;
      out += row(it);
    }
  if (!p.notes.empty()) {
    out += "\nNotes:\n";
    for (const auto& n : p.notes) out += "  - " + n + "\n";
  }
  return out;
}

nlohmann::json plan_to_json(const MemoryPlan& p) {
  nlohmann::json items = nlohmann::json::array();
  for (const auto& it : p.items)
    items.push_back(
        {{"name", it.name}, {"group", it.group}, {"bytes", it.bytes}, {"detail", it.detail}, {"at_peak", it.at_peak}});
  const ParallelLayout& l = p.layout;
  return {
      {"device", p.device},
      {"fits", p.fits},
      {"peak_bytes", p.peak_bytes},
      {"capacity_bytes", p.capacity_bytes},
      {"allocated_bytes", p.allocated_bytes()},
      {"peak_phase", p.peak_phase},
      {"checkpointed_layers", p.checkpointed_layers},
      {"total_layers", p.total_layers},
      {"checkpoint_every", p.checkpoint_every},
      {"layers_per_checkpoint", p.layers_per_checkpoint},
      {"stored_checkpoints", p.stored_checkpoints},
      {"offload_activations", p.offload_activations},
      {"mlp_tile_tokens", p.mlp_tile_tokens},
      {"attention_kept_layers", p.attention_kept_layers},
      {"mlp_recomputed_layers", p.mlp_recomputed_layers},
      {"mlp_offloaded_layers", p.mlp_offloaded_layers},
      {"mlp_parked_layers", p.mlp_parked_layers},
      {"mlp_park_stride", p.mlp_park_stride},
      {"tokens_per_gpu", p.tokens_per_gpu},
      {"host_bytes", p.host_bytes},
      {"host_capacity_bytes", p.host_capacity_bytes},
      {"layout", {{"world_size", l.world_size}, {"dp", l.dp}, {"sp", l.sp}, {"ulysses", l.ulysses}, {"ring", l.ring}}},
      {"items", items},
      {"notes", p.notes},
      {"refused", p.refused}};
}

}  // namespace odyssey
