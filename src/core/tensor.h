// Tensor: a typed, strided view of memory on a device, optionally owning its storage.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace ferry {

enum class DeviceKind : uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  static Device Cpu() { return {}; }
  static Device Cuda(int index) { return {DeviceKind::kCuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool operator==(const Device&) const = default;
  std::string ToString() const;
};

using Shape = std::vector<int64_t>;
std::string ShapeToString(const Shape& shape);
int64_t NumElements(const Shape& shape);

// Thread-compatible. Copies share storage (like a shared_ptr); views keep it alive.
// Storage may be owned (Empty/Zeros), borrowed (FromBorrowed, e.g. an mmap'd file kept
// alive by `keepalive`), or device memory from a backend allocator.
class Tensor {
 public:
  Tensor() = default;

  // Allocates 64-byte aligned, uninitialised host memory.
  static Tensor Empty(Shape shape, DType dtype);
  static Tensor Zeros(Shape shape, DType dtype);
  // Wraps memory owned elsewhere; `keepalive` (may be null) holds the owner alive.
  static Tensor FromBorrowed(void* data, Shape shape, DType dtype, std::shared_ptr<const void> keepalive,
                             Device device = Device::Cpu());
  static Tensor FromVector(const std::vector<float>& values, Shape shape);

  bool defined() const { return data_ != nullptr || !shape_.empty(); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim(int i) const { return shape_[i < 0 ? shape_.size() + i : i]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return NumElements(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  bool is_contiguous() const;

  void* raw() const { return data_; }
  template <typename T>
  T* data() const { return static_cast<T*>(data_); }

  // A view of rows [begin, end) along dim 0 (shares storage).
  Tensor Slice(int64_t begin, int64_t end) const;
  // A view with another shape over the same contiguous elements.
  Result<Tensor> Reshape(Shape shape) const;
  // A deep copy into freshly allocated contiguous host memory.
  Tensor Clone() const;
  // Host copy converted to f32 (contiguous).
  Tensor ToF32() const;

  std::string DebugString() const;

 private:
  void* data_ = nullptr;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::kF32;
  Device device_;
  std::shared_ptr<const void> storage_;
};

Shape ContiguousStrides(const Shape& shape);

}  // namespace ferry
