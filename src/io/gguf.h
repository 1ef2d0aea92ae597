// GGUF files (llama.cpp's single-file model format): a bounded reader of the header, the
// metadata key/values and the tensor table, with tensors returned as ferry tensors.
//
// Every count, length and offset is checked against the file before it is used, so a
// truncated or hostile file is an error, never a crash or a huge allocation. Versions 2 and
// 3, little-endian only. Tensor types F32, F16 and BF16 come back as zero-copy views; Q8_0
// (blocks of 32 int8 with one f16 scale) is dequantized on read to f32, exactly (f16 would
// round scale * q again; f32 holds it without loss at twice the memory). Other types are
// Unimplemented, naming type and tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/int8_blocks.h"

namespace ferry::io {

// The metadata value types of the GGUF specification (their numbers on disk).
enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
std::string_view GgufTypeName(GgufType type);

// ggml tensor types named by GGUF files (the ones ferry reads, plus names for messages).
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ8_0 = 8, kBF16 = 30 };
// "F32", "Q4_K", ...; "type N" for numbers ggml does not define.
std::string GgmlTypeName(uint32_t type);

// One metadata value. Arrays hold scalars or strings (arrays of arrays are refused), packed
// by kind so that a file's arrays cost memory proportional to their bytes.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t u = 0;       // unsigned integers and bool
  int64_t i = 0;        // signed integers
  double f = 0.0;       // float32 / float64
  std::string s;        // string
  // Arrays: the elements in the one vector their element_type selects.
  GgufType element_type = GgufType::kUint8;
  std::vector<int64_t> ints;  // integer and bool elements (uint64 ones as their bits)
  std::vector<double> floats;
  std::vector<std::string> strings;

  bool is_integer() const;
  bool is_float() const { return type == GgufType::kFloat32 || type == GgufType::kFloat64; }
  size_t array_size() const { return ints.size() + floats.size() + strings.size(); }
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> ne;  // innermost first: ne[0] is the row length
  uint32_t type = 0;         // GgmlType number
  uint64_t offset = 0;       // from the start of the data section
  uint64_t nbytes = 0;
};

// Limits on what a file may declare (defaults suit real models; tests lower them).
struct GgufLimits {
  uint64_t max_metadata = 1 << 16;       // key/value pairs
  uint64_t max_tensors = 1 << 20;
  uint64_t max_string_bytes = 64 << 20;  // one string (a chat template, a key, a name)
  uint64_t max_array_length = 1 << 24;   // one array (vocabularies, merges)
};

// Thread-safe after Open (read-only). Tensors returned keep the mapping alive.
class GgufFile {
 public:
  static Result<std::shared_ptr<GgufFile>> Open(const std::string& path, const GgufLimits& limits = {});
  // The same over bytes already in memory (`keepalive` owns them).
  static Result<std::shared_ptr<GgufFile>> Parse(std::string_view bytes, std::shared_ptr<const void> keepalive,
                                                 const std::string& name, const GgufLimits& limits = {});
  // True when `path` is a regular file starting with the GGUF magic.
  static bool LooksLikeGguf(const std::string& path);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& name() const { return name_; }
  size_t size() const { return bytes_.size(); }

  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* Find(const std::string& key) const;
  // Typed lookups: NotFound when absent (Optional*: nullopt), InvalidArgument naming the key
  // when the value has another type (any integer type converts when it fits).
  Result<int64_t> Int(const std::string& key) const;
  Result<std::optional<int64_t>> OptionalInt(const std::string& key) const;
  Result<std::optional<double>> OptionalFloat(const std::string& key) const;
  Result<std::optional<bool>> OptionalBool(const std::string& key) const;
  Result<std::string> String(const std::string& key) const;
  Result<std::optional<std::string>> OptionalString(const std::string& key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(const std::string& name) const;
  // Shape outermost-first (ferry's order: a ne = {in, out} matrix is [out, in]); F32/F16/BF16
  // are views of the file, Q8_0 is dequantized (see the file comment), others Unimplemented.
  Result<Tensor> Get(const std::string& name) const;
  // A 2-D Q8_0 tensor as its blocks (q and the f16 scales, shapes outermost-first, copied out
  // of the file); nullopt for a tensor of another type or rank.
  Result<std::optional<Int8Blocks>> GetInt8Blocks(const std::string& name) const;

 private:
  GgufFile() = default;
  Status ParseAll(const GgufLimits& limits);

  std::string name_;
  std::string_view bytes_;
  std::shared_ptr<const void> keepalive_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace ferry::io
