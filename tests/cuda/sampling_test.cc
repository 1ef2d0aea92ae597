// The GPU side of logit bias, banned ids (min_tokens) and the presence, frequency and
// repetition penalties: the kernel's adjusted logits equal the CPU's bit for bit, and
// Backend::SampleTokens with them picks what engine::Sampler picks (greedy) or stays in its
// support (sampled). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda_backend.h"
#include "core/tensor.h"
#include "cuda_test_util.h"
#include "engine/sampler.h"
#include "kernels/cuda/kernels.h"
#include "kernels/logit_adjust.h"

namespace ferry::cuda {
namespace {

using testing::DeviceBuffer;
using testing::Download;
using testing::RandomFloats;
using testing::Upload;

struct Row {
  std::vector<int32_t> history;  // prompt then output
  size_t generated = 0;
  float repetition = 1.0f, presence = 0.0f, frequency = 0.0f;
  std::vector<std::pair<int32_t, float>> bias;
  std::vector<int32_t> banned;

  kernels::RowPenalties Penalties() const {
    return {history, generated, repetition, presence, frequency, bias, banned};
  }
};

std::vector<Row> RandomRows(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  std::vector<Row> rows(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    Row& row = rows[static_cast<size_t>(r)];
    const int prompt = 5 + r * 3, output = r % 7;
    for (int i = 0; i < prompt + output; ++i) row.history.push_back(id(rng) % (vocab / 4));  // repeats likely
    row.generated = static_cast<size_t>(output);
    row.repetition = r % 3 == 0 ? 1.0f : 1.0f + 0.1f * static_cast<float>(r % 5);
    row.presence = r % 2 == 0 ? 0.0f : 0.3f * static_cast<float>(r % 4) - 0.4f;
    row.frequency = r % 4 == 1 ? 0.0f : 0.25f * static_cast<float>(r % 3);
    for (int b = 0; b < r % 5; ++b) row.bias.emplace_back(id(rng), static_cast<float>((b * 37) % 200 - 100));
    if (r % 3 == 1) row.banned = {id(rng), id(rng)};
  }
  return rows;
}

// Copies host logits into a backend tensor and waits for the copy to land. A copy from
// pageable memory may return before its DMA has finished, and the backend's stream does not
// wait for the legacy default stream, so without the wait a kernel on it can read rows the
// copy has not reached yet (or a pooled buffer's previous contents).
void UploadLogits(const std::vector<float>& logits, Tensor& dev) {
  ASSERT_EQ(cudaMemcpy(dev.raw(), logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(CudaSampling, AdjustLogitsMatchesTheCpuBitForBit) {
  FERRY_SKIP_WITHOUT_GPU();
  const int rows = 24, vocab = 5003;
  std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * vocab, 11, -20.0f, 20.0f);
  std::vector<kernels::LogitAdjustment> entries;
  const std::vector<Row> spec = RandomRows(rows, vocab, 3);
  for (int r = 0; r < rows; ++r) kernels::CollectLogitAdjustments(spec[r].Penalties(), r, vocab, entries);
  ASSERT_GT(entries.size(), 100u);
  std::vector<float> want = logits;
  for (const auto& e : entries) {
    const size_t at = static_cast<size_t>(e.row) * vocab + static_cast<size_t>(e.id);
    want[at] = kernels::AdjustLogit(logits[at], e);
  }
  DeviceBuffer d = Upload(logits), de = Upload(entries);
  FERRY_ASSERT_OK(AdjustLogits(d.as<float>(), vocab, de.as<kernels::LogitAdjustment>(), static_cast<int>(entries.size()),
                               nullptr));
  FERRY_ASSERT_SYNC();
  const std::vector<float> got = Download<float>(d, logits.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << "logit " << i << ": " << got[i] << " vs " << want[i];
  }
}

// Through the backend: greedy rows pick engine::Sampler's token; sampled rows never draw a
// banned id and stay where the CPU sampler's distribution has mass.
// Greedy rows: the first maximum wins, as engine::Argmax, on the vectorized pass (vocab a
// multiple of 4, a llama-3-sized one included) and the scalar one (vocab 4099), with the
// maximum repeated across the row so that the threads and the unrolled loads that hold
// copies of it must agree on the lowest id.
TEST(CudaSampling, GreedyRowsPickTheFirstMaximum) {
  FERRY_SKIP_WITHOUT_GPU();
  auto be = backend::MakeCudaBackend({});
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  backend::Backend& b = **be;
  for (int vocab : {4096, 4099, 128256}) {
    const int rows = 6;
    std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * vocab, 77 + vocab, -8.0f, 8.0f);
    for (int r = 0; r < rows; ++r) {
      float* row = logits.data() + static_cast<size_t>(r) * vocab;
      // Copies of the maximum: at ids that land in different threads, different unrolled
      // loads and different lanes of one 16-byte load, the first of them varying by row.
      const int first = (r * 7919 + 13) % (vocab / 2);
      for (int id : {first, first + 1, first + 4096 + 2, vocab - 1 - r, first + 16 * 1024 + 3}) {
        if (id < vocab) row[id] = 9.5f;
      }
      if (r == rows - 1) row[vocab - 1] = 10.0f;  // the last id alone
    }
    std::vector<backend::TokenSampling> ts(static_cast<size_t>(rows));
    for (auto& t : ts) t.temperature = 0.0f;
    auto dev = b.Allocate({rows, vocab}, DType::kF32);
    ASSERT_TRUE(dev.ok());
    ASSERT_NO_FATAL_FAILURE(UploadLogits(logits, *dev));
    std::vector<int32_t> tokens;
    FERRY_ASSERT_OK(b.SampleTokens(*dev, ts, tokens));
    ASSERT_EQ(tokens.size(), static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      const std::span<const float> row(logits.data() + static_cast<size_t>(r) * vocab, static_cast<size_t>(vocab));
      EXPECT_EQ(tokens[r], engine::Argmax(row)) << "vocab " << vocab << " row " << r;
    }
  }
}

TEST(CudaSampling, SampleTokensAppliesPenaltiesBiasAndBansAsTheCpuDoes) {
  FERRY_SKIP_WITHOUT_GPU();
  auto be = backend::MakeCudaBackend({});
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  backend::Backend& b = **be;
  const int rows = 32, vocab = 4096;
  std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * vocab, 5, -8.0f, 8.0f);
  std::vector<Row> spec = RandomRows(rows, vocab, 9);
  // Make the adjustments decide: ban every row's argmax in some rows, bias a token up in others.
  for (int r = 0; r < rows; ++r) {
    const float* row = logits.data() + static_cast<size_t>(r) * vocab;
    const int32_t top = engine::Argmax(std::span<const float>(row, static_cast<size_t>(vocab)));
    if (r % 4 == 0) spec[r].banned.push_back(top);
    if (r % 4 == 1) spec[r].bias.emplace_back((top + 17) % vocab, 30.0f);
    if (r % 4 == 2) spec[r].history.push_back(top), spec[r].generated += 1, spec[r].frequency = 2.0f, spec[r].presence = 2.0f;
  }
  for (int pass = 0; pass < 2; ++pass) {
    const bool greedy = pass == 0;
    std::vector<backend::TokenSampling> ts(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      backend::TokenSampling& t = ts[static_cast<size_t>(r)];
      t.temperature = greedy ? 0.0f : 0.8f;
      t.top_k = greedy ? 0 : 50;
      t.seed = 1000 + static_cast<uint64_t>(r);
      t.counter = spec[r].generated;
      t.history = spec[r].history;
      t.repetition_penalty = spec[r].repetition;
      t.presence_penalty = spec[r].presence;
      t.frequency_penalty = spec[r].frequency;
      t.logit_bias = spec[r].bias;
      t.banned = spec[r].banned;
    }
    auto dev = b.Allocate({rows, vocab}, DType::kF32);
    ASSERT_TRUE(dev.ok());
    ASSERT_NO_FATAL_FAILURE(UploadLogits(logits, *dev));
    std::vector<int32_t> tokens;
    FERRY_ASSERT_OK(b.SampleTokens(*dev, ts, tokens));
    // The caller's logits are not modified (log-probabilities are reported from them).
    std::vector<float> after(logits.size());
    ASSERT_EQ(cudaMemcpy(after.data(), dev->raw(), after.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(after, logits);
    engine::Sampler cpu;
    for (int r = 0; r < rows; ++r) {
      const std::span<const float> row(logits.data() + static_cast<size_t>(r) * vocab, static_cast<size_t>(vocab));
      engine::SamplingParams p;
      p.temperature = ts[r].temperature;
      p.top_k = ts[r].top_k;
      p.repetition_penalty = spec[r].repetition;
      p.presence_penalty = spec[r].presence;
      p.frequency_penalty = spec[r].frequency;
      p.logit_bias = spec[r].bias;
      for (int32_t banned : spec[r].banned) EXPECT_NE(tokens[r], banned) << "row " << r;
      if (greedy) {
        EXPECT_EQ(tokens[r], cpu.Sample(row, p, spec[r].history, 0, spec[r].generated, spec[r].banned)) << "row " << r;
      } else {
        // In the support: the 50 highest adjusted logits (ties to the lower id).
        std::vector<float> adjusted(row.begin(), row.end());
        std::vector<kernels::LogitAdjustment> entries;
        kernels::CollectLogitAdjustments(spec[r].Penalties(), 0, vocab, entries);
        for (const auto& e : entries) adjusted[e.id] = kernels::AdjustLogit(row[e.id], e);
        std::vector<int32_t> order(static_cast<size_t>(vocab));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return adjusted[x] > adjusted[y]; });
        const std::set<int32_t> support(order.begin(), order.begin() + 50);
        EXPECT_TRUE(support.count(tokens[r])) << "row " << r << " drew " << tokens[r];
      }
    }
  }
}

}  // namespace
}  // namespace ferry::cuda

namespace ferry::cuda {
namespace {

// Structured-output masks uploaded as bitsets: the GPU draws only allowed ids, and greedy
// rows pick what the CPU sampler picks under the same mask (with a bias that the mask must
// override in some rows).
TEST(CudaSampling, SampleTokensHonoursAllowedMasks) {
  FERRY_SKIP_WITHOUT_GPU();
  auto be = backend::MakeCudaBackend({});
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  backend::Backend& b = **be;
  const int rows = 48, vocab = 5000;
  const size_t words = (vocab + 63) / 64;
  std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * vocab, 11, -8.0f, 8.0f);
  std::vector<std::vector<uint64_t>> masks(static_cast<size_t>(rows));
  std::vector<std::vector<std::pair<int32_t, float>>> bias(static_cast<size_t>(rows));
  std::mt19937 rng(3);
  for (int r = 0; r < rows; ++r) {
    if (r % 3 == 2) continue;  // unconstrained rows in the same batch
    masks[r].assign(words, 0);
    const int allowed = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < allowed; ++k) {
      const int32_t id = static_cast<int32_t>(rng() % vocab);
      masks[r][static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    }
    const float* row = logits.data() + static_cast<size_t>(r) * vocab;
    bias[r].emplace_back(engine::Argmax(std::span<const float>(row, static_cast<size_t>(vocab))), 40.0f);
  }
  for (int pass = 0; pass < 2; ++pass) {
    const bool greedy = pass == 0;
    std::vector<backend::TokenSampling> ts(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      ts[r].temperature = greedy ? 0.0f : 1.0f;
      ts[r].seed = 77 + static_cast<uint64_t>(r);
      ts[r].logit_bias = bias[r];
      ts[r].allowed = masks[r];
    }
    auto dev = b.Allocate({rows, vocab}, DType::kF32);
    ASSERT_TRUE(dev.ok());
    ASSERT_NO_FATAL_FAILURE(UploadLogits(logits, *dev));
    std::vector<int32_t> tokens;
    FERRY_ASSERT_OK(b.SampleTokens(*dev, ts, tokens));
    engine::Sampler cpu;
    for (int r = 0; r < rows; ++r) {
      ASSERT_GE(tokens[r], 0);
      if (!masks[r].empty()) {
        EXPECT_TRUE((masks[r][static_cast<size_t>(tokens[r]) >> 6] >> (tokens[r] & 63)) & 1) << "row " << r;
      }
      if (greedy) {
        const std::span<const float> row(logits.data() + static_cast<size_t>(r) * vocab, static_cast<size_t>(vocab));
        engine::SamplingParams p;
        p.temperature = 0;
        p.logit_bias = bias[r];
        EXPECT_EQ(tokens[r], cpu.Sample(row, p, {}, 0, 0, {}, masks[r])) << "row " << r;
      }
    }
  }
  // A mask of the wrong size is refused, not read out of bounds.
  std::vector<backend::TokenSampling> bad(1);
  std::vector<uint64_t> short_mask(3, ~uint64_t{0});
  bad[0].allowed = short_mask;
  auto dev = b.Allocate({1, vocab}, DType::kF32);
  ASSERT_TRUE(dev.ok());
  std::vector<int32_t> tokens;
  EXPECT_FALSE(b.SampleTokens(*dev, bad, tokens).ok());
}

}  // namespace
}  // namespace ferry::cuda
