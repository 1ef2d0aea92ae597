#include "core/file_limit.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdio>

namespace ferry {
namespace {

TEST(FileLimitTest, RaisingReachesTheHardLimitAndReportsIt) {
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &before), 0);
  const int64_t raised = RaiseFileLimit();
  rlimit after{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &after), 0);
  EXPECT_EQ(after.rlim_cur, after.rlim_max);  // the soft limit now is the hard one
  EXPECT_GE(after.rlim_cur, before.rlim_cur);
  if (after.rlim_cur == RLIM_INFINITY) {
    EXPECT_EQ(raised, -1);
  } else {
    EXPECT_EQ(raised, static_cast<int64_t>(after.rlim_cur));
  }
  EXPECT_EQ(FileLimit(), raised);
  EXPECT_EQ(RaiseFileLimit(), raised);  // already raised: unchanged
}

TEST(FileLimitTest, OpenFileCountFollowsOpenAndClose) {
  const int64_t before = OpenFileCount();
  ASSERT_GT(before, 0);  // at least stdin, stdout, stderr (and the directory being read)
  std::FILE* a = std::tmpfile();
  std::FILE* b = std::tmpfile();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(OpenFileCount(), before + 2);
  std::fclose(a);
  std::fclose(b);
  EXPECT_EQ(OpenFileCount(), before);
}

}  // namespace
}  // namespace ferry
