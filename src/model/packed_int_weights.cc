#include "model/packed_int_weights.h"

#include <cstdint>
#include <optional>
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

// A layer's packed tensors, checked against each other, and the element accessors of both
// layouts.
struct PackedLayer {
  bool awq = false;
  int bits = 0;
  int per = 0;  // values per int32
  uint32_t mask = 0;
  int zero_offset = 0;
  int64_t in = 0, out = 0, groups = 0;
  Tensor qweight, qzeros, scales;  // scales in f32 [groups, out]
  std::vector<int32_t> row_group;  // each input row's group

  int Value(int64_t o, int64_t i) const {
    const auto* qw = reinterpret_cast<const uint32_t*>(qweight.data<int32_t>());
    const uint32_t word = awq ? qw[i * (out / per) + o / per] : qw[(i / per) * out + o];
    const int shift = (awq ? kAwqNibble[o % per] : static_cast<int>(i % per)) * bits;
    return static_cast<int>((word >> shift) & mask);
  }
  int Zero(int64_t g, int64_t o) const {
    const auto* qz = reinterpret_cast<const uint32_t*>(qzeros.data<int32_t>());
    const int shift = (awq ? kAwqNibble[o % per] : static_cast<int>(o % per)) * bits;
    return static_cast<int>((qz[g * (out / per) + o / per] >> shift) & mask) + zero_offset;
  }
  float Scale(int64_t g, int64_t o) const { return scales.data<float>()[g * out + o]; }
};

Result<PackedLayer> ReadPackedLayer(const WeightSource& src, const std::string& prefix,
                                    const io::QuantizationConfig& q) {
  PackedLayer l;
  l.awq = q.method == "awq";
  l.bits = q.bits;
  if (l.bits != 4 && l.bits != 8) return InvalidArgument("packed weights of " + std::to_string(l.bits) + " bits");
  l.per = 32 / l.bits;
  l.mask = (1u << l.bits) - 1;
  FERRY_ASSIGN_OR_RETURN(l.qweight, PackedTensor(src, prefix + ".qweight"));
  FERRY_ASSIGN_OR_RETURN(l.qzeros, PackedTensor(src, prefix + ".qzeros"));
  FERRY_ASSIGN_OR_RETURN(Tensor scales_raw, src.get(prefix + ".scales"));
  if (scales_raw.rank() != 2 ||
      (scales_raw.dtype() != DType::kF16 && scales_raw.dtype() != DType::kBF16 && scales_raw.dtype() != DType::kF32)) {
    return InvalidArgument("tensor '" + prefix + ".scales' must be a 2-D float tensor, got " +
                           std::string(DTypeName(scales_raw.dtype())) + " " + ShapeToString(scales_raw.shape()));
  }
  l.scales = scales_raw.ToF32();
  const Tensor& qweight = l.qweight;
  const Tensor& qzeros = l.qzeros;
  const Tensor& scales = l.scales;
  const int per = l.per;
  l.in = l.awq ? qweight.dim(0) : qweight.dim(0) * per;
  l.out = l.awq ? qweight.dim(1) * per : qweight.dim(1);
  const int64_t groups = q.group_size > 0 ? (l.in + q.group_size - 1) / q.group_size : 1;
  const auto shapes = [&] {
    return " (qweight " + ShapeToString(qweight.shape()) + ", qzeros " + ShapeToString(qzeros.shape()) + ", scales " +
           ShapeToString(scales.shape()) + ", " + std::to_string(l.bits) + " bits, group size " +
           (q.group_size > 0 ? std::to_string(q.group_size) : std::string("-1")) + ")";
  };
  // g_idx may regroup rows (act-order), so its group count is the scales' own.
  const bool g_idx = !l.awq && src.has(prefix + ".g_idx");
  l.groups = g_idx ? scales.dim(0) : groups;
  if (scales.dim(0) != l.groups || scales.dim(1) != l.out || l.out % per != 0 || qzeros.dim(0) != l.groups ||
      qzeros.dim(1) != l.out / per) {
    return InvalidArgument("layer '" + prefix + "': " + q.method + " tensors of inconsistent shapes" + shapes() +
                           "; expected " + std::to_string(l.in) + " inputs, " + std::to_string(l.out) + " outputs, " +
                           std::to_string(l.groups) + " groups");
  }
  FERRY_ASSIGN_OR_RETURN(l.row_group, RowGroups(src, prefix, l.in, q.group_size, l.groups, !l.awq));
  l.zero_offset = !l.awq && q.gptq_zeros_minus_one ? 1 : 0;
  return l;
}

}  // namespace

Result<Tensor> DequantizePackedLinear(const WeightSource& src, const std::string& prefix,
                                      const io::QuantizationConfig& q, DType dtype) {
  FERRY_ASSIGN_OR_RETURN(const PackedLayer l, ReadPackedLayer(src, prefix, q));
  Tensor w = Tensor::Empty({l.out, l.in}, dtype);
  std::vector<float> row(static_cast<size_t>(l.in));
  for (int64_t o = 0; o < l.out; ++o) {
    for (int64_t i = 0; i < l.in; ++i) {
      const int64_t g = l.row_group[static_cast<size_t>(i)];
      row[static_cast<size_t>(i)] = static_cast<float>(l.Value(o, i) - l.Zero(g, o)) * l.Scale(g, o);
    }
    ConvertFromF32(dtype, row.data(), static_cast<char*>(w.raw()) + o * l.in * DTypeSize(dtype),
                   static_cast<size_t>(l.in));
  }
  return w;
}

Result<std::optional<kernels::Int4Groups>> PackedLinearInt4Groups(const WeightSource& src, const std::string& prefix,
                                                                  const io::QuantizationConfig& q) {
  if (q.bits != 4) return std::optional<kernels::Int4Groups>();
  FERRY_ASSIGN_OR_RETURN(const PackedLayer l, ReadPackedLayer(src, prefix, q));
  const int64_t group_size = l.in / l.groups;
  // Contiguous groups of a width the GPU kernels take (a multiple of 32), and no regrouping:
  // an act-order g_idx cannot be written in this form.
  if (l.in % l.groups != 0 || group_size % 32 != 0) return std::optional<kernels::Int4Groups>();
  for (int64_t i = 0; i < l.in; ++i) {
    if (l.row_group[static_cast<size_t>(i)] != i / group_size) return std::optional<kernels::Int4Groups>();
  }
  kernels::Int4Groups g;
  g.out = l.out;
  g.in = l.in;
  g.group_size = group_size;
  g.q.resize(static_cast<size_t>(l.out * l.in));
  g.scales.resize(static_cast<size_t>(l.out * l.groups));
  g.zeros.resize(static_cast<size_t>(l.out * l.groups));
  for (int64_t o = 0; o < l.out; ++o) {
    for (int64_t gi = 0; gi < l.groups; ++gi) {
      g.zeros[static_cast<size_t>(o * l.groups + gi)] = static_cast<uint8_t>(l.Zero(gi, o));
      g.scales[static_cast<size_t>(o * l.groups + gi)] = l.Scale(gi, o);
    }
    for (int64_t i = 0; i < l.in; ++i) g.q[static_cast<size_t>(o * l.in + i)] = static_cast<uint8_t>(l.Value(o, i));
  }
  return std::optional<kernels::Int4Groups>(std::move(g));
}

}  // namespace ferry::model
