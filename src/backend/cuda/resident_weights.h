// Host-side weights that ops receive (norm gammas, embedding tables, RoPE frequencies),
// uploaded on first use and cached by address, so model code is the same on every device.
// Thread-safe. The first use must not fall inside a step graph's recording (an upload waits
// for the stream); the eager run before every recording makes sure of that.
#pragma once

#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace ferry::backend {

class ResidentWeights {
 public:
  explicit ResidentWeights(CudaContext& ctx) : ctx_(ctx) {}

  // The device copy of a host tensor, as it is; a device tensor is returned as it is.
  Result<const Tensor*> Get(const Tensor& t) { return Upload(t, t.dtype()); }
  // The same, widened to f32 on the way (norm weights).
  Result<const Tensor*> GetF32(const Tensor& t) { return Upload(t, DType::kF32); }
  // Records `device` as the device copy of host tensor `host` (copied by the weight loader),
  // so Get finds it instead of uploading at first use.
  void Adopt(const Tensor& host, Tensor device);
  // A RoPE table's inverse frequencies on the device (uploaded again if the table changed).
  Result<const float*> RopeFrequencies(const RopeTable& table);

 private:
  Result<const Tensor*> Upload(const Tensor& t, DType dtype);

  CudaContext& ctx_;
  std::mutex mu_;
  std::unordered_map<const void*, Tensor> uploads_;  // GUARDED_BY(mu_)
  std::vector<Tensor> keep_;                         // GUARDED_BY(mu_): the host address stays valid (and unique)
  std::unordered_map<const RopeTable*, std::pair<std::vector<float>, Tensor>> rope_;  // GUARDED_BY(mu_)
};

}  // namespace ferry::backend
