// The CPU backend's part of an engine fingerprint: this CPU's ISA and the oneDNN version,
// and the refusal of engines built for a stronger ISA.
#include <gtest/gtest.h>

#include <memory>
#include <regex>

#include "backend/cpu_backend.h"

namespace ferry::backend {
namespace {

bool HasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

TEST(CpuFingerprintTest, NamesThisCpuAndOneDnn) {
  std::unique_ptr<Backend> be = MakeCpuBackend();
  auto fp = be->Fingerprint();
  ASSERT_TRUE(fp.ok()) << fp.status().ToString();
  EXPECT_EQ(fp->device, "cpu");
  __builtin_cpu_init();
  const std::string isa = HasAvx512() ? "avx512" : __builtin_cpu_supports("avx2") ? "avx2" : "baseline";
  EXPECT_EQ(fp->cpu_isa, isa);
  EXPECT_TRUE(std::regex_match(fp->onednn_version, std::regex(R"(\d+\.\d+\.\d+)"))) << fp->onednn_version;
  EXPECT_TRUE(fp->gpu.empty() && fp->arch.empty() && fp->cublaslt_version == 0);
  // Its own engines run here.
  EXPECT_TRUE(be->CheckFingerprint(*fp).ok());
}

TEST(CpuFingerprintTest, RefusesOnlyAKnownStrongerIsa) {
  std::unique_ptr<Backend> be = MakeCpuBackend();
  io::EngineFingerprint fp;
  fp.device = "cpu";
  __builtin_cpu_init();
  for (const char* weaker : {"baseline", "avx2", "avx1024", ""}) {
    fp.cpu_isa = weaker;
    if (std::string(weaker) == "avx2" && !__builtin_cpu_supports("avx2")) continue;
    EXPECT_TRUE(be->CheckFingerprint(fp).ok()) << weaker;
  }
  if (!HasAvx512()) {
    fp.cpu_isa = "avx512";
    const Status s = be->CheckFingerprint(fp);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("'avx512'"), std::string::npos) << s.message();
  }
}

TEST(CpuFingerprintTest, RefusesAnotherDevice) {
  std::unique_ptr<Backend> be = MakeCpuBackend();
  io::EngineFingerprint fp;
  fp.device = "cuda";
  fp.arch = "sm_90";
  EXPECT_EQ(be->CheckFingerprint(fp).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ferry::backend
