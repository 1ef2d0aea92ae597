// The KV cache sized from gpu_memory_utilization on a real GPU: the profiling step runs,
// the cache fills the share (more than max_num_seqs sequences), a share below the weights
// is refused with the sizes, and a share that is not free is refused before loading. And
// the device pool that the step's buffers come from, once the cache has taken the rest.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backend/cuda/device_pool.h"
#include "backend/cuda_backend.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "sched/engine_core.h"
#include "sched/kv_sizing.h"
#include "test_util.h"

namespace ferry::sched {
namespace {

std::shared_ptr<engine::Engine> LoadDemo() {
  engine::EngineOptions eo;
  eo.device = DeviceSpec::Cuda(0);
  auto e = engine::Engine::Load(testing::SourcePath("models/demo/kjv-decoder"), eo);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : nullptr;
}

EngineCoreOptions Options(double utilization) {
  EngineCoreOptions o;
  o.batching.max_num_seqs = 4;
  o.batching.max_num_batched_tokens = 256;
  o.batching.max_seq_len = 256;
  o.gpu_memory_utilization = utilization;
  return o;
}

TEST(CudaKvSizingTest, ShareFillsTheCacheAfterTheProfiledStep) {
  FERRY_SKIP_WITHOUT_GPU();
  auto e = LoadDemo();
  ASSERT_NE(e, nullptr);
  auto memory = backend::QueryCudaMemory(0);
  ASSERT_TRUE(memory.ok());
  // A share of 2 GiB of whatever the device has.
  const double util = 2.0 * (1 << 30) / static_cast<double>(memory->total_bytes);
  auto core = EngineCore::Create("kjv", e, Options(util));
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  const int default_blocks = 4 * (256 / 16);
  EXPECT_GT((*core)->cache().num_blocks(), 10 * default_blocks);
  // The cache stays inside the share (weights and the step's activations come out of it).
  const io::ModelConfig& c = e->config();
  const int64_t block_bytes = 2ll * c.num_layers * c.num_kv_heads * 16 * c.head_dim * 2;
  EXPECT_LT(static_cast<int64_t>((*core)->cache().num_blocks()) * block_bytes, int64_t{2} << 30);
  // And it serves.
  GenerationRequest r;
  r.prompt = std::vector<int32_t>(100, 5);
  r.max_tokens = 8;
  r.ignore_eos = true;
  auto out = GenerateAll(**core, {r});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE((*out)[0].error.ok()) << (*out)[0].error.ToString();
  EXPECT_EQ((*out)[0].tokens.size(), 8u);
}

TEST(CudaKvSizingTest, ShareBelowTheWeightsIsRefusedNamingTheSizes) {
  FERRY_SKIP_WITHOUT_GPU();
  auto e = LoadDemo();
  ASSERT_NE(e, nullptr);
  auto core = EngineCore::Create("kjv", e, Options(1e-6));
  ASSERT_EQ(core.status().code(), StatusCode::kResourceExhausted) << core.status().ToString();
  const std::string m = core.status().message();
  EXPECT_NE(m.find("does not fit"), std::string::npos) << m;
  EXPECT_NE(m.find("gpu_memory_utilization"), std::string::npos) << m;
}

TEST(CudaKvSizingTest, ShareThatIsNotFreeIsRefusedBeforeLoading) {
  FERRY_SKIP_WITHOUT_GPU();
  KvSizingOptions o;
  o.gpu_memory_utilization = 1.0;  // the whole device: never all free (the context holds some)
  const Status s = PrecheckMemoryBudget("kjv", testing::SourcePath("models/demo/kjv-decoder"), DeviceSpec::Cuda(0), o);
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("are free"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ferry::sched

namespace ferry::backend {
namespace {

// The pool's blocks after a step has shrunk: a request up to a quarter smaller than a kept
// block reuses it (past 1 MiB), a smaller one does not; and a cudaMalloc that fails while
// blocks are kept for reuse frees them and succeeds, when trimming is allowed (a decode batch
// that varies by a few rows each step once filled the device with one cached logits buffer
// per row count, and every step past that point failed).
TEST(CudaDevicePoolTest, ShrunkRequestsReuseAndOutOfMemoryTrimsTheCache) {
  FERRY_SKIP_WITHOUT_GPU();
  auto pool = std::make_shared<DevicePool>(0);
  constexpr size_t kMiB = size_t{1} << 20;
  {
    auto a = pool->Get(100 * kMiB);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
  }
  EXPECT_EQ(pool->allocated_bytes(), 100 * kMiB);
  EXPECT_EQ(pool->cached_bytes(), 100 * kMiB);
  {
    auto b = pool->Get(90 * kMiB);  // within a quarter: the 100 MiB block
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(pool->allocated_bytes(), 100 * kMiB);
    EXPECT_EQ(pool->cached_bytes(), 0u);
    auto c = pool->Get(70 * kMiB);  // no block close enough: a new one
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(pool->allocated_bytes(), 170 * kMiB);
  }
  pool->Trim();
  EXPECT_EQ(pool->allocated_bytes(), 0u);

  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  constexpr size_t kGiB = size_t{1} << 30;
  const size_t blocks = free_bytes * 6 / 10 / kGiB;
  ASSERT_GT(blocks, 0u);
  {
    std::vector<std::shared_ptr<void>> held;
    for (size_t i = 0; i < blocks; ++i) {
      auto block = pool->Get(kGiB);
      ASSERT_TRUE(block.ok()) << block.status().ToString();
      held.push_back(*block);
    }
  }  // all kept for reuse now
  EXPECT_EQ(pool->cached_bytes(), blocks * kGiB);
  const size_t big = free_bytes * 7 / 10;
  auto refused = pool->Get(big);  // without trimming: the kept blocks leave too little
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  {
    auto granted = pool->Get(big, /*may_trim=*/true);
    ASSERT_TRUE(granted.ok()) << granted.status().ToString();
    EXPECT_EQ(pool->cached_bytes(), 0u);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
  pool->Trim();
}

}  // namespace
}  // namespace ferry::backend
