#include "batch/types.h"

#include <gtest/gtest.h>

namespace ferry::batch {
namespace {

TEST(TypesTest, BatchRecordsRoundTripAndSpeakOpenAi) {
  BatchInfo b;
  b.id = "batch_1";
  b.tenant = "t";
  b.endpoint = "/v1/completions";
  b.input_file_id = "file-1";
  b.metadata = {{"k", "v"}};
  b.created_at = 100;
  b.expires_at = 200;
  b.total = 3;
  b.completed = 2;
  b.failed = 1;
  SetStatus(b, kCompleted, 150);
  const BatchInfo c = BatchInfo::FromRecord(b.ToRecord());
  EXPECT_EQ(c.ToJson(), b.ToJson());
  EXPECT_EQ(c.tenant, "t");
  const nlohmann::json j = b.ToJson();
  EXPECT_EQ(j["object"], "batch");
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["completed_at"], 150);
  EXPECT_TRUE(j["failed_at"].is_null());
  EXPECT_TRUE(j["output_file_id"].is_null());
  EXPECT_EQ(j["request_counts"], (nlohmann::json{{"total", 3}, {"completed", 2}, {"failed", 1}}));
  EXPECT_FALSE(j.contains("tenant"));
}

TEST(TypesTest, OutputsKeepInputOrderAndSplitErrors) {
  const BatchOutputs o = AssembleOutputs({{2, {Outcome::kSucceeded, "c"}},
                                          {0, {Outcome::kSucceeded, "a"}},
                                          {1, {Outcome::kFailed, "b"}},
                                          {3, {Outcome::kCancelled, "d"}}});
  EXPECT_EQ(o.output, "a\nc\n");
  EXPECT_EQ(o.errors, "b\nd\n");
}

TEST(TypesTest, FinalStatusFollowsHowTheBatchEnded) {
  BatchInfo b;
  b.status = kInProgress;
  b.expires_at = 100;
  EXPECT_EQ(FinalStatus(b, 50), kCompleted);
  b.cancelled = 1;
  EXPECT_EQ(FinalStatus(b, 150), kExpired);
  b.status = kCancelling;
  EXPECT_EQ(FinalStatus(b, 150), kCancelled);
}

TEST(TypesTest, EntriesRoundTrip) {
  Entry e;
  e.batch_id = "batch_1";
  e.index = 7;
  e.custom_id = "x";
  e.url = "/v1/embeddings";
  e.body = R"({"model":"m"})";
  auto r = Entry::FromRecord(e.ToRecord().dump());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->index, 7);
  EXPECT_EQ(r->body, e.body);
  EXPECT_FALSE(Entry::FromRecord("nope").ok());
  const nlohmann::json skipped = nlohmann::json::parse(SkippedLine(e, kCancelled));
  EXPECT_EQ(skipped["error"]["code"], "batch_cancelled");
  EXPECT_TRUE(skipped["response"].is_null());
}

}  // namespace
}  // namespace ferry::batch
