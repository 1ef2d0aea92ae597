#include "kernels/cpu/packed_weight.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace ferry::kernels::cpu {
namespace {


// Same dtype in and out: a plain transpose of 16-row strips, through a small tile so both
// the reads (rows of W) and the writes (rows of the panel) stay within a few cache lines.
template <typename T>
void PackPanels(const T* w, int64_t n, int64_t k, T* out, int64_t p_begin, int64_t p_end) {
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

// Rows [row0, row0 + rows) of W as f32 into buf (row-major, k per row).
void GatherRows(const Tensor& weight, int64_t row0, int64_t rows, float* buf) {
  const int64_t k = weight.dim(1);
  const size_t elem = DTypeSize(weight.dtype());
  ConvertToF32(weight.dtype(), static_cast<const char*>(weight.raw()) + row0 * k * elem, buf,
               static_cast<size_t>(rows * k));
}

// buf (rows x k f32) -> one f32/bf16/f16 panel, zero past `rows`.
void EmitFloatPanel(const float* buf, int64_t rows, int64_t k, DType dtype, void* panel) {
  std::memset(panel, 0, static_cast<size_t>(k) * kPanelCols * DTypeSize(dtype));
  for (int64_t c = 0; c < rows; ++c) {
    const float* src = buf + c * k;
    switch (dtype) {
      case DType::kF32:
        for (int64_t kk = 0; kk < k; ++kk) static_cast<float*>(panel)[kk * kPanelCols + c] = src[kk];
        break;
      case DType::kBF16:
        for (int64_t kk = 0; kk < k; ++kk) static_cast<uint16_t*>(panel)[kk * kPanelCols + c] = F32ToBf16(src[kk]);
        break;
      default:
        for (int64_t kk = 0; kk < k; ++kk) static_cast<uint16_t*>(panel)[kk * kPanelCols + c] = F32ToF16(src[kk]);
        break;
    }
  }
}

// Quantizes buf's rows (rows x k f32, scaled in place by `smooth` when given) to one int8
// panel plus its kPanelCols scales. Returns false if a row holds a non-finite value.
bool EmitInt8Panel(float* buf, int64_t rows, int64_t k, int64_t k_stored, PanelLayout layout, const float* smooth,
                   int8_t* panel, float* scales) {
  std::memset(panel, 0, static_cast<size_t>(k_stored) * kPanelCols);
  for (int64_t c = 0; c < rows; ++c) {
    float* row = buf + c * k;
    float amax = 0.0f;
    bool finite = true;
    for (int64_t kk = 0; kk < k; ++kk) {
      if (smooth != nullptr) row[kk] *= smooth[kk];
      amax = std::max(amax, std::fabs(row[kk]));
      finite &= std::isfinite(row[kk]);
    }
    if (!finite) return false;
    const float scale = amax / 127.0f;
    scales[c] = scale;
    if (scale == 0.0f) continue;  // an all-zero row (or one that underflows): q = 0
    for (int64_t kk = 0; kk < k; ++kk) {
      // nearbyint rounds half to even in the default rounding mode, as the activation
      // quantizer (cvtps2dq) does.
      const float q = std::clamp(std::nearbyint(row[kk] / scale), -127.0f, 127.0f);
      const int64_t at = layout == PanelLayout::kRows ? kk * kPanelCols + c
                                                       : (kk / 4) * (4 * kPanelCols) + c * 4 + (kk & 3);
      panel[at] = static_cast<int8_t>(q);
    }
  }
  return true;
}

Result<Tensor> AllocateTensor(Shape shape, DType dtype, const std::string& what) {
  try {
    return Tensor::Empty(std::move(shape), dtype);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory packing " + what);
  }
}

DType TargetDType(WeightFormat format, DType source) {
  switch (format) {
    case WeightFormat::kNative: return source;
    case WeightFormat::kF32: return DType::kF32;
    case WeightFormat::kBF16: return DType::kBF16;
    case WeightFormat::kF16: return DType::kF16;
    case WeightFormat::kInt8:
    case WeightFormat::kInt8W8A8: return DType::kI8;
    case WeightFormat::kFp8:
    case WeightFormat::kInt4: break;  // refused by PackWeight (the CPU backend expands int4 first)
  }
  return source;
}

}  // namespace

Tensor SmoothReciprocals(const Tensor& smooth) {
  Tensor inv = Tensor::Empty({smooth.numel()}, DType::kF32);
  const float* s = smooth.data<float>();
  float* r = inv.data<float>();
  for (int64_t i = 0; i < smooth.numel(); ++i) r[i] = 1.0f / s[i];
  return inv;
}

std::string CheckSmoothFactors(const Tensor& smooth) {
  const float* s = smooth.data<float>();
  for (int64_t i = 0; i < smooth.numel(); ++i) {
    if (!(s[i] > 0.0f) || !std::isfinite(s[i]) || !std::isfinite(1.0f / s[i])) {
      return "smooth factor " + std::to_string(i) + " is not positive and finite with a finite reciprocal";
    }
  }
  return "";
}

void AdviseHugePages(void* p, size_t bytes) {
  // Weights and KV caches are streamed in full every step; 2 MiB pages cut the TLB misses
  // (each a two-level walk under virtualization) that otherwise cost ~10% of bandwidth.
  // Advisory only: where transparent huge pages are off this does nothing.
  constexpr uintptr_t kPage = 4096;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kPage - 1) & ~(kPage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kPage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

Result<std::shared_ptr<PackedWeight>> PackWeight(const Tensor& weight, WeightFormat format, const Tensor& smooth) {
  if (weight.rank() != 2) return InvalidArgument("linear weight must be 2-D, got " + weight.DebugString());
  if (!weight.is_contiguous()) return InvalidArgument("linear weight must be contiguous");
  if (!weight.device().is_cpu()) return InvalidArgument("linear weight is not in host memory");
  const DType src_dtype = weight.dtype();
  if (src_dtype != DType::kF32 && src_dtype != DType::kBF16 && src_dtype != DType::kF16) {
    return InvalidArgument("linear weight dtype must be f32, bf16 or f16, got " + std::string(DTypeName(src_dtype)));
  }
  if (format == WeightFormat::kFp8) {
    return Unimplemented("fp8 weights run on GPUs only (build the engine with --device cuda)");
  }
  if (format == WeightFormat::kInt4) {
    return InvalidArgument("int4 weights are expanded to f32 before packing (CpuBackend::PrepareLinear)");
  }
  const int64_t n = weight.dim(0), k = weight.dim(1);
  if (n > 0 && k > 0 && weight.raw() == nullptr) return InvalidArgument("linear weight has no data");
  const bool int8 = format == WeightFormat::kInt8 || format == WeightFormat::kInt8W8A8;
  auto packed = std::make_shared<PackedWeight>();
  packed->format = format;
  packed->dtype = TargetDType(format, src_dtype);
  packed->layout = format == WeightFormat::kInt8W8A8 ? PanelLayout::kQuads : PanelLayout::kRows;
  packed->n = n;
  packed->k = k;
  packed->k_stored = StoredK(packed->layout, k);
  packed->num_panels = (n + kPanelCols - 1) / kPanelCols;
  packed->source = weight.raw();

  const float* smooth_ptr = nullptr;
  if (format == WeightFormat::kInt8W8A8) {
    if (k > kMaxInt8K) {
      return InvalidArgument("int8 W8A8 supports K up to " + std::to_string(kMaxInt8K) + ", got " + std::to_string(k));
    }
    if (smooth.defined()) {
      if (smooth.numel() != k || !smooth.device().is_cpu() || smooth.rank() != 1) {
        return InvalidArgument("smooth factors must be [" + std::to_string(k) + "] host memory, got " +
                               smooth.DebugString());
      }
      packed->smooth = smooth.ToF32();
      if (const std::string bad = CheckSmoothFactors(packed->smooth); !bad.empty()) return InvalidArgument(bad);
      smooth_ptr = packed->smooth.data<float>();
      packed->inv_smooth = SmoothReciprocals(packed->smooth);
    }
  }

  const std::string what = "a " + weight.DebugString() + " weight as " + WeightFormatName(format);
  FERRY_ASSIGN_OR_RETURN(packed->panels,
                         AllocateTensor({packed->num_panels, packed->k_stored * kPanelCols}, packed->dtype, what));
  AdviseHugePages(packed->panels.raw(), packed->panels.nbytes());
  if (int8) {
    FERRY_ASSIGN_OR_RETURN(packed->scales, AllocateTensor({packed->num_panels * kPanelCols}, DType::kF32, what));
    std::fill_n(packed->scales.data<float>(), packed->scales.numel(), 0.0f);
  }

  PackedWeight& pw = *packed;
  if (!int8 && pw.dtype == src_dtype) {
    ParallelFor(pw.num_panels, 1, [&](int64_t b, int64_t e) {
      if (src_dtype == DType::kF32) {
        PackPanels(weight.data<float>(), n, k, pw.panels.data<float>(), b, e);
      } else {
        PackPanels(weight.data<uint16_t>(), n, k, pw.panels.data<uint16_t>(), b, e);
      }
    });
    return packed;
  }
  std::atomic<int64_t> bad_row{-1};
  ParallelFor(pw.num_panels, 1, [&](int64_t b, int64_t e) {
    std::vector<float> buf(static_cast<size_t>(kPanelCols * k));
    for (int64_t p = b; p < e; ++p) {
      const int64_t rows = std::min<int64_t>(kPanelCols, n - p * kPanelCols);
      GatherRows(weight, p * kPanelCols, rows, buf.data());
      void* dst = const_cast<void*>(pw.panel(p));
      if (!int8) {
        EmitFloatPanel(buf.data(), rows, k, pw.dtype, dst);
      } else if (!EmitInt8Panel(buf.data(), rows, k, pw.k_stored, pw.layout, smooth_ptr, static_cast<int8_t*>(dst),
                                pw.scales.data<float>() + p * kPanelCols)) {
        bad_row.store(p * kPanelCols, std::memory_order_relaxed);
      }
    }
  });
  if (bad_row.load() >= 0) {
    return InvalidArgument("cannot quantize " + weight.DebugString() + ": non-finite values in rows " +
                           std::to_string(bad_row.load()) + ".." + std::to_string(bad_row.load() + kPanelCols - 1) +
                           (smooth_ptr != nullptr ? " (after smoothing)" : ""));
  }
  return packed;
}

Result<std::shared_ptr<PackedWeight>> PackInt8Blocks(const Tensor& q, const Tensor& scales, int64_t block_size) {
  if (q.rank() != 2 || q.dtype() != DType::kI8 || !q.is_contiguous() || !q.device().is_cpu()) {
    return InvalidArgument("int8 blocks: q must be contiguous host i8 [out, in], got " + q.DebugString());
  }
  const int64_t n = q.dim(0), k = q.dim(1);
  if (block_size <= 0 || block_size % kInt8BlockMultiple != 0 || k % block_size != 0) {
    return InvalidArgument("int8 blocks: block size " + std::to_string(block_size) +
                           " must be a positive multiple of " + std::to_string(kInt8BlockMultiple) + " dividing the " +
                           std::to_string(k) + " inputs");
  }
  const int64_t blocks = k / block_size;
  if (scales.rank() != 2 || scales.dtype() != DType::kF16 || !scales.is_contiguous() || !scales.device().is_cpu() ||
      scales.dim(0) != n || scales.dim(1) != blocks) {
    return InvalidArgument("int8 blocks: scales must be contiguous host f16 [" + std::to_string(n) + ", " +
                           std::to_string(blocks) + "], got " + scales.DebugString());
  }
  const auto* sc = static_cast<const uint16_t*>(scales.raw());
  for (int64_t i = 0; i < scales.numel(); ++i) {
    if (!std::isfinite(F16ToF32(sc[i]))) {
      return InvalidArgument("int8 blocks: scale " + std::to_string(i) + " is not finite");
    }
  }
  auto packed = std::make_shared<PackedWeight>();
  packed->format = WeightFormat::kInt8;
  packed->dtype = DType::kI8;
  packed->layout = PanelLayout::kRows;
  packed->n = n;
  packed->k = k;
  packed->k_stored = k;
  packed->num_panels = (n + kPanelCols - 1) / kPanelCols;
  packed->block_size = block_size;
  const std::string what = "a " + q.DebugString() + " weight as int8 blocks";
  FERRY_ASSIGN_OR_RETURN(packed->panels, AllocateTensor({packed->num_panels, k * kPanelCols}, DType::kI8, what));
  AdviseHugePages(packed->panels.raw(), packed->panels.nbytes());
  FERRY_ASSIGN_OR_RETURN(packed->block_scales,
                         AllocateTensor({packed->num_panels, blocks, kPanelCols}, DType::kF16, what));
  PackedWeight& pw = *packed;
  ParallelFor(pw.num_panels, 1, [&](int64_t b, int64_t e) {
    PackPanels(q.data<int8_t>(), n, k, pw.panels.data<int8_t>(), b, e);
    for (int64_t p = b; p < e; ++p) {
      uint16_t* dst = static_cast<uint16_t*>(pw.block_scales.raw()) + p * blocks * kPanelCols;
      const int64_t rows = std::min<int64_t>(kPanelCols, n - p * kPanelCols);
      for (int64_t g = 0; g < blocks; ++g) {
        for (int64_t c = 0; c < kPanelCols; ++c) {
          dst[g * kPanelCols + c] = c < rows ? sc[(p * kPanelCols + c) * blocks + g] : uint16_t{0};
        }
      }
    }
  });
  return packed;
}

const PackedWeight* AsPackedWeight(const std::shared_ptr<void>& packed) {
  if (!packed) return nullptr;
  const auto* p = static_cast<const PackedWeight*>(packed.get());
  return p->magic == PackedWeight::kMagic ? p : nullptr;
}

}  // namespace ferry::kernels::cpu
