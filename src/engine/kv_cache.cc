#include "engine/kv_cache.h"

#include <string>

namespace ferry::engine {

Result<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheConfig& config, backend::Backend& backend) {
  if (config.num_layers <= 0 || config.num_kv_heads <= 0 || config.head_dim <= 0 || config.block_tokens <= 0 ||
      config.num_blocks <= 0) {
    return InvalidArgument("invalid KV cache configuration");
  }
  std::unique_ptr<KvCache> cache(new KvCache(config));
  // One block more than the sequences can have: padding rows of a step graph write there.
  const Shape shape{config.num_blocks + 1, config.num_kv_heads, config.block_tokens, config.head_dim};
  for (int l = 0; l < config.num_layers; ++l) {
    backend::KvLayer layer;
    FERRY_ASSIGN_OR_RETURN(layer.k, backend.Allocate(shape, config.dtype));
    FERRY_ASSIGN_OR_RETURN(layer.v, backend.Allocate(shape, config.dtype));
    layer.block_tokens = config.block_tokens;
    cache->layers_.push_back(std::move(layer));
  }
  cache->free_.reserve(config.num_blocks);
  for (int b = config.num_blocks - 1; b >= 0; --b) cache->free_.push_back(b);
  return cache;
}

Status KvCache::Reserve(int64_t seq, int32_t total_tokens) {
  std::vector<int32_t>& table = tables_[seq];
  const int need = BlocksFor(total_tokens) - static_cast<int>(table.size());
  if (need <= 0) return Status::Ok();
  if (need > static_cast<int>(free_.size())) {
    if (table.empty()) tables_.erase(seq);
    return ResourceExhausted("KV cache full: need " + std::to_string(need) + " blocks, " +
                             std::to_string(free_.size()) + " free");
  }
  for (int i = 0; i < need; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return Status::Ok();
}

void KvCache::Free(int64_t seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  for (auto b = it->second.rbegin(); b != it->second.rend(); ++b) free_.push_back(*b);
  tables_.erase(it);
}

const std::vector<int32_t>& KvCache::BlockTable(int64_t seq) const {
  static const std::vector<int32_t> kEmpty;
  auto it = tables_.find(seq);
  return it == tables_.end() ? kEmpty : it->second;
}

int32_t KvCache::Slot(int64_t seq, int32_t position) const {
  const std::vector<int32_t>& table = BlockTable(seq);
  return table[position / config_.block_tokens] * config_.block_tokens + position % config_.block_tokens;
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (const backend::KvLayer& l : layers_) total += l.k.nbytes() + l.v.nbytes();
  return total;
}

}  // namespace ferry::engine
