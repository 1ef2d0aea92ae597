// The serving config (YAML): every document is parsed into a config or refused with a
// Status naming the key; nothing crashes, however deep, aliased or mistyped it is.
#include <cstdint>
#include <string_view>

#include "serve/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)ferry::serve::ParseServerConfig(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
