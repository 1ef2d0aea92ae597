#include "engine/kv_cache.h"

#include <gtest/gtest.h>

#include <set>

namespace ferry::engine {
namespace {

class KvCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = backend::MakeCpuBackend();
    KvCacheConfig c;
    c.num_layers = 2;
    c.num_kv_heads = 2;
    c.head_dim = 8;
    c.block_tokens = 4;
    c.num_blocks = 6;
    auto cache = KvCache::Create(c, *backend_);
    ASSERT_TRUE(cache.ok());
    cache_ = std::move(cache).value();
  }
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<KvCache> cache_;
};

TEST_F(KvCacheTest, ReserveGrowsBlockTablesAndSlotsAreDistinct) {
  ASSERT_TRUE(cache_->Reserve(1, 5).ok());  // 2 blocks
  ASSERT_TRUE(cache_->Reserve(2, 4).ok());  // 1 block
  EXPECT_EQ(cache_->BlockTable(1).size(), 2u);
  EXPECT_EQ(cache_->num_free_blocks(), 3);
  ASSERT_TRUE(cache_->Reserve(1, 8).ok());  // still 2 blocks
  EXPECT_EQ(cache_->num_free_blocks(), 3);
  std::set<int32_t> slots;
  for (int p = 0; p < 8; ++p) slots.insert(cache_->Slot(1, p));
  for (int p = 0; p < 4; ++p) slots.insert(cache_->Slot(2, p));
  EXPECT_EQ(slots.size(), 12u);
  EXPECT_EQ(cache_->layers().size(), 2u);
  // Six blocks for sequences plus the padding block, which no sequence is ever given.
  EXPECT_EQ(cache_->layers()[0].k.shape(), (Shape{7, 2, 4, 8}));
  EXPECT_EQ(cache_->padding_block(), 6);
  for (int32_t s : slots) EXPECT_LT(s / 4, 6);
}

TEST_F(KvCacheTest, ExhaustionFailsWithoutSideEffectsAndFreeReturnsBlocks) {
  ASSERT_TRUE(cache_->Reserve(1, 16).ok());  // 4 blocks
  const Status st = cache_->Reserve(2, 12);  // needs 3, only 2 free
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(cache_->Contains(2));
  EXPECT_EQ(cache_->num_free_blocks(), 2);
  cache_->Free(1);
  EXPECT_EQ(cache_->num_free_blocks(), 6);
  EXPECT_TRUE(cache_->Reserve(2, 12).ok());
  cache_->Free(42);  // unknown: ignored
  EXPECT_EQ(cache_->num_free_blocks(), 3);
}

class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = backend::MakeCpuBackend();
    KvCacheConfig c;
    c.num_layers = 1;
    c.num_kv_heads = 1;
    c.head_dim = 4;
    c.block_tokens = 4;
    c.num_blocks = 8;
    c.prefix_caching = true;
    cache_ = std::move(KvCache::Create(c, *backend_)).value();
  }
  // Reserves and "computes" `tokens` for `seq`, then registers its full blocks.
  std::vector<uint64_t> Run(int64_t seq, const std::vector<int32_t>& tokens) {
    std::vector<uint64_t> hashes;
    cache_->HashBlocks(tokens, hashes);
    EXPECT_TRUE(cache_->Reserve(seq, static_cast<int32_t>(tokens.size())).ok());
    cache_->CacheFullBlocks(seq, hashes, tokens, static_cast<int32_t>(tokens.size()));
    return hashes;
  }
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<KvCache> cache_;
};

const std::vector<int32_t> kA = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};       // 2 full blocks + 2 tokens
const std::vector<int32_t> kB = {1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13};  // same first 2 blocks

TEST_F(PrefixCacheTest, HashesAreChainedOverThePrefix) {
  std::vector<uint64_t> a, b, c;
  cache_->HashBlocks(kA, a);
  cache_->HashBlocks(kB, b);
  cache_->HashBlocks(std::vector<int32_t>{9, 9, 9, 9, 5, 6, 7, 8}, c);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a, b);
  EXPECT_NE(c[1], a[1]);  // the same block after a different prefix is a different key
  std::vector<uint64_t> grown = {a[0]};
  cache_->HashBlocks(kA, grown);  // incremental: only the missing blocks are appended
  EXPECT_EQ(grown, a);
}

TEST_F(PrefixCacheTest, FullBlocksAreSharedWithReferenceCounts) {
  const std::vector<uint64_t> hashes = Run(1, kA);
  EXPECT_EQ(cache_->num_cached_blocks(), 2);
  EXPECT_EQ(cache_->num_free_blocks(), 5);
  std::vector<uint64_t> hb;
  cache_->HashBlocks(kB, hb);
  const PrefixMatch m = cache_->FindCachedPrefix(hb, kB, 2);
  EXPECT_EQ(m.blocks, 2);
  EXPECT_EQ(m.free_blocks, 0);  // sequence 1 holds them
  ASSERT_TRUE(cache_->AdoptPrefix(2, hb, kB, 2).ok());
  EXPECT_EQ(cache_->BlockTable(2)[0], cache_->BlockTable(1)[0]);
  EXPECT_EQ(cache_->BlockTable(2)[1], cache_->BlockTable(1)[1]);
  ASSERT_TRUE(cache_->Reserve(2, static_cast<int32_t>(kB.size())).ok());  // one new block for the tail
  EXPECT_EQ(cache_->num_free_blocks(), 4);
  cache_->Free(1);  // the shared blocks stay: sequence 2 holds them
  EXPECT_EQ(cache_->num_free_blocks(), 5);
  cache_->Free(2);  // now unreferenced, but still findable
  EXPECT_EQ(cache_->num_free_blocks(), 8);
  EXPECT_EQ(cache_->num_cached_blocks(), 2);
  const PrefixMatch again = cache_->FindCachedPrefix(hashes, kA, 2);
  EXPECT_EQ(again.blocks, 2);
  EXPECT_EQ(again.free_blocks, 2);
  ASSERT_TRUE(cache_->AdoptPrefix(3, hashes, kA, 2).ok());
  EXPECT_EQ(cache_->num_free_blocks(), 6);  // taking cached free blocks uses free blocks
}

TEST_F(PrefixCacheTest, ContentIsComparedNotJustHashes) {
  const std::vector<uint64_t> hashes = Run(1, kA);
  std::vector<int32_t> other = kA;
  other[5] = 99;  // the same hashes would claim this block; its tokens do not match
  EXPECT_EQ(cache_->FindCachedPrefix(hashes, other, 2).blocks, 1);
  EXPECT_FALSE(cache_->AdoptPrefix(2, hashes, other, 2).ok());
}

TEST_F(PrefixCacheTest, EvictionTakesNeverUsedBlocksFirstThenTheLeastRecentlyFreedTailFirst) {
  const std::vector<uint64_t> hashes = Run(1, kA);  // 3 blocks, 2 cached
  cache_->Free(1);
  EXPECT_EQ(cache_->num_cached_blocks(), 2);
  ASSERT_TRUE(cache_->Reserve(2, 24).ok());  // 6 blocks: the 5 never-used ones and the uncached tail block
  EXPECT_EQ(cache_->num_cached_blocks(), 2);
  ASSERT_TRUE(cache_->Reserve(2, 28).ok());  // a 7th: one cached block is evicted
  EXPECT_EQ(cache_->num_cached_blocks(), 1);
  EXPECT_EQ(cache_->FindCachedPrefix(hashes, kA, 2).blocks, 1);  // the tail went first; the head is still there
  ASSERT_TRUE(cache_->Reserve(2, 32).ok());
  EXPECT_EQ(cache_->num_cached_blocks(), 0);
  EXPECT_FALSE(cache_->Reserve(3, 4).ok());
}

TEST_F(PrefixCacheTest, RepeatedContentKeepsOneCachedCopy) {
  Run(1, kA);
  Run(2, kA);  // computed again without a lookup: its blocks stay uncached
  EXPECT_EQ(cache_->num_cached_blocks(), 2);
  cache_->Free(2);
  EXPECT_EQ(cache_->num_free_blocks(), 5);
  cache_->Free(1);
  EXPECT_EQ(cache_->num_free_blocks(), 8);
}

TEST_F(KvCacheTest, WithoutPrefixCachingNothingIsKept) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint64_t> hashes;
  cache_->HashBlocks(tokens, hashes);
  ASSERT_TRUE(cache_->Reserve(1, 8).ok());
  cache_->CacheFullBlocks(1, hashes, tokens, 8);
  EXPECT_EQ(cache_->num_cached_blocks(), 0);
  EXPECT_EQ(cache_->FindCachedPrefix(hashes, tokens, 2).blocks, 0);
}

}  // namespace
}  // namespace ferry::engine
