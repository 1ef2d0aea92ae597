// The safetensors reader on arbitrary files: every header either opens, with each tensor's
// bytes inside the mapping (all of them are read here, so a view past the end faults), or is
// refused with a Status. It never crashes.
#include <cstdint>

#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = ferry::fuzz::WriteScratch(".safetensors", data, size);
  auto file = ferry::io::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  size_t total = 0;
  uint8_t x = 0;
  for (const std::string& name : file.value()->Names()) {
    FUZZ_CHECK(file.value()->Has(name));
    auto t = file.value()->Get(name);
    FUZZ_CHECK(t.ok());
    const auto* bytes = t.value().data<const uint8_t>();
    const size_t n = t.value().nbytes();
    total += n;
    for (size_t i = 0; i < n; ++i) x ^= bytes[i];
  }
  FUZZ_CHECK(total <= size);  // validated tensors do not overlap, so they fit in the file
  volatile uint8_t sink = x;
  (void)sink;
  return 0;
}
