// libFuzzer target: any bytes given to the preset loader produce either a config or
// diagnostics, never a crash, hang or sanitizer report. A config that loads must also
// survive save -> load unchanged, and --set with the same bytes must not crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "config/preset_io.h"
#include "config/validate.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = odyssey::load_preset_text(text, "fuzz.yaml", "");
  if (r.ok()) {
    (void)odyssey::validate_config(r.value, nullptr);
    auto again = odyssey::load_preset_text(odyssey::save_preset_text(r.value.config), "resaved.yaml", "");
    if (!again.ok() || !(again.value.config == r.value.config)) std::abort();  // round trip broken
  }
  odyssey::LoadedConfig c;
  (void)odyssey::apply_overrides(c, {"system=" + text, text});
  return 0;
}
