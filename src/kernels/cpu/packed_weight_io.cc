#include "kernels/cpu/packed_weight_io.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ferry::kernels::cpu {
namespace {

using nlohmann::json;

// Sizes beyond this are corrupt, and keeping below it keeps every byte count in int64.
constexpr int64_t kMaxDim = int64_t{1} << 32;

const char* PanelLayoutName(PanelLayout l) { return l == PanelLayout::kQuads ? "quads" : "rows"; }

bool IsInt8(WeightFormat f) { return f == WeightFormat::kInt8 || f == WeightFormat::kInt8W8A8; }

Result<int64_t> GetInt(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    return InvalidArgument(std::string("linear layout: '") + key + "' is missing or not an integer");
  }
  const bool in_range = it->is_number_unsigned()
                            ? it->get<uint64_t>() <= static_cast<uint64_t>(kMaxDim)
                            : it->get<int64_t>() >= 0 && it->get<int64_t>() <= kMaxDim;
  if (!in_range) return InvalidArgument(std::string("linear layout: '") + key + "' is out of range");
  return it->get<int64_t>();
}

Result<std::string> GetString(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) {
    return InvalidArgument(std::string("linear layout: '") + key + "' is missing or not a string");
  }
  return it->get<std::string>();
}

// Whether a packed weight of `format` may hold panel elements of `dtype`.
bool DTypeFits(WeightFormat format, DType dtype) {
  switch (format) {
    case WeightFormat::kNative:
      return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
    case WeightFormat::kF32: return dtype == DType::kF32;
    case WeightFormat::kBF16: return dtype == DType::kBF16;
    case WeightFormat::kF16: return dtype == DType::kF16;
    case WeightFormat::kInt8:
    case WeightFormat::kInt8W8A8: return dtype == DType::kI8;
    case WeightFormat::kFp8:
    case WeightFormat::kInt4: return false;
  }
  return false;
}

// The blob as a tensor of `shape` x `dtype`, sharing its memory (copied only when it is not
// 64-byte aligned). A blob handed over as raw bytes (u8/i8) of the right size is accepted.
Result<Tensor> AdoptBlob(const Tensor& blob, const std::string& name, const Shape& shape, DType dtype) {
  const size_t want = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  if (!blob.defined() || !blob.device().is_cpu() || !blob.is_contiguous()) {
    return DataLoss("linear blob '" + name + "' is not contiguous host memory: " + blob.DebugString());
  }
  const bool bytes = blob.dtype() == DType::kU8 || blob.dtype() == DType::kI8;
  if (blob.dtype() != dtype && !bytes) {
    return DataLoss("linear blob '" + name + "' is " + std::string(DTypeName(blob.dtype())) + ", layout says " +
                    std::string(DTypeName(dtype)));
  }
  if (blob.nbytes() != want) {
    return DataLoss("linear blob '" + name + "' holds " + std::to_string(blob.nbytes()) + " bytes, layout needs " +
                    std::to_string(want));
  }
  if (want > 0 && blob.raw() == nullptr) return DataLoss("linear blob '" + name + "' has no data");
  // The tensor copy keeps the blob's owner (the file mapping) alive for as long as the view.
  Tensor view = Tensor::FromBorrowed(blob.raw(), shape, dtype, std::make_shared<const Tensor>(blob));
  if (reinterpret_cast<uintptr_t>(blob.raw()) % kBlobAlignment == 0) return view;
  try {
    return view.Clone();
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory copying misaligned linear blob '" + name + "'");
  }
}

Result<PackedLinear> Deserialize(const SerializedLinear& s) {
  const json j = json::parse(s.layout_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("linear layout is not a JSON object");
  FERRY_ASSIGN_OR_RETURN(const std::string backend_name, GetString(j, "backend"));
  FERRY_ASSIGN_OR_RETURN(const std::string layout_name, GetString(j, "layout"));
  if (backend_name != "cpu" || layout_name != "panels") {
    return InvalidArgument("linear layout '" + backend_name + "/" + layout_name + "' is not the CPU panel layout");
  }
  FERRY_ASSIGN_OR_RETURN(const int64_t version, GetInt(j, "version"));
  if (version != kPackedLayoutVersion) {
    return InvalidArgument("linear layout version " + std::to_string(version) + " is not supported (this build reads " +
                           std::to_string(kPackedLayoutVersion) + "); rebuild the engine");
  }
  FERRY_ASSIGN_OR_RETURN(const std::string format_name, GetString(j, "format"));
  FERRY_ASSIGN_OR_RETURN(const WeightFormat format, ParseWeightFormat(format_name));
  FERRY_ASSIGN_OR_RETURN(const std::string dtype_name, GetString(j, "dtype"));
  FERRY_ASSIGN_OR_RETURN(const DType dtype, ParseDType(dtype_name));
  if (!DTypeFits(format, dtype)) {
    return InvalidArgument("linear layout: dtype " + dtype_name + " does not fit format " + format_name);
  }
  FERRY_ASSIGN_OR_RETURN(const int64_t panel_cols, GetInt(j, "panel_cols"));
  if (panel_cols != kPanelCols) {
    return InvalidArgument("linear layout: panel_cols " + std::to_string(panel_cols) + ", kernels use " +
                           std::to_string(kPanelCols));
  }
  const PanelLayout layout = format == WeightFormat::kInt8W8A8 ? PanelLayout::kQuads : PanelLayout::kRows;
  FERRY_ASSIGN_OR_RETURN(const std::string panel_layout, GetString(j, "panel_layout"));
  if (panel_layout != PanelLayoutName(layout)) {
    return InvalidArgument("linear layout: panel_layout '" + panel_layout + "' does not fit format " + format_name);
  }
  FERRY_ASSIGN_OR_RETURN(const int64_t n, GetInt(j, "n"));
  FERRY_ASSIGN_OR_RETURN(const int64_t k, GetInt(j, "k"));
  FERRY_ASSIGN_OR_RETURN(const int64_t k_stored, GetInt(j, "k_stored"));
  FERRY_ASSIGN_OR_RETURN(const int64_t num_panels, GetInt(j, "num_panels"));
  const int64_t want_k_stored = StoredK(layout, k);
  if (k_stored != want_k_stored || num_panels != (n + kPanelCols - 1) / kPanelCols) {
    return InvalidArgument("linear layout: k_stored " + std::to_string(k_stored) + " / num_panels " +
                           std::to_string(num_panels) + " do not follow from n " + std::to_string(n) + ", k " +
                           std::to_string(k));
  }
  if (format == WeightFormat::kInt8W8A8 && k > kMaxInt8K) {
    return InvalidArgument("linear layout: K " + std::to_string(k) + " is too large for int8 W8A8");
  }

  auto names_it = j.find("blobs");
  if (names_it == j.end() || !names_it->is_array()) return InvalidArgument("linear layout: 'blobs' is not a list");
  std::vector<std::string> names;
  for (const json& name : *names_it) {
    if (!name.is_string()) return InvalidArgument("linear layout: 'blobs' holds a non-string");
    names.push_back(name.get<std::string>());
  }
  // int8-wo with block scales: the inputs per scale (absent: per-column scales).
  int64_t block_size = 0;
  if (j.contains("block_size")) {
    FERRY_ASSIGN_OR_RETURN(block_size, GetInt(j, "block_size"));
    if (format != WeightFormat::kInt8 || block_size <= 0 || block_size % kInt8BlockMultiple != 0 ||
        k % block_size != 0) {
      return InvalidArgument("linear layout: block_size " + std::to_string(block_size) + " does not fit format " +
                             format_name + " with k " + std::to_string(k));
    }
  }
  // The only lists a valid layout can have: panels, [scales | block_scales], [smooth], [bias].
  size_t next = 0;
  auto take = [&](const char* name) {
    if (next < names.size() && names[next] == name) {
      ++next;
      return true;
    }
    return false;
  };
  if (!take("panels")) return InvalidArgument("linear layout: the first blob must be 'panels'");
  const bool has_scales = block_size == 0 && take("scales");
  const bool has_block_scales = block_size > 0 && take("block_scales");
  const bool has_smooth = take("smooth");
  const bool has_bias = take("bias");
  if (next != names.size() || (has_scales || has_block_scales) != IsInt8(format) ||
      (has_smooth && format != WeightFormat::kInt8W8A8)) {
    return InvalidArgument("linear layout: blob list does not fit format " + format_name);
  }
  if (s.blobs.size() != names.size()) {
    return DataLoss("linear layout lists " + std::to_string(names.size()) + " blobs, got " +
                    std::to_string(s.blobs.size()));
  }

  auto packed = std::make_shared<PackedWeight>();
  packed->format = format;
  packed->dtype = dtype;
  packed->layout = layout;
  packed->n = n;
  packed->k = k;
  packed->k_stored = k_stored;
  packed->num_panels = num_panels;
  size_t b = 0;
  FERRY_ASSIGN_OR_RETURN(packed->panels, AdoptBlob(s.blobs[b++], "panels", {num_panels, k_stored * kPanelCols}, dtype));
  if (has_scales) {
    FERRY_ASSIGN_OR_RETURN(packed->scales, AdoptBlob(s.blobs[b++], "scales", {num_panels * kPanelCols}, DType::kF32));
    const float* sc = packed->scales.data<float>();
    for (int64_t i = 0; i < packed->scales.numel(); ++i) {
      if (!(sc[i] >= 0.0f) || !std::isfinite(sc[i])) {
        return DataLoss("linear blob 'scales': element " + std::to_string(i) + " is not a finite scale");
      }
    }
  }
  if (has_block_scales) {
    packed->block_size = block_size;
    FERRY_ASSIGN_OR_RETURN(packed->block_scales, AdoptBlob(s.blobs[b++], "block_scales",
                                                           {num_panels, k / block_size, kPanelCols}, DType::kF16));
    const auto* sc = static_cast<const uint16_t*>(packed->block_scales.raw());
    for (int64_t i = 0; i < packed->block_scales.numel(); ++i) {
      if (!std::isfinite(F16ToF32(sc[i]))) {
        return DataLoss("linear blob 'block_scales': element " + std::to_string(i) + " is not finite");
      }
    }
  }
  if (has_smooth) {
    FERRY_ASSIGN_OR_RETURN(packed->smooth, AdoptBlob(s.blobs[b++], "smooth", {k}, DType::kF32));
    if (const std::string bad = CheckSmoothFactors(packed->smooth); !bad.empty()) {
      return DataLoss("linear blob 'smooth': " + bad);
    }
    packed->inv_smooth = SmoothReciprocals(packed->smooth);
  }
  PackedLinear w;
  if (has_bias) {
    FERRY_ASSIGN_OR_RETURN(w.bias, AdoptBlob(s.blobs[b++], "bias", {n}, DType::kF32));
  }
  w.packed = std::move(packed);
  return w;
}

}  // namespace

Result<SerializedLinear> SerializePackedWeight(const PackedWeight& w, const Tensor& bias) {
  SerializedLinear s;
  json names = json::array({"panels"});
  s.blobs.push_back(w.panels);
  if (w.scales.defined()) {
    names.push_back("scales");
    s.blobs.push_back(w.scales);
  }
  if (w.block_size > 0) {
    names.push_back("block_scales");
    s.blobs.push_back(w.block_scales);
  }
  if (w.smooth.defined()) {
    names.push_back("smooth");
    s.blobs.push_back(w.smooth);
  }
  if (bias.defined()) {
    if (bias.numel() != w.n || !bias.device().is_cpu()) {
      return InvalidArgument("SerializeLinear: bias " + bias.DebugString() + " does not have " + std::to_string(w.n) +
                             " elements");
    }
    names.push_back("bias");
    s.blobs.push_back(bias.dtype() == DType::kF32 && bias.is_contiguous() && bias.rank() == 1 ? bias : bias.ToF32());
    if (s.blobs.back().rank() != 1) {
      FERRY_ASSIGN_OR_RETURN(s.blobs.back(), s.blobs.back().Reshape({w.n}));
    }
  }
  json layout = {
      {"backend", "cpu"},
      {"layout", "panels"},
      {"version", kPackedLayoutVersion},
      {"format", WeightFormatName(w.format)},
      {"dtype", std::string(DTypeName(w.dtype))},
      {"panel_cols", kPanelCols},
      {"panel_layout", PanelLayoutName(w.layout)},
      {"n", w.n},
      {"k", w.k},
      {"k_stored", w.k_stored},
      {"num_panels", w.num_panels},
      {"blob_alignment", kBlobAlignment},
      {"blobs", names},
  };
  if (w.block_size > 0) layout["block_size"] = w.block_size;
  s.layout_json = layout.dump();
  return s;
}

Result<PackedLinear> DeserializePackedWeight(const SerializedLinear& s) {
  try {
    return Deserialize(s);
  } catch (const std::exception& e) {  // nlohmann's accessors; the checks above should make this unreachable
    return InvalidArgument(std::string("linear layout: ") + e.what());
  }
}

}  // namespace ferry::kernels::cpu
