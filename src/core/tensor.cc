#include "core/tensor.h"

#include <cstring>

#include "core/allocator.h"
#include "core/thread_pool.h"

namespace ferry {

std::string Device::ToString() const {
  return kind == DeviceKind::kCpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::string ShapeToString(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Shape ContiguousStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Tensor Tensor::Empty(Shape shape, DType dtype) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.strides_ = ContiguousStrides(t.shape_);
  t.dtype_ = dtype;
  const size_t bytes = std::max<size_t>(t.nbytes(), 1);
  std::shared_ptr<void> mem = AllocateStorage(bytes);
  t.data_ = mem.get();
  t.storage_ = std::move(mem);
  return t;
}

Tensor Tensor::Zeros(Shape shape, DType dtype) {
  Tensor t = Empty(std::move(shape), dtype);
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::FromBorrowed(void* data, Shape shape, DType dtype, std::shared_ptr<const void> keepalive,
                            Device device) {
  Tensor t;
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.strides_ = ContiguousStrides(t.shape_);
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::move(keepalive);
  return t;
}

Tensor Tensor::FromVector(const std::vector<float>& values, Shape shape) {
  Tensor t = Empty(std::move(shape), DType::kF32);
  std::memcpy(t.data_, values.data(), std::min(values.size(), static_cast<size_t>(t.numel())) * 4);
  return t;
}

bool Tensor::is_contiguous() const { return strides_ == ContiguousStrides(shape_); }

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + begin * strides_[0] * static_cast<int64_t>(DTypeSize(dtype_));
  return t;
}

Result<Tensor> Tensor::Reshape(Shape shape) const {
  if (NumElements(shape) != numel()) {
    return InvalidArgument("cannot reshape " + ShapeToString(shape_) + " to " + ShapeToString(shape));
  }
  if (!is_contiguous()) return InvalidArgument("cannot reshape a non-contiguous tensor");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = ContiguousStrides(t.shape_);
  return t;
}

Tensor Tensor::Clone() const {
  Tensor t = Empty(shape_, dtype_);
  if (is_contiguous()) {
    std::memcpy(t.data_, data_, nbytes());
  } else {
    // Row-wise copy for a dim-0 strided view with contiguous rows.
    const int64_t rows = shape_.empty() ? 1 : shape_[0];
    const size_t row_bytes = rows ? nbytes() / rows : 0;
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(t.data_) + r * row_bytes,
                  static_cast<const char*>(data_) + r * strides_[0] * DTypeSize(dtype_), row_bytes);
  }
  return t;
}

Tensor Tensor::ToF32() const {
  Tensor src = is_contiguous() ? *this : Clone();
  Tensor t = Empty(shape_, DType::kF32);
  // Large weights convert on every core (engine builds convert billions of values).
  const size_t elem = DTypeSize(dtype_);
  const auto* from = static_cast<const uint8_t*>(src.data_);
  float* to = t.data<float>();
  ParallelFor(numel(), int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    ConvertToF32(dtype_, from + static_cast<size_t>(begin) * elem, to + begin, static_cast<size_t>(end - begin));
  });
  return t;
}

std::string Tensor::DebugString() const {
  return std::string(DTypeName(dtype_)) + ShapeToString(shape_) + "@" + device_.ToString();
}

}  // namespace ferry
