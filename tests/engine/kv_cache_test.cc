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

}  // namespace
}  // namespace ferry::engine
