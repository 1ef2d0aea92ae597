// The GGUF reader on arbitrary files: every file either opens, with each readable tensor's
// bytes inside it (all of them are read here), or is refused with a Status; an opened llama
// file's metadata either converts to checkpoint files or is refused. It never crashes.
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz_util.h"
#include "io/gguf.h"
#include "io/gguf_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<std::string>(reinterpret_cast<const char*>(data), size);
  // Low limits keep one input's allocations small; the checks are the same at any limit.
  ferry::io::GgufLimits limits;
  limits.max_array_length = 1 << 16;
  limits.max_string_bytes = 1 << 16;
  auto file = ferry::io::GgufFile::Parse(*bytes, bytes, "fuzz.gguf", limits);
  if (!file.ok()) return 0;
  uint8_t x = 0;
  for (const ferry::io::GgufTensorInfo& info : file.value()->tensors()) {
    FUZZ_CHECK(file.value()->FindTensor(info.name) != nullptr);
    auto t = file.value()->Get(info.name);
    if (!t.ok()) continue;
    const auto* p = t.value().data<const uint8_t>();
    for (size_t i = 0; i < t.value().nbytes(); ++i) x ^= p[i];
  }
  auto model = ferry::io::GgufModel::FromFile(file.value());
  if (model.ok()) FUZZ_CHECK(model.value()->files().count("config.json") == 1);
  volatile uint8_t sink = x;
  (void)sink;
  return 0;
}
