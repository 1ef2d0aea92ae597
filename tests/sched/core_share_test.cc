#include "sched/core_share.h"

#include <gtest/gtest.h>

namespace ferry::sched {
namespace {

TEST(CoreShareTest, MembersWithWorkSplitTheCoresAndOneAloneGetsThemAll) {
  CoreShare share(5);
  const int a = share.Join(), b = share.Join(), c = share.Join();
  EXPECT_EQ(share.cores(), 5);
  EXPECT_EQ(share.Busy(b), 5);  // alone
  EXPECT_EQ(share.Busy(a), 3);  // two with work: 5 = 3 + 2, the remainder to the lower member
  EXPECT_EQ(share.Busy(b), 2);
  EXPECT_EQ(share.Busy(c), 1);  // three: 2 + 2 + 1
  EXPECT_EQ(share.Busy(a), 2);
  share.Idle(a);
  share.Idle(b);
  EXPECT_EQ(share.Busy(c), 5);  // the others went idle
}

TEST(CoreShareTest, EveryMemberGetsAThreadWhenThereAreMoreMembersThanCores) {
  CoreShare share(2);
  const int a = share.Join(), b = share.Join(), c = share.Join();
  share.Busy(a);
  share.Busy(b);
  EXPECT_EQ(share.Busy(c), 1);
  EXPECT_EQ(share.Busy(a), 1);
  EXPECT_EQ(CoreShare(0).cores(), 1);  // never fewer than one core
}

TEST(CoreShareTest, AMemberNeverGetsMoreThanItsOwnCap) {
  CoreShare share(8);
  const int a = share.Join(2), b = share.Join();
  EXPECT_EQ(share.Busy(a), 2);  // alone, but capped
  EXPECT_EQ(share.Busy(b), 4);
  EXPECT_EQ(share.Busy(a), 2);
  share.Idle(a);
  EXPECT_EQ(share.Busy(b), 8);
}

}  // namespace
}  // namespace ferry::sched
