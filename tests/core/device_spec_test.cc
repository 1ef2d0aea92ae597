#include <gtest/gtest.h>

#include "core/device_spec.h"

namespace ferry {
namespace {

TEST(DeviceSpecTest, ParsesTheThreeForms) {
  EXPECT_EQ(*ParseDevice("cpu"), DeviceSpec::Cpu());
  EXPECT_EQ(*ParseDevice("cuda"), DeviceSpec::Cuda(0));
  EXPECT_EQ(*ParseDevice("cuda:0"), DeviceSpec::Cuda(0));
  EXPECT_EQ(*ParseDevice("cuda:3"), DeviceSpec::Cuda(3));
  EXPECT_EQ(ParseDevice("cuda:17")->index, 17);
  EXPECT_TRUE(ParseDevice("cuda:3")->is_cuda());
  EXPECT_TRUE(ParseDevice("cpu")->is_cpu());
  EXPECT_EQ(ParseDevice("cuda:2")->device(), Device::Cuda(2));
}

TEST(DeviceSpecTest, NamesReadBack) {
  for (const DeviceSpec d : {DeviceSpec::Cpu(), DeviceSpec::Cuda(0), DeviceSpec::Cuda(5)}) {
    EXPECT_EQ(*ParseDevice(d.ToString()), d);
  }
  EXPECT_EQ(DeviceSpec::Cuda(0).ToString(), "cuda");
  EXPECT_EQ(DeviceSpec::Cuda(1).ToString(), "cuda:1");
}

TEST(DeviceSpecTest, RefusesEverythingElseNamingTheForms) {
  for (const char* bad : {"", "tpu", "CPU", "cuda:", "cuda:x", "cuda:-1", "cuda:1:2", "cuda:99999", " cpu", "cuda1"}) {
    auto d = ParseDevice(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find("cpu, cuda or cuda:N"), std::string::npos) << d.status().message();
    EXPECT_NE(d.status().message().find(std::string("'") + bad + "'"), std::string::npos) << d.status().message();
  }
}

}  // namespace
}  // namespace ferry
