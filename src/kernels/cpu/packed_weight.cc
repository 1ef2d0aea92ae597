#include "kernels/cpu/packed_weight.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>

#include "core/allocator.h"
#include "core/thread_pool.h"

namespace ferry::kernels::cpu {
namespace {

template <typename T>
void PackPanels(const T* w, int64_t n, int64_t k, T* out, int64_t p_begin, int64_t p_end) {
  // Transpose 16-row strips through a small tile so both the reads (rows of W) and the
  // writes (rows of the panel) stay within a few cache lines.
  constexpr int64_t kTileK = 64;
  for (int64_t p = p_begin; p < p_end; ++p) {
    T* dst = out + p * k * kPanelCols;
    const int64_t rows = std::min<int64_t>(kPanelCols, n - p * kPanelCols);
    if (rows < kPanelCols) std::memset(static_cast<void*>(dst), 0, sizeof(T) * k * kPanelCols);
    for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
      const int64_t k1 = std::min(k, k0 + kTileK);
      for (int64_t c = 0; c < rows; ++c) {
        const T* src = w + (p * kPanelCols + c) * k;
        for (int64_t kk = k0; kk < k1; ++kk) dst[kk * kPanelCols + c] = src[kk];
      }
    }
  }
}

}  // namespace

void AdviseHugePages(void* p, size_t bytes) {
  // Weights and KV caches are streamed in full every step; 2 MiB pages cut the TLB misses
  // (each a two-level walk under virtualization) that otherwise cost ~10% of bandwidth.
  // Advisory only: where transparent huge pages are off this does nothing.
  constexpr uintptr_t kPage = 4096;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kPage - 1) & ~(kPage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kPage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

Result<std::shared_ptr<PackedWeight>> PackWeight(const Tensor& weight) {
  if (weight.rank() != 2) return InvalidArgument("linear weight must be 2-D, got " + weight.DebugString());
  if (!weight.is_contiguous()) return InvalidArgument("linear weight must be contiguous");
  if (!weight.device().is_cpu()) return InvalidArgument("linear weight is not in host memory");
  const DType dtype = weight.dtype();
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return InvalidArgument("linear weight dtype must be f32, bf16 or f16, got " + std::string(DTypeName(dtype)));
  }
  auto packed = std::make_shared<PackedWeight>();
  packed->dtype = dtype;
  packed->n = weight.dim(0);
  packed->k = weight.dim(1);
  packed->num_panels = (packed->n + kPanelCols - 1) / kPanelCols;
  packed->source = weight.raw();
  const size_t bytes = static_cast<size_t>(packed->num_panels) * packed->k * kPanelCols * packed->elem_size();
  void* mem = nullptr;
  try {
    mem = AlignedAlloc(std::max<size_t>(bytes, 64));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory packing a " + weight.DebugString() + " weight");
  }
  packed->storage = std::shared_ptr<void>(mem, AlignedFree);
  AdviseHugePages(mem, bytes);
  const int64_t n = packed->n, k = packed->k;
  ParallelFor(packed->num_panels, 1, [&](int64_t b, int64_t e) {
    if (dtype == DType::kF32) {
      PackPanels(weight.data<float>(), n, k, static_cast<float*>(mem), b, e);
    } else {
      PackPanels(weight.data<uint16_t>(), n, k, static_cast<uint16_t*>(mem), b, e);
    }
  });
  return packed;
}

const PackedWeight* AsPackedWeight(const std::shared_ptr<void>& packed, const Tensor& weight) {
  if (!packed) return nullptr;
  const auto* p = static_cast<const PackedWeight*>(packed.get());
  if (p->magic != PackedWeight::kMagic || p->source != weight.raw() || p->dtype != weight.dtype() ||
      weight.rank() != 2 || p->n != weight.dim(0) || p->k != weight.dim(1)) {
    return nullptr;
  }
  return p;
}

}  // namespace ferry::kernels::cpu
