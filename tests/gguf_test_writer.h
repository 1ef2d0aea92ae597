// Builds GGUF bytes for tests: metadata of every type, tensors at aligned offsets, and the
// raw pieces to put together broken files. Written from the GGUF specification, separately
// from the reader; tests/fixtures/gguf/ holds files written by llama.cpp's own gguf-py.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ferry::testing {

class GgufBuilder {
 public:
  // GGUF metadata value types (the specification's numbers).
  enum Type : uint32_t {
    kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
    kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
  };
  // ggml tensor types.
  enum TensorType : uint32_t { kTF32 = 0, kTF16 = 1, kTQ8_0 = 8, kTQ4_K = 12, kTBF16 = 30 };

  explicit GgufBuilder(uint32_t version = 3, uint64_t alignment = 32) : version_(version), alignment_(alignment) {}

  template <typename T>
  static void Put(std::string* out, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out->append(b, sizeof(T));
  }
  static void PutString(std::string* out, const std::string& s) {
    Put<uint64_t>(out, s.size());
    out->append(s);
  }

  // One key with its type and the value's bytes as written after the type.
  void Raw(const std::string& key, uint32_t type, const std::string& value) {
    PutString(&kv_, key);
    Put<uint32_t>(&kv_, type);
    kv_.append(value);
    ++n_kv_;
  }
  template <typename T>
  void Scalar(const std::string& key, uint32_t type, T v) {
    std::string b;
    Put<T>(&b, v);
    Raw(key, type, b);
  }
  void U32(const std::string& key, uint32_t v) { Scalar(key, kU32, v); }
  void I32(const std::string& key, int32_t v) { Scalar(key, kI32, v); }
  void U64(const std::string& key, uint64_t v) { Scalar(key, kU64, v); }
  void F32(const std::string& key, float v) { Scalar(key, kF32, v); }
  void Bool(const std::string& key, bool v) { Scalar<uint8_t>(key, kBool, v ? 1 : 0); }
  void Str(const std::string& key, const std::string& v) {
    std::string b;
    PutString(&b, v);
    Raw(key, kString, b);
  }
  void StrArray(const std::string& key, const std::vector<std::string>& v) {
    std::string b;
    Put<uint32_t>(&b, kString);
    Put<uint64_t>(&b, v.size());
    for (const std::string& s : v) PutString(&b, s);
    Raw(key, kArray, b);
  }
  template <typename T>
  void Array(const std::string& key, uint32_t element_type, const std::vector<T>& v) {
    std::string b;
    Put<uint32_t>(&b, element_type);
    Put<uint64_t>(&b, v.size());
    for (const T& x : v) Put<T>(&b, x);
    Raw(key, kArray, b);
  }

  // A tensor with dims innermost first (ne[0] = row length) and its data bytes.
  void Tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type, const std::string& data) {
    tensors_.push_back({name, ne, type, data});
  }

  std::string Build() const {
    std::string out = "GGUF";
    Put<uint32_t>(&out, version_);
    Put<uint64_t>(&out, tensors_.size());
    Put<uint64_t>(&out, n_kv_);
    out += kv_;
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const T& t : tensors_) {
      PutString(&out, t.name);
      Put<uint32_t>(&out, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) Put<uint64_t>(&out, d);
      Put<uint32_t>(&out, t.type);
      Put<uint64_t>(&out, offset);
      offsets.push_back(offset);
      offset = Align(offset + t.data.size());
    }
    out.resize(Align(out.size()), '\0');
    const size_t data_start = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(data_start + offsets[i], '\0');
      out += tensors_[i].data;
    }
    return out;
  }

 private:
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::string data;
  };
  uint64_t Align(uint64_t x) const { return (x + alignment_ - 1) / alignment_ * alignment_; }

  uint32_t version_;
  uint64_t alignment_;
  std::string kv_;
  uint64_t n_kv_ = 0;
  std::vector<T> tensors_;
};

}  // namespace ferry::testing
