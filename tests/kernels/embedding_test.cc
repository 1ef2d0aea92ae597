#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "kernel_test_util.h"

namespace ferry {
namespace {

using testing::ConvertTo;
using testing::ExpectClose;
using testing::Poisoned;
using testing::RandomTensor;
using testing::Values;

TEST(EmbeddingTest, GathersRowsOfEveryDtype) {
  std::mt19937 rng(51);
  auto be = backend::MakeCpuBackend();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const int64_t vocab = 100, dim = 67;
    const Tensor table = ConvertTo(RandomTensor({vocab, dim}, rng), dtype);
    const std::vector<int32_t> ids = {5, 0, 99, 5, 42, 17, 3};
    Tensor out = Poisoned({static_cast<int64_t>(ids.size()), dim});
    ASSERT_TRUE(be->Embedding(table, backend::HostIndices(ids), out).ok());
    const std::vector<double> t = Values(table);
    std::vector<double> ref;
    for (int32_t id : ids) ref.insert(ref.end(), t.begin() + id * dim, t.begin() + (id + 1) * dim);
    ExpectClose(out, ref, 0.0, "embedding");
  }
}

// Ids are validated once where requests enter (the engine core, the encoder's batch check),
// so release builds do not scan them per call; debug builds still refuse them here.
TEST(EmbeddingTest, RejectsBadShapesAndInDebugBuildsOutOfRangeIds) {
  std::mt19937 rng(52);
  auto be = backend::MakeCpuBackend();
  const Tensor table = RandomTensor({10, 4}, rng);
#ifndef NDEBUG
  const std::vector<int32_t> ids = {1, 10};
  Tensor out = Poisoned({2, 4});
  EXPECT_FALSE(be->Embedding(table, backend::HostIndices(ids), out).ok());
  EXPECT_TRUE(std::isnan(out.data<float>()[0])) << "nothing written on error";
  const std::vector<int32_t> neg = {-1};
  Tensor out1 = Poisoned({1, 4});
  EXPECT_FALSE(be->Embedding(table, backend::HostIndices(neg), out1).ok());
#endif
  Tensor wrong = Poisoned({2, 5});
  const std::vector<int32_t> ok_ids = {1, 2};
  EXPECT_FALSE(be->Embedding(table, backend::HostIndices(ok_ids), wrong).ok());
}

}  // namespace
}  // namespace ferry
