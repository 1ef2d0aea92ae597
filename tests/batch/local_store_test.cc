// What only the local backend does: one server per data directory, and a restart after a
// crash runs again what was leased and not finished, without writing anything twice.
#include "batch/local_store.h"

#include <gtest/gtest.h>

#include "store_test_util.h"

namespace ferry::batch {
namespace {

using namespace ferry::batch::testing;

QueueOptions Local(const std::string& dir) {
  QueueOptions o;
  o.backend = QueueBackend::kLocal;
  o.path = dir;
  o.lease_ms = 60000;
  return o;
}

TEST(LocalStoreTest, ASecondServerCannotOpenTheSameDirectory) {
  const std::string dir = TempDir();
  auto first = OpenLocalStore(Local(dir));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = OpenLocalStore(Local(dir));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("in use"), std::string::npos);
  first->reset();
  EXPECT_TRUE(OpenLocalStore(Local(dir)).ok());  // released with the first
  std::filesystem::remove_all(dir);
}

TEST(LocalStoreTest, AReopenedStoreRunsLeasedEntriesAgainAndKeepsResults) {
  const std::string dir = TempDir();
  BatchInfo b = MakeBatch("alice", 4);
  {
    auto s = OpenLocalStore(Local(dir));
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->CreateBatch(b, MakeEntries(b.id, 4)).ok());
    auto leased = (*s)->Lease("w", 3);
    ASSERT_EQ(leased->size(), 3u);
    ASSERT_TRUE((*s)->Complete((*leased)[0], Ok((*leased)[0])).ok());
    // The server dies here with two leased and one never leased (the lease is 60 s).
  }
  auto s = OpenLocalStore(Local(dir));
  ASSERT_TRUE(s.ok());
  auto again = (*s)->Lease("w", 10);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), 3u);  // c1, c2 leased before; c3 never
  for (const Entry& e : *again) {
    EXPECT_NE(e.custom_id, "c0");
    ASSERT_TRUE((*s)->Complete(e, Ok(e)).ok());
  }
  auto done = (*s)->GetBatch("alice", b.id);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->status, kCompleted);
  EXPECT_EQ(done->completed, 4);
  auto out = (*s)->FileContent("alice", done->output_file_id);
  EXPECT_EQ(std::count(out->begin(), out->end(), '\n'), 4);
  std::filesystem::remove_all(dir);
}

TEST(LocalStoreTest, ABadPathFailsToOpen) {
  QueueOptions o = Local("/proc/ferry-no-such/dir");
  EXPECT_FALSE(OpenLocalStore(o).ok());
}

}  // namespace
}  // namespace ferry::batch
