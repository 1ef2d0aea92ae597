// The engine file: one file holding a compiled model. Layout:
//
//   [0, 4096)          header: magic "FERRYENG", format version, where the manifest is,
//                      its CRC-32C, the file size, then the build fingerprint as JSON text
//   [4096, ...)        tensor blobs, each starting on a 4096-byte boundary (mmap-ready,
//                      already in the layout the kernels read)
//   [manifest_offset)  the manifest: JSON (model config, tokenizer files, build options,
//                      tuned kernel choices, and a table of blobs with CRC-32C each)
//
// docs/engine-format.md describes every field.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace ferry::io {

inline constexpr char kEngineMagic[8] = {'F', 'E', 'R', 'R', 'Y', 'E', 'N', 'G'};
inline constexpr uint32_t kEngineFormatVersion = 1;
inline constexpr size_t kEngineHeaderBytes = 4096;
inline constexpr size_t kEngineBlobAlignment = 4096;

// CRC-32C (Castagnoli), hardware-accelerated with SSE4.2.
uint32_t Crc32c(const void* data, size_t bytes, uint32_t crc = 0);

// A blob's place in the file, as stored in the manifest: {"offset", "bytes", "crc32c"}.
struct BlobRef {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  nlohmann::json ToJson() const;
  static Result<BlobRef> FromJson(const nlohmann::json& j);
};

// Thread-compatible. Writes to PATH.tmp and renames on Finish, so a reader never sees a
// half-written engine under the final name.
class EngineWriter {
 public:
  static Result<std::unique_ptr<EngineWriter>> Create(const std::string& path, const nlohmann::json& fingerprint);
  ~EngineWriter();
  EngineWriter(const EngineWriter&) = delete;
  EngineWriter& operator=(const EngineWriter&) = delete;

  // Appends `bytes` at the next aligned offset; returns where it went.
  Result<BlobRef> AddBlob(const void* data, size_t bytes);
  // Writes the manifest, patches the header, and renames into place.
  Status Finish(const nlohmann::json& manifest);

 private:
  EngineWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  Status WriteAt(uint64_t offset, const void* data, size_t bytes);

  std::string path_;
  int fd_ = -1;
  uint64_t end_ = kEngineHeaderBytes;
  std::string fingerprint_text_;
  bool finished_ = false;
};

// Thread-safe after Open (read-only).
class EngineFile {
 public:
  // Checks the header (magic, version not newer than this build's, sizes inside the file)
  // and the manifest's checksum; blobs are checked by Blob()/VerifyAll.
  static Result<std::shared_ptr<EngineFile>> Open(const std::string& path);
  // True when the file starts with the engine magic (cheap; for "directory or engine?").
  static bool LooksLikeEngine(const std::string& path);

  const nlohmann::json& manifest() const { return manifest_; }
  const nlohmann::json& fingerprint() const { return fingerprint_; }
  uint32_t format_version() const { return format_version_; }
  const std::string& path() const { return file_->path(); }
  size_t size() const { return file_->size(); }

  // A zero-copy view of a blob as a tensor of `dtype`/`shape` (bytes must match). With
  // `verify`, its CRC-32C is checked first (DataLoss naming `what` on mismatch).
  Result<Tensor> Blob(const nlohmann::json& ref, DType dtype, const Shape& shape, const std::string& what,
                      bool verify) const;
  // The raw bytes of a blob (verified when asked).
  Result<std::string_view> BlobBytes(const nlohmann::json& ref, const std::string& what, bool verify) const;
  // Checks every blob listed under manifest["blobs_index"] (all of them), in parallel.
  Status VerifyAll() const;

 private:
  std::shared_ptr<MappedFile> file_;
  nlohmann::json manifest_;
  nlohmann::json fingerprint_;
  uint32_t format_version_ = 0;
  uint64_t data_end_ = 0;  // blobs live in [kEngineHeaderBytes, data_end_)
};

}  // namespace ferry::io
