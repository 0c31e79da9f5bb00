#include "provenance.h"

#include "common/json_dump.h"

#if __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAContext.h>
#define ODYSSEY_HAVE_CUDA_RUNTIME 1
#endif
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <ctime>
#include <fstream>

// Defined in the source that app/odyssey_bench/stamp_commit.cmake writes at build time.
extern const char* const kOdysseyBenchCommit;
extern const char* const kOdysseyBenchCommitSource;

namespace odyssey::bench {

namespace {

std::string trimmed(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? trimmed(v) : std::string{};
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  id = trimmed(id);
  return id.empty() ? "unknown-boot" : id;
}

std::string hostname() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0) return "unknown-host";
  return buf.data();
}

}  // namespace

Provenance machine_provenance(const c10::Device& device) {
  Provenance p;
  p.commit = kOdysseyBenchCommit;
  p.commit_source = kOdysseyBenchCommitSource;
  p.host = hostname();
#ifdef ODYSSEY_HAVE_CUDA_RUNTIME
  if (device.is_cuda()) {
    const cudaDeviceProp* props = at::cuda::getDeviceProperties(device.index());
    p.gpu = props->name;
    static const char* hex = "0123456789abcdef";
    std::string u = "GPU-";
    for (int i = 0; i < 16; ++i) {
      const auto b = static_cast<unsigned char>(props->uuid.bytes[i]);
      if (i == 4 || i == 6 || i == 8 || i == 10) u += '-';
      u += hex[b >> 4];
      u += hex[b & 0xF];
    }
    p.gpu_uuid = u;
  }
#else
  (void)device;
#endif
  p.lease = env("ODYSSEY_LEASE");
  p.lease_source = "ODYSSEY_LEASE";
  if (p.lease.empty()) {
    p.lease = p.host + "/" + boot_id() + "/" + (p.gpu_uuid.empty() ? std::string("cpu") : p.gpu_uuid);
    p.lease_source = "machine";
  }
  return p;
}

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::array<char, 32> buf{};
  std::strftime(buf.data(), buf.size(), "%Y-%m-%dT%H:%M:%S+00:00", &tm);
  return buf.data();
}

void add_provenance(nlohmann::ordered_json& rec, const Provenance& p) {
  rec["commit"] = p.commit;
  rec["commit_source"] = p.commit_source;
  rec["time"] = utc_now_iso8601();
  rec["host"] = p.host;
  rec["gpu"] = p.gpu.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(p.gpu);
  rec["gpu_uuid"] = p.gpu_uuid.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(p.gpu_uuid);
  rec["lease"] = p.lease;
  rec["lease_source"] = p.lease_source;
}

std::string provenance_members(const Provenance& p) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  add_provenance(j, p);
  std::string s = dump_json(j);  // {"commit":"...",...}: the members between the braces
  return s.substr(1, s.size() - 2);
}

}  // namespace odyssey::bench
