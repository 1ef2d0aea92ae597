#include "core/precision.h"

#include <string>

namespace ferry {

namespace {

constexpr Precision kAll[] = {Precision::kFp32, Precision::kBf16, Precision::kFp16,
                              Precision::kInt8WeightOnly, Precision::kInt8, Precision::kFp8,
                              Precision::kInt4WeightOnly};

}  // namespace

std::string_view PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kInt8WeightOnly: return "int8-wo";
    case Precision::kInt8: return "int8";
    case Precision::kFp8: return "fp8";
    case Precision::kInt4WeightOnly: return "int4-wo";
  }
  return "?";
}

Result<Precision> ParsePrecision(std::string_view name) {
  for (const Precision p : kAll) {
    if (name == PrecisionName(p)) return p;
  }
  return InvalidArgument("unknown precision '" + std::string(name) + "' (fp32, bf16, fp16, int8-wo, int8, fp8, int4-wo)");
}

}  // namespace ferry
