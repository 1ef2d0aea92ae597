// Every decoder fixture against Hugging Face's float64 references, plus the ragged-batch,
// chunked-prefill and KV-cache invariants the batcher relies on.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <limits>

#include "engine/engine.h"
#include "decoder_test_util.h"
#include "engine/sampler.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace ferry {
namespace {

using testing::MaxAbs;
using testing::MaxDiff;
using testing::ToFloats;
using testing::ToIds;

struct Prompt {
  std::vector<int32_t> ids;
  std::vector<float> last_logits;
  std::vector<float> all_logits;  // empty when not stored
  std::vector<int32_t> greedy;
  double min_margin = 0;
};

std::vector<Prompt> LoadPrompts(const std::string& dir) {
  auto ref = io::SafetensorsFile::Open(dir + "/reference.safetensors");
  EXPECT_TRUE(ref.ok()) << ref.status().ToString();
  std::ifstream in(dir + "/reference.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<Prompt> prompts;
  for (const auto& p : j["prompts"]) {
    const std::string key = "p" + std::to_string(p["index"].get<int>());
    Prompt out;
    out.ids = ToIds((*ref)->Get(key + ".input_ids").value());
    out.last_logits = ToFloats((*ref)->Get(key + ".last_logits").value());
    if ((*ref)->Has(key + ".all_logits")) out.all_logits = ToFloats((*ref)->Get(key + ".all_logits").value());
    out.greedy = ToIds((*ref)->Get(key + ".greedy_ids").value());
    out.min_margin = p["min_top2_margin"].get<double>();
    prompts.push_back(std::move(out));
  }
  return prompts;
}

// A fixture's folder: "arch/NAME" is tests/fixtures/architectures/NAME (made by
// tools/fixtures/architectures.py), anything else ../shared/fixtures/models/NAME.
std::string DecoderFixtureDir(const std::string& param) {
  if (param.starts_with("arch/")) return testing::SourcePath("tests/fixtures/architectures/" + param.substr(5));
  return testing::FixturePath("models/" + param);
}

class DecoderFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = DecoderFixtureDir(GetParam());
    if (!std::filesystem::exists(dir_ + "/reference.safetensors")) {
      GTEST_SKIP() << dir_ << " is not there yet (made by tools/fixtures/architectures.py)";
    }
    auto e = engine::Engine::Load(dir_);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = *e;
    prompts_ = LoadPrompts(dir_);
    ASSERT_FALSE(prompts_.empty());
    runner_ = testing::DecoderHarness::Create(engine_, static_cast<int>(prompts_.size()) + 1, 256);
    ASSERT_NE(runner_, nullptr);
  }

  std::string dir_;
  std::shared_ptr<engine::Engine> engine_;
  std::vector<Prompt> prompts_;
  std::unique_ptr<testing::DecoderHarness> runner_;
};

TEST_P(DecoderFixtureTest, LogitsMatchReference) {
  const int vocab = engine_->config().vocab_size;
  for (size_t j = 0; j < prompts_.size(); ++j) {
    const Prompt& p = prompts_[j];
    const bool all = !p.all_logits.empty();
    auto logits = runner_->Step({{static_cast<int64_t>(j), p.ids, 0, all}});
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    runner_->cache().Free(static_cast<int64_t>(j));
    const float* got = logits->data<float>();
    const double tol = 1e-3 * MaxAbs(p.last_logits);
    const float* last = got + (all ? (p.ids.size() - 1) * vocab : 0);
    EXPECT_LE(MaxDiff(last, p.last_logits.data(), vocab), tol) << GetParam() << " prompt " << j;
    if (all) {
      ASSERT_EQ(logits->dim(0), static_cast<int64_t>(p.ids.size()));
      EXPECT_LE(MaxDiff(got, p.all_logits.data(), p.all_logits.size()), 1e-3 * MaxAbs(p.all_logits))
          << GetParam() << " prompt " << j << " (all positions)";
    }
  }
}

TEST_P(DecoderFixtureTest, GreedyMatchesReferenceUpToAmbiguousSteps) {
  const int vocab = engine_->config().vocab_size;
  for (size_t j = 0; j < prompts_.size(); ++j) {
    const Prompt& p = prompts_[j];
    // Measured error of our logits at the last prompt position bounds how close two
    // candidates may be before either choice is legitimate.
    auto first = runner_->Step({{999, p.ids, 0, false}});
    ASSERT_TRUE(first.ok());
    runner_->cache().Free(999);
    const double err = MaxDiff(first->data<float>(), p.last_logits.data(), vocab);

    auto res = runner_->Greedy(p.ids, static_cast<int>(p.greedy.size()));
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    const std::vector<int32_t>& got = *res;
    ASSERT_EQ(got.size(), p.greedy.size());
    if (p.min_margin > 2 * err) {
      EXPECT_EQ(got, p.greedy) << GetParam() << " prompt " << j;
      continue;
    }
    // Some step is ambiguous at our precision: replay with full recompute to find our own
    // margins, and require agreement up to the first step whose margin is within the error.
    std::vector<int32_t> ctx = p.ids;
    for (size_t s = 0; s < p.greedy.size(); ++s) {
      auto l = runner_->Step({{998, ctx, 0, false}});
      ASSERT_TRUE(l.ok());
      runner_->cache().Free(998);
      std::vector<float> row(l->data<float>(), l->data<float>() + vocab);
      std::vector<float> sorted = row;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      if (sorted[0] - sorted[1] <= 2 * err) break;
      ASSERT_EQ(got[s], p.greedy[s]) << GetParam() << " prompt " << j << " step " << s;
      ctx.push_back(p.greedy[s]);
    }
  }
}

TEST_P(DecoderFixtureTest, RaggedBatchEqualsEachPromptAlone) {
  const int vocab = engine_->config().vocab_size;
  std::vector<testing::RawStep> steps;
  for (size_t j = 0; j < prompts_.size(); ++j) steps.push_back({static_cast<int64_t>(j), prompts_[j].ids, 0, false});
  auto batched = runner_->Step(steps);
  ASSERT_TRUE(batched.ok()) << batched.status().ToString();
  for (size_t j = 0; j < prompts_.size(); ++j) runner_->cache().Free(static_cast<int64_t>(j));
  for (size_t j = 0; j < prompts_.size(); ++j) {
    auto alone = runner_->Step({{50, prompts_[j].ids, 0, false}});
    ASSERT_TRUE(alone.ok());
    runner_->cache().Free(50);
    EXPECT_LE(MaxDiff(batched->data<float>() + j * vocab, alone->data<float>(), vocab),
              1e-4 * MaxAbs(prompts_[j].last_logits))
        << GetParam() << " prompt " << j;
  }
}

TEST_P(DecoderFixtureTest, ChunkedPrefillAndKvDecodeEqualFullRecompute) {
  const int vocab = engine_->config().vocab_size;
  // longrope switches every position to the long factors once a sequence passes the original
  // window, so a cache filled before the switch differs from a recompute after it (in
  // transformers too): keep such models to sequences inside the window.
  const io::RopeScaling& rope = engine_->config().rope_scaling;
  const size_t limit = rope.type == io::RopeScaling::Type::kLongRope
                           ? static_cast<size_t>(rope.original_max_position) - 8
                           : std::numeric_limits<size_t>::max();
  const Prompt* longest = nullptr;
  for (const Prompt& q : prompts_) {
    if (q.ids.size() <= limit && (longest == nullptr || q.ids.size() > longest->ids.size())) longest = &q;
  }
  ASSERT_NE(longest, nullptr);
  const Prompt& p = *longest;
  // Sequence = prompt + its reference continuation; feed it in chunks of 3, then one token
  // at a time, and compare every step's last logits with a from-scratch pass.
  std::vector<int32_t> seq = p.ids;
  seq.insert(seq.end(), p.greedy.begin(), p.greedy.begin() + 8);
  int32_t pos = 0;
  const int32_t prompt_len = static_cast<int32_t>(p.ids.size());
  while (pos < static_cast<int32_t>(seq.size())) {
    const int32_t n = pos < prompt_len ? std::min<int32_t>(3, prompt_len - pos) : 1;
    auto inc = runner_->Step({{7, std::span<const int32_t>(seq.data() + pos, n), pos, false}});
    ASSERT_TRUE(inc.ok()) << inc.status().ToString();
    pos += n;
    auto full = runner_->Step({{8, std::span<const int32_t>(seq.data(), pos), 0, false}});
    ASSERT_TRUE(full.ok());
    runner_->cache().Free(8);
    EXPECT_LE(MaxDiff(inc->data<float>(), full->data<float>(), vocab), 1e-4 * MaxAbs(p.last_logits) + 1e-5)
        << GetParam() << " at length " << pos;
  }
  runner_->cache().Free(7);
  EXPECT_EQ(runner_->cache().num_free_blocks(), runner_->cache().num_blocks());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecoderFixtureTest,
                         ::testing::Values("llama-tiny", "llama3-tiny", "qwen2-tiny", "arch/qwen3-tiny",
                                           "arch/gemma2-tiny", "arch/phi3-tiny", "arch/mistral-swa-tiny"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

// The sliding-window fixtures' prompts are longer than their windows, and the references
// move when the window is removed: the window is exercised, not just parsed.
TEST(DecoderWindowTest, FixturesExerciseTheirWindows) {
  for (const char* name : {"gemma2-tiny", "mistral-swa-tiny"}) {
    const std::string dir = DecoderFixtureDir(std::string("arch/") + name);
    if (!std::filesystem::exists(dir + "/reference.json")) GTEST_SKIP() << dir << " is not there yet";
    std::ifstream in(dir + "/reference.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    ASSERT_TRUE(j.contains("window_effect")) << name;
    EXPECT_GT(j["window_effect"]["max_abs_diff_vs_no_window"].get<double>(), 1e-2) << name;
    EXPECT_GT(j["window_effect"]["prompt_len"].get<int>(), j["window_effect"]["sliding_window"].get<int>());
  }
}

TEST(DecoderGenerateTest, Llama3TinyGreedyTextMatchesFixture) {
  const std::string dir = testing::FixturePath("models/llama3-tiny");
  auto e = engine::Engine::Load(dir);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  std::ifstream in(dir + "/reference.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  auto r = testing::DecoderHarness::Create(*e, 8, std::min(4096, (*e)->config().max_position_embeddings));
  ASSERT_NE(r, nullptr);
  for (const auto& p : j["prompts"]) {
    if (p["source"] != "text") continue;
    auto ids = (*e)->EncodePrompt(p["text"].get<std::string>());
    ASSERT_TRUE(ids.ok());
    auto res = r->Greedy(*ids, 24);
    ASSERT_TRUE(res.ok());
    auto text = (*e)->tokenizer()->Decode(*res);
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(*text, p["greedy_text"].get<std::string>());
  }
}

}  // namespace
}  // namespace ferry
