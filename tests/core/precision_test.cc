#include <gtest/gtest.h>

#include "core/precision.h"

namespace ferry {
namespace {

TEST(PrecisionTest, EveryNameReadsBack) {
  for (const Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16, Precision::kInt8WeightOnly,
                            Precision::kInt8, Precision::kFp8, Precision::kInt4WeightOnly}) {
    auto parsed = ParsePrecision(PrecisionName(p));
    ASSERT_TRUE(parsed.ok()) << PrecisionName(p);
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_EQ(PrecisionName(Precision::kInt8WeightOnly), "int8-wo");
  EXPECT_EQ(*ParsePrecision("int8"), Precision::kInt8);
  EXPECT_EQ(*ParsePrecision("int4-wo"), Precision::kInt4WeightOnly);
}

TEST(PrecisionTest, UnknownNamesListTheKnownOnes) {
  for (const char* bad : {"int4", "", "FP32", "f32", "int8_wo"}) {
    auto p = ParsePrecision(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("fp32, bf16, fp16, int8-wo, int8, fp8, int4-wo"), std::string::npos);
  }
}

}  // namespace
}  // namespace ferry
