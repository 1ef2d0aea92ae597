// Shared helpers for the GPU tests: skipping without a GPU, RAII device buffers, host <->
// device copies, seeded random data, poisoned outputs, dtype round trips on the host and
// error measures against a reference.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace ferry::cuda::testing {

// True when the CUDA runtime sees at least one device.
bool HaveGpu();

// Skips the calling test (GTEST_SKIP) when there is no usable GPU.
#define FERRY_SKIP_WITHOUT_GPU()                                                      \
  do {                                                                                \
    if (!::ferry::cuda::testing::HaveGpu()) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

// Asserts that a ferry::Status is ok, printing it otherwise.
#define FERRY_ASSERT_OK(expr)                                  \
  do {                                                         \
    const ::ferry::Status ferry_test_status_ = (expr);         \
    ASSERT_TRUE(ferry_test_status_.ok()) << ferry_test_status_.ToString(); \
  } while (0)

// Waits for the default stream; failures (including a kernel's asynchronous errors) become
// test failures.
#define FERRY_ASSERT_SYNC() ASSERT_EQ(::ferry::cuda::testing::SyncError(), "")

// "" when cudaDeviceSynchronize succeeds, else the error's name and description.
std::string SyncError();

// Device memory owned by the test. Move-only. Allocation failures throw (GoogleTest
// reports them as a failure of the running test).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

DeviceBuffer Upload(const void* data, size_t bytes);
template <typename T>
DeviceBuffer Upload(const std::vector<T>& v) {
  return Upload(v.data(), v.size() * sizeof(T));
}
// Copies bytes out of a device buffer (after synchronizing the device); throws on failure.
void Download(const void* device_ptr, void* host, size_t bytes);
template <typename T>
std::vector<T> Download(const DeviceBuffer& b, size_t count) {
  std::vector<T> v(count);
  Download(b.get(), v.data(), count * sizeof(T));
  return v;
}

// Fills the buffer with 0xFF bytes: NaN as f32, f16, bf16 and e4m3, -1 as int8/int32, so
// any element a kernel fails to write stands out.
void Poison(DeviceBuffer& b);
// A buffer of `bytes` filled with 0xFF.
DeviceBuffer PoisonedBuffer(size_t bytes);

// Seeded uniform values in [lo, hi).
std::vector<float> RandomFloats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// Host encodings of float dtypes (f32, f16, bf16, f8_e4m3), through core/dtype.h.
std::vector<uint8_t> Encode(DType dtype, const std::vector<float>& values);
std::vector<float> Decode(DType dtype, const std::vector<uint8_t>& bytes);
// values rounded to `dtype` and back: what a kernel sees after Encode.
std::vector<float> RoundTo(DType dtype, const std::vector<float>& values);

DeviceBuffer UploadAs(DType dtype, const std::vector<float>& values);
std::vector<float> DownloadAs(DType dtype, const DeviceBuffer& b, size_t count);

// The act dtypes every kernel is tested with, and their error bounds (relative to the
// reference's magnitude): f32 1e-5, f16/bf16 1e-2.
std::vector<DType> ActDTypes();
double Tolerance(DType act);

struct ErrorStats {
  double max_abs = 0;       // max |got - want|
  double max_ref = 0;       // max |want|
  double rel_max = 0;       // max_abs / max_ref
  double rel_norm = 0;      // ||got - want|| / ||want||
  int64_t bad_values = 0;   // NaN or inf in got where want is finite
  int64_t worst_index = -1;
  std::string ToString() const;
};
ErrorStats Compare(const std::vector<float>& got, const std::vector<float>& want);

// Expects no NaN/inf, rel_max <= tol and rel_norm <= tol; records the measure for the
// summary printed by the tests (see WorstErrors).
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what);

// The largest rel_max seen per label (kernel and dtype) by ExpectClose in this process.
std::string WorstErrors();

}  // namespace ferry::cuda::testing
