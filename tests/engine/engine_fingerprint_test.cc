// Engine fingerprints: what a build records besides the backend's part, and the checks a
// loader makes before any device is touched, each naming the fix.
#include <gtest/gtest.h>

#include "backend/cuda_backend.h"
#include "engine/engine_fingerprint.h"

namespace ferry {
namespace {

io::EngineFingerprint Fingerprint(const std::string& device) {
  io::EngineFingerprint fp;
  fp.device = device;
  fp.weight_layout_version = io::kWeightLayoutVersion;
  if (device == "cuda") fp.arch = "sm_90";
  if (device == "cpu") fp.cpu_isa = "baseline";
  return fp;
}

TEST(EngineFingerprintTest, CurrentFingerprintAddsFerrysVersions) {
  auto be = backend::MakeCpuBackend();
  auto fp = engine::CurrentFingerprint(*be);
  ASSERT_TRUE(fp.ok()) << fp.status().ToString();
  EXPECT_EQ(fp->device, "cpu");
  EXPECT_FALSE(fp->ferry_version.empty());
  EXPECT_EQ(fp->weight_layout_version, io::kWeightLayoutVersion);
  EXPECT_FALSE(fp->cpu_isa.empty());
  EXPECT_TRUE(engine::CheckFingerprint(*fp, DeviceSpec::Cpu()).ok());
}

TEST(EngineFingerprintTest, MatchingDeviceKindsPass) {
  EXPECT_TRUE(engine::CheckEngineDevice(Fingerprint("cpu"), DeviceSpec::Cpu()).ok());
  EXPECT_TRUE(engine::CheckEngineDevice(Fingerprint("cuda"), DeviceSpec::Cuda(0)).ok());
  EXPECT_TRUE(engine::CheckEngineDevice(Fingerprint("cuda"), DeviceSpec::Cuda(3)).ok());
}

TEST(EngineFingerprintTest, EachMismatchNamesItsFix) {
  struct Case {
    io::EngineFingerprint fp;
    DeviceSpec device;
    std::string message;
  };
  io::EngineFingerprint old_layout = Fingerprint("cpu");
  old_layout.weight_layout_version = 7;
  const std::vector<Case> cases = {
      {old_layout, DeviceSpec::Cpu(), "weight layout version 7"},
      {Fingerprint("cpu"), DeviceSpec::Cuda(0), "`ferry build --device cuda`"},
      {Fingerprint("cpu"), DeviceSpec::Cuda(2), "run the checkpoint itself with --device cuda:2"},
      {Fingerprint("cuda"), DeviceSpec::Cpu(), "engine was built for a GPU (sm_90); load it with --device cuda"},
      {Fingerprint("tpu"), DeviceSpec::Cpu(), "unknown device 'tpu'"},
      {Fingerprint(""), DeviceSpec::Cpu(), "unknown device ''"},
  };
  for (const Case& c : cases) {
    const Status s = engine::CheckEngineDevice(c.fp, c.device);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << c.message;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
    // The full check stops at the same place, before making any backend.
    EXPECT_EQ(engine::CheckFingerprint(c.fp, c.device).message(), s.message());
  }
}

TEST(EngineFingerprintTest, AGpuEngineWithoutAGpuSaysWhatItWasBuiltFor) {
  if (backend::CudaAvailable()) GTEST_SKIP() << "a GPU is present";
  const Status s = engine::CheckFingerprint(Fingerprint("cuda"), DeviceSpec::Cuda(0));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("engine was built for a GPU (sm_90)"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ferry
