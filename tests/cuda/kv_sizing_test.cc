// The KV cache sized from gpu_memory_utilization on a real GPU: the profiling step runs,
// the cache fills the share (more than max_num_seqs sequences), a share below the weights
// is refused with the sizes, and a share that is not free is refused before loading.
#include <gtest/gtest.h>

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
