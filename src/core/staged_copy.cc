#include "core/staged_copy.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>

namespace ferry {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Below this a piece is not worth a thread hand-off.
constexpr size_t kMinPieceBytes = 1 << 20;

}  // namespace

std::vector<StagedChunk> PlanChunks(int64_t elements, size_t element_bytes, size_t chunk_bytes) {
  std::vector<StagedChunk> chunks;
  if (elements <= 0) return chunks;
  const int64_t per_chunk = std::max<int64_t>(1, static_cast<int64_t>(chunk_bytes / std::max<size_t>(1, element_bytes)));
  for (int64_t first = 0; first < elements; first += per_chunk) {
    chunks.push_back(StagedChunk{first, std::min(per_chunk, elements - first)});
  }
  return chunks;
}

StagedCopier::StagedCopier(StagingTarget& target, int fill_threads)
    : target_(target), fill_threads_(std::max(1, fill_threads)), slot_used_(target.slot_count(), false) {
  if (fill_threads_ > 1) pool_ = std::make_unique<ThreadPool>(fill_threads_ - 1, "ferry-stage");
}

StagedCopier::~StagedCopier() = default;

void StagedCopier::Fill(void* dst, const void* src, size_t bytes) {
  const int pieces = static_cast<int>(std::min<size_t>(fill_threads_, std::max<size_t>(1, bytes / kMinPieceBytes)));
  if (pieces <= 1 || pool_ == nullptr) {
    std::memcpy(dst, src, bytes);
    return;
  }
  // Pieces of whole pages, so each thread faults in its own pages of the mapping.
  const size_t piece = ((bytes + pieces - 1) / pieces + 4095) & ~static_cast<size_t>(4095);
  std::mutex mu;
  std::condition_variable cv;
  int left = 0;
  auto copy_piece = [&](size_t begin) {
    const size_t n = std::min(piece, bytes - begin);
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, n);
  };
  for (size_t begin = piece; begin < bytes; begin += piece) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++left;
    }
    pool_->Submit([&, begin] {
      copy_piece(begin);
      std::lock_guard<std::mutex> lock(mu);
      if (--left == 0) cv.notify_one();
    });
  }
  copy_piece(0);  // the calling thread takes the first piece
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return left == 0; });
}

Status StagedCopier::Copy(const StagedCopy& copy) {
  FERRY_RETURN_IF_ERROR(error_);
  if (copy.elements <= 0) return Status::Ok();
  if (copy.src == nullptr || copy.dst == nullptr) return InvalidArgument("staged copy without a source or destination");
  const size_t elem = DTypeSize(copy.src_dtype);
  if (elem > target_.slot_bytes()) return InvalidArgument("a staging slot is smaller than one element");
  // A source in a file mapping whose pages are not cached yet (a cold page cache): ask the
  // kernel to read the whole tensor ahead now, so the disk works while the first chunks are
  // filled. Harmless for memory already resident.
  {
    static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t begin = reinterpret_cast<uintptr_t>(copy.src) & ~(page - 1);
    const uintptr_t end = reinterpret_cast<uintptr_t>(copy.src) + static_cast<uintptr_t>(copy.elements) * elem;
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
  }
  for (const StagedChunk& chunk : PlanChunks(copy.elements, elem, target_.slot_bytes())) {
    const int slot = next_slot_;
    next_slot_ = (next_slot_ + 1) % target_.slot_count();
    if (slot_used_[slot]) {
      const auto t0 = Clock::now();
      error_ = target_.WaitSlot(slot);
      stats_.wait_seconds += Seconds(t0, Clock::now());
      ++stats_.slot_waits;
      FERRY_RETURN_IF_ERROR(error_);
    }
    const size_t bytes = static_cast<size_t>(chunk.count) * elem;
    const auto t0 = Clock::now();
    Fill(target_.slot_memory(slot), static_cast<const char*>(copy.src) + static_cast<size_t>(chunk.first) * elem,
         bytes);
    stats_.fill_seconds += Seconds(t0, Clock::now());
    error_ = target_.Enqueue(slot, copy, chunk);
    FERRY_RETURN_IF_ERROR(error_);
    slot_used_[slot] = true;
    stats_.bytes += bytes;
    ++stats_.chunks;
  }
  return Status::Ok();
}

Status StagedCopier::Finish() {
  FERRY_RETURN_IF_ERROR(error_);
  const auto t0 = Clock::now();
  error_ = target_.Drain();
  stats_.wait_seconds += Seconds(t0, Clock::now());
  std::fill(slot_used_.begin(), slot_used_.end(), false);
  return error_;
}

}  // namespace ferry
