// Paged KV cache: fixed-size blocks shared by all sequences, a block table per sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"

namespace ferry::engine {

struct KvCacheConfig {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_tokens = 16;
  int num_blocks = 0;
  DType dtype = DType::kF32;
};

// Thread-compatible: owned by the thread that schedules steps (the batcher).
class KvCache {
 public:
  static Result<std::unique_ptr<KvCache>> Create(const KvCacheConfig& config, backend::Backend& backend);

  // Makes sequence `seq` able to hold `total_tokens` tokens, allocating blocks as needed.
  // ResourceExhausted (and no change) when not enough blocks are free.
  Status Reserve(int64_t seq, int32_t total_tokens);
  // Returns every block of `seq` to the free list. Unknown sequences are ignored.
  void Free(int64_t seq);
  bool Contains(int64_t seq) const { return tables_.count(seq) != 0; }

  // Block ids of `seq` in order (empty for an unknown sequence).
  const std::vector<int32_t>& BlockTable(int64_t seq) const;
  // Cache slot of the token at `position` of `seq` (must be reserved).
  int32_t Slot(int64_t seq, int32_t position) const;

  // A block no sequence ever gets: padding rows of a fixed-size step write their K/V there.
  int32_t padding_block() const { return config_.num_blocks; }
  int BlocksFor(int32_t tokens) const { return (tokens + config_.block_tokens - 1) / config_.block_tokens; }
  int num_free_blocks() const { return static_cast<int>(free_.size()); }
  int num_blocks() const { return config_.num_blocks; }
  int capacity_tokens() const { return config_.num_blocks * config_.block_tokens; }
  const KvCacheConfig& config() const { return config_; }
  std::vector<backend::KvLayer>& layers() { return layers_; }
  size_t bytes() const;

 private:
  explicit KvCache(const KvCacheConfig& config) : config_(config) {}

  KvCacheConfig config_;
  std::vector<backend::KvLayer> layers_;
  std::vector<int32_t> free_;  // a stack: recently freed blocks are reused first (warm in cache)
  std::unordered_map<int64_t, std::vector<int32_t>> tables_;
};

}  // namespace ferry::engine
