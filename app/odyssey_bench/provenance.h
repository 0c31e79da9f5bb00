// Where and when an odyssey-bench line was measured (docs/benchmarks.md, "The line format"):
// the commit the binary was built from, the host, the GPU and its UUID, and the lease key that
// tests/bench/compare.py pairs Odyssey and Hugging Face lines by. tests/bench/hf_bench.py writes
// the same fields the same way (source_commit, gpu_uuid, lease_key there).
#pragma once

#include <c10/core/Device.h>

#include <nlohmann/json.hpp>
#include <string>

namespace odyssey::bench {

struct Provenance {
  std::string commit;         // stamped at build time: "<sha>[-dirty]", $ODYSSEY_COMMIT, or "unknown"
  std::string commit_source;  // "git", "ODYSSEY_COMMIT" or "none"
  std::string host;           // gethostname()
  std::string gpu;            // the CUDA device's name; empty on the CPU
  std::string gpu_uuid;       // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (nvidia-smi's form); empty on the CPU
  std::string lease;          // "<host>/<boot_id>/<gpu_uuid or cpu>", or $ODYSSEY_LEASE
  std::string lease_source;   // "machine" or "ODYSSEY_LEASE"
};

// The machine's provenance for lines measured on `device` (read once per process).
Provenance machine_provenance(const c10::Device& device);

// Now, UTC, ISO 8601 to the second: 2026-12-01T03:58:05+00:00 (hf_bench.py's form).
std::string utc_now_iso8601();

// Appends the provenance fields (commit, commit_source, time = now, host, gpu, gpu_uuid, lease,
// lease_source) to a record.
void add_provenance(nlohmann::ordered_json& rec, const Provenance& p);

// The same fields as JSON members without braces ("commit": "...", ...), for the --check lines
// that are written with printf.
std::string provenance_members(const Provenance& p);

}  // namespace odyssey::bench
