// The Store contract, on both backends: files and tenants, leases, results written once
// per custom_id, finalization into output and error files, cancellation, paging.
#include "batch/store.h"

#include <gtest/gtest.h>

#include <set>

#include "store_test_util.h"

namespace ferry::batch {
namespace {

using namespace ferry::batch::testing;

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    QueueOptions o;
    o.lease_ms = 200;
    if (GetParam() == "local") {
      dir_ = TempDir();
      o.backend = QueueBackend::kLocal;
      o.path = dir_;
    } else {
      if (!ferry::testing::HaveRedisServer()) GTEST_SKIP() << "redis-server is not installed";
      redis_ = std::make_unique<ferry::testing::RedisServer>(/*aof=*/false);
      ASSERT_TRUE(redis_->Start());
      o.backend = QueueBackend::kRedis;
      o.url = redis_->url();
    }
    auto s = OpenStore(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  void TearDown() override {
    store_.reset();
    redis_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Leases everything there is for `consumer` (a few rounds).
  std::vector<Entry> LeaseAll(const std::string& consumer) {
    std::vector<Entry> out;
    for (int round = 0; round < 10; ++round) {
      auto got = store_->Lease(consumer, 100);
      EXPECT_TRUE(got.ok()) << got.status().ToString();
      if (!got.ok() || got->empty()) break;
      out.insert(out.end(), got->begin(), got->end());
    }
    return out;
  }

  std::string dir_;
  std::unique_ptr<ferry::testing::RedisServer> redis_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreTest, FilesBelongToTheirTenant) {
  FileInfo f{NewId("file-"), "alice", "in.jsonl", "batch", 5, NowUnix()};
  ASSERT_TRUE(store_->PutFile(f, "hello").ok());
  auto got = store_->GetFile("alice", f.id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->filename, "in.jsonl");
  EXPECT_EQ(got->bytes, 5);
  EXPECT_EQ(*store_->FileContent("alice", f.id), "hello");
  EXPECT_EQ(store_->GetFile("bob", f.id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->FileContent("bob", f.id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->DeleteFile("bob", f.id).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->ListFiles("bob", "", Page{})->size(), 0u);
  EXPECT_EQ(store_->ListFiles("alice", "", Page{})->size(), 1u);
  EXPECT_EQ(store_->ListFiles("alice", "batch_output", Page{})->size(), 0u);
  ASSERT_TRUE(store_->DeleteFile("alice", f.id).ok());
  EXPECT_EQ(store_->GetFile("alice", f.id).status().code(), StatusCode::kNotFound);
}

TEST_P(StoreTest, ListsPageNewestFirst) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    BatchInfo b = MakeBatch("alice", 1);
    ASSERT_TRUE(store_->CreateBatch(b, MakeEntries(b.id, 1)).ok());
    ids.push_back(b.id);
  }
  ASSERT_TRUE(store_->CreateBatch(MakeBatch("bob", 1), {}).ok());
  auto first = store_->ListBatches("alice", Page{"", 2});
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 3u);  // limit + 1: there is more
  EXPECT_EQ((*first)[0].id, ids[4]);
  EXPECT_EQ((*first)[1].id, ids[3]);
  auto second = store_->ListBatches("alice", Page{ids[3], 10});
  ASSERT_EQ(second->size(), 3u);
  EXPECT_EQ((*second)[0].id, ids[2]);
  EXPECT_EQ((*second)[2].id, ids[0]);
  EXPECT_EQ(store_->ListBatches("", Page{"", 100})->size(), 6u);  // the admin view
  EXPECT_EQ(store_->GetBatch("bob", ids[0]).status().code(), StatusCode::kNotFound);
}

TEST_P(StoreTest, EachResultIsWrittenOnceAndTheLastFinalizes) {
  BatchInfo b = MakeBatch("alice", 6);
  ASSERT_TRUE(store_->CreateBatch(b, MakeEntries(b.id, 6)).ok());
  std::vector<Entry> leased = LeaseAll("w1");
  ASSERT_EQ(leased.size(), 6u);
  std::set<std::string> ids;
  for (const Entry& e : leased) {
    ids.insert(e.custom_id);
    EXPECT_EQ(e.tenant, "alice");
    EXPECT_TRUE(e.skip.empty());
  }
  EXPECT_EQ(ids.size(), 6u);
  for (const Entry& e : leased) {
    EntryResult r = e.index == 2 ? EntryResult{Outcome::kFailed, R"({"custom_id":"c2","error":"x"})"} : Ok(e);
    auto wrote = store_->Complete(e, r);
    ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
    EXPECT_TRUE(*wrote);
    auto again = store_->Complete(e, Ok(e));  // a retried entry finds its result there
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE(*again) << e.custom_id;
  }
  ASSERT_TRUE(store_->Maintain().ok());
  auto done = store_->GetBatch("alice", b.id);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->status, kCompleted);
  EXPECT_EQ(done->completed, 5);
  EXPECT_EQ(done->failed, 1);
  EXPECT_GT(done->completed_at, 0);
  auto out = store_->FileContent("alice", done->output_file_id);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(std::count(out->begin(), out->end(), '\n'), 5);
  EXPECT_EQ(out->substr(0, 18), R"({"custom_id":"c0",)");  // input order
  EXPECT_LT(out->find("\"c4\""), out->find("\"c5\""));
  auto err = store_->FileContent("alice", done->error_file_id);
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(*err, "{\"custom_id\":\"c2\",\"error\":\"x\"}\n");
  EXPECT_EQ(store_->ListFiles("alice", "batch_output", Page{})->size(), 2u);
  EXPECT_TRUE(LeaseAll("w1").empty());
  auto counts = store_->Counts();
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->jobs[kCompleted], 1);
  EXPECT_EQ(counts->completed, 5);
}

TEST_P(StoreTest, AnExpiredLeaseGoesToAnotherConsumer) {
  BatchInfo b = MakeBatch("alice", 3);
  ASSERT_TRUE(store_->CreateBatch(b, MakeEntries(b.id, 3)).ok());
  std::vector<Entry> first = LeaseAll("w1");
  ASSERT_EQ(first.size(), 3u);
  ASSERT_TRUE(store_->Complete(first[0], Ok(first[0])).ok());
  // w1 keeps one lease alive and lets the other lapse (lease_ms 200).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::vector<Entry> second;
  while (second.empty() && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(store_->Renew("w1", {first[1]}).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto got = store_->Lease("w2", 10);
    ASSERT_TRUE(got.ok());
    second = *got;
  }
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].custom_id, first[2].custom_id);
  // Both finish it: one result.
  EXPECT_TRUE(*store_->Complete(second[0], Ok(second[0])));
  EXPECT_FALSE(*store_->Complete(first[2], Ok(first[2])));
  EXPECT_TRUE(*store_->Complete(first[1], Ok(first[1])));
  ASSERT_TRUE(store_->Maintain().ok());
  auto done = store_->GetBatch("alice", b.id);
  EXPECT_EQ(done->status, kCompleted);
  EXPECT_EQ(done->completed, 3);
  const std::string out = *store_->FileContent("alice", done->output_file_id);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3);
}

// Each lease of an entry counts: a request whose consumer keeps dying is leased again with a
// higher count (the worker fails it past queue.max_attempts instead of running it forever).
TEST_P(StoreTest, LeasesCountTheAttemptsOfEachRequest) {
  BatchInfo b = MakeBatch("alice", 1);
  ASSERT_TRUE(store_->CreateBatch(b, MakeEntries(b.id, 1)).ok());
  std::vector<Entry> got = LeaseAll("w1");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].attempts, 1);
  for (int attempt = 2; attempt <= 3; ++attempt) {
    // The consumer dies (no renewal): after lease_ms another one takes the entry.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::vector<Entry> again;
    while (again.empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      auto r = store_->Lease("w" + std::to_string(attempt), 10);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      again = *r;
    }
    ASSERT_EQ(again.size(), 1u) << "attempt " << attempt;
    EXPECT_EQ(again[0].custom_id, got[0].custom_id);
    EXPECT_EQ(again[0].attempts, attempt);
  }
}

TEST_P(StoreTest, CancelKeepsFinishedResultsAndCancelsTheRest) {
  BatchInfo b = MakeBatch("alice", 5);
  ASSERT_TRUE(store_->CreateBatch(b, MakeEntries(b.id, 5)).ok());
  auto leased = store_->Lease("w1", 2);
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->size(), 2u);
  ASSERT_TRUE(store_->Complete((*leased)[0], Ok((*leased)[0])).ok());
  EXPECT_EQ(store_->CancelBatch("bob", b.id).status().code(), StatusCode::kNotFound);
  auto c = store_->CancelBatch("alice", b.id);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->status, kCancelling);
  EXPECT_GT(c->cancelling_at, 0);
  // The one running finishes and is kept; the rest come back marked to skip (redis) or
  // were cancelled at once (local).
  ASSERT_TRUE(store_->Complete((*leased)[1], Ok((*leased)[1])).ok());
  for (Entry& e : LeaseAll("w1")) {
    EXPECT_EQ(e.skip, kCancelled);
    ASSERT_TRUE(store_->Complete(e, EntryResult{Outcome::kCancelled, SkippedLine(e, kCancelled)}).ok());
  }
  ASSERT_TRUE(store_->Maintain().ok());
  auto done = store_->GetBatch("alice", b.id);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->status, kCancelled);
  EXPECT_EQ(done->completed, 2);
  EXPECT_EQ(done->cancelled, 3);
  EXPECT_GT(done->cancelled_at, 0);
  auto err = store_->FileContent("alice", done->error_file_id);
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(std::count(err->begin(), err->end(), '\n'), 3);
  EXPECT_NE(err->find("batch_cancelled"), std::string::npos);
  // A finished batch cannot be cancelled; a cancelled one is returned as it is.
  EXPECT_EQ(store_->CancelBatch("alice", b.id)->status, kCancelled);
  BatchInfo f = MakeBatch("alice", 1);
  SetStatus(f, kFailed, NowUnix());
  ASSERT_TRUE(store_->CreateBatch(f, {}).ok());
  EXPECT_EQ(store_->CancelBatch("alice", f.id).status().code(), StatusCode::kFailedPrecondition);
}

TEST_P(StoreTest, EntriesPastTheWindowAreSkippedAsExpired) {
  BatchInfo b = MakeBatch("alice", 2);
  b.expires_at = NowUnix() - 1;
  ASSERT_TRUE(store_->CreateBatch(b, MakeEntries(b.id, 2)).ok());
  for (Entry& e : LeaseAll("w1")) {
    EXPECT_EQ(e.skip, kExpired);
    ASSERT_TRUE(store_->Complete(e, EntryResult{Outcome::kCancelled, SkippedLine(e, kExpired)}).ok());
  }
  ASSERT_TRUE(store_->Maintain().ok());
  auto done = store_->GetBatch("alice", b.id);
  EXPECT_EQ(done->status, kExpired);
  EXPECT_GT(done->expired_at, 0);
  EXPECT_NE(store_->FileContent("alice", done->error_file_id)->find("batch_expired"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, ::testing::Values("local", "redis"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ferry::batch
