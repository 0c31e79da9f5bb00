// GpuProbe: the NVIDIA GPUs of this machine through NVML, loaded at run time with
// dlopen("libnvidia-ml.so.1"), so the window has no link-time dependency on the driver and
// runs where there is none (then the result says why there is no GPU list). Plain C++;
// probe() may be called from any thread (calls are serialised) and is what the GPU panel's
// refresh timer runs on the thread pool.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace odyssey::ui {

struct GpuInfo {
  int index = 0;     // NVML's index: nvidia-smi's numbering (PCI bus order)
  std::string name;  // "NVIDIA H200"
  std::string uuid;
  std::int64_t memory_total = 0;  // bytes
  std::int64_t memory_used = 0;   // bytes
  int utilization = -1;           // percent of the last sample period; -1 = not reported
  bool operator==(const GpuInfo&) const = default;
};

struct GpuProbeResult {
  bool nvml = false;    // NVML was loaded and initialised
  std::string problem;  // why there is no GPU list: no library, init failed ("" when nvml)
  std::string driver;   // the driver's version, when NVML reports it
  std::vector<GpuInfo> gpus;
};

class GpuProbe {
 public:
  // `library`: the NVML shared object to dlopen (the driver's soname by default).
  explicit GpuProbe(std::string library = "libnvidia-ml.so.1");
  ~GpuProbe();
  GpuProbe(const GpuProbe&) = delete;
  GpuProbe& operator=(const GpuProbe&) = delete;

  // Loads and initialises NVML on the first call (a failure is remembered and reported
  // again without retrying), then lists every device with its memory and utilisation.
  GpuProbeResult probe();

 private:
  struct Api;
  bool load(std::string* problem);

  std::mutex mutex_;
  std::string library_;
  std::unique_ptr<Api> api_;
  void* handle_ = nullptr;
  bool tried_ = false;
  bool initialised_ = false;
  std::string load_problem_;
};

}  // namespace odyssey::ui
