#include "model/weights.h"

#include <cstring>

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
  for (size_t i = 0; i < weight_names.size(); ++i) {
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
  w.format = options.linear_format;
  if (options.smooth != nullptr) {
    auto it = options.smooth->find(key);
    if (it != options.smooth->end()) w.smooth = it->second;
  }
  // The backend fuses the parts where the weight ends up (the host, or straight into the
  // device's rows on a GPU).
  FERRY_RETURN_IF_ERROR(be.PrepareLinearParts(parts, w).WithContext("preparing '" + key + "'"));
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
