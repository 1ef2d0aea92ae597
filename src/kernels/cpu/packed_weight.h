// The layout the CPU GEMM kernels read linear weights in.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace ferry::kernels::cpu {

// Output features per panel: two AVX2 registers of f32.
inline constexpr int kPanelCols = 16;

// A weight W[N, K] rearranged into column panels of kPanelCols output features. Panel p
// holds K rows of kPanelCols contiguous values (W[p*16 + c, k] at k*16 + c), in the
// weight's own dtype (f32, bf16 or f16), with the last panel zero-padded. Panels sit back
// to back, so the panels a thread owns form one sequential stream (what decode GEMV wants)
// and any K range of a panel is a contiguous micro-panel (what the blocked GEMM wants).
// Immutable after packing; thread-safe to share.
struct PackedWeight {
  static constexpr uint64_t kMagic = 0x6665727279504b57ull;  // tags the type behind shared_ptr<void>
  uint64_t magic = kMagic;
  DType dtype = DType::kF32;
  int64_t n = 0;
  int64_t k = 0;
  int64_t num_panels = 0;
  const void* source = nullptr;  // the weight data it was packed from
  std::shared_ptr<void> storage;

  size_t elem_size() const { return dtype == DType::kF32 ? 4 : 2; }
  const void* panel(int64_t p) const {
    return static_cast<const char*>(storage.get()) + static_cast<size_t>(p) * k * kPanelCols * elem_size();
  }
};

// Asks the kernel to back [p, p + bytes) with transparent huge pages (best effort).
void AdviseHugePages(void* p, size_t bytes);

// Packs W[N, K] (f32, bf16 or f16, contiguous). Multi-threaded.
Result<std::shared_ptr<PackedWeight>> PackWeight(const Tensor& weight);

// The packed form attached to `packed` if it is a PackedWeight packed from `weight`; else null.
const PackedWeight* AsPackedWeight(const std::shared_ptr<void>& packed, const Tensor& weight);

}  // namespace ferry::kernels::cpu
