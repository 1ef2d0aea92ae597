// The engine file: one file holding a compiled model. Layout:
//
//   [0, 4096)          header: magic "FERRYENG", format version, where the manifest is,
//                      its CRC-32C, the file size, then the build fingerprint as JSON text
//   [4096, ...)        tensor blobs, each starting on a 4096-byte boundary (mmap-ready,
//                      already in the layout the kernels read)
//   [manifest_offset)  the manifest: JSON (io::EngineManifest: model, tokenizer files,
//                      build options, tuned kernel choices, and every blob with its CRC-32C)
//
// docs/engine-format.md describes every field.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/engine_fingerprint.h"
#include "io/engine_manifest.h"

namespace ferry::io {

inline constexpr char kEngineMagic[8] = {'F', 'E', 'R', 'R', 'Y', 'E', 'N', 'G'};
inline constexpr size_t kEngineHeaderBytes = 4096;

// CRC-32C (Castagnoli), hardware-accelerated with SSE4.2.
uint32_t Crc32c(const void* data, size_t bytes, uint32_t crc = 0);

// Thread-compatible. Writes to PATH.tmp and renames on Finish, so a reader never sees a
// half-written engine under the final name.
class EngineWriter {
 public:
  static Result<std::unique_ptr<EngineWriter>> Create(const std::string& path, const EngineFingerprint& fingerprint);
  ~EngineWriter();
  EngineWriter(const EngineWriter&) = delete;
  EngineWriter& operator=(const EngineWriter&) = delete;

  // Appends `bytes` at the next aligned offset; returns where it went.
  Result<BlobRef> AddBlob(const void* data, size_t bytes);
  // Writes the manifest, patches the header, and renames into place. The manifest's blobs
  // must be ones AddBlob returned (checked, as a reader would).
  Status Finish(const EngineManifest& manifest);

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
  // Checks the header (magic, version not newer than this build's, sizes inside the file),
  // the manifest's checksum, and everything in the manifest that does not need the blobs'
  // bytes: its fields (EngineManifest::Parse) and that every blob lies in the data section
  // (CheckExtents). Blobs' checksums are checked by Blob()/BlobBytes()/VerifyAll.
  static Result<std::shared_ptr<EngineFile>> Open(const std::string& path, FileLoad how = FileLoad::kMap);
  // True when the file starts with the engine magic (cheap; for "directory or engine?").
  static bool LooksLikeEngine(const std::string& path);

  const EngineManifest& manifest() const { return manifest_; }
  // The header's fingerprint (what loaders check).
  const EngineFingerprint& fingerprint() const { return fingerprint_; }
  uint32_t format_version() const { return format_version_; }
  const std::string& path() const { return file_->path(); }
  size_t size() const { return file_->size(); }

  // A zero-copy view of a stored tensor. With `verify`, its CRC-32C is checked first
  // (DataLoss naming `what` on mismatch).
  Result<Tensor> Blob(const StoredTensor& tensor, const std::string& what, bool verify) const;
  // The raw bytes of a blob (verified when asked).
  Result<std::string_view> BlobBytes(const BlobRef& ref, const std::string& what, bool verify) const;
  // Checks the CRC-32C of every blob the manifest refers to (EngineManifest::AllBlobs), in
  // parallel.
  Status VerifyAll() const;

 private:
  std::shared_ptr<MappedFile> file_;
  EngineManifest manifest_;
  EngineFingerprint fingerprint_;
  uint32_t format_version_ = 0;
  uint64_t data_end_ = 0;  // blobs live in [kEngineHeaderBytes, data_end_)
};

}  // namespace ferry::io
