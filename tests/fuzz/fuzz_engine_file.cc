// The engine file reader. The first byte picks what the rest is:
//  - even: a whole engine file (header, fingerprint, blobs, manifest) as bytes;
//  - odd: manifest text alone, which gets past the checksums: EngineManifest::Parse,
//    CheckExtents, a ToJson round trip (the same manifest again), the model config and the
//    tokenizer files it embeds.
// Every input is opened or refused with a Status; nothing crashes.
#include <cstdint>

#include "fuzz_util.h"
#include "io/engine_file.h"
#include "io/model_config.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if ((data[0] & 1) == 0) {
    const std::string& path = ferry::fuzz::WriteScratch(".engine", data + 1, size - 1);
    auto engine = ferry::io::EngineFile::Open(path);
    if (!engine.ok()) return 0;
    (void)engine.value()->VerifyAll();  // reads every blob the manifest names
    return 0;
  }
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto manifest = ferry::io::EngineManifest::Parse(text);
  if (!manifest.ok()) return 0;
  (void)manifest->CheckExtents(ferry::io::kEngineHeaderBytes, uint64_t{1} << 40);
  (void)manifest->AllBlobs();
  auto again = ferry::io::EngineManifest::Parse(manifest->ToJson().dump());
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again.value() == manifest.value());
  auto config = manifest->files.find("config.json");
  if (config != manifest->files.end()) (void)ferry::io::ParseModelConfig(config->second);
  if (manifest->files.count("tokenizer.json") != 0) (void)ferry::tokenizer::LoadTokenizerFromFiles(manifest->files);
  return 0;
}
