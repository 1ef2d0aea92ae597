// The engine fingerprint: the documented JSON for CPU and GPU engines, read back exactly,
// lenient on fields a device does not use, strict on types.
#include <gtest/gtest.h>

#include "io/engine_fingerprint.h"

namespace ferry::io {
namespace {

using json = nlohmann::json;

TEST(EngineFingerprintTest, CpuFingerprintIsTheDocumentedJson) {
  EngineFingerprint fp;
  fp.device = "cpu";
  fp.cpu_isa = "avx2";
  fp.ferry_version = "0.1.0";
  fp.weight_layout_version = 1;
  fp.onednn_version = "2.6.3";
  const json expected = json::parse(R"({"device": "cpu", "cpu_isa": "avx2", "ferry_version": "0.1.0",
      "weight_layout_version": 1, "libraries": {"onednn": "2.6.3"}})");
  EXPECT_EQ(fp.ToJson(), expected);
  EXPECT_EQ(*EngineFingerprint::FromJson(expected), fp);
}

TEST(EngineFingerprintTest, GpuFingerprintIsTheDocumentedJson) {
  EngineFingerprint fp;
  fp.device = "cuda";
  fp.gpu = "NVIDIA H200";
  fp.arch = "sm_90";
  fp.ferry_version = "0.1.0";
  fp.weight_layout_version = 1;
  fp.cuda_runtime_version = 13000;
  fp.cublaslt_version = 130100;
  const json expected = json::parse(R"({"device": "cuda", "gpu": "NVIDIA H200", "arch": "sm_90",
      "ferry_version": "0.1.0", "weight_layout_version": 1,
      "libraries": {"cuda_runtime": 13000, "cublaslt": 130100}})");
  EXPECT_EQ(fp.ToJson(), expected);
  EXPECT_EQ(*EngineFingerprint::FromJson(expected), fp);
}

TEST(EngineFingerprintTest, AbsentFieldsKeepTheirDefaults) {
  auto fp = EngineFingerprint::FromJson(json::parse(R"({"device": "cuda", "gpu_arch": "sm_90"})"));
  ASSERT_TRUE(fp.ok()) << fp.status().ToString();
  EXPECT_EQ(fp->device, "cuda");
  EXPECT_EQ(fp->arch, "");
  EXPECT_EQ(fp->weight_layout_version, 0);
  EXPECT_EQ(fp->cublaslt_version, 0u);
}

TEST(EngineFingerprintTest, WrongTypesAreDataLossNamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"([1, 2])", "must be an object"},
      {R"({"device": 1})", "device must be a string"},
      {R"({"weight_layout_version": "1"})", "weight_layout_version must be an integer"},
      {R"({"weight_layout_version": 1.5})", "weight_layout_version must be an integer"},
      {R"({"cpu_isa": ["avx2"]})", "cpu_isa must be a string"},
      {R"({"libraries": "onednn"})", "libraries must be an object"},
      {R"({"libraries": {"cublaslt": -1}})", "libraries.cublaslt must be a non-negative integer"},
      {R"({"libraries": {"cuda_runtime": 99999999999}})", "libraries.cuda_runtime must be an integer"},
      {R"({"libraries": {"onednn": 2}})", "libraries.onednn must be a string"},
  };
  for (const auto& [text, message] : cases) {
    auto fp = EngineFingerprint::FromJson(json::parse(text));
    ASSERT_FALSE(fp.ok()) << text;
    EXPECT_EQ(fp.status().code(), StatusCode::kDataLoss) << text;
    EXPECT_NE(fp.status().message().find(message), std::string::npos) << fp.status().message();
    EXPECT_NE(fp.status().message().find("engine fingerprint"), std::string::npos) << fp.status().message();
  }
}

}  // namespace
}  // namespace ferry::io
