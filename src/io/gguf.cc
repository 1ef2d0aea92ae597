#include "io/gguf.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/dtype.h"

namespace ferry::io {

namespace {

static_assert(std::endian::native == std::endian::little, "GGUF I/O assumes a little-endian host");

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint64_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr uint64_t kQ8Block = 32;
constexpr uint64_t kQ8BlockBytes = 2 + kQ8Block;

// A bounds-checked cursor over the file's bytes; every read says what it was reading.
class Cursor {
 public:
  Cursor(std::string_view bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return bytes_.size() - pos_; }

  template <typename T>
  Result<T> Read(const char* what) {
    if (left() < sizeof(T)) return Truncated(what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string> ReadString(const char* what, uint64_t max_bytes) {
    FERRY_ASSIGN_OR_RETURN(const uint64_t n, Read<uint64_t>(what));
    if (n > max_bytes) {
      return InvalidArgument(Where() + ": " + what + " declares " + std::to_string(n) + " bytes, more than the " +
                             std::to_string(max_bytes) + " allowed");
    }
    if (n > left()) return Truncated(what);
    std::string s(bytes_.substr(pos_, n));
    pos_ += n;
    return s;
  }

  Status Truncated(const char* what) const {
    return DataLoss(Where() + ": the file ends inside " + what + " (truncated or corrupt)");
  }
  std::string Where() const { return "GGUF '" + name_ + "' at byte " + std::to_string(pos_); }

 private:
  std::string_view bytes_;
  const std::string& name_;
  uint64_t pos_ = 0;
};

// The smallest number of bytes one value of `type` takes on disk (arrays: their header), so a
// count can be checked against the bytes left before anything is allocated.
uint64_t MinBytes(GgufType type) {
  switch (type) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

bool KnownType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

Result<GgufValue> ReadValue(Cursor& c, GgufType type, const GgufLimits& limits, const std::string& key) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::kUint8: { FERRY_ASSIGN_OR_RETURN(auto x, c.Read<uint8_t>("a uint8 value")); v.u = x; break; }
    case GgufType::kInt8: { FERRY_ASSIGN_OR_RETURN(auto x, c.Read<int8_t>("an int8 value")); v.i = x; break; }
    case GgufType::kUint16: { FERRY_ASSIGN_OR_RETURN(auto x, c.Read<uint16_t>("a uint16 value")); v.u = x; break; }
    case GgufType::kInt16: { FERRY_ASSIGN_OR_RETURN(auto x, c.Read<int16_t>("an int16 value")); v.i = x; break; }
    case GgufType::kUint32: { FERRY_ASSIGN_OR_RETURN(auto x, c.Read<uint32_t>("a uint32 value")); v.u = x; break; }
    case GgufType::kInt32: { FERRY_ASSIGN_OR_RETURN(auto x, c.Read<int32_t>("an int32 value")); v.i = x; break; }
    case GgufType::kUint64: { FERRY_ASSIGN_OR_RETURN(auto x, c.Read<uint64_t>("a uint64 value")); v.u = x; break; }
    case GgufType::kInt64: { FERRY_ASSIGN_OR_RETURN(auto x, c.Read<int64_t>("an int64 value")); v.i = x; break; }
    case GgufType::kFloat32: { FERRY_ASSIGN_OR_RETURN(auto x, c.Read<float>("a float32 value")); v.f = x; break; }
    case GgufType::kFloat64: { FERRY_ASSIGN_OR_RETURN(auto x, c.Read<double>("a float64 value")); v.f = x; break; }
    case GgufType::kBool: {
      FERRY_ASSIGN_OR_RETURN(auto x, c.Read<uint8_t>("a bool value"));
      if (x > 1) return InvalidArgument(c.Where() + ": key '" + key + "' has bool value " + std::to_string(x));
      v.u = x;
      break;
    }
    case GgufType::kString: {
      FERRY_ASSIGN_OR_RETURN(v.s, c.ReadString("a string value", limits.max_string_bytes));
      break;
    }
    case GgufType::kArray: {
      FERRY_ASSIGN_OR_RETURN(const uint32_t et, c.Read<uint32_t>("an array's element type"));
      if (!KnownType(et)) {
        return InvalidArgument(c.Where() + ": key '" + key + "' is an array of unknown type " + std::to_string(et));
      }
      v.element_type = static_cast<GgufType>(et);
      if (v.element_type == GgufType::kArray) {
        return Unimplemented(c.Where() + ": key '" + key + "' is an array of arrays, which ferry does not read");
      }
      FERRY_ASSIGN_OR_RETURN(const uint64_t n, c.Read<uint64_t>("an array's length"));
      if (n > limits.max_array_length) {
        return InvalidArgument(c.Where() + ": key '" + key + "' declares an array of " + std::to_string(n) +
                               " elements, more than the " + std::to_string(limits.max_array_length) + " allowed");
      }
      if (n > c.left() / MinBytes(v.element_type)) {
        return DataLoss(c.Where() + ": key '" + key + "' declares " + std::to_string(n) +
                        " elements, more than the rest of the file can hold");
      }
      GgufValue probe;
      probe.type = v.element_type;
      if (v.element_type == GgufType::kString) {
        v.strings.reserve(n);
      } else if (probe.is_float()) {
        v.floats.reserve(n);
      } else {
        v.ints.reserve(n);
      }
      for (uint64_t k = 0; k < n; ++k) {
        FERRY_ASSIGN_OR_RETURN(GgufValue e, ReadValue(c, v.element_type, limits, key));
        if (v.element_type == GgufType::kString) {
          v.strings.push_back(std::move(e.s));
        } else if (e.is_float()) {
          v.floats.push_back(e.f);
        } else {
          v.ints.push_back(e.u != 0 ? static_cast<int64_t>(e.u) : e.i);
        }
      }
      break;
    }
  }
  return v;
}

// Bytes of a tensor of `type` with dims `ne`; an error for types ferry does not read, for a
// row length that is not whole Q8_0 blocks, and for sizes that overflow.
Result<uint64_t> TensorBytes(const GgufTensorInfo& t) {
  uint64_t numel = 1;
  for (uint64_t d : t.ne) {
    if (d == 0 || numel > std::numeric_limits<uint64_t>::max() / 8 / d) {
      return InvalidArgument("tensor '" + t.name + "' has an empty or absurd dimension");
    }
    numel *= d;
  }
  if (numel > (uint64_t{1} << 48)) return InvalidArgument("tensor '" + t.name + "' is absurdly large");
  switch (static_cast<GgmlType>(t.type)) {
    case GgmlType::kF32: return numel * 4;
    case GgmlType::kF16: case GgmlType::kBF16: return numel * 2;
    case GgmlType::kQ8_0:
      if (t.ne[0] % kQ8Block != 0) {
        return InvalidArgument("tensor '" + t.name + "' (Q8_0) has rows of " + std::to_string(t.ne[0]) +
                               " values, not a multiple of 32");
      }
      return numel / kQ8Block * kQ8BlockBytes;
  }
  return Unimplemented("tensor '" + t.name + "' has type " + GgmlTypeName(t.type) +
                       ", which ferry does not read (supported: F32, F16, BF16, Q8_0)");
}

}  // namespace

std::string_view GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "unknown";
}

std::string GgmlTypeName(uint32_t type) {
  // ggml's numbering (types 4 and 5 were removed long ago).
  static constexpr const char* kNames[] = {
      "F32",  "F16",  "Q4_0", "Q4_1", nullptr, nullptr, "Q5_0", "Q5_1", "Q8_0",    "Q8_1",    "Q2_K",
      "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",  "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
      "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16"};
  if (type < std::size(kNames) && kNames[type] != nullptr) return kNames[type];
  return "type " + std::to_string(type);
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kUint16: case GgufType::kInt16:
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kUint64: case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

bool GgufFile::LooksLikeGguf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, kMagic, 4) == 0;
}

Result<std::shared_ptr<GgufFile>> GgufFile::Open(const std::string& path, const GgufLimits& limits) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  return Parse(file->view(), file, path, limits);
}

Result<std::shared_ptr<GgufFile>> GgufFile::Parse(std::string_view bytes, std::shared_ptr<const void> keepalive,
                                                  const std::string& name, const GgufLimits& limits) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->name_ = name;
  f->bytes_ = bytes;
  f->keepalive_ = std::move(keepalive);
  FERRY_RETURN_IF_ERROR(f->ParseAll(limits));
  return f;
}

Status GgufFile::ParseAll(const GgufLimits& limits) {
  Cursor c(bytes_, name_);
  if (bytes_.size() < 4 || std::memcmp(bytes_.data(), kMagic, 4) != 0) {
    return InvalidArgument("'" + name_ + "' is not a GGUF file (no GGUF magic)");
  }
  FERRY_ASSIGN_OR_RETURN(const uint32_t magic, c.Read<uint32_t>("the magic"));
  (void)magic;
  FERRY_ASSIGN_OR_RETURN(version_, c.Read<uint32_t>("the version"));
  // A big-endian file has its version byte-swapped: 0x03000000 for version 3.
  if (version_ != 0 && (version_ & 0xffff) == 0) {
    return Unimplemented("GGUF '" + name_ + "' is big-endian (version field " + std::to_string(version_) +
                         "); ferry reads little-endian GGUF only");
  }
  if (version_ != 2 && version_ != 3) {
    return Unimplemented("GGUF '" + name_ + "' has version " + std::to_string(version_) +
                         "; ferry reads versions 2 and 3");
  }
  FERRY_ASSIGN_OR_RETURN(const uint64_t n_tensors, c.Read<uint64_t>("the tensor count"));
  FERRY_ASSIGN_OR_RETURN(const uint64_t n_kv, c.Read<uint64_t>("the metadata count"));
  if (n_tensors > limits.max_tensors) {
    return InvalidArgument("GGUF '" + name_ + "' declares " + std::to_string(n_tensors) + " tensors, more than the " +
                           std::to_string(limits.max_tensors) + " allowed");
  }
  if (n_kv > limits.max_metadata) {
    return InvalidArgument("GGUF '" + name_ + "' declares " + std::to_string(n_kv) +
                           " metadata entries, more than the " + std::to_string(limits.max_metadata) + " allowed");
  }
  for (uint64_t k = 0; k < n_kv; ++k) {
    FERRY_ASSIGN_OR_RETURN(std::string key, c.ReadString("a metadata key", limits.max_string_bytes));
    FERRY_ASSIGN_OR_RETURN(const uint32_t type, c.Read<uint32_t>("a metadata value type"));
    if (!KnownType(type)) {
      return InvalidArgument(c.Where() + ": key '" + key + "' has unknown value type " + std::to_string(type));
    }
    FERRY_ASSIGN_OR_RETURN(GgufValue v, ReadValue(c, static_cast<GgufType>(type), limits, key));
    if (!metadata_.emplace(key, std::move(v)).second) {
      return InvalidArgument("GGUF '" + name_ + "' repeats the metadata key '" + key + "'");
    }
  }
  if (Find("general.alignment") != nullptr) {
    Result<std::optional<int64_t>> a = OptionalInt("general.alignment");
    if (!a.ok() || **a <= 0 || **a > (1 << 20) || !std::has_single_bit(static_cast<uint64_t>(**a))) {
      return InvalidArgument("GGUF '" + name_ + "': general.alignment must be a power of two up to 2^20");
    }
    alignment_ = static_cast<uint64_t>(**a);
  }
  tensors_.reserve(std::min<uint64_t>(n_tensors, c.left() / 24));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    FERRY_ASSIGN_OR_RETURN(t.name, c.ReadString("a tensor name", limits.max_string_bytes));
    FERRY_ASSIGN_OR_RETURN(const uint32_t n_dims, c.Read<uint32_t>("a tensor's dimension count"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return InvalidArgument(c.Where() + ": tensor '" + t.name + "' has " + std::to_string(n_dims) +
                             " dimensions (1 to 4 allowed)");
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      FERRY_ASSIGN_OR_RETURN(const uint64_t ne, c.Read<uint64_t>("a tensor dimension"));
      t.ne.push_back(ne);
    }
    FERRY_ASSIGN_OR_RETURN(t.type, c.Read<uint32_t>("a tensor type"));
    FERRY_ASSIGN_OR_RETURN(t.offset, c.Read<uint64_t>("a tensor offset"));
    if (t.offset % alignment_ != 0) {
      return InvalidArgument("GGUF '" + name_ + "': tensor '" + t.name + "' is at offset " + std::to_string(t.offset) +
                             ", not a multiple of the alignment " + std::to_string(alignment_));
    }
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      return InvalidArgument("GGUF '" + name_ + "' repeats the tensor '" + t.name + "'");
    }
    tensors_.push_back(std::move(t));
  }
  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_bytes = data_offset_ <= bytes_.size() ? bytes_.size() - data_offset_ : 0;
  if (n_tensors > 0 && data_offset_ > bytes_.size()) {
    return DataLoss("GGUF '" + name_ + "' ends before its data section (truncated)");
  }
  for (GgufTensorInfo& t : tensors_) {
    // Types ferry cannot read are reported when such a tensor is asked for, so a file with an
    // extra tensor of another type still opens; the size check needs the size, though.
    Result<uint64_t> bytes = TensorBytes(t);
    if (!bytes.ok()) {
      if (bytes.status().code() == StatusCode::kUnimplemented) continue;
      return bytes.status().WithContext("GGUF '" + name_ + "'");
    }
    t.nbytes = *bytes;
    if (t.offset > data_bytes || t.nbytes > data_bytes - t.offset) {
      return DataLoss("GGUF '" + name_ + "': tensor '" + t.name + "' (" + std::to_string(t.nbytes) +
                      " bytes at data offset " + std::to_string(t.offset) + ") lies past the end of the file");
    }
  }
  return Status::Ok();
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

Result<std::optional<int64_t>> GgufFile::OptionalInt(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::optional<int64_t>();
  if (!v->is_integer()) {
    return InvalidArgument("GGUF key '" + key + "' is a " + std::string(GgufTypeName(v->type)) +
                           ", not an integer");
  }
  if (v->type == GgufType::kUint64 && v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgument("GGUF key '" + key + "' is too large");
  }
  return std::optional<int64_t>(v->u != 0 ? static_cast<int64_t>(v->u) : v->i);
}

Result<int64_t> GgufFile::Int(const std::string& key) const {
  FERRY_ASSIGN_OR_RETURN(std::optional<int64_t> v, OptionalInt(key));
  if (!v) return NotFound("GGUF '" + name_ + "' has no metadata key '" + key + "'");
  return *v;
}

Result<std::optional<double>> GgufFile::OptionalFloat(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::optional<double>();
  if (v->is_float()) return std::optional<double>(v->f);
  FERRY_ASSIGN_OR_RETURN(std::optional<int64_t> i, OptionalInt(key));
  return std::optional<double>(static_cast<double>(*i));
}

Result<std::optional<bool>> GgufFile::OptionalBool(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::optional<bool>();
  if (v->type != GgufType::kBool) {
    return InvalidArgument("GGUF key '" + key + "' is a " + std::string(GgufTypeName(v->type)) + ", not a bool");
  }
  return std::optional<bool>(v->u != 0);
}

Result<std::optional<std::string>> GgufFile::OptionalString(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::optional<std::string>();
  if (v->type != GgufType::kString) {
    return InvalidArgument("GGUF key '" + key + "' is a " + std::string(GgufTypeName(v->type)) + ", not a string");
  }
  return std::optional<std::string>(v->s);
}

Result<std::string> GgufFile::String(const std::string& key) const {
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> v, OptionalString(key));
  if (!v) return NotFound("GGUF '" + name_ + "' has no metadata key '" + key + "'");
  return *v;
}

const GgufTensorInfo* GgufFile::FindTensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<Tensor> GgufFile::Get(const std::string& name) const {
  const GgufTensorInfo* t = FindTensor(name);
  if (t == nullptr) return NotFound("tensor '" + name + "' not found in GGUF '" + name_ + "'");
  Shape shape;
  for (auto it = t->ne.rbegin(); it != t->ne.rend(); ++it) shape.push_back(static_cast<int64_t>(*it));
  if (t->nbytes == 0) FERRY_RETURN_IF_ERROR(TensorBytes(*t).status().WithContext("GGUF '" + name_ + "'"));
  const uint8_t* data = reinterpret_cast<const uint8_t*>(bytes_.data()) + data_offset_ + t->offset;
  switch (static_cast<GgmlType>(t->type)) {
    case GgmlType::kF32:
      return Tensor::FromBorrowed(const_cast<uint8_t*>(data), shape, DType::kF32, keepalive_);
    case GgmlType::kF16:
      return Tensor::FromBorrowed(const_cast<uint8_t*>(data), shape, DType::kF16, keepalive_);
    case GgmlType::kBF16:
      return Tensor::FromBorrowed(const_cast<uint8_t*>(data), shape, DType::kBF16, keepalive_);
    case GgmlType::kQ8_0: {
      const uint64_t blocks = t->nbytes / kQ8BlockBytes;
      Tensor out = Tensor::Empty(shape, DType::kF32);
      float* values = out.data<float>();
      for (uint64_t b = 0; b < blocks; ++b) {
        const uint8_t* block = data + b * kQ8BlockBytes;
        uint16_t scale_bits;
        std::memcpy(&scale_bits, block, 2);
        const float scale = F16ToF32(scale_bits);
        const int8_t* q = reinterpret_cast<const int8_t*>(block + 2);
        for (uint64_t j = 0; j < kQ8Block; ++j) values[b * kQ8Block + j] = scale * static_cast<float>(q[j]);
      }
      return out;
    }
  }
  return Unimplemented("GGUF '" + name_ + "': tensor '" + name + "' has type " + GgmlTypeName(t->type) +
                       ", which ferry does not read (supported: F32, F16, BF16, Q8_0)");
}

Result<std::optional<Int8Blocks>> GgufFile::GetInt8Blocks(const std::string& name) const {
  const GgufTensorInfo* t = FindTensor(name);
  if (t == nullptr) return NotFound("tensor '" + name + "' not found in GGUF '" + name_ + "'");
  if (static_cast<GgmlType>(t->type) != GgmlType::kQ8_0 || t->ne.size() != 2) return std::optional<Int8Blocks>();
  if (t->nbytes == 0) FERRY_RETURN_IF_ERROR(TensorBytes(*t).status().WithContext("GGUF '" + name_ + "'"));
  const int64_t rows = static_cast<int64_t>(t->ne[1]);
  const int64_t cols = static_cast<int64_t>(t->ne[0]);  // whole blocks (TensorBytes checked)
  const int64_t blocks_per_row = cols / static_cast<int64_t>(kQ8Block);
  Int8Blocks b;
  b.block_size = static_cast<int64_t>(kQ8Block);
  b.stored_bytes = static_cast<int64_t>(t->nbytes);
  b.q = Tensor::Empty({rows, cols}, DType::kI8);
  b.scales = Tensor::Empty({rows, blocks_per_row}, DType::kF16);
  const uint8_t* data = reinterpret_cast<const uint8_t*>(bytes_.data()) + data_offset_ + t->offset;
  int8_t* q = b.q.data<int8_t>();
  auto* scales = static_cast<uint8_t*>(b.scales.raw());
  const uint64_t blocks = t->nbytes / kQ8BlockBytes;
  for (uint64_t i = 0; i < blocks; ++i) {
    const uint8_t* block = data + i * kQ8BlockBytes;
    std::memcpy(scales + 2 * i, block, 2);
    std::memcpy(q + i * kQ8Block, block + 2, kQ8Block);
  }
  return std::optional<Int8Blocks>(std::move(b));
}

}  // namespace ferry::io
