// Read-only files in memory (RAII): memory-mapped, or copied into anonymous memory on
// transparent huge pages. Weights are used straight from data().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ferry {

// How a file's bytes come into memory.
//  - kMap: mmap of the file (pages shared through the page cache, read on first touch).
//  - kHugePageCopy: read (in parallel) into anonymous memory advised for transparent huge
//    pages. Weights that every step streams in full lose ~10% of memory bandwidth to the TLB
//    misses of 4-KiB page-cache pages (measured: an fp32 engine file decoded slower than the
//    checkpoint it was built from, whose packed weights live in huge-page memory).
enum class FileLoad { kMap, kHugePageCopy };

// Thread-safe after construction (read-only). Unmaps on destruction.
class MappedFile {
 public:
  static Result<std::shared_ptr<MappedFile>> Open(const std::string& path, FileLoad how = FileLoad::kMap);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }

  // Asks the kernel to read [offset, offset+len) ahead (MADV_WILLNEED).
  void Prefetch(size_t offset, size_t len) const;

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size, void* region, size_t region_bytes)
      : path_(std::move(path)), data_(data), size_(size), region_(region), region_bytes_(region_bytes) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
  void* region_;          // what to unmap (the copy's region is aligned inside it)
  size_t region_bytes_;
};

// Reads a whole file into a string.
Result<std::string> ReadFileToString(const std::string& path);
// Writes `contents` to `path` atomically (temp file + rename).
Status WriteStringToFile(const std::string& path, std::string_view contents);

}  // namespace ferry
