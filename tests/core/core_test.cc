#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <numeric>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "test_util.h"

namespace ferry {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  FERRY_ASSIGN_OR_RETURN(int h, Half(x));
  FERRY_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, ResultPropagatesErrorsAndValues) {
  EXPECT_EQ(*Quarter(8), 2);
  const Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().ToString(), "INVALID_ARGUMENT: odd");
  EXPECT_EQ(NotFound("x").WithContext("loading").message(), "loading: x");
  EXPECT_TRUE(Status::Ok().WithContext("ctx").ok());
}

TEST(DTypeTest, Bf16AndF16RoundTripAndRound) {
  for (float v : {0.0f, 1.0f, -2.5f, 3.140625f, 65504.0f, 1e-3f}) {
    EXPECT_EQ(Bf16ToF32(F32ToBf16(Bf16ToF32(F32ToBf16(v)))), Bf16ToF32(F32ToBf16(v)));
    EXPECT_NEAR(Bf16ToF32(F32ToBf16(v)), v, std::fabs(v) / 128);
    EXPECT_NEAR(F16ToF32(F32ToF16(v)), v, std::fabs(v) / 1024);
  }
  // Round to nearest even: 1 + 2^-8 is halfway between two bf16 values; even is 1.0.
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(NAN))));
}

TEST(DTypeTest, Fp8E4M3) {
  EXPECT_EQ(F8E4M3ToF32(F32ToF8E4M3(1.0f)), 1.0f);
  EXPECT_EQ(F8E4M3ToF32(F32ToF8E4M3(-0.5f)), -0.5f);
  EXPECT_EQ(F8E4M3ToF32(F32ToF8E4M3(1000.0f)), 448.0f);  // saturates
  EXPECT_EQ(F8E4M3ToF32(F32ToF8E4M3(0.1f)), 0.1015625f);
  EXPECT_EQ(F8E4M3ToF32(1), std::ldexp(1.0f, -9));  // smallest subnormal
}

// The conversion rounds by bit arithmetic; the reference here searches every finite code
// for the nearest value (ties to the even code), as exact round-to-nearest-even does.
TEST(DTypeTest, Fp8E4M3RoundsToNearestEvenLikeAnExhaustiveSearch) {
  auto nearest = [](float f) -> uint8_t {
    if (std::isnan(f)) return 0x7f;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const float a = std::fabs(f);
    if (a >= 448.0f) return sign | 0x7e;
    uint8_t best = 0;
    float best_err = a;
    for (uint8_t c = 1; c < 0x7f; ++c) {
      const float err = std::fabs(F8E4M3ToF32(c) - a);
      if (err < best_err || (err == best_err && (c & 1) == 0)) {
        best = c;
        best_err = err;
      }
    }
    return sign | best;
  };
  std::vector<float> values = {0.0f, -0.0f, 1e-12f, 0x1p-10f, 0x1p-9f, 0x1p-6f, 448.0f, 460.0f, 1e9f, -1e9f};
  // Every code, and the midpoints between neighbours (the ties), and just either side of them.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = F8E4M3ToF32(static_cast<uint8_t>(c)), hi = F8E4M3ToF32(static_cast<uint8_t>(c + 1));
    const float mid = 0.5f * (lo + hi);
    for (float v : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      values.push_back(v);
      values.push_back(-v);
    }
  }
  uint64_t h = 12345;
  for (int i = 0; i < 200000; ++i) {  // log-uniform magnitudes over the whole range
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    const float u = static_cast<float>(h >> 40) / static_cast<float>(1 << 24);
    values.push_back(((h >> 20) & 1 ? -1.0f : 1.0f) * std::exp2(-12.0f + 21.0f * u));
  }
  for (float v : values) ASSERT_EQ(F32ToF8E4M3(v), nearest(v)) << v;
}

TEST(DTypeTest, BulkConversionsMatchScalar) {
  std::vector<float> src(37);
  for (size_t i = 0; i < src.size(); ++i) src[i] = std::sin(static_cast<float>(i)) * 10;
  for (DType d : {DType::kBF16, DType::kF16, DType::kF32}) {
    std::vector<uint8_t> buf(src.size() * DTypeSize(d));
    ConvertFromF32(d, src.data(), buf.data(), src.size());
    std::vector<float> back(src.size());
    ConvertToF32(d, buf.data(), back.data(), src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      const float expect = d == DType::kBF16 ? Bf16ToF32(F32ToBf16(src[i]))
                           : d == DType::kF16 ? F16ToF32(F32ToF16(src[i])) : src[i];
      EXPECT_EQ(back[i], expect) << DTypeName(d) << " " << i;
    }
  }
  EXPECT_FALSE(ParseDType("q4").ok());
  EXPECT_EQ(*ParseDType("BF16"), DType::kBF16);
}

// ToF32 of a large tensor converts in ranges on several threads; every element must land
// where the one-thread conversion puts it, including the ragged last range.
TEST(TensorTest, LargeToF32EqualsTheElementwiseConversion) {
  SetComputeThreads(2);
  for (const DType dtype : {DType::kBF16, DType::kF16, DType::kF8E4M3}) {
    const int64_t rows = 3, cols = (int64_t{1} << 16) + 37;  // not a multiple of the range size
    Tensor t = Tensor::Empty({rows, cols}, dtype);
    std::vector<float> values(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.001f * static_cast<float>(i)) * 100.0f;
    ConvertFromF32(dtype, values.data(), t.raw(), values.size());
    const Tensor f = t.ToF32();
    ASSERT_EQ(f.dtype(), DType::kF32);
    ASSERT_EQ(f.shape(), t.shape());
    std::vector<float> expected(values.size());
    ConvertToF32(dtype, t.raw(), expected.data(), expected.size());
    EXPECT_EQ(std::memcmp(f.data<float>(), expected.data(), expected.size() * sizeof(float)), 0) << DTypeName(dtype);
  }
  SetComputeThreads(0);
}

TEST(TensorTest, ShapesViewsAndClone) {
  Tensor t = Tensor::Zeros({4, 3}, DType::kF32);
  EXPECT_EQ(t.numel(), 12);
  EXPECT_EQ(t.strides(), (Shape{3, 1}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % kAlignment, 0u);
  std::iota(t.data<float>(), t.data<float>() + 12, 0.0f);
  Tensor s = t.Slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_EQ(s.data<float>()[0], 3.0f);
  Tensor c = s.Clone();
  c.data<float>()[0] = 100;
  EXPECT_EQ(t.data<float>()[3], 3.0f);
  EXPECT_TRUE(t.Reshape({2, 6}).ok());
  EXPECT_FALSE(t.Reshape({5, 2}).ok());
  EXPECT_FALSE(Tensor().defined());
}

TEST(ArenaTest, ReusesMemoryAfterReset) {
  Arena arena;
  void* a = arena.Allocate(100);
  arena.Allocate(3 << 20);  // forces a second block
  arena.Reset();
  const size_t cap = arena.capacity();
  void* b = arena.Allocate(100);
  arena.Allocate(3 << 20);
  EXPECT_EQ(arena.capacity(), cap);  // no growth on the second round
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % kAlignment, 0u);
  (void)a;
}

// Resident pages of this process, from /proc/self/statm.
int64_t ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * 4096;
}

TEST(AllocatorTest, LargeStorageIsAlignedWritableAndGoesBackToTheKernelWhenFreed) {
  auto small = AllocateStorage(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.get()) % kAlignment, 0u);
  const int64_t before = ResidentBytes();
  {
    constexpr size_t kBytes = 64u << 20;
    auto large = AllocateStorage(kBytes + 3);
    ASSERT_NE(large, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(large.get()) % kAlignment, 0u);
    std::memset(large.get(), 1, kBytes + 3);  // every byte is ours
    EXPECT_GE(ResidentBytes() - before, static_cast<int64_t>(kBytes) / 2);
  }
  // Freed: the pages are unmapped, not kept by the heap. AddressSanitizer keeps the
  // shadow of the freed range resident (one byte per eight), on top of that.
  EXPECT_LT(ResidentBytes() - before, (int64_t{8} << 20) + (testing::kAddressSanitizer ? int64_t{64} << 17 : 0));
}

// The pool hands a freed block to the next request it fits, keeps no more than the live
// blocks' high-water mark in all, and its blocks outlive it safely.
TEST(AllocatorTest, BlockPoolReusesBlocksWithinItsHighWaterMark) {
  const size_t mib = size_t{1} << 20;
  std::shared_ptr<BlockPool> pool = BlockPool::Create();
  void* first = nullptr;
  {
    std::shared_ptr<void> a = pool->Get(4 * mib);
    std::shared_ptr<void> b = pool->Get(2 * mib);
    first = a.get();
    std::memset(a.get(), 1, 4 * mib);
    EXPECT_EQ(pool->stats().live_bytes, 6 * mib);
    EXPECT_EQ(pool->stats().high_water, 6 * mib);
  }
  EXPECT_EQ(pool->stats().live_bytes, 0u);
  EXPECT_EQ(pool->stats().idle_bytes, 6 * mib);
  {
    // 3 MiB fits the 4 MiB block (within twice the request), not the 2 MiB one.
    std::shared_ptr<void> c = pool->Get(3 * mib);
    EXPECT_EQ(c.get(), first);
    EXPECT_EQ(pool->stats().reused, 1u);
    EXPECT_EQ(pool->stats().live_bytes, 4 * mib);
    // 9 MiB fits nothing: a new block, and live + idle (9 + 4 + 2) would pass the new
    // high-water mark (13): the idle 2 MiB block goes back to the kernel.
    std::shared_ptr<void> d = pool->Get(9 * mib);
    std::memset(d.get(), 2, 9 * mib);
    EXPECT_EQ(pool->stats().high_water, 13 * mib);
    EXPECT_EQ(pool->stats().idle_bytes, 0u);
  }
  EXPECT_EQ(pool->stats().idle_bytes, 13 * mib);
  // A block alive when its pool goes is unmapped by its last owner.
  std::shared_ptr<void> survivor = pool->Get(5 * mib);
  pool.reset();
  std::memset(survivor.get(), 3, 5 * mib);
  survivor.reset();
}

TEST(ThreadingTest, ParallelForCoversRangeOnce) {
  SetComputeThreads(2);
  std::vector<std::atomic<int>> hits(1000);
  ParallelFor(1000, 7, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadingTest, ThreadPoolRunsAllTasksBeforeDestruction) {
  std::atomic<int> done{0};
  {
    ThreadPool pool(3, "test");
    for (int i = 0; i < 100; ++i) pool.Submit([&] { done++; });
  }
  EXPECT_EQ(done.load(), 100);
}

// Many queues share a pool: each queue's tasks run one at a time and in order, and every
// task runs, also those still queued when the queue object is gone.
TEST(ThreadingTest, SerialQueuesRunTheirTasksInOrderOneAtATime) {
  constexpr int kQueues = 16, kTasks = 300;
  std::vector<std::vector<int>> seen(kQueues);
  std::vector<std::atomic<int>> inside(kQueues);
  std::atomic<bool> overlapped{false};
  {
    ThreadPool pool(4, "serial");
    std::vector<std::unique_ptr<SerialQueue>> queues;
    for (int q = 0; q < kQueues; ++q) queues.push_back(std::make_unique<SerialQueue>(pool));
    for (int t = 0; t < kTasks; ++t) {
      for (int q = 0; q < kQueues; ++q) {
        queues[q]->Post([&, q, t] {
          if (inside[q].fetch_add(1) != 0) overlapped = true;
          seen[q].push_back(t);
          inside[q].fetch_sub(1);
        });
      }
    }
    queues.clear();  // tasks keep their queue's state alive
  }
  EXPECT_FALSE(overlapped.load());
  for (int q = 0; q < kQueues; ++q) {
    ASSERT_EQ(seen[q].size(), static_cast<size_t>(kTasks)) << q;
    for (int t = 0; t < kTasks; ++t) ASSERT_EQ(seen[q][t], t) << q;
  }
}

TEST(MappedFileTest, MapsAndReportsErrors) {
  const std::string path = "/tmp/ferry_core_test_" + std::to_string(getpid());
  ASSERT_TRUE(WriteStringToFile(path, "hello").ok());
  auto f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->view(), "hello");
  EXPECT_EQ(*ReadFileToString(path), "hello");
  std::remove(path.c_str());
  EXPECT_EQ(MappedFile::Open("/nonexistent/x").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(MappedFile::Open("/tmp").ok());
}

// The huge-page copy holds the same bytes as the mapping, for a file of many 16-MiB read
// pieces with a ragged end, and for an empty file; it starts on a 2-MiB boundary.
TEST(MappedFileTest, HugePageCopyEqualsTheMapping) {
  const std::string path = "/tmp/ferry_core_test_copy_" + std::to_string(getpid());
  std::string bytes((size_t{40} << 20) + 12345, '\0');
  uint64_t x = 88172645463325252ull;
  for (char& c : bytes) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x);
  }
  ASSERT_TRUE(WriteStringToFile(path, bytes).ok());
  auto mapped = MappedFile::Open(path, FileLoad::kMap);
  auto copied = MappedFile::Open(path, FileLoad::kHugePageCopy);
  ASSERT_TRUE(mapped.ok() && copied.ok());
  EXPECT_EQ((*copied)->size(), bytes.size());
  EXPECT_TRUE((*copied)->view() == (*mapped)->view());
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*copied)->data()) % (uintptr_t{2} << 20), 0u);
  ASSERT_TRUE(WriteStringToFile(path, "").ok());
  auto empty = MappedFile::Open(path, FileLoad::kHugePageCopy);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->size(), 0u);
  std::remove(path.c_str());
  EXPECT_EQ(MappedFile::Open("/nonexistent/x", FileLoad::kHugePageCopy).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ferry
