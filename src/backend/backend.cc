#include "backend/backend.h"

#include <cstring>

#include "backend/cuda_backend.h"

namespace ferry::backend {

Status Backend::CopyColumns(const Tensor& src, int64_t col_begin, Tensor& dst) {
  if (src.rank() != 2 || dst.rank() != 2 || src.dim(0) != dst.dim(0) || src.dtype() != dst.dtype() ||
      col_begin < 0 || col_begin + dst.dim(1) > src.dim(1)) {
    return InvalidArgument("CopyColumns: cannot copy columns [" + std::to_string(col_begin) + ", +" +
                           std::to_string(dst.dim(1)) + ") of " + src.DebugString() + " into " + dst.DebugString());
  }
  const size_t elem = DTypeSize(src.dtype());
  const size_t row_bytes = static_cast<size_t>(dst.dim(1)) * elem;
  const char* s = static_cast<const char*>(src.raw()) + col_begin * elem;
  char* d = static_cast<char*>(dst.raw());
  for (int64_t r = 0; r < src.dim(0); ++r) {
    std::memcpy(d + r * row_bytes, s + r * src.strides()[0] * elem, row_bytes);
  }
  return Status::Ok();
}

Status Backend::RopeQkvWriteKv(const Tensor& qkv, int num_heads, int num_kv_heads, const int32_t* positions,
                               const RopeTable& table, const int32_t* slots, KvLayer& layer, Tensor& q, Tensor& k,
                               Tensor& v) {
  const int64_t q_dim = q.dim(1), kv_dim = k.dim(1);
  FERRY_RETURN_IF_ERROR(CopyColumns(qkv, 0, q));
  FERRY_RETURN_IF_ERROR(CopyColumns(qkv, q_dim, k));
  FERRY_RETURN_IF_ERROR(CopyColumns(qkv, q_dim + kv_dim, v));
  FERRY_RETURN_IF_ERROR(Rope(q, k, num_heads, num_kv_heads, positions, table));
  return WriteKv(k, v, slots, layer);
}

Result<int> ParseCudaDevice(const std::string& device) {
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.size() < 9 &&
      device.find_first_not_of("0123456789", 5) == std::string::npos) {
    return std::stoi(device.substr(5));
  }
  return InvalidArgument("device must be cpu, cuda or cuda:N, got '" + device + "'");
}

}  // namespace ferry::backend
