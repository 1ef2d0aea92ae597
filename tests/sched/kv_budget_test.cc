// The KV cache's share of a memory budget, as arithmetic: fill on a GPU, capped on the host,
// refusals that name every size.
#include "sched/kv_budget.h"

#include <gtest/gtest.h>

namespace ferry::sched {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

KvBudgetInput Gpu() {
  KvBudgetInput in;
  in.model = "llama";
  in.device = "cuda:0";
  in.budget_bytes = 63 * kGiB;  // 0.45 of 140 GiB
  in.budget_source = "gpu_memory_utilization 0.45 of 140.00 GiB";
  in.available_bytes = 100 * kGiB;
  in.weights_bytes = 15 * kGiB;
  in.activation_bytes = 2 * kGiB;
  in.reserve_bytes = 256 * kMiB;
  in.block_bytes = 2 * kMiB;  // llama-3-8b, bf16, 16 tokens: 2 x 32 layers x 8 heads x 16 x 128 x 2 bytes
  in.blocks_per_sequence = 512;  // 8192 tokens
  in.max_seq_len = 8192;
  in.default_blocks = 16 * 512;
  in.fill = true;
  return in;
}

TEST(KvBudgetTest, NoBudgetKeepsMaxNumSeqsSequences) {
  KvBudgetInput in = Gpu();
  in.budget_bytes = 0;
  auto d = DecideKvBlocks(in);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->blocks, 16 * 512);
  EXPECT_EQ(d->kv_bytes, int64_t{16} * 512 * 2 * kMiB);
  EXPECT_NE(d->summary.find("no memory budget"), std::string::npos);
}

TEST(KvBudgetTest, GpuFillsWhatWeightsActivationsAndReserveLeave) {
  auto d = DecideKvBlocks(Gpu());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  // (63 GiB - 15 GiB - 2 GiB - 256 MiB) / 2 MiB
  EXPECT_EQ(d->blocks, static_cast<int>((63 * kGiB - 17 * kGiB - 256 * kMiB) / (2 * kMiB)));
  EXPECT_GT(d->blocks, 16 * 512);  // more than max_num_seqs sequences: vLLM's behaviour
  EXPECT_NE(d->summary.find("weights 15.00 GiB + activations 2.00 GiB + reserve 256.0 MiB"), std::string::npos)
      << d->summary;
}

TEST(KvBudgetTest, TwoModelsShareOneGpuByTheirFractions) {
  // Each takes its own fraction: the second sees the first's memory as taken, not its own.
  KvBudgetInput first = Gpu();
  KvBudgetInput second = Gpu();
  second.available_bytes = 140 * kGiB - 63 * kGiB + second.weights_bytes;  // free + what it holds itself
  auto a = DecideKvBlocks(first);
  auto b = DecideKvBlocks(second);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->blocks, b->blocks);
}

TEST(KvBudgetTest, ShareNotFreeIsRefusedNamingTheSizes) {
  KvBudgetInput in = Gpu();
  in.available_bytes = 40 * kGiB;
  auto d = DecideKvBlocks(in);
  ASSERT_EQ(d.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(d.status().message().find("63.00 GiB but only 40.00 GiB are free"), std::string::npos)
      << d.status().message();
  EXPECT_NE(d.status().message().find("gpu_memory_utilization 0.45"), std::string::npos);
}

TEST(KvBudgetTest, BudgetBelowOneSequenceIsRefusedNamingEverySize) {
  KvBudgetInput in = Gpu();
  in.budget_bytes = 17 * kGiB + 256 * kMiB + 511 * 2 * kMiB;  // one block short of one sequence
  auto d = DecideKvBlocks(in);
  ASSERT_EQ(d.status().code(), StatusCode::kResourceExhausted);
  const std::string m = d.status().message();
  EXPECT_NE(m.find("model 'llama' on cuda:0 does not fit"), std::string::npos) << m;
  EXPECT_NE(m.find("weights 15.00 GiB + activations 2.00 GiB + reserve 256.0 MiB = 17.25 GiB"), std::string::npos)
      << m;
  EXPECT_NE(m.find("leaving 1022.0 MiB for the KV cache"), std::string::npos) << m;
  EXPECT_NE(m.find("one sequence of 8192 tokens needs 1.00 GiB (512 blocks of 2.0 MiB)"), std::string::npos) << m;
  // One more block and it fits, with exactly one sequence.
  in.budget_bytes += 2 * kMiB;
  auto ok = DecideKvBlocks(in);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->blocks, 512);
}

TEST(KvBudgetTest, HostTakesAtMostMaxNumSeqsSequences) {
  KvBudgetInput in = Gpu();
  in.device = "cpu";
  in.available_bytes = -1;
  in.fill = false;
  in.budget_source = "host_memory_budget_bytes";
  auto d = DecideKvBlocks(in);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->blocks, 16 * 512);  // the budget would hold more; the host keeps the default
  // A tighter budget: fewer sequences than max_num_seqs, whole blocks.
  in.budget_bytes = 17 * kGiB + 256 * kMiB + 3 * kGiB + kMiB;
  d = DecideKvBlocks(in);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->blocks, 3 * 512);
  EXPECT_NE(d->summary.find("3.0 sequences of 8192 tokens"), std::string::npos) << d->summary;
}

TEST(KvBudgetTest, MalformedInputIsAnError) {
  KvBudgetInput in = Gpu();
  in.block_bytes = 0;
  EXPECT_EQ(DecideKvBlocks(in).status().code(), StatusCode::kInvalidArgument);
}

TEST(KvBudgetTest, FormatsBinaryUnits) {
  EXPECT_EQ(FormatBinaryBytes(100), "100 B");
  EXPECT_EQ(FormatBinaryBytes(3 * 1024), "3 KiB");
  EXPECT_EQ(FormatBinaryBytes(640 * kMiB), "640.0 MiB");
  EXPECT_EQ(FormatBinaryBytes(3 * kGiB / 2), "1.50 GiB");
}

}  // namespace
}  // namespace ferry::sched
