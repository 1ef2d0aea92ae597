#include "kernels/weight_format.h"

#include <string>
#include <string_view>

namespace ferry::kernels {

// These names are written into engine files and build options; renaming one breaks every
// engine built with it.
const char* WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kNative: return "native";
    case WeightFormat::kF32: return "fp32";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kF16: return "fp16";
    case WeightFormat::kInt8: return "int8-wo";
    case WeightFormat::kInt8W8A8: return "int8";
    case WeightFormat::kFp8: return "fp8";
    case WeightFormat::kInt4: return "int4-wo";
  }
  return "?";
}

Result<WeightFormat> ParseWeightFormat(std::string_view name) {
  for (WeightFormat f : {WeightFormat::kNative, WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16,
                         WeightFormat::kInt8, WeightFormat::kInt8W8A8, WeightFormat::kFp8,
                         WeightFormat::kInt4}) {
    if (name == WeightFormatName(f)) return f;
  }
  return InvalidArgument("unknown weight format '" + std::string(name) +
                         "' (expected native, fp32, bf16, fp16, int8-wo, int8, fp8 or int4-wo)");
}

}  // namespace ferry::kernels
