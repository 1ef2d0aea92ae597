// Prefix caching on the GPU: the engine core with the demo decoder on CUDA (f32
// activations, decode steps as CUDA graphs) gives the same greedy tokens with and without
// the prefix cache, for prompts that share a system prompt, run one after another and all
// at once, and the cache is really used (hits counted, every block free at the end).
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "engine/engine.h"
#include "sched/engine_core.h"
#include "test_util.h"

namespace ferry {
namespace {

std::vector<int32_t> Tokens(const sched::GenerationEvent& ev) {
  std::vector<int32_t> out;
  for (const auto& t : ev.tokens) out.push_back(t.token);
  return out;
}

TEST(CudaPrefixCacheTest, SharedPrefixesGiveTheSameTokensWithAndWithoutTheCache) {
  FERRY_SKIP_WITHOUT_GPU();
  engine::EngineOptions eo;
  eo.device = DeviceSpec::Cuda();
  eo.cuda_activations = DType::kF32;
  auto loaded = engine::Engine::Load(testing::SourcePath("models/demo/kjv-decoder"), eo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  std::shared_ptr<engine::Engine> e = std::move(loaded).value();
  auto system = e->EncodePrompt(
      "And God said, Let there be light: and there was light. And God saw the light, that it was good: and God "
      "divided the light from the darkness. And God called the light Day, and the darkness he called Night.");
  ASSERT_TRUE(system.ok());
  ASSERT_GE(system->size(), 48u);
  std::vector<std::vector<int32_t>> prompts;
  for (const char* q : {" In the beginning", " And the evening and the morning", " Let the waters", " And Adam"}) {
    std::vector<int32_t> p = *system;
    auto more = e->tokenizer()->Encode(q);
    ASSERT_TRUE(more.ok());
    p.insert(p.end(), more->begin(), more->end());
    prompts.push_back(p);
  }
  auto request = [](const std::vector<int32_t>& prompt) {
    sched::GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = 16;
    r.ignore_eos = true;
    return r;
  };
  auto run = [&](bool caching, int64_t* hits) {
    sched::EngineCoreOptions o;
    o.batching.max_num_seqs = 8;
    o.batching.max_num_batched_tokens = 64;  // the prompts are prefilled in chunks
    o.batching.max_seq_len = 160;
    o.batching.enable_prefix_caching = caching;
    auto core = std::move(sched::EngineCore::Create("kjv", e, o)).value();
    std::vector<std::vector<int32_t>> outs;
    for (const auto& p : prompts) {  // one after another: each finds the earlier ones' blocks
      auto ev = sched::GenerateAll(*core, {request(p)});
      EXPECT_TRUE(ev.ok()) << ev.status().ToString();
      if (ev.ok()) outs.push_back(Tokens((*ev)[0]));
    }
    std::vector<sched::GenerationRequest> batch;  // and all at once
    for (const auto& p : prompts) batch.push_back(request(p));
    auto ev = sched::GenerateAll(*core, std::move(batch));
    EXPECT_TRUE(ev.ok()) << ev.status().ToString();
    if (ev.ok()) {
      for (const auto& x : *ev) outs.push_back(Tokens(x));
    }
    *hits = core->prefix_hit_tokens();
    EXPECT_EQ(core->cache().num_free_blocks(), core->cache().num_blocks());
    return outs;
  };
  int64_t hits_on = 0, hits_off = 0;
  const auto with = run(true, &hits_on);
  const auto without = run(false, &hits_off);
  ASSERT_EQ(with.size(), 8u);
  EXPECT_EQ(with, without);
  EXPECT_EQ(hits_off, 0);
  const int64_t shared = static_cast<int64_t>(system->size()) / 16 * 16;
  EXPECT_GE(hits_on, 3 * shared);  // at least the 2nd to 4th sequential requests hit
}

}  // namespace
}  // namespace ferry
