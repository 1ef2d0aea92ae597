#include "engine/kv_cache.h"

#include <algorithm>
#include <string>

namespace ferry::engine {

namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

}  // namespace

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
  cache->blocks_.resize(static_cast<size_t>(config.num_blocks));
  cache->free_.reserve(config.num_blocks);
  for (int b = config.num_blocks - 1; b >= 0; --b) cache->free_.push_back(b);
  if (config.prefix_caching) {
    cache->block_tokens_.resize(static_cast<size_t>(config.num_blocks) * static_cast<size_t>(config.block_tokens));
  }
  return cache;
}

int32_t KvCache::TakeFreeBlock() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    b = evictable_.front();
    evictable_.pop_front();
    BlockState& st = blocks_[b];
    by_hash_.erase(st.hash);  // its content is overwritten: no longer findable
    st.cached = false;
  }
  blocks_[b].refs = 1;
  return b;
}

Status KvCache::Reserve(int64_t seq, int32_t total_tokens) {
  Table& table = tables_[seq];
  const int need = BlocksFor(total_tokens) - static_cast<int>(table.blocks.size());
  if (need <= 0) return Status::Ok();
  if (need > num_free_blocks()) {
    if (table.blocks.empty()) tables_.erase(seq);
    return ResourceExhausted("KV cache full: need " + std::to_string(need) + " blocks, " +
                             std::to_string(num_free_blocks()) + " free");
  }
  for (int i = 0; i < need; ++i) table.blocks.push_back(TakeFreeBlock());
  return Status::Ok();
}

void KvCache::Release(int32_t b) {
  BlockState& st = blocks_[b];
  if (--st.refs > 0) return;
  if (st.cached) {
    st.lru = evictable_.insert(evictable_.end(), b);
  } else {
    free_.push_back(b);
  }
}

void KvCache::Free(int64_t seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  // The tail first: its blocks are the least likely to be shared again, so they are evicted first.
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) Release(*b);
  tables_.erase(it);
}

void KvCache::HashBlocks(std::span<const int32_t> tokens, std::vector<uint64_t>& hashes) const {
  const size_t bt = static_cast<size_t>(config_.block_tokens);
  const size_t full = tokens.size() / bt;
  for (size_t b = hashes.size(); b < full; ++b) {
    uint64_t h = b == 0 ? 0x6A09E667F3BCC908ull : hashes[b - 1];
    for (size_t i = b * bt; i < (b + 1) * bt; ++i) h = Mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) + 0x9E3779B97F4A7C15ull));
    hashes.push_back(h);
  }
}

bool KvCache::SameTokens(int32_t block, std::span<const int32_t> tokens, int index) const {
  const size_t bt = static_cast<size_t>(config_.block_tokens);
  if (tokens.size() < (static_cast<size_t>(index) + 1) * bt) return false;
  return std::equal(tokens.begin() + static_cast<std::ptrdiff_t>(index * bt),
                    tokens.begin() + static_cast<std::ptrdiff_t>((index + 1) * bt),
                    block_tokens_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(block) * bt));
}

PrefixMatch KvCache::FindCachedPrefix(std::span<const uint64_t> hashes, std::span<const int32_t> tokens,
                                      int max_blocks) const {
  PrefixMatch m;
  if (!config_.prefix_caching) return m;
  const int n = std::min<int>(max_blocks, static_cast<int>(hashes.size()));
  for (int i = 0; i < n; ++i) {
    auto it = by_hash_.find(hashes[i]);
    if (it == by_hash_.end() || !SameTokens(it->second, tokens, i)) break;
    ++m.blocks;
    if (blocks_[it->second].refs == 0) ++m.free_blocks;
  }
  return m;
}

Status KvCache::AdoptPrefix(int64_t seq, std::span<const uint64_t> hashes, std::span<const int32_t> tokens,
                            int blocks) {
  if (blocks <= 0) return Status::Ok();
  if (tables_.count(seq) != 0 && !tables_[seq].blocks.empty()) {
    return FailedPrecondition("sequence " + std::to_string(seq) + " already holds KV blocks");
  }
  if (FindCachedPrefix(hashes, tokens, blocks).blocks < blocks) {
    return FailedPrecondition("the cached prefix of sequence " + std::to_string(seq) + " was evicted");
  }
  Table& table = tables_[seq];
  for (int i = 0; i < blocks; ++i) {
    const int32_t b = by_hash_.at(hashes[i]);
    BlockState& st = blocks_[b];
    if (st.refs++ == 0) evictable_.erase(st.lru);
    table.blocks.push_back(b);
  }
  table.cached_upto = blocks;
  return Status::Ok();
}

void KvCache::CacheFullBlocks(int64_t seq, std::span<const uint64_t> hashes, std::span<const int32_t> tokens,
                              int32_t computed) {
  if (!config_.prefix_caching) return;
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  Table& table = it->second;
  const size_t bt = static_cast<size_t>(config_.block_tokens);
  const int full = std::min<int>({static_cast<int>(computed / config_.block_tokens), static_cast<int>(hashes.size()),
                                  static_cast<int>(table.blocks.size())});
  for (int i = table.cached_upto; i < full; ++i) {
    const int32_t b = table.blocks[i];
    BlockState& st = blocks_[b];
    if (st.cached || by_hash_.count(hashes[i]) != 0) continue;  // shared, or another block holds this content
    st.cached = true;
    st.hash = hashes[i];
    by_hash_.emplace(hashes[i], b);
    std::copy(tokens.begin() + static_cast<std::ptrdiff_t>(i * bt), tokens.begin() + static_cast<std::ptrdiff_t>((i + 1) * bt),
              block_tokens_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(b) * bt));
  }
  table.cached_upto = std::max(table.cached_upto, full);
}

const std::vector<int32_t>& KvCache::BlockTable(int64_t seq) const {
  static const std::vector<int32_t> kEmpty;
  auto it = tables_.find(seq);
  return it == tables_.end() ? kEmpty : it->second.blocks;
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
