// Paged KV cache: fixed-size blocks shared by all sequences, a block table per sequence,
// and automatic prefix caching with vLLM's semantics: a full block is keyed by a hash
// chained over every token up to its end, so equal prefixes map to equal keys; blocks are
// reference-counted and shared between the sequences whose prompts start alike; freed blocks
// that hold cached content stay findable until they are evicted, least recently freed first
// (the tail of a sequence before its head), to make room for new content.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
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
  bool prefix_caching = false;  // share and keep full blocks by content (see above)
};

// A match in the prefix cache: the first `blocks` full blocks of a sequence are cached;
// `free_blocks` of them are referenced by no sequence, so taking them uses free blocks.
struct PrefixMatch {
  int blocks = 0;
  int free_blocks = 0;
};

// Thread-compatible: owned by the thread that schedules steps (the batcher).
class KvCache {
 public:
  static Result<std::unique_ptr<KvCache>> Create(const KvCacheConfig& config, backend::Backend& backend);

  // Makes sequence `seq` able to hold `total_tokens` tokens, allocating blocks as needed
  // (never-used blocks first, then evicting the least recently freed cached ones).
  // ResourceExhausted (and no change) when not enough blocks are free.
  Status Reserve(int64_t seq, int32_t total_tokens);
  // Releases every block of `seq`: a block no other sequence holds becomes free (still
  // findable by its content when it was cached). Unknown sequences are ignored.
  void Free(int64_t seq);
  bool Contains(int64_t seq) const { return tables_.count(seq) != 0; }

  // ---- prefix caching (prefix_caching on; otherwise matches are empty and nothing is kept)
  // Appends to `hashes` the chained hashes of the full blocks of `tokens` not hashed yet
  // (hashes.size() blocks are).
  void HashBlocks(std::span<const int32_t> tokens, std::vector<uint64_t>& hashes) const;
  // How many of the first `max_blocks` blocks (hashes and tokens of a sequence) are cached.
  // Content is compared token by token, so a hash collision never shares a wrong block.
  PrefixMatch FindCachedPrefix(std::span<const uint64_t> hashes, std::span<const int32_t> tokens,
                               int max_blocks) const;
  // Gives `seq`, which holds no blocks, the first `blocks` cached blocks of its prefix (as
  // FindCachedPrefix matched them, with nothing evicted since). FailedPrecondition otherwise.
  Status AdoptPrefix(int64_t seq, std::span<const uint64_t> hashes, std::span<const int32_t> tokens, int blocks);
  // Makes the full blocks of `seq` holding tokens [0, computed) findable by their content.
  void CacheFullBlocks(int64_t seq, std::span<const uint64_t> hashes, std::span<const int32_t> tokens,
                       int32_t computed);
  bool prefix_caching() const { return config_.prefix_caching; }

  // Block ids of `seq` in order (empty for an unknown sequence).
  const std::vector<int32_t>& BlockTable(int64_t seq) const;
  // Cache slot of the token at `position` of `seq` (must be reserved).
  int32_t Slot(int64_t seq, int32_t position) const;

  // A block no sequence ever gets: padding rows of a fixed-size step write their K/V there.
  int32_t padding_block() const { return config_.num_blocks; }
  int BlocksFor(int32_t tokens) const { return (tokens + config_.block_tokens - 1) / config_.block_tokens; }
  // Blocks no sequence references: never used, freed, or cached and evictable.
  int num_free_blocks() const { return static_cast<int>(free_.size() + evictable_.size()); }
  // Blocks whose content is findable (referenced or not).
  int num_cached_blocks() const { return static_cast<int>(by_hash_.size()); }
  int num_blocks() const { return config_.num_blocks; }
  int capacity_tokens() const { return config_.num_blocks * config_.block_tokens; }
  const KvCacheConfig& config() const { return config_; }
  std::vector<backend::KvLayer>& layers() { return layers_; }
  size_t bytes() const;

 private:
  struct BlockState {
    int32_t refs = 0;
    bool cached = false;
    uint64_t hash = 0;
    std::list<int32_t>::iterator lru;  // in evictable_ while cached and unreferenced
  };
  struct Table {
    std::vector<int32_t> blocks;
    int cached_upto = 0;  // blocks [0, cached_upto) have been offered to the cache
  };

  explicit KvCache(const KvCacheConfig& config) : config_(config) {}
  // A block for new content: a never-used one, else the least recently freed cached one.
  int32_t TakeFreeBlock();
  bool SameTokens(int32_t block, std::span<const int32_t> tokens, int index) const;
  void Release(int32_t block);

  KvCacheConfig config_;
  std::vector<backend::KvLayer> layers_;
  std::vector<BlockState> blocks_;
  std::vector<int32_t> free_;          // unreferenced, uncached; a stack (recently freed reused first)
  std::list<int32_t> evictable_;       // unreferenced, cached; front = evicted first
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::vector<int32_t> block_tokens_;  // the tokens of every cached block, [num_blocks, block_tokens]
  std::unordered_map<int64_t, Table> tables_;
};

}  // namespace ferry::engine
