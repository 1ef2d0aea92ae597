#include "backend/cuda/linear_weights.h"

#include <cuda_runtime.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/logging.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cuda/cuda_check.h"

namespace ferry::backend {

namespace {

using json = nlohmann::json;

// Host-side per-output-channel symmetric int8 quantization of w [n, k] (f32), optionally
// after multiplying column j by smooth[j] (SmoothQuant: x / s, W * s).
void QuantizeWeightInt8(const float* w, int64_t n, int64_t k, const float* smooth, std::vector<int8_t>& q,
                        std::vector<float>& scales) {
  q.resize(static_cast<size_t>(n * k));
  scales.resize(static_cast<size_t>(n));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      row[j] = w[r * k + j] * (smooth != nullptr ? smooth[j] : 1.0f);
      amax = std::max(amax, std::fabs(row[j]));
    }
    const float scale = amax / 127.0f;
    scales[r] = scale;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      q[r * k + j] = static_cast<int8_t>(std::clamp(std::nearbyint(row[j] * inv), -127.0f, 127.0f));
    }
  }
}

// Per-output-channel fp8 e4m3: scale = max|w| / 448.
void QuantizeWeightFp8(const float* w, int64_t n, int64_t k, std::vector<uint8_t>& q, std::vector<float>& scales) {
  q.resize(static_cast<size_t>(n * k));
  scales.resize(static_cast<size_t>(n));
  auto rows = [&](int64_t begin, int64_t end) {
    std::vector<float> scaled(static_cast<size_t>(k));
    for (int64_t r = begin; r < end; ++r) {
      float amax = 0.0f;
      for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(w[r * k + j]));
      const float scale = amax / 448.0f;
      scales[r] = scale;
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      for (int64_t j = 0; j < k; ++j) scaled[j] = w[r * k + j] * inv;
      ConvertFromF32(DType::kF8E4M3, scaled.data(), q.data() + r * k, static_cast<size_t>(k));
    }
  };
  // Rows are independent: an 8B model's weights are billions of elements, so split them
  // over the host's cores (the result does not depend on the split).
  const int64_t threads = std::clamp<int64_t>(n * k / (1 << 22), 1, std::max(1u, std::thread::hardware_concurrency()));
  if (threads == 1) return rows(0, n);
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) pool.emplace_back(rows, n * t / threads, n * (t + 1) / threads);
  for (auto& th : pool) th.join();
}

cuda::GemmKind FloatKind(DType act) {
  switch (act) {
    case DType::kBF16: return cuda::GemmKind::kBF16;
    case DType::kF16: return cuda::GemmKind::kF16;
    default: return cuda::GemmKind::kF32;
  }
}


// The row blocks as one host tensor (int8 and fp8 quantize the whole weight on the host).
Tensor ConcatHost(const std::vector<Tensor>& parts, int64_t n, int64_t k) {
  if (parts.size() == 1) return parts[0];
  Tensor out = Tensor::Empty({n, k}, parts[0].dtype());
  char* dst = out.data<char>();
  for (const Tensor& p : parts) {
    std::memcpy(dst, p.raw(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

// The bias (in the activation dtype for float and fp8 GEMMs, which cuBLASLt adds in its
// epilogue; f32 for the int8 kinds, whose epilogue kernels add it), then `lin` becomes the
// weight's packed form. An fp8 bias in f32 kept cuBLASLt from fusing it: a separate pass
// over the output cost more than the fp8 GEMM saved (bert-base on an H200).
Status FinishCudaLinear(WeightLoader& loader, DType activations, int64_t n, int64_t k, std::shared_ptr<CudaLinear> lin,
                        LinearWeight& w) {
  if (w.bias.defined()) {
    const Tensor b = w.bias.ToF32();
    const bool float_kind = lin->kind == cuda::GemmKind::kBF16 || lin->kind == cuda::GemmKind::kF16 ||
                            lin->kind == cuda::GemmKind::kF32 || lin->kind == cuda::GemmKind::kFp8;
    const DType bias_dtype = float_kind ? activations : DType::kF32;
    FERRY_ASSIGN_OR_RETURN(lin->bias, loader.Upload(b, bias_dtype));
  }
  w.out = n;
  w.in = k;
  w.format = lin->format;
  lin->fp8_fast_accum = lin->kind == cuda::GemmKind::kFp8 && w.fast_accumulation;
  w.fast_accumulation = lin->fp8_fast_accum;
  w.packed = std::move(lin);
  w.weight = Tensor();  // the GPU copy is what runs
  w.smooth = Tensor();
  w.int4.reset();
  return Status::Ok();
}

// kInt4: the groups given, or the weight quantized now, packed and uploaded. A layer the
// kernels cannot take (no group size fits its width, or f32 activations) is left for the
// float path (returns false).
Result<bool> PrepareInt4(CudaContext& ctx, WeightLoader& loader, DType activations, const std::vector<Tensor>& parts,
                         int64_t n, int64_t k, const LinearWeight& w, CudaLinear& lin) {
  std::shared_ptr<const kernels::Int4Groups> g = w.int4;
  if (activations != DType::kBF16 && activations != DType::kF16) {
    FERRY_LOG_INFO("a [{}, {}] weight stays in {} (int4 GEMMs take bf16 or f16 activations)", n, k,
                   DTypeName(activations));
    return false;
  }
  if (g == nullptr) {
    const int64_t group = kernels::DefaultInt4GroupSize(k);
    if (group == 0) {
      FERRY_LOG_INFO("a [{}, {}] weight stays in {} (no int4 group size fits {} inputs)", n, k, DTypeName(activations),
                     k);
      return false;
    }
    const Tensor f = ConcatHost(parts, n, k).ToF32();
    FERRY_ASSIGN_OR_RETURN(kernels::Int4Groups q, kernels::QuantizeInt4(f.data<float>(), n, k, group));
    g = std::make_shared<const kernels::Int4Groups>(std::move(q));
  }
  if (g->in % 32 != 0 || g->group_size % 32 != 0) {
    return InvalidArgument("int4 groups of " + std::to_string(g->group_size) + " over " + std::to_string(g->in) +
                           " inputs: the GPU kernels need multiples of 32");
  }
  const std::vector<uint32_t> packed = kernels::PackInt4Rows(*g);
  const int64_t groups = g->groups();
  lin.kind = cuda::GemmKind::kInt4WeightOnly;
  lin.group_size = g->group_size;
  FERRY_ASSIGN_OR_RETURN(lin.weight, ctx.Allocate({g->out, g->in / 8}, DType::kI32));
  FERRY_RETURN_IF_ERROR(
      loader.CopyToDevice(packed.data(), DType::kI32, lin.weight.raw(), DType::kI32, g->out * (g->in / 8)));
  FERRY_ASSIGN_OR_RETURN(lin.scales, ctx.Allocate({g->out, groups}, DType::kF32));
  FERRY_RETURN_IF_ERROR(
      loader.CopyToDevice(g->scales.data(), DType::kF32, lin.scales.raw(), DType::kF32, g->out * groups));
  FERRY_ASSIGN_OR_RETURN(lin.zeros, ctx.Allocate({g->out, groups}, DType::kU8));
  FERRY_RETURN_IF_ERROR(loader.CopyToDevice(g->zeros.data(), DType::kU8, lin.zeros.raw(), DType::kU8, g->out * groups));
  return true;
}

// The SmoothQuant factors' reciprocals on the device: the values the CPU quantizer multiplies
// by (kernels::cpu::SmoothReciprocals), so that a W8A8 input is quantized to the same bytes on both.
Result<Tensor> UploadReciprocal(WeightLoader& loader, const Tensor& host) {
  return loader.Upload(kernels::cpu::SmoothReciprocals(host), DType::kF32);
}

}  // namespace

Status PrepareCudaLinear(CudaContext& ctx, WeightLoader& loader, const cuda::LtGemm& gemm, DType activations,
                         const std::vector<Tensor>& given_parts, LinearWeight& w) {
  if (w.int4 != nullptr && w.format == WeightFormat::kInt4 && given_parts.empty() && !w.weight.defined()) {
    // A GPTQ / AWQ grid, used as it is.
    auto lin = std::make_shared<CudaLinear>();
    lin->format = WeightFormat::kInt4;
    FERRY_ASSIGN_OR_RETURN(const bool prepared,
                           PrepareInt4(ctx, loader, activations, {}, w.int4->out, w.int4->in, w, *lin));
    if (!prepared) {
      // Float activations: expand the groups and take the float path below.
      Tensor f = Tensor::Empty({w.int4->out, w.int4->in}, DType::kF32);
      kernels::DequantizeInt4(*w.int4, f.data<float>());
      w.weight = std::move(f);
      w.format = WeightFormat::kNative;
      w.int4.reset();
      return PrepareCudaLinear(ctx, loader, gemm, activations, {}, w);
    }
    return FinishCudaLinear(loader, activations, w.int4->out, w.int4->in, std::move(lin), w);
  }
  std::vector<Tensor> parts = given_parts;
  if (parts.empty()) parts.push_back(w.weight);
  int64_t n = 0;
  const int64_t k = parts[0].defined() && parts[0].rank() == 2 ? parts[0].dim(1) : 0;
  for (const Tensor& p : parts) {
    if (!p.defined() || p.rank() != 2 || p.dim(1) != k || p.dtype() != parts[0].dtype() || !p.is_contiguous()) {
      return InvalidArgument("PrepareLinear: weight must be [out, in] row blocks of one dtype");
    }
    n += p.dim(0);
  }
  auto lin = std::make_shared<CudaLinear>();
  lin->format = w.format;
  if (w.format == WeightFormat::kInt8W8A8 || w.format == WeightFormat::kFp8) {
    // int8 (IMMA) and fp8 GEMMs take only some shapes (N and K multiples of 4, or 16): a
    // layer they cannot run, such as a classifier head of 3 labels or a vocabulary of
    // 50257, stays in the activation dtype, as TensorRT keeps such layers in higher precision.
    cuda::GemmProblem probe;
    probe.kind = w.format == WeightFormat::kFp8 ? cuda::GemmKind::kFp8 : cuda::GemmKind::kInt8;
    probe.out_dtype = activations == DType::kF32 ? DType::kBF16 : activations;
    probe.m = 1;
    probe.n = n;
    probe.k = k;
    probe.has_bias = w.bias.defined();
    probe.fp8_scaling = cuda::Fp8Scaling::kPerRowCol;
    const Status fits = gemm.CheckProblem(probe);
    if (fits.code() == StatusCode::kInvalidArgument) {
      FERRY_LOG_INFO("a [{}, {}] weight stays in {} ({} GEMMs cannot take it: {})", n, k,
                     DTypeName(activations), WeightFormatName(w.format), fits.message());
      lin->format = WeightFormat::kNative;
    } else if (!fits.ok()) {
      return fits;
    }
  }
  if (lin->format == WeightFormat::kInt4) {
    FERRY_ASSIGN_OR_RETURN(const bool prepared, PrepareInt4(ctx, loader, activations, parts, n, k, w, *lin));
    if (!prepared) lin->format = WeightFormat::kNative;
  }
  // Quantized formats work on the whole weight in f32 on the host; float ones never do.
  Tensor f;
  if (lin->format != WeightFormat::kNative && lin->format != WeightFormat::kF32 &&
      lin->format != WeightFormat::kBF16 && lin->format != WeightFormat::kF16 && lin->format != WeightFormat::kInt4) {
    f = ConcatHost(parts, n, k).ToF32();
  }
  switch (lin->format) {
    case WeightFormat::kNative:
    case WeightFormat::kF32:
    case WeightFormat::kBF16:
    case WeightFormat::kF16: {
      // On the GPU a float weight takes the activations' dtype: cuBLASLt multiplies like types.
      // Each part goes to its rows as stored; a dtype change happens on the device.
      const DType act = activations;
      lin->kind = FloatKind(act);
      FERRY_ASSIGN_OR_RETURN(lin->weight, ctx.Allocate({n, k}, act));
      char* dst = static_cast<char*>(lin->weight.raw());
      for (const Tensor& p : parts) {
        FERRY_RETURN_IF_ERROR(loader.CopyToDevice(p.raw(), p.dtype(), dst, act, p.numel()));
        dst += static_cast<size_t>(p.numel()) * DTypeSize(act);
      }
      break;
    }
    case WeightFormat::kInt8:
    case WeightFormat::kInt8W8A8: {
      const bool w8a8 = lin->format == WeightFormat::kInt8W8A8;
      lin->kind = w8a8 ? cuda::GemmKind::kInt8 : cuda::GemmKind::kInt8WeightOnly;
      Tensor smooth_host;
      if (w8a8 && w.smooth.defined()) {
        smooth_host = w.smooth.ToF32();
        if (smooth_host.numel() != k) return InvalidArgument("SmoothQuant factors do not match the weight");
        FERRY_ASSIGN_OR_RETURN(lin->smooth, loader.Upload(smooth_host, DType::kF32));
        FERRY_ASSIGN_OR_RETURN(lin->inv_smooth, UploadReciprocal(loader, smooth_host));
      }
      std::vector<int8_t> q;
      std::vector<float> scales;
      QuantizeWeightInt8(f.data<float>(), n, k, smooth_host.defined() ? smooth_host.data<float>() : nullptr, q, scales);
      FERRY_ASSIGN_OR_RETURN(lin->weight, ctx.Allocate({n, k}, DType::kI8));
      FERRY_RETURN_IF_ERROR(loader.CopyToDevice(q.data(), DType::kI8, lin->weight.raw(), DType::kI8, n * k));
      FERRY_ASSIGN_OR_RETURN(lin->scales, ctx.Allocate({n}, DType::kF32));
      FERRY_RETURN_IF_ERROR(loader.CopyToDevice(scales.data(), DType::kF32, lin->scales.raw(), DType::kF32, n));
      break;
    }
    case WeightFormat::kInt4:
      break;  // PrepareInt4 above
    case WeightFormat::kFp8: {
      lin->kind = cuda::GemmKind::kFp8;
      std::vector<uint8_t> q;
      std::vector<float> scales;
      QuantizeWeightFp8(f.data<float>(), n, k, q, scales);
      FERRY_ASSIGN_OR_RETURN(lin->weight, ctx.Allocate({n, k}, DType::kF8E4M3));
      FERRY_RETURN_IF_ERROR(
          loader.CopyToDevice(q.data(), DType::kF8E4M3, lin->weight.raw(), DType::kF8E4M3, n * k));
      FERRY_ASSIGN_OR_RETURN(lin->scales, ctx.Allocate({n}, DType::kF32));
      FERRY_RETURN_IF_ERROR(loader.CopyToDevice(scales.data(), DType::kF32, lin->scales.raw(), DType::kF32, n));
      break;
    }
  }
  return FinishCudaLinear(loader, activations, n, k, std::move(lin), w);
}

// A CUDA engine's linear: layout JSON plus blobs (weight, scales, smooth, bias) copied to the host.
Result<SerializedLinear> SerializeCudaLinear(const LinearWeight& w) {
  const auto* lin = static_cast<const CudaLinear*>(w.packed.get());
  if (lin == nullptr) return FailedPrecondition("SerializeLinear: weight was not prepared");
  json layout = {{"backend", "cuda"}, {"format", WeightFormatName(lin->format)},
                           {"kind", std::string(cuda::GemmKindName(lin->kind))}, {"out", w.out_features()},
                           {"in", w.in_features()}};
  SerializedLinear s;
  auto add = [&](const char* name, const Tensor& t) -> Status {
    if (!t.defined()) return Status::Ok();
    Tensor host = Tensor::Empty(t.shape(), t.dtype());
    FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.raw(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost));
    layout["blobs"].push_back(name);
    s.blobs.push_back(std::move(host));
    return Status::Ok();
  };
  FERRY_RETURN_IF_ERROR(add("weight", lin->weight));
  FERRY_RETURN_IF_ERROR(add("scales", lin->scales));
  FERRY_RETURN_IF_ERROR(add("smooth", lin->smooth));
  FERRY_RETURN_IF_ERROR(add("zeros", lin->zeros));
  if (lin->group_size > 0) layout["group_size"] = lin->group_size;
  FERRY_RETURN_IF_ERROR(add("bias", lin->bias));
  json choices = json::array();
  for (const auto& c : lin->choices) choices.push_back(c ? json(c->ToString()) : json(nullptr));
  layout["gemm_choices"] = choices;
  if (lin->kind == cuda::GemmKind::kFp8) layout["fp8_accumulation"] = lin->fp8_fast_accum ? "fast" : "exact";
  s.layout_json = layout.dump();
  return s;
}

Result<LinearWeight> DeserializeCudaLinear(WeightLoader& loader, const SerializedLinear& s) {
  json layout;
  try {
    layout = json::parse(s.layout_json);
  } catch (const json::exception& e) {
    return DataLoss(std::string("bad linear layout: ") + e.what());
  }
  if (layout.value("backend", "") != "cuda") {
    return FailedPrecondition("this weight was packed for another backend; rebuild the engine with --device cuda");
  }
  auto lin = std::make_shared<CudaLinear>();
  FERRY_ASSIGN_OR_RETURN(lin->format, ParseWeightFormat(layout.value("format", "")));
  const std::string kind = layout.value("kind", "");
  bool known = false;
  for (auto k : {cuda::GemmKind::kF32, cuda::GemmKind::kBF16, cuda::GemmKind::kF16, cuda::GemmKind::kFp8,
                 cuda::GemmKind::kInt8, cuda::GemmKind::kInt8WeightOnly, cuda::GemmKind::kInt4WeightOnly}) {
    if (kind == cuda::GemmKindName(k)) {
      lin->kind = k;
      known = true;
    }
  }
  if (!known) return DataLoss("unknown GEMM kind '" + kind + "'");
  const json names = layout.value("blobs", json::array());
  if (names.size() != s.blobs.size()) return DataLoss("linear layout names " + std::to_string(names.size()) + " blobs");
  for (size_t i = 0; i < names.size(); ++i) {
    const Tensor& b = s.blobs[i];
    FERRY_ASSIGN_OR_RETURN(Tensor dev, loader.Upload(b, b.dtype()));
    const std::string name = names[i];
    if (name == "weight") lin->weight = dev;
    else if (name == "scales") lin->scales = dev;
    else if (name == "smooth") {
      lin->smooth = dev;
      FERRY_ASSIGN_OR_RETURN(lin->inv_smooth, UploadReciprocal(loader, b.ToF32()));
    }
    else if (name == "zeros") lin->zeros = dev;
    else if (name == "bias") lin->bias = dev;
    else return DataLoss("unknown linear blob '" + name + "'");
  }
  if (!lin->weight.defined() || lin->weight.rank() != 2) return DataLoss("linear without a weight blob");
  const bool int4 = lin->kind == cuda::GemmKind::kInt4WeightOnly;
  if (int4) {
    lin->group_size = layout.value("group_size", int64_t{0});
    const int64_t in = lin->weight.dim(1) * 8;
    if (lin->group_size <= 0 || in % lin->group_size != 0 || !lin->scales.defined() || !lin->zeros.defined() ||
        lin->scales.numel() != lin->weight.dim(0) * (in / lin->group_size) ||
        lin->zeros.numel() != lin->scales.numel()) {
      return DataLoss("int4 linear with inconsistent group size, scales or zero points");
    }
  }
  // Engines written before the setting existed accumulated exactly.
  const json accumulation = layout.value("fp8_accumulation", json("exact"));
  if (accumulation != "exact" && accumulation != "fast") {
    return DataLoss("fp8_accumulation must be \"exact\" or \"fast\", got " + accumulation.dump());
  }
  lin->fp8_fast_accum = lin->kind == cuda::GemmKind::kFp8 && accumulation == "fast";
  for (const json& c : layout.value("gemm_choices", json::array())) {
    if (c.is_string()) {
      FERRY_ASSIGN_OR_RETURN(cuda::GemmChoice choice, cuda::GemmChoice::FromString(c.get<std::string>()));
      lin->choices.push_back(choice);
    } else {
      lin->choices.push_back(std::nullopt);
    }
  }
  // Ten buckets: an engine written before 513-1024 had a bucket of its own, whose last choice
  // (timed at 2048 rows) covered 513-4096.
  if (lin->choices.size() == 10 && cuda::kGemmMBuckets == 11) lin->choices.push_back(lin->choices.back());
  LinearWeight w;
  w.format = lin->format;
  w.out = lin->weight.dim(0);
  w.in = int4 ? lin->weight.dim(1) * 8 : lin->weight.dim(1);
  w.fast_accumulation = lin->fp8_fast_accum;
  w.packed = lin;
  return w;
}

}  // namespace ferry::backend
