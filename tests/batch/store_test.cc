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

// A batch created in `validating` holds no entries until its check ends: then it starts
// (entries queued, total set, in_progress_at) exactly once, however often it is finished.
TEST_P(StoreTest, AValidatedBatchStartsOnce) {
  BatchInfo b = MakeBatch("alice", 0);
  SetStatus(b, kValidating, b.created_at);
  b.in_progress_at = 0;
  ASSERT_TRUE(store_->CreateBatch(b, {}).ok());
  EXPECT_TRUE(LeaseAll("w1").empty());
  auto pending = store_->LeaseValidation("v1", 10);
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  ASSERT_EQ(pending->size(), 1u);
  EXPECT_EQ((*pending)[0].id, b.id);
  EXPECT_EQ((*pending)[0].tenant, "alice");
  if (GetParam() == "redis") {
    // One replica checks a batch at a time (its lock lapses after lease_ms if it dies).
    EXPECT_TRUE(store_->LeaseValidation("v2", 10)->empty());
  }
  auto seen = store_->GetBatch("alice", b.id);
  EXPECT_EQ(seen->status, kValidating);
  EXPECT_EQ(seen->ToJson()["in_progress_at"], nullptr);
  ASSERT_TRUE(store_->FinishValidation(b.id, MakeEntries(b.id, 3), nullptr).ok());
  ASSERT_TRUE(store_->FinishValidation(b.id, MakeEntries(b.id, 3), nullptr).ok());  // a second finisher: nothing
  auto started = store_->GetBatch("alice", b.id);
  ASSERT_TRUE(started.ok());
  EXPECT_EQ(started->status, kInProgress);
  EXPECT_EQ(started->total, 3);
  EXPECT_GE(started->in_progress_at, b.created_at);
  EXPECT_TRUE(store_->LeaseValidation("v1", 10)->empty());
  std::vector<Entry> leased = LeaseAll("w1");
  ASSERT_EQ(leased.size(), 3u);
  for (const Entry& e : leased) ASSERT_TRUE(store_->Complete(e, Ok(e)).ok());
  ASSERT_TRUE(store_->Maintain().ok());
  EXPECT_EQ(store_->GetBatch("alice", b.id)->status, kCompleted);
  EXPECT_EQ(store_->Counts()->jobs[kValidating], 0);
}

TEST_P(StoreTest, AFailedValidationKeepsItsErrors) {
  BatchInfo b = MakeBatch("alice", 0);
  SetStatus(b, kValidating, b.created_at);
  ASSERT_TRUE(store_->CreateBatch(b, {}).ok());
  EXPECT_EQ(store_->Counts()->jobs[kValidating], 1);
  const nlohmann::json errors = {
      {"object", "list"},
      {"data", {{{"code", "model_not_found"}, {"message", "m"}, {"param", "body.model"}, {"line", 4}}}}};
  ASSERT_TRUE(store_->FinishValidation(b.id, {}, errors).ok());
  auto failed = store_->GetBatch("alice", b.id);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->status, kFailed);
  EXPECT_GT(failed->failed_at, 0);
  EXPECT_EQ(failed->errors, errors);
  EXPECT_EQ(failed->total, 0);
  EXPECT_TRUE(LeaseAll("w1").empty());
  EXPECT_TRUE(store_->LeaseValidation("v1", 10)->empty());
  EXPECT_EQ(store_->CancelBatch("alice", b.id).status().code(), StatusCode::kFailedPrecondition);
}

TEST_P(StoreTest, CancellingAValidatingBatchEndsItAndItNeverStarts) {
  BatchInfo b = MakeBatch("alice", 0);
  SetStatus(b, kValidating, b.created_at);
  ASSERT_TRUE(store_->CreateBatch(b, {}).ok());
  ASSERT_EQ(store_->LeaseValidation("v1", 10)->size(), 1u);  // a check is under way ...
  auto c = store_->CancelBatch("alice", b.id);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->status, kCancelled);
  EXPECT_GT(c->cancelling_at, 0);
  EXPECT_GT(c->cancelled_at, 0);
  // ... and ends after the cancel: the batch stays cancelled and nothing is queued.
  ASSERT_TRUE(store_->FinishValidation(b.id, MakeEntries(b.id, 2), nullptr).ok());
  EXPECT_EQ(store_->GetBatch("alice", b.id)->status, kCancelled);
  EXPECT_TRUE(LeaseAll("w1").empty());
  EXPECT_TRUE(store_->LeaseValidation("v1", 10)->empty());
}

// Files past their expires_at read as gone at once; the sweep deletes their rows and content.
TEST_P(StoreTest, ExpiredFilesAreGoneAndSwept) {
  const int64_t now = NowUnix();
  FileInfo expired{NewId("file-"), "alice", "old.jsonl", "batch", 3, now - 10, now - 1};
  FileInfo later{NewId("file-"), "alice", "later.jsonl", "batch", 3, now, now + 3600};
  FileInfo kept{NewId("file-"), "alice", "kept.jsonl", "batch", 3, now, 0};
  FileInfo dropped{NewId("file-"), "alice", "dropped.jsonl", "batch", 3, now, now + 3600};
  for (const FileInfo* f : {&expired, &later, &kept, &dropped}) ASSERT_TRUE(store_->PutFile(*f, "abc").ok());
  ASSERT_TRUE(store_->DeleteFile("alice", dropped.id).ok());  // deleted before it expires: not swept later
  EXPECT_EQ(store_->GetFile("alice", expired.id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->FileContent("alice", expired.id).status().code(), StatusCode::kNotFound);
  auto listed = store_->ListFiles("alice", "", Page{});
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].id, kept.id);
  EXPECT_EQ((*listed)[1].id, later.id);
  EXPECT_EQ((*listed)[1].expires_at, now + 3600);
  EXPECT_EQ(store_->GetFile("alice", later.id)->ToJson()["expires_at"], now + 3600);
  EXPECT_EQ(store_->GetFile("alice", kept.id)->ToJson()["expires_at"], nullptr);
  EXPECT_EQ(store_->DeleteFile("alice", expired.id).code(), StatusCode::kNotFound);  // as good as gone
  auto swept = store_->SweepExpiredFiles(now);
  ASSERT_TRUE(swept.ok()) << swept.status().ToString();
  EXPECT_EQ(*swept, 1);
  EXPECT_EQ(*store_->SweepExpiredFiles(now), 0);
  // An hour on, the second goes too; the one without an expiry stays.
  EXPECT_EQ(*store_->SweepExpiredFiles(now + 3600), 1);
  EXPECT_EQ(store_->GetFile("alice", later.id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*store_->FileContent("alice", kept.id), "abc");
  EXPECT_EQ(store_->ListFiles("alice", "", Page{})->size(), 1u);
}

TEST_P(StoreTest, OutputFilesExpireAsTheBatchAsks) {
  BatchInfo b = MakeBatch("alice", 2);
  b.output_expires_after_s = 7200;
  ASSERT_TRUE(store_->CreateBatch(b, MakeEntries(b.id, 2)).ok());
  std::vector<Entry> leased = LeaseAll("w1");
  ASSERT_EQ(leased.size(), 2u);
  ASSERT_TRUE(store_->Complete(leased[0], Ok(leased[0])).ok());
  ASSERT_TRUE(store_->Complete(leased[1], EntryResult{Outcome::kFailed, R"({"custom_id":"c1"})"}).ok());
  ASSERT_TRUE(store_->Maintain().ok());
  auto done = store_->GetBatch("alice", b.id);
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->status, kCompleted);
  for (const std::string& id : {done->output_file_id, done->error_file_id}) {
    auto f = store_->GetFile("alice", id);
    ASSERT_TRUE(f.ok()) << id;
    EXPECT_EQ(f->expires_at, f->created_at + 7200);
  }
  // Swept with the rest once due.
  EXPECT_EQ(*store_->SweepExpiredFiles(NowUnix() + 7201), 2);
  EXPECT_EQ(store_->FileContent("alice", done->output_file_id).status().code(), StatusCode::kNotFound);
}

// A batch past its window ends expired: results already in (and those of requests still
// running) are kept; requests not run are in the error file as batch_expired.
TEST_P(StoreTest, AnExpiredBatchKeepsFinishedResultsAndExpiresTheRest) {
  BatchInfo b = MakeBatch("alice", 5);
  b.expires_at = NowUnix() + 1;
  ASSERT_TRUE(store_->CreateBatch(b, MakeEntries(b.id, 5)).ok());
  auto leased = store_->Lease("w1", 2);
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->size(), 2u);
  ASSERT_TRUE(store_->Complete((*leased)[0], Ok((*leased)[0])).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (NowUnix() < b.expires_at && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(store_->Renew("w1", {(*leased)[1]}).ok());  // still running: its lease is kept
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(NowUnix(), b.expires_at);
  ASSERT_TRUE(store_->Renew("w1", {(*leased)[1]}).ok());
  ASSERT_TRUE(store_->Maintain().ok());  // local: the queued ones are expired here, in bulk
  // The one running when the window closed finishes and counts.
  ASSERT_TRUE(*store_->Complete((*leased)[1], Ok((*leased)[1])));
  for (Entry& e : LeaseAll("w1")) {  // redis: each is skipped as it is leased
    EXPECT_EQ(e.skip, kExpired);
    ASSERT_TRUE(store_->Complete(e, EntryResult{Outcome::kCancelled, SkippedLine(e, kExpired)}).ok());
  }
  ASSERT_TRUE(store_->Maintain().ok());
  auto done = store_->GetBatch("alice", b.id);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->status, kExpired);
  EXPECT_GT(done->expired_at, 0);
  EXPECT_EQ(done->completed, 2);
  EXPECT_EQ(done->cancelled, 3);
  const std::string out = *store_->FileContent("alice", done->output_file_id);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2);
  EXPECT_NE(out.find("\"c0\""), std::string::npos);
  EXPECT_NE(out.find("\"c1\""), std::string::npos);
  const std::string err = *store_->FileContent("alice", done->error_file_id);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 3);
  size_t expired_lines = 0;
  for (size_t pos = err.find("batch_expired"); pos != std::string::npos; pos = err.find("batch_expired", pos + 1)) {
    ++expired_lines;
  }
  EXPECT_EQ(expired_lines, 3u);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, ::testing::Values("local", "redis"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ferry::batch
