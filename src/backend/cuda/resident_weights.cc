#include "backend/cuda/resident_weights.h"

namespace ferry::backend {

Result<const Tensor*> ResidentWeights::Upload(const Tensor& t, DType dtype) {
  if (!t.device().is_cpu()) return &t;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = uploads_.find(t.raw());
  if (it != uploads_.end()) return &it->second;
  const Tensor host = dtype == DType::kF32 ? t.ToF32() : t;
  FERRY_ASSIGN_OR_RETURN(Tensor dev, ctx_.Upload(host.raw(), host.shape(), host.dtype()));
  keep_.push_back(t);
  return &uploads_.emplace(t.raw(), std::move(dev)).first->second;
}

void ResidentWeights::Adopt(const Tensor& host, Tensor device) {
  std::lock_guard<std::mutex> lock(mu_);
  if (uploads_.count(host.raw()) != 0) return;
  keep_.push_back(host);
  uploads_.emplace(host.raw(), std::move(device));
}

Result<const float*> ResidentWeights::RopeFrequencies(const RopeTable& table) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rope_.find(&table);
  if (it == rope_.end() || it->second.first != table.inv_freq) {
    FERRY_ASSIGN_OR_RETURN(
        Tensor dev, ctx_.Upload(table.inv_freq.data(), {static_cast<int64_t>(table.inv_freq.size())}, DType::kF32));
    it = rope_.insert_or_assign(&table, std::make_pair(table.inv_freq, std::move(dev))).first;
  }
  return it->second.second.data<float>();
}

}  // namespace ferry::backend
