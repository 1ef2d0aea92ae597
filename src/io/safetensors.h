// safetensors checkpoints: zero-copy reads from mmap'd files (single or sharded through
// model.safetensors.index.json), and a writer for ferry's own checkpoints and fixtures.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace ferry::io {

// Thread-safe after Open (read-only). Tensors returned borrow the mapping and keep it alive.
class SafetensorsFile {
 public:
  // Validates the header: JSON well-formed, every dtype known (F32/F16/BF16/F8_E4M3/I8/U8/
  // I32/I64), offsets inside the file, sizes == numel * dtype size, no overlaps.
  static Result<std::shared_ptr<SafetensorsFile>> Open(const std::string& path);

  bool Has(const std::string& name) const;
  std::vector<std::string> Names() const;
  // A zero-copy view of one tensor (read-only memory: do not write through it).
  Result<Tensor> Get(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_->path(); }

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    size_t begin;  // absolute offset in the file
    size_t end;
  };
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint: one or more safetensors files behind one name space.
class Checkpoint {
 public:
  // DIR/model.safetensors, or DIR/model.safetensors.index.json with its shards.
  static Result<std::shared_ptr<Checkpoint>> Open(const std::string& model_dir);

  bool Has(const std::string& name) const;
  std::vector<std::string> Names() const;
  Result<Tensor> Get(const std::string& name) const;
  // Get + checks: the shape must equal `shape`; error names tensor, expected and actual.
  Result<Tensor> GetChecked(const std::string& name, const Shape& shape) const;

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> index_;  // tensor name -> files_ index
};

// Writes tensors (any host tensors, contiguous) to a safetensors file, names sorted.
Status WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace ferry::io
