// The GPU load path: weights staged through pinned slots land bit for bit where they
// belong — fused parts in their rows, chunks across slot boundaries, dtypes converted on
// the device — and nothing reads them before FinishLoading (or the first op) waits.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda_backend.h"
#include "cuda_test_util.h"

namespace ferry::backend {
namespace {

Tensor RandomF32(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::Empty(shape, DType::kF32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

Tensor Convert(const Tensor& f32, DType dtype) {
  Tensor out = Tensor::Empty(f32.shape(), dtype);
  ConvertFromF32(dtype, f32.data<float>(), out.raw(), static_cast<size_t>(f32.numel()));
  return out;
}

std::unique_ptr<Backend> MakeBf16Backend() {
  CudaBackendOptions o;
  o.activations = DType::kBF16;
  o.kv_cache = DType::kBF16;
  auto be = MakeCudaBackend(o);
  EXPECT_TRUE(be.ok()) << be.status().ToString();
  return std::move(be).value();
}

// The device weight of a prepared linear, as the host bytes an engine file would store.
Tensor DeviceWeight(Backend& be, const LinearWeight& w) {
  auto s = be.SerializeLinear(w);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s->blobs.at(0);
}

TEST(WeightLoaderTest, FusedPartsLandInTheirRowsAcrossSlots) {
  FERRY_SKIP_WITHOUT_GPU();
  auto be = MakeBf16Backend();
  // Three bf16 parts (32, 70 and 8 MiB): the second is cut into chunks across slots.
  const Tensor q = Convert(RandomF32({4096, 4096}, 1), DType::kBF16);   // 32 MiB
  const Tensor k = Convert(RandomF32({9000, 4096}, 2), DType::kBF16);   // 70 MiB: two chunks
  const Tensor v = Convert(RandomF32({1024, 4096}, 3), DType::kBF16);
  LinearWeight w;
  FERRY_ASSERT_OK(be->PrepareLinearParts({q, k, v}, w));
  FERRY_ASSERT_OK(be->FinishLoading());
  const Tensor dev = DeviceWeight(*be, w);
  ASSERT_EQ(dev.shape(), (Shape{4096 + 9000 + 1024, 4096}));
  ASSERT_EQ(dev.dtype(), DType::kBF16);
  const char* p = dev.data<char>();
  EXPECT_EQ(std::memcmp(p, q.raw(), q.nbytes()), 0);
  EXPECT_EQ(std::memcmp(p + q.nbytes(), k.raw(), k.nbytes()), 0);
  EXPECT_EQ(std::memcmp(p + q.nbytes() + k.nbytes(), v.raw(), v.nbytes()), 0);
}

TEST(WeightLoaderTest, F32CheckpointIsConvertedOnTheDevice) {
  FERRY_SKIP_WITHOUT_GPU();
  auto be = MakeBf16Backend();
  const Tensor f = RandomF32({20000, 1024}, 4);  // 78 MiB of f32: two chunks converted
  LinearWeight w;
  w.weight = f;
  w.bias = RandomF32({20000}, 5);
  FERRY_ASSERT_OK(be->PrepareLinear(w));
  // No FinishLoading: serializing (an op that reads the weight) waits by itself.
  const Tensor dev = DeviceWeight(*be, w);
  const Tensor expected = Convert(f, DType::kBF16);
  ASSERT_EQ(dev.nbytes(), expected.nbytes());
  EXPECT_EQ(std::memcmp(dev.raw(), expected.raw(), expected.nbytes()), 0);
}

TEST(WeightLoaderTest, PreloadedTableServesEmbedding) {
  FERRY_SKIP_WITHOUT_GPU();
  auto be = MakeBf16Backend();
  const Tensor table = Convert(RandomF32({32000, 64}, 6), DType::kBF16);  // 4 MiB: preloaded
  FERRY_ASSERT_OK(be->PreloadWeight(table));
  FERRY_ASSERT_OK(be->FinishLoading());
  std::vector<int32_t> ids = {0, 31999, 17, 12345};
  auto out = be->Allocate({4, 64}, DType::kBF16);
  ASSERT_TRUE(out.ok());
  const Tensor host_ids = Tensor::FromBorrowed(ids.data(), {4}, DType::kI32, nullptr, Device::Cpu());
  FERRY_ASSERT_OK(be->Embedding(table, host_ids, *out));
  auto host = be->ToHost(*out);
  ASSERT_TRUE(host.ok());
  const Tensor f = table.ToF32();
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 64; ++c) {
      EXPECT_EQ(host->data<float>()[r * 64 + c], f.data<float>()[ids[r] * 64 + c]) << r << "," << c;
    }
  }
}

}  // namespace
}  // namespace ferry::backend
