#include "kernels/cuda/launch.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace ferry::cuda {

bool DependentLaunchEnabled() {
  static const bool allowed = [] {
    const char* v = std::getenv("FERRY_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  if (!allowed) return false;
  // Per device: 0 unknown, 1 without, 2 with.
  static std::array<std::atomic<int8_t>, 64> known{};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= static_cast<int>(known.size())) {
    cudaGetLastError();
    return false;
  }
  int8_t state = known[static_cast<size_t>(device)].load(std::memory_order_relaxed);
  if (state == 0) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    state = major >= 9 ? 2 : 1;
    known[static_cast<size_t>(device)].store(state, std::memory_order_relaxed);
  }
  return state == 2;
}

}  // namespace ferry::cuda
