#include "core/staged_copy.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

namespace ferry {
namespace {

// A host stand-in for a device: the slots are plain memory, and enqueued chunks are moved
// (and converted) by the target itself, never before it must. In lazy mode nothing moves
// until the copier waits for a slot or drains, so a copier that refilled a slot before
// waiting for it would overwrite a chunk not yet moved, and the destination would show it.
// In threaded mode a worker thread moves chunks as they come, like a DMA engine.
class HostTarget final : public StagingTarget {
 public:
  HostTarget(int slots, size_t slot_bytes, bool threaded)
      : slot_bytes_(slot_bytes), memory_(slots, std::vector<char>(slot_bytes)), pending_per_slot_(slots, 0) {
    if (threaded) worker_ = std::thread([this] { Run(); });
  }
  ~HostTarget() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  int slot_count() const override { return static_cast<int>(memory_.size()); }
  size_t slot_bytes() const override { return slot_bytes_; }
  void* slot_memory(int slot) override { return memory_[slot].data(); }
  Status Enqueue(int slot, const StagedCopy& copy, const StagedChunk& chunk) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Job{slot, copy, chunk});
    ++pending_per_slot_[slot];
    ++enqueued_;
    cv_.notify_all();
    return Status::Ok();
  }
  Status WaitSlot(int slot) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++waits_;
    if (!worker_.joinable()) {
      while (pending_per_slot_[slot] > 0) RunOneLocked();
      return Status::Ok();
    }
    cv_.wait(lock, [&] { return pending_per_slot_[slot] == 0; });
    return Status::Ok();
  }
  Status Drain() override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!worker_.joinable()) {
      while (!queue_.empty()) RunOneLocked();
      return Status::Ok();
    }
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    return Status::Ok();
  }
  int waits() const { return waits_; }
  int enqueued() const { return enqueued_; }

 private:
  struct Job {
    int slot;
    StagedCopy copy;
    StagedChunk chunk;
  };
  // The device's side of a chunk: slot -> destination, converted through f32 when the
  // dtypes differ (what the GPU's conversion kernel does).
  void Move(const Job& j) {
    const char* src = memory_[j.slot].data();
    char* dst = static_cast<char*>(j.copy.dst) + j.chunk.first * static_cast<int64_t>(DTypeSize(j.copy.dst_dtype));
    const size_t n = static_cast<size_t>(j.chunk.count);
    if (j.copy.src_dtype == j.copy.dst_dtype) {
      std::memcpy(dst, src, n * DTypeSize(j.copy.src_dtype));
      return;
    }
    std::vector<float> f(n);
    ConvertToF32(j.copy.src_dtype, src, f.data(), n);
    ConvertFromF32(j.copy.dst_dtype, f.data(), dst, n);
  }
  void RunOneLocked() {
    Job j = queue_.front();
    queue_.pop_front();
    Move(j);
    --pending_per_slot_[j.slot];
  }
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Job j = queue_.front();
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      Move(j);
      lock.lock();
      busy_ = false;
      --pending_per_slot_[j.slot];
      cv_.notify_all();
    }
  }

  const size_t slot_bytes_;
  std::vector<std::vector<char>> memory_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::vector<int> pending_per_slot_;
  bool busy_ = false;
  bool stopping_ = false;
  int waits_ = 0;
  int enqueued_ = 0;
  std::thread worker_;
};

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-4.0f, 4.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(PlanChunksTest, CoversEveryElementOnceOnElementBoundaries) {
  for (const auto& [elements, elem, chunk] : std::vector<std::tuple<int64_t, size_t, size_t>>{
           {0, 2, 64}, {1, 2, 64}, {32, 2, 64}, {33, 2, 64}, {1000, 4, 64}, {1000, 4, 65}, {7, 4, 3}}) {
    const std::vector<StagedChunk> chunks = PlanChunks(elements, elem, chunk);
    int64_t next = 0;
    for (const StagedChunk& c : chunks) {
      EXPECT_EQ(c.first, next);
      EXPECT_GE(c.count, 1);
      // Whole elements that fit in a chunk (one at least, even when an element is larger).
      EXPECT_LE(static_cast<size_t>(c.count) * elem, std::max(chunk, elem));
      next += c.count;
    }
    EXPECT_EQ(next, elements) << elements << " elements of " << elem << " bytes in chunks of " << chunk;
  }
  EXPECT_EQ(PlanChunks(1000, 4, 64).size(), 63u);  // 16 per chunk
}

// Many tensors of mixed sizes through a small ring: every destination equals its source,
// with the ring reused many times over (so the copier must have waited for each slot).
void CheckManyTensors(bool threaded, int fill_threads) {
  HostTarget target(3, 4096, threaded);
  StagedCopier copier(target, fill_threads);
  std::vector<std::vector<float>> sources, dests;
  for (int t = 0; t < 40; ++t) {
    const size_t n = static_cast<size_t>(1 + (t * 977) % 5000);
    sources.push_back(RandomFloats(n, 100 + t));
    dests.emplace_back(n, 0.0f);
  }
  for (size_t t = 0; t < sources.size(); ++t) {
    // The source dies (is overwritten) as soon as Copy returns, as a converted host buffer would.
    std::vector<float> scratch = sources[t];
    StagedCopy c{scratch.data(), DType::kF32, dests[t].data(), DType::kF32, static_cast<int64_t>(scratch.size())};
    ASSERT_TRUE(copier.Copy(c).ok());
    std::fill(scratch.begin(), scratch.end(), -1.0f);
  }
  ASSERT_TRUE(copier.Finish().ok());
  for (size_t t = 0; t < sources.size(); ++t) ASSERT_EQ(dests[t], sources[t]) << "tensor " << t;
  EXPECT_GT(copier.stats().chunks, 3u * 10);
  EXPECT_GT(copier.stats().slot_waits, 0u);
  EXPECT_EQ(copier.stats().bytes, [&] {
    uint64_t b = 0;
    for (const auto& s : sources) b += s.size() * sizeof(float);
    return b;
  }());
}

TEST(StagedCopierTest, LazyDeviceSeesEveryChunkIntact) { CheckManyTensors(false, 1); }
TEST(StagedCopierTest, AsynchronousDeviceSeesEveryChunkIntact) { CheckManyTensors(true, 1); }

TEST(StagedCopierTest, ParallelFillOfLargeChunks) {
  // Slots of 8 MiB, so each chunk is split among the fill threads (pieces of >= 1 MiB).
  HostTarget target(2, 8u << 20, true);
  StagedCopier copier(target, 4);
  const std::vector<float> src = RandomFloats((20u << 20) / 4 + 123, 7);
  std::vector<float> dst(src.size(), 0.0f);
  ASSERT_TRUE(copier.Copy({src.data(), DType::kF32, dst.data(), DType::kF32, static_cast<int64_t>(src.size())}).ok());
  ASSERT_TRUE(copier.Finish().ok());
  EXPECT_EQ(dst, src);
  EXPECT_EQ(copier.stats().chunks, 3u);
}

TEST(StagedCopierTest, ConvertsOnTheDeviceSideChunkByChunk) {
  // f32 -> bf16: the source is read in chunks of whole f32 elements and each lands at its
  // element offset in the bf16 destination.
  HostTarget target(2, 1000, false);  // 250 f32 per slot
  StagedCopier copier(target, 1);
  const std::vector<float> src = RandomFloats(1234, 3);
  std::vector<uint16_t> dst(src.size(), 0);
  ASSERT_TRUE(
      copier.Copy({src.data(), DType::kF32, dst.data(), DType::kBF16, static_cast<int64_t>(src.size())}).ok());
  ASSERT_TRUE(copier.Finish().ok());
  std::vector<uint16_t> expected(src.size());
  ConvertFromF32(DType::kBF16, src.data(), expected.data(), src.size());
  EXPECT_EQ(dst, expected);
  EXPECT_EQ(copier.stats().chunks, 5u);
}

TEST(StagedCopierTest, RejectsCopiesWithoutEnds) {
  HostTarget target(2, 64, false);
  StagedCopier copier(target, 1);
  float x = 1;
  EXPECT_TRUE(copier.Copy({nullptr, DType::kF32, &x, DType::kF32, 1}).code() == StatusCode::kInvalidArgument);
  EXPECT_TRUE(copier.Copy({&x, DType::kF32, &x, DType::kF32, 0}).ok());  // nothing to do
}

}  // namespace
}  // namespace ferry
