#include "cuda/cuda_test_util.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace ferry::cuda::testing {
namespace {

void ThrowIfFailed(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
  }
}

std::mutex& WorstMutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, double>& Worst() {
  static std::map<std::string, double> worst;
  return worst;
}

}  // namespace

bool HaveGpu() {
  static const bool have = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // clear it: later checks must not see it
      return false;
    }
    return count > 0;
  }();
  return have;
}

std::string SyncError() {
  const cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return "";
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  // Never zero bytes: a valid pointer keeps the kernels' null checks meaningful.
  ThrowIfFailed(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes), "cudaMalloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer Upload(const void* data, size_t bytes) {
  DeviceBuffer b(bytes);
  if (bytes > 0) ThrowIfFailed(cudaMemcpy(b.get(), data, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  return b;
}

void Download(const void* device_ptr, void* host, size_t bytes) {
  ThrowIfFailed(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (bytes > 0) ThrowIfFailed(cudaMemcpy(host, device_ptr, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

void Poison(DeviceBuffer& b) {
  ThrowIfFailed(cudaMemset(b.get(), 0xFF, b.bytes()), "cudaMemset");
}

DeviceBuffer PoisonedBuffer(size_t bytes) {
  DeviceBuffer b(bytes);
  Poison(b);
  return b;
}

std::vector<float> RandomFloats(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> Encode(DType dtype, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * DTypeSize(dtype));
  ConvertFromF32(dtype, values.data(), bytes.data(), values.size());
  return bytes;
}

std::vector<float> Decode(DType dtype, const std::vector<uint8_t>& bytes) {
  std::vector<float> values(bytes.size() / DTypeSize(dtype));
  ConvertToF32(dtype, bytes.data(), values.data(), values.size());
  return values;
}

std::vector<float> RoundTo(DType dtype, const std::vector<float>& values) { return Decode(dtype, Encode(dtype, values)); }

DeviceBuffer UploadAs(DType dtype, const std::vector<float>& values) { return Upload(Encode(dtype, values)); }

std::vector<float> DownloadAs(DType dtype, const DeviceBuffer& b, size_t count) {
  return Decode(dtype, Download<uint8_t>(b, count * DTypeSize(dtype)));
}

std::vector<DType> ActDTypes() { return {DType::kF32, DType::kF16, DType::kBF16}; }

double Tolerance(DType act) { return act == DType::kF32 ? 1e-5 : 1e-2; }

std::string ErrorStats::ToString() const {
  std::ostringstream s;
  s << "max|err| " << max_abs << " (rel " << rel_max << ", at " << worst_index << "), normwise " << rel_norm
    << ", max|ref| " << max_ref << ", non-finite " << bad_values;
  return s.str();
}

ErrorStats Compare(const std::vector<float>& got, const std::vector<float>& want) {
  ErrorStats e;
  double err2 = 0, ref2 = 0;
  const size_t n = std::min(got.size(), want.size());
  for (size_t i = 0; i < n; ++i) {
    const double g = got[i], w = want[i];
    e.max_ref = std::max(e.max_ref, std::fabs(w));
    ref2 += w * w;
    if (!std::isfinite(g) && std::isfinite(w)) {
      ++e.bad_values;
      if (e.worst_index < 0) e.worst_index = static_cast<int64_t>(i);
      continue;
    }
    const double d = std::fabs(g - w);
    err2 += d * d;
    if (d > e.max_abs) {
      e.max_abs = d;
      if (e.bad_values == 0) e.worst_index = static_cast<int64_t>(i);
    }
  }
  e.rel_max = e.max_ref > 0 ? e.max_abs / e.max_ref : e.max_abs;
  e.rel_norm = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return e;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const ErrorStats e = Compare(got, want);
  EXPECT_EQ(e.bad_values, 0) << what << ": " << e.ToString() << " (unwritten output?)";
  EXPECT_LE(e.rel_max, tol) << what << ": " << e.ToString() << "; got " << got[std::max<int64_t>(e.worst_index, 0)]
                            << " want " << want[std::max<int64_t>(e.worst_index, 0)];
  EXPECT_LE(e.rel_norm, tol) << what << ": " << e.ToString();
  // Label: the text before the first ',' (kernel and dtype by convention).
  const std::string label = what.substr(0, what.find(','));
  std::lock_guard<std::mutex> lock(WorstMutex());
  double& worst = Worst()[label];
  worst = std::max(worst, e.bad_values > 0 ? INFINITY : e.rel_max);
}

std::string WorstErrors() {
  std::lock_guard<std::mutex> lock(WorstMutex());
  std::ostringstream s;
  for (const auto& [label, err] : Worst()) s << "  " << label << ": max rel err " << err << "\n";
  return s.str();
}

}  // namespace ferry::cuda::testing
