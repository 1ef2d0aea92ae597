#include "qos/memory_check.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"

namespace ferry::qos {
namespace {

TEST(MemoryCheckTest, EstimatesWeightsAndKvOfACheckpoint) {
  VariantPlan plan;
  plan.variant = "bf16";
  plan.path = testing::SourcePath("models/demo/kjv-decoder");
  plan.batching.max_num_seqs = 8;
  plan.batching.max_seq_len = 256;
  plan.batching.kv_block_tokens = 16;
  Result<MemoryNeed> n = EstimateMemory(plan);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->variant, "bf16");
  EXPECT_EQ(n->device, "cpu");
  EXPECT_EQ(n->weights_bytes,
            static_cast<int64_t>(std::filesystem::file_size(plan.path + "/model.safetensors")));
  // 8 sequences x 16 blocks of 16 tokens x 8 layers x 2 KV heads x 32 dims x K and V x f32.
  EXPECT_EQ(n->kv_bytes, int64_t{8} * 16 * 16 * 8 * 2 * 32 * 2 * 4);
  // max_seq_len 0: the model's context (512).
  plan.batching.max_seq_len = 0;
  n = EstimateMemory(plan);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->kv_bytes, int64_t{8} * 32 * 16 * 8 * 2 * 32 * 2 * 4);
  plan.path = "/nonexistent/model";
  EXPECT_EQ(EstimateMemory(plan).status().code(), StatusCode::kNotFound);
}

TEST(MemoryCheckTest, EstimatesAGgufFile) {
  VariantPlan plan;
  plan.variant = "gguf";
  plan.path = testing::SourcePath("tests/fixtures/gguf/tiny-llama.gguf");
  plan.batching.max_num_seqs = 8;
  plan.batching.max_seq_len = 256;
  plan.batching.kv_block_tokens = 16;
  Result<MemoryNeed> n = EstimateMemory(plan);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->weights_bytes, static_cast<int64_t>(std::filesystem::file_size(plan.path)));
  // 8 sequences x 16 blocks of 16 tokens x 2 layers x 2 KV heads x 8 dims x K and V x f32.
  EXPECT_EQ(n->kv_bytes, int64_t{8} * 16 * 16 * 2 * 2 * 8 * 2 * 4);
}

TEST(MemoryCheckTest, EncodersNeedNoKv) {
  VariantPlan plan;
  plan.variant = "f32";
  plan.path = testing::SourcePath("models/demo/kjv-classifier");
  Result<MemoryNeed> n = EstimateMemory(plan);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_GT(n->weights_bytes, 0);
  EXPECT_EQ(n->kv_bytes, 0);
}

TEST(MemoryCheckTest, RefusesAGroupThatDoesNotFitNamingTheSizes) {
  const int64_t gib = int64_t{1} << 30;
  const std::vector<MemoryNeed> needs = {{"bf16", "cuda:0", 16 * gib, 20 * gib},
                                         {"fp8", "cuda:0", 8 * gib, 20 * gib},
                                         {"int8", "cpu", gib, gib}};
  const std::vector<MemoryBudget> fits = {{"cuda:0", 80 * gib, 141 * gib, "cudaMemGetInfo"},
                                          {"cpu", 100 * gib, 128 * gib, "/proc/meminfo"}};
  EXPECT_TRUE(CheckGroupMemory("llama", needs, fits).ok());
  const std::vector<MemoryBudget> tight = {{"cuda:0", 60 * gib, 141 * gib, "cudaMemGetInfo"},
                                           {"cpu", 100 * gib, 128 * gib, "/proc/meminfo"}};
  const Status st = CheckGroupMemory("llama", needs, tight);
  ASSERT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(st.message(),
            "the variants of model 'llama' need 64.00 GiB on cuda:0 (bf16: weights 16.00 GiB + KV 20.00 GiB; fp8: "
            "weights 8.00 GiB + KV 20.00 GiB) but cuda:0 has 60.00 GiB available of 141.00 GiB (cudaMemGetInfo; 90% "
            "of it may be used); drop a variant, lower max_num_seqs or max_seq_len, or use an fp8 KV cache");
  // The usable fraction: 64 GiB fits in 90 % of 72 GiB but not of 70.
  EXPECT_TRUE(CheckGroupMemory("llama", needs, {{"cuda:0", 72 * gib, 141 * gib, "x"}}).ok());
  EXPECT_FALSE(CheckGroupMemory("llama", needs, {{"cuda:0", 70 * gib, 141 * gib, "x"}}).ok());
  // A device whose memory could not be queried is not checked.
  EXPECT_TRUE(CheckGroupMemory("llama", needs, {}).ok());
}

TEST(MemoryCheckTest, HostMemoryIsQueried) {
  Result<MemoryBudget> b = QueryMemory(DeviceSpec::Cpu());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->device, "cpu");
  EXPECT_GT(b->total_bytes, int64_t{1} << 28);
  EXPECT_GT(b->available_bytes, 0);
  EXPECT_LE(b->available_bytes, b->total_bytes);
  EXPECT_FALSE(b->source.empty());
}

TEST(MemoryCheckTest, FormatsBytes) {
  EXPECT_EQ(FormatBytes(100), "100 B");
  EXPECT_EQ(FormatBytes(12 * 1024), "12 KiB");
  EXPECT_EQ(FormatBytes(int64_t{640} << 20), "640.0 MiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 29), "1.50 GiB");
}

}  // namespace
}  // namespace ferry::qos
