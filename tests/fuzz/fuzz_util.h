// Helpers shared by the fuzz targets (tests/fuzz/README.md says how to build and run them).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ferry::fuzz {

// One scratch file per process, rewritten for every input: the loaders under test read
// files (mmap), not buffers.
inline const std::string& ScratchPath(const char* suffix) {
  static const std::string path = [suffix] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir != nullptr ? dir : "/tmp") + "/ferry_fuzz_" + std::to_string(getpid()) + suffix;
  }();
  return path;
}

inline const std::string& WriteScratch(const char* suffix, const uint8_t* data, size_t size) {
  const std::string& path = ScratchPath(suffix);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

// Where the fixtures and the demo models are (compiled in, as for the tests).
inline std::string Fixture(const std::string& rel) { return std::string(FERRY_FIXTURES_DIR) + "/" + rel; }
inline std::string Source(const std::string& rel) { return std::string(FERRY_SOURCE_DIR) + "/" + rel; }

// A fatal check that stays on in release builds: a violated invariant is a finding.
#define FUZZ_CHECK(cond)                                                             \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

}  // namespace ferry::fuzz
