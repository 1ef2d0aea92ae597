// Load and unload a repository model 50 times: every version's memory comes back (RSS).
// Labelled slow (about 35 s on 2 cores: each load warms the model up).
#include "serve/model_versions.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "repository_test_util.h"

namespace ferry::serve {
namespace {

using namespace ferry::serve::testing;  // NOLINT: the repository helpers

int64_t ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

TEST(ModelVersionsSlowTest, FiftyLoadUnloadCyclesReturnMemory) {
  const fs::path repo = TempRepo("cycles");
  Publish(repo / "kjv", 1, V1Source());
  std::ofstream(repo / "kjv" / "config.yaml") << "threads: 2\n";
  std::unique_ptr<Server> server = StartRepoServer(repo);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  auto cycle = [&] {
    ASSERT_EQ(testing::Http(port, "POST", "/admin/models/kjv/unload").status, 202);
    ASSERT_TRUE(WaitForState(port, "kjv", 1, "unloaded"));
    ASSERT_EQ(testing::Http(port, "POST", "/admin/models/kjv/load").status, 202);
    ASSERT_TRUE(WaitForState(port, "kjv", 1, "ready"));
    ASSERT_EQ(PostJson(port, "/v1/completions", Greedy("kjv", 2)).status, 200);
  };
  for (int i = 0; i < 5; ++i) cycle();  // allocator pools and caches reach their steady size
  const int64_t baseline = ResidentBytes();
  for (int i = 0; i < 50; ++i) {
    cycle();
    if (::testing::Test::HasFatalFailure()) return;
  }
  const int64_t after = ResidentBytes();
  // One loaded demo model is ~20 MB of weights, KV cache and scratch: a leak of one version
  // per cycle would add 1 GB; allow a few MB of allocator noise.
  EXPECT_LT(after - baseline, 16 << 20) << "RSS " << baseline << " -> " << after;
  const std::string metrics = testing::Http(port, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("ferry:model_loads_total{model_name=\"kjv\",version=\"1\",result=\"success\"} 56"),
            std::string::npos);
  server.reset();
  fs::remove_all(repo);
}

}  // namespace
}  // namespace ferry::serve
