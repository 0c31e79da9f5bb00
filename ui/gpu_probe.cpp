#include "gpu_probe.h"

#include <QCoreApplication>
#include <dlfcn.h>

#include <utility>

namespace odyssey::ui {
namespace {

// The few NVML types used, as nvml.h declares them (a stable C ABI; the header is not
// needed at build time).
using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

}  // namespace

struct GpuProbe::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*driver)(char*, unsigned int) = nullptr;
  const char* (*error)(nvmlReturn_t) = nullptr;

  std::string text(nvmlReturn_t r) const {
    const char* s = error ? error(r) : nullptr;
    return s ? std::string(s) : "NVML error " + std::to_string(r);
  }
};

namespace {

template <typename F>
bool find(void* handle, F* out, const char* name, const char* fallback = nullptr) {
  void* p = dlsym(handle, name);
  if (!p && fallback) p = dlsym(handle, fallback);
  *out = reinterpret_cast<F>(p);
  return p != nullptr;
}

}  // namespace

GpuProbe::GpuProbe(std::string library) : library_(std::move(library)) {}

GpuProbe::~GpuProbe() {
  std::lock_guard lock(mutex_);
  if (initialised_ && api_->shutdown) api_->shutdown();
  if (handle_) dlclose(handle_);
}

bool GpuProbe::load(std::string* problem) {
  handle_ = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* why = dlerror();
    *problem =
        (why ? QCoreApplication::translate("GpuProbe",
                                           "%1 could not be loaded (the NVIDIA driver is not installed): %2")
                   .arg(QString::fromStdString(library_), QString::fromLocal8Bit(why))
             : QCoreApplication::translate("GpuProbe", "%1 could not be loaded (the NVIDIA driver is not installed)")
                   .arg(QString::fromStdString(library_)))
            .toStdString();
    // glibc keeps the message in a per-thread buffer until the next dlerror call, which frees
    // it; without that call a probe thread still alive at exit shows as a leak under ASan.
    (void)dlerror();
    return false;
  }
  api_ = std::make_unique<Api>();
  Api& a = *api_;
  const bool ok = find(handle_, &a.init, "nvmlInit_v2", "nvmlInit") && find(handle_, &a.shutdown, "nvmlShutdown") &&
                  find(handle_, &a.count, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount") &&
                  find(handle_, &a.handle, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex") &&
                  find(handle_, &a.name, "nvmlDeviceGetName") && find(handle_, &a.memory, "nvmlDeviceGetMemoryInfo");
  // Optional: a device without them is still listed.
  find(handle_, &a.uuid, "nvmlDeviceGetUUID");
  find(handle_, &a.utilization, "nvmlDeviceGetUtilizationRates");
  find(handle_, &a.driver, "nvmlSystemGetDriverVersion");
  find(handle_, &a.error, "nvmlErrorString");
  if (!ok) {
    *problem = QCoreApplication::translate("GpuProbe", "%1 lacks NVML functions the window needs (%2)")
                   .arg(QString::fromStdString(library_),
                        QStringLiteral("nvmlInit_v2, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, "
                                       "nvmlDeviceGetName, nvmlDeviceGetMemoryInfo"))
                   .toStdString();
    return false;
  }
  if (const nvmlReturn_t r = a.init(); r != kNvmlSuccess) {
    *problem = QCoreApplication::translate("GpuProbe", "NVML did not initialise: %1")
                   .arg(QString::fromStdString(a.text(r)))
                   .toStdString();
    return false;
  }
  initialised_ = true;
  return true;
}

GpuProbeResult GpuProbe::probe() {
  std::lock_guard lock(mutex_);
  GpuProbeResult out;
  if (!tried_) {
    tried_ = true;
    load(&load_problem_);
  }
  if (!initialised_) {
    out.problem = load_problem_;
    return out;
  }
  const Api& a = *api_;
  out.nvml = true;
  if (a.driver) {
    char v[96] = {};
    if (a.driver(v, sizeof v) == kNvmlSuccess) out.driver = v;
  }
  unsigned int n = 0;
  if (const nvmlReturn_t r = a.count(&n); r != kNvmlSuccess) {
    out.problem = QCoreApplication::translate("GpuProbe", "NVML could not count the GPUs: %1")
                      .arg(QString::fromStdString(a.text(r)))
                      .toStdString();
    return out;
  }
  for (unsigned int i = 0; i < n; ++i) {
    nvmlDevice_t dev = nullptr;
    GpuInfo g;
    g.index = static_cast<int>(i);
    if (const nvmlReturn_t r = a.handle(i, &dev); r != kNvmlSuccess) {
      g.name = QCoreApplication::translate("GpuProbe", "(not accessible: %1)")
                   .arg(QString::fromStdString(a.text(r)))
                   .toStdString();
      out.gpus.push_back(g);
      continue;
    }
    char buf[128] = {};
    if (a.name(dev, buf, sizeof buf) == kNvmlSuccess) g.name = buf;
    if (a.uuid) {
      char u[96] = {};
      if (a.uuid(dev, u, sizeof u) == kNvmlSuccess) g.uuid = u;
    }
    nvmlMemory_t m{};
    if (a.memory(dev, &m) == kNvmlSuccess) {
      g.memory_total = static_cast<std::int64_t>(m.total);
      g.memory_used = static_cast<std::int64_t>(m.used);
    }
    nvmlUtilization_t u{};
    if (a.utilization && a.utilization(dev, &u) == kNvmlSuccess) g.utilization = static_cast<int>(u.gpu);
    out.gpus.push_back(std::move(g));
  }
  return out;
}

}  // namespace odyssey::ui
