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

Result<backend::LinearWeight> LoadLinear(const WeightSource& src, backend::Backend& be, const std::string& weight_name,
                                         const std::string& bias_name, int64_t out, int64_t in) {
  backend::LinearWeight w;
  FERRY_ASSIGN_OR_RETURN(w.weight, GetWeight(src, weight_name, {out, in}));
  if (!bias_name.empty()) {
    FERRY_ASSIGN_OR_RETURN(w.bias, GetVectorF32(src, bias_name, out));
  }
  FERRY_RETURN_IF_ERROR(be.PrepareLinear(w));
  return w;
}

}  // namespace ferry::model
