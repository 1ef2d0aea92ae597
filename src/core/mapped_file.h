// Read-only memory-mapped files (RAII). Weights are used straight from the mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ferry {

// Thread-safe after construction (read-only). Unmaps on destruction.
class MappedFile {
 public:
  static Result<std::shared_ptr<MappedFile>> Open(const std::string& path);
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
  MappedFile(std::string path, const uint8_t* data, size_t size) : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

// Reads a whole file into a string.
Result<std::string> ReadFileToString(const std::string& path);
// Writes `contents` to `path` atomically (temp file + rename).
Status WriteStringToFile(const std::string& path, std::string_view contents);

}  // namespace ferry
