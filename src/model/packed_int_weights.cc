#include "model/packed_int_weights.h"

#include <cstdint>
#include <vector>

namespace ferry::model {
namespace {

// A contiguous, 8-byte aligned tensor (a checkpoint's tensors start at any byte offset).
Tensor Aligned(Tensor t) {
  return t.is_contiguous() && reinterpret_cast<uintptr_t>(t.raw()) % 8 == 0 ? t : t.Clone();
}

// `name`, which must be a 2-D int32 tensor (GPTQ and AWQ store every packed tensor so).
Result<Tensor> PackedTensor(const WeightSource& src, const std::string& name) {
  FERRY_ASSIGN_OR_RETURN(Tensor t, src.get(name));
  if (t.dtype() != DType::kI32 || t.rank() != 2) {
    return InvalidArgument("packed tensor '" + name + "' must be a 2-D int32 tensor, got " +
                           std::string(DTypeName(t.dtype())) + " " + ShapeToString(t.shape()));
  }
  return Aligned(std::move(t));
}

// Each input row's group: g_idx when the checkpoint has one, else row / group_size.
Result<std::vector<int32_t>> RowGroups(const WeightSource& src, const std::string& prefix, int64_t in,
                                       int64_t group_size, int64_t groups, bool use_g_idx) {
  std::vector<int32_t> g(static_cast<size_t>(in));
  const std::string name = prefix + ".g_idx";
  if (use_g_idx && src.has(name)) {
    FERRY_ASSIGN_OR_RETURN(Tensor t, src.get(name));
    if ((t.dtype() != DType::kI32 && t.dtype() != DType::kI64) || t.rank() != 1 || t.dim(0) != in) {
      return InvalidArgument("tensor '" + name + "' must be an integer vector of " + std::to_string(in) +
                             " input rows, got " + std::string(DTypeName(t.dtype())) + " " + ShapeToString(t.shape()));
    }
    const Tensor c = Aligned(t);
    for (int64_t i = 0; i < in; ++i) {
      const int64_t v = c.dtype() == DType::kI32 ? c.data<int32_t>()[i] : c.data<int64_t>()[i];
      if (v < 0 || v >= groups) {
        return InvalidArgument("tensor '" + name + "': row " + std::to_string(i) + " names group " +
                               std::to_string(v) + " of " + std::to_string(groups));
      }
      g[static_cast<size_t>(i)] = static_cast<int32_t>(v);
    }
    return g;
  }
  for (int64_t i = 0; i < in; ++i) g[static_cast<size_t>(i)] = static_cast<int32_t>(group_size > 0 ? i / group_size : 0);
  return g;
}

}  // namespace

Result<Tensor> DequantizePackedLinear(const WeightSource& src, const std::string& prefix,
                                      const io::QuantizationConfig& q, DType dtype) {
  const bool awq = q.method == "awq";
  const int bits = q.bits;
  if (bits != 4 && bits != 8) return InvalidArgument("packed weights of " + std::to_string(bits) + " bits");
  const int per = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  FERRY_ASSIGN_OR_RETURN(const Tensor qweight, PackedTensor(src, prefix + ".qweight"));
  FERRY_ASSIGN_OR_RETURN(const Tensor qzeros, PackedTensor(src, prefix + ".qzeros"));
  FERRY_ASSIGN_OR_RETURN(Tensor scales_raw, src.get(prefix + ".scales"));
  if (scales_raw.rank() != 2 ||
      (scales_raw.dtype() != DType::kF16 && scales_raw.dtype() != DType::kBF16 && scales_raw.dtype() != DType::kF32)) {
    return InvalidArgument("tensor '" + prefix + ".scales' must be a 2-D float tensor, got " +
                           std::string(DTypeName(scales_raw.dtype())) + " " + ShapeToString(scales_raw.shape()));
  }
  const Tensor scales = scales_raw.ToF32();
  const int64_t in = awq ? qweight.dim(0) : qweight.dim(0) * per;
  const int64_t out = awq ? qweight.dim(1) * per : qweight.dim(1);
  const int64_t groups = q.group_size > 0 ? (in + q.group_size - 1) / q.group_size : 1;
  const auto shapes = [&] {
    return " (qweight " + ShapeToString(qweight.shape()) + ", qzeros " + ShapeToString(qzeros.shape()) + ", scales " +
           ShapeToString(scales.shape()) + ", " + std::to_string(bits) + " bits, group size " +
           (q.group_size > 0 ? std::to_string(q.group_size) : std::string("-1")) + ")";
  };
  // g_idx may regroup rows (act-order), so its group count is the scales' own.
  const bool g_idx = !awq && src.has(prefix + ".g_idx");
  const int64_t scale_groups = g_idx ? scales.dim(0) : groups;
  if (scales.dim(0) != scale_groups || scales.dim(1) != out || out % per != 0 || qzeros.dim(0) != scale_groups ||
      qzeros.dim(1) != out / per) {
    return InvalidArgument("layer '" + prefix + "': " + q.method + " tensors of inconsistent shapes" + shapes() +
                           "; expected " + std::to_string(in) + " inputs, " + std::to_string(out) + " outputs, " +
                           std::to_string(scale_groups) + " groups");
  }
  FERRY_ASSIGN_OR_RETURN(const std::vector<int32_t> row_group,
                         RowGroups(src, prefix, in, q.group_size, scale_groups, !awq));
  const auto* qw = reinterpret_cast<const uint32_t*>(qweight.data<int32_t>());
  const auto* qz = reinterpret_cast<const uint32_t*>(qzeros.data<int32_t>());
  const float* s = scales.data<float>();
  const int zero_offset = !awq && q.gptq_zeros_minus_one ? 1 : 0;
  const int64_t zcols = out / per;
  Tensor w = Tensor::Empty({out, in}, dtype);
  std::vector<float> row(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    const int shift_o = (awq ? kAwqNibble[o % per] : static_cast<int>(o % per)) * bits;
    for (int64_t i = 0; i < in; ++i) {
      const int64_t g = row_group[static_cast<size_t>(i)];
      const uint32_t word = awq ? qw[i * (out / per) + o / per] : qw[(i / per) * out + o];
      const int shift_i = awq ? shift_o : static_cast<int>(i % per) * bits;
      const int value = static_cast<int>((word >> shift_i) & mask);
      const int zero = static_cast<int>((qz[g * zcols + o / per] >> shift_o) & mask) + zero_offset;
      row[static_cast<size_t>(i)] = static_cast<float>(value - zero) * s[g * out + o];
    }
    ConvertFromF32(dtype, row.data(), static_cast<char*>(w.raw()) + o * in * DTypeSize(dtype),
                   static_cast<size_t>(in));
  }
  return w;
}

}  // namespace ferry::model
