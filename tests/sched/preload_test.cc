// Preload: load, allocate the engine core, warm every bucket through it.
#include "sched/preload.h"

#include <gtest/gtest.h>

#include "engine/engine_builder.h"
#include "io/temp_dir.h"
#include "test_util.h"

namespace ferry::sched {
namespace {

using testing::TempDir;

// An untuned engine of the tiny Qwen2 fixture at `path`.
void BuildTinyEngine(const std::string& path) {
  engine::BuildOptions bo;
  bo.tune = false;
  ASSERT_TRUE(engine::BuildEngine(testing::FixturePath("models/qwen2-tiny"), path, bo).ok());
}

// A core of 4 sequences of 128 tokens.
PreloadOptions SmallCore() {
  PreloadOptions po;
  po.core.batching.max_seq_len = 128;
  po.core.batching.max_num_seqs = 4;
  return po;
}

TEST(PreloadTest, WarmsEveryBucketAndReportsPhases) {
  TempDir tmp;
  const std::string path = tmp.File("q.ferry");
  ASSERT_NO_FATAL_FAILURE(BuildTinyEngine(path));
  PreloadOptions po = SmallCore();
  auto p = PreloadedModel::Create("q", path, po);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const PreloadTimings& t = (*p)->timings();
  EXPECT_GT(t.load_ms, 0);
  EXPECT_GT(t.warmup_ms, 0);
  // Prefill buckets 16, 64 and 127 (the longest prompt that leaves room for one token) and
  // decode buckets 1, 2, 4.
  EXPECT_EQ((*p)->options().prefill_lengths, (std::vector<int>{16, 64, 127}));
  EXPECT_EQ((*p)->options().decode_batches, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(t.warmup_passes, 6);
  ASSERT_EQ(t.passes.size(), 6u);
  EXPECT_EQ(t.passes[0].what, "prefill 127");
  EXPECT_EQ(t.passes[5].what, "decode batch 4");
  // Warm-up leaves the cache empty.
  EXPECT_EQ((*p)->core()->cache().num_free_blocks(), (*p)->core()->cache().num_blocks());
  EXPECT_TRUE((*p)->core()->empty());
}

TEST(PreloadTest, MinimalWarmupRunsOneShortPassAndTellsEachPhase) {
  TempDir tmp;
  const std::string path = tmp.File("q.ferry");
  ASSERT_NO_FATAL_FAILURE(BuildTinyEngine(path));
  PreloadOptions po = SmallCore();
  po.minimal_warmup = true;
  std::vector<std::string> phases;
  po.on_phase = [&](std::string_view phase) { phases.emplace_back(phase); };
  auto p = PreloadedModel::Create("q", path, po);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const PreloadTimings& t = (*p)->timings();
  EXPECT_EQ(t.warmup_passes, 1);
  ASSERT_EQ(t.passes.size(), 1u);
  EXPECT_EQ(t.passes[0].what, "prefill 16 + 2 decode steps at batch 1");
  EXPECT_GT(t.passes[0].ms, 0);
  EXPECT_EQ(phases, (std::vector<std::string>{"allocate", "warmup"}));
  EXPECT_EQ((*p)->core()->cache().num_free_blocks(), (*p)->core()->cache().num_blocks());
}

}  // namespace
}  // namespace ferry::sched
