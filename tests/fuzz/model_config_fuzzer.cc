// libFuzzer target for config.json parsing: any text gives a config or an
// error, never a crash or an escaping exception; accepted configs survive a
// round trip through ModelConfigToJson.
#include <cstddef>
#include <cstdint>
#include <string>

#include "worker/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = sbp::ParseModelConfig(text, "fuzz");
  if (!config.ok()) return 0;
  auto again = sbp::ParseModelConfig(sbp::ModelConfigToJson(*config), "fuzz");
  if (!again.ok() || !(*again == *config)) __builtin_trap();
  (void)sbp::ParameterCount(*config);
  return 0;
}
