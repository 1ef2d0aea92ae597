#include "model/weights.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>

#include "model/packed_int_weights.h"

namespace ferry::model {

Result<Tensor> GetWeight(const WeightSource& src, const std::string& name, const Shape& shape) {
  FERRY_ASSIGN_OR_RETURN(Tensor t, src.get(name));
  if (t.shape() != shape) {
    return InvalidArgument("tensor '" + name + "': expected shape " + ShapeToString(shape) + ", got " +
                           ShapeToString(t.shape()));
  }
  switch (t.dtype()) {
    case DType::kF32: case DType::kBF16: case DType::kF16: break;
    default:
      return InvalidArgument("tensor '" + name + "': unsupported dtype " + std::string(DTypeName(t.dtype())) +
                             " (expected f32, bf16 or f16)");
  }
  return t;
}

namespace {

// q * scale for a [N, K] e4m3 tensor; `scale` is the f32 scale tensor (see DequantizingSource).
Result<Tensor> Dequantize(const std::string& name, const Tensor& q, const Tensor& scale,
                          const io::QuantizationConfig& cfg, DType dtype) {
  if (q.rank() != 2) return InvalidArgument("float8 tensor '" + name + "' must be 2-D, got " + ShapeToString(q.shape()));
  const int64_t n = q.dim(0), k = q.dim(1);
  const int64_t count = scale.numel();
  // Rows and columns of one scale block: the whole tensor, one row, or a block.
  int64_t br = n, bc = k;
  if (count == 1) {
  } else if (count == n && (scale.rank() == 1 || (scale.rank() == 2 && scale.dim(1) == 1))) {
    br = 1;
  } else if (scale.rank() == 2) {
    const int64_t rows = scale.dim(0), cols = scale.dim(1);
    br = cfg.block_rows > 0 ? cfg.block_rows : (n % rows == 0 ? n / rows : 0);
    bc = cfg.block_cols > 0 ? cfg.block_cols : (k % cols == 0 ? k / cols : 0);
    if (br <= 0 || bc <= 0 || (n + br - 1) / br != rows || (k + bc - 1) / bc != cols) {
      return InvalidArgument("float8 tensor '" + name + "' " + ShapeToString(q.shape()) + ": its scale " +
                             ShapeToString(scale.shape()) + " is neither one value, one per row, nor a block grid" +
                             (cfg.block_rows > 0 ? " of " + std::to_string(cfg.block_rows) + " x " +
                                                       std::to_string(cfg.block_cols) + " blocks"
                                                 : std::string()));
    }
  } else {
    return InvalidArgument("float8 tensor '" + name + "' " + ShapeToString(q.shape()) + ": scale shape " +
                           ShapeToString(scale.shape()) + " is not supported");
  }
  const int64_t grid_cols = (k + bc - 1) / bc;
  const uint8_t* src = q.data<uint8_t>();
  const float* s = scale.data<float>();
  Tensor out = Tensor::Empty({n, k}, dtype);
  for (int64_t r = 0; r < n; ++r) {
    const float* srow = s + (r / br) * grid_cols;
    for (int64_t c = 0; c < k; ++c) {
      const float v = F8E4M3ToF32(src[r * k + c]) * srow[c / bc];
      const int64_t i = r * k + c;
      switch (dtype) {
        case DType::kF32: out.data<float>()[i] = v; break;
        case DType::kF16: out.data<uint16_t>()[i] = F32ToF16(v); break;
        default: out.data<uint16_t>()[i] = F32ToBf16(v); break;
      }
    }
  }
  return out;
}

}  // namespace

WeightSource DequantizingSource(WeightSource inner, const io::QuantizationConfig& q, DType dtype) {
  WeightSource out;
  if (q.packed_int()) {
    // `P.weight` of a quantized layer P stands for P.qweight and its companions.
    const auto packed = [inner](const std::string& name) -> std::optional<std::string> {
      constexpr std::string_view kSuffix = ".weight";
      if (!name.ends_with(kSuffix)) return std::nullopt;
      std::string prefix = name.substr(0, name.size() - kSuffix.size());
      if (inner.has(name) || !inner.has(prefix + ".qweight")) return std::nullopt;
      return prefix;
    };
    out.has = [inner, packed](const std::string& name) { return inner.has(name) || packed(name).has_value(); };
    out.get = [inner, packed, q, dtype](const std::string& name) -> Result<Tensor> {
      if (const std::optional<std::string> prefix = packed(name)) return DequantizePackedLinear(inner, *prefix, q, dtype);
      return inner.get(name);
    };
    out.quantized = [packed](const std::string& name) { return packed(name).has_value(); };
    out.int4 = [inner, packed, q](const std::string& name) -> Result<std::optional<kernels::Int4Groups>> {
      if (const std::optional<std::string> prefix = packed(name)) return PackedLinearInt4Groups(inner, *prefix, q);
      return std::optional<kernels::Int4Groups>();
    };
    return out;
  }
  out.has = inner.has;
  out.quantized = [inner](const std::string& name) {
    const Result<Tensor> t = inner.get(name);  // a view: the bytes are not read
    return t.ok() && t->dtype() == DType::kF8E4M3;
  };
  out.get = [inner, q, dtype](const std::string& name) -> Result<Tensor> {
    FERRY_ASSIGN_OR_RETURN(Tensor t, inner.get(name));
    if (t.dtype() != DType::kF8E4M3) return t;
    std::string scale_name;
    for (const char* suffix : {"_scale", "_scale_inv"}) {
      if (inner.has(name + suffix)) {
        scale_name = name + suffix;
        break;
      }
    }
    if (scale_name.empty()) {
      return InvalidArgument("float8 tensor '" + name + "' has no scale ('" + name + "_scale' or '" + name +
                             "_scale_inv')");
    }
    FERRY_ASSIGN_OR_RETURN(Tensor scale, inner.get(scale_name));
    if (scale.dtype() != DType::kF32 && scale.dtype() != DType::kBF16 && scale.dtype() != DType::kF16) {
      return InvalidArgument("scale '" + scale_name + "' must be f32, bf16 or f16, got " +
                             std::string(DTypeName(scale.dtype())));
    }
    return Dequantize(name, t.is_contiguous() ? t : t.Clone(), scale.ToF32(), q, dtype);
  };
  return out;
}

int64_t DequantizedBytes(const io::Checkpoint& checkpoint, const io::ModelConfig& config) {
  const io::QuantizationConfig& q = config.quantization;
  const auto element = static_cast<int64_t>(DTypeSize(DequantizedDType(config)));
  int64_t bytes = 0;
  for (const std::string& name : checkpoint.Names()) {
    const Result<Tensor> t = checkpoint.Get(name);
    if (!t.ok()) continue;
    const bool companion = name.ends_with("_scale") || name.ends_with("_scale_inv") ||
                           (q.packed_int() && (name.ends_with(".qzeros") || name.ends_with(".scales") ||
                                               name.ends_with(".g_idx")));
    if (companion) continue;
    if (t->dtype() == DType::kF8E4M3) {
      bytes += t->numel() * element;
    } else if (q.packed_int() && name.ends_with(".qweight")) {
      bytes += t->numel() * (32 / std::max(1, q.bits)) * element;
    } else {
      bytes += static_cast<int64_t>(t->nbytes());
    }
  }
  return bytes;
}

DType DequantizedDType(const io::ModelConfig& config) {
  if (config.torch_dtype == "float32") return DType::kF32;
  if (config.torch_dtype == "float16") return DType::kF16;
  return DType::kBF16;
}

Result<Tensor> GetVectorF32(const WeightSource& src, const std::string& name, int64_t size) {
  FERRY_ASSIGN_OR_RETURN(Tensor t, GetWeight(src, name, {size}));
  return t.ToF32();
}

Result<Tensor> ConcatRows(const std::vector<Tensor>& parts) {
  if (parts.empty()) return InvalidArgument("ConcatRows: no parts");
  const int64_t cols = parts[0].dim(1);
  const DType dtype = parts[0].dtype();
  int64_t rows = 0;
  for (const Tensor& p : parts) {
    if (p.rank() != 2 || p.dim(1) != cols || p.dtype() != dtype) {
      return InvalidArgument("ConcatRows: parts disagree on columns or dtype (" + p.DebugString() + " vs " +
                             parts[0].DebugString() + ")");
    }
    rows += p.dim(0);
  }
  Tensor out = Tensor::Empty({rows, cols}, dtype);
  char* dst = out.data<char>();
  for (const Tensor& p : parts) {
    std::memcpy(dst, p.raw(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

Tensor ConcatVectors(const std::vector<Tensor>& parts) {
  int64_t n = 0;
  for (const Tensor& p : parts) n += p.numel();
  Tensor out = Tensor::Empty({n}, DType::kF32);
  float* dst = out.data<float>();
  for (const Tensor& p : parts) {
    std::memcpy(dst, p.raw(), p.nbytes());
    dst += p.numel();
  }
  return out;
}

Result<backend::LinearWeight> LoadLinear(const WeightSource& src, backend::Backend& be, const LoadOptions& options,
                                         const std::string& key, const std::vector<std::string>& weight_names,
                                         const std::vector<std::string>& bias_names,
                                         const std::vector<int64_t>& outs, int64_t in) {
  backend::LinearWeight w;
  std::vector<Tensor> parts;
  w.format = options.linear_format;
  if (options.keep_unquantized_layers && src.quantized) {
    for (const std::string& name : weight_names) {
      if (!src.quantized(name)) w.format = backend::WeightFormat::kNative;
    }
  }
  w.fast_accumulation = w.format == backend::WeightFormat::kFp8 && options.fp8_fast_accumulation;
  if (w.format == backend::WeightFormat::kInt4 && src.int4) {
    std::vector<kernels::Int4Groups> blocks;
    for (size_t i = 0; i < weight_names.size(); ++i) {
      FERRY_ASSIGN_OR_RETURN(std::optional<kernels::Int4Groups> g, src.int4(weight_names[i]));
      if (!g.has_value()) break;  // no exact 4-bit form (unquantized, act-order, 8 bits): quantized from floats
      if (g->out != outs[i] || g->in != in) {
        return InvalidArgument("tensor '" + weight_names[i] + "': expected shape " + ShapeToString({outs[i], in}) +
                               ", got " + ShapeToString({g->out, g->in}));
      }
      blocks.push_back(std::move(*g));
    }
    if (blocks.size() == weight_names.size()) {
      Result<kernels::Int4Groups> all = kernels::ConcatInt4Rows(blocks);
      // Blocks of different group sizes are requantized from their floats instead.
      if (all.ok()) w.int4 = std::make_shared<const kernels::Int4Groups>(std::move(all).value());
    }
  }
  if (w.format == backend::WeightFormat::kNative && src.int8_blocks && be.TakesInt8Blocks()) {
    std::vector<Tensor> qs, scales;
    int64_t block_size = 0;
    for (size_t i = 0; i < weight_names.size(); ++i) {
      FERRY_ASSIGN_OR_RETURN(std::optional<io::Int8Blocks> b, src.int8_blocks(weight_names[i]));
      if (!b.has_value() || (block_size != 0 && b->block_size != block_size)) break;  // loaded as floats
      if (b->out() != outs[i] || b->in() != in) {
        return InvalidArgument("tensor '" + weight_names[i] + "': expected shape " + ShapeToString({outs[i], in}) +
                               ", got " + ShapeToString(b->q.shape()));
      }
      block_size = b->block_size;
      qs.push_back(std::move(b->q));
      scales.push_back(std::move(b->scales));
    }
    if (qs.size() == weight_names.size()) {
      auto blocks = std::make_shared<io::Int8Blocks>();
      blocks->block_size = block_size;
      if (qs.size() == 1) {
        blocks->q = std::move(qs[0]);
        blocks->scales = std::move(scales[0]);
      } else {
        FERRY_ASSIGN_OR_RETURN(blocks->q, ConcatRows(qs));
        FERRY_ASSIGN_OR_RETURN(blocks->scales, ConcatRows(scales));
      }
      w.int8_blocks = std::move(blocks);
      w.format = backend::WeightFormat::kInt8;
    }
  }
  for (size_t i = 0; i < weight_names.size() && w.int4 == nullptr && w.int8_blocks == nullptr; ++i) {
    FERRY_ASSIGN_OR_RETURN(Tensor t, GetWeight(src, weight_names[i], {outs[i], in}));
    parts.push_back(t);
  }
  if (!bias_names.empty()) {
    std::vector<Tensor> biases;
    for (size_t i = 0; i < bias_names.size(); ++i) {
      FERRY_ASSIGN_OR_RETURN(Tensor b, GetVectorF32(src, bias_names[i], outs[i]));
      biases.push_back(b);
    }
    w.bias = biases.size() == 1 ? biases[0] : ConcatVectors(biases);
  }
  if (options.smooth != nullptr) {
    auto it = options.smooth->find(key);
    if (it != options.smooth->end()) w.smooth = it->second;
  }
  // The backend fuses the parts where the weight ends up (the host, or straight into the
  // device's rows on a GPU).
  if (w.int4 != nullptr || w.int8_blocks != nullptr) {
    FERRY_RETURN_IF_ERROR(be.PrepareLinear(w).WithContext("preparing '" + key + "'"));
  } else {
    FERRY_RETURN_IF_ERROR(be.PrepareLinearParts(parts, w).WithContext("preparing '" + key + "'"));
  }
  return w;
}

Result<Tensor> LoadTable(const WeightSource& src, const LoadOptions& options, const std::string& name,
                         const Shape& shape) {
  FERRY_ASSIGN_OR_RETURN(Tensor t, GetWeight(src, name, shape));
  if (!options.table_dtype.has_value() || *options.table_dtype == t.dtype()) return t;
  Tensor f = t.ToF32();
  if (*options.table_dtype == DType::kF32) return f;
  Tensor out = Tensor::Empty(shape, *options.table_dtype);
  ConvertFromF32(*options.table_dtype, f.data<float>(), out.raw(), static_cast<size_t>(f.numel()));
  return out;
}

Result<backend::LinearWeight> PreparedSource::Linear(const std::string& key, int64_t out, int64_t in) const {
  FERRY_ASSIGN_OR_RETURN(backend::LinearWeight lw, linear(key));
  if (lw.out_features() != out || lw.in_features() != in) {
    return DataLoss("weight '" + key + "' is [" + std::to_string(lw.out_features()) + ", " +
                    std::to_string(lw.in_features()) + "], the config needs [" + std::to_string(out) + ", " +
                    std::to_string(in) + "]");
  }
  return lw;
}

Result<Tensor> PreparedSource::Table(const std::string& key, const Shape& shape) const {
  FERRY_ASSIGN_OR_RETURN(Tensor t, tensor(key));
  if (t.shape() != shape) return DataLoss("weight '" + key + "' has shape " + ShapeToString(t.shape()));
  return t;
}

}  // namespace ferry::model
