// The batch worker over a real local store with a dispatch function standing in for the
// server's routes: the lines it writes, its width, retries of 429/503, leases of requests
// that never answer.
#include "serve/batch_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

namespace ferry::serve {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

struct Fixture {
  Fixture() {
    char tmpl[] = "/tmp/ferry_batch_worker_XXXXXX";
    dir = mkdtemp(tmpl);
    options.backend = batch::QueueBackend::kLocal;
    options.path = dir;
    options.poll_ms = 5;
    options.max_in_flight = 4;
    store = std::move(batch::OpenStore(options)).value();
  }
  ~Fixture() { std::filesystem::remove_all(dir); }

  std::string Submit(int n) {
    batch::BatchInfo b;
    b.id = batch::NewId("batch_");
    b.tenant = "t";
    b.endpoint = "/v1/completions";
    b.created_at = batch::NowUnix();
    b.expires_at = b.created_at + 3600;
    b.total = n;
    batch::SetStatus(b, batch::kInProgress, b.created_at);
    std::vector<batch::Entry> entries;
    for (int i = 0; i < n; ++i) {
      batch::Entry e;
      e.batch_id = b.id;
      e.index = i;
      e.custom_id = "c" + std::to_string(i);
      e.url = "/v1/completions";
      e.body = R"({"model":"m"})";
      entries.push_back(e);
    }
    EXPECT_TRUE(store->CreateBatch(b, entries).ok());
    return b.id;
  }
  batch::BatchInfo WaitFinal(const std::string& id) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    batch::BatchInfo b;
    while (std::chrono::steady_clock::now() < deadline) {
      b = *store->GetBatch("t", id);
      if (batch::IsTerminal(b.status)) return b;
      std::this_thread::sleep_for(5ms);
    }
    ADD_FAILURE() << "batch " << id << " is still " << b.status;
    return b;
  }

  std::string dir;
  batch::QueueOptions options;
  std::unique_ptr<batch::Store> store;
  MetricsRegistry registry;
};

TEST(BatchWorkerTest, ResultLinesAreOpenAis) {
  batch::Entry e;
  e.custom_id = "x";
  const batch::EntryResult ok = BatchWorker::ToResult(e, BatchResponse{200, R"({"a":1})", "req-1"});
  EXPECT_EQ(ok.outcome, batch::Outcome::kSucceeded);
  const json line = json::parse(ok.line);
  EXPECT_EQ(line["custom_id"], "x");
  EXPECT_EQ(line["response"]["status_code"], 200);
  EXPECT_EQ(line["response"]["request_id"], "req-1");
  EXPECT_EQ(line["response"]["body"]["a"], 1);
  EXPECT_TRUE(line["error"].is_null());
  EXPECT_EQ(line["id"].get<std::string>().rfind("batch_req_", 0), 0u);
  const batch::EntryResult bad = BatchWorker::ToResult(e, BatchResponse{404, "not json", "req-2"});
  EXPECT_EQ(bad.outcome, batch::Outcome::kFailed);
  EXPECT_EQ(json::parse(bad.line)["response"]["body"], "not json");
}

TEST(BatchWorkerTest, RunsEveryEntryWithinItsWidth) {
  Fixture f;
  std::atomic<int> running{0}, peak{0}, calls{0};
  std::atomic<int> width{3};
  BatchWorker w(*f.store, f.options, f.registry,
                [&](const batch::Entry& e, std::function<void(BatchResponse)> done) {
                  ++calls;
                  peak = std::max(peak.load(), ++running);
                  std::thread([&, e, done = std::move(done)] {
                    std::this_thread::sleep_for(2ms);
                    --running;
                    done(BatchResponse{e.index == 5 ? 400 : 200, R"({"i":)" + std::to_string(e.index) + "}", "r"});
                  }).detach();
                },
                [&] { return width.load(); });
  w.Start();
  const std::string id = f.Submit(40);
  const batch::BatchInfo b = f.WaitFinal(id);
  w.Stop(5000);
  EXPECT_EQ(b.status, batch::kCompleted);
  EXPECT_EQ(b.completed, 39);
  EXPECT_EQ(b.failed, 1);
  EXPECT_EQ(calls.load(), 40);
  EXPECT_LE(peak.load(), 3);
  EXPECT_EQ(w.StatusJson()["recorded_total"], 40);
  EXPECT_NE(f.registry.Render().find("ferry:batch_requests"), std::string::npos);
}

// A batch created validating is checked by the worker against its input file: the
// endpoint, the models the server serves (the check callback), the file still there.
TEST(BatchWorkerTest, ValidatesNewBatchesThenRunsThem) {
  Fixture f;
  std::atomic<int> calls{0};
  BatchWorker w(*f.store, f.options, f.registry,
                [&](const batch::Entry&, std::function<void(BatchResponse)> done) {
                  ++calls;
                  done(BatchResponse{200, "{}", "r"});
                },
                [] { return 2; });
  w.SetModelCheck([](const std::string& model) { return model == "m"; });
  const auto create = [&](const std::string& content) {
    batch::FileInfo file{batch::NewId("file-"), "t", "in.jsonl", "batch", static_cast<int64_t>(content.size()),
                         batch::NowUnix()};
    EXPECT_TRUE(f.store->PutFile(file, content).ok());
    batch::BatchInfo b;
    b.id = batch::NewId("batch_");
    b.tenant = "t";
    b.endpoint = "/v1/completions";
    b.input_file_id = file.id;
    b.created_at = batch::NowUnix();
    b.expires_at = b.created_at + 3600;
    batch::SetStatus(b, batch::kValidating, b.created_at);
    EXPECT_TRUE(f.store->CreateBatch(b, {}).ok());
    return std::make_pair(b.id, file.id);
  };
  const std::string line = R"({"custom_id":"a","method":"POST","url":"/v1/completions","body":{"model":"m"}})";
  const std::string other = R"({"custom_id":"b","method":"POST","url":"/v1/completions","body":{"model":"x"}})";
  const auto good = create(line + "\n" + R"({"custom_id":"c","method":"POST","url":"/v1/completions","body":{"model":"m"}})");
  const auto unknown = create(line + "\n" + other + "\n");
  const auto deleted = create(line);
  ASSERT_TRUE(f.store->DeleteFile("t", deleted.second).ok());
  w.Start();
  w.Wake();
  const batch::BatchInfo ok = f.WaitFinal(good.first);
  EXPECT_EQ(ok.status, batch::kCompleted);
  EXPECT_EQ(ok.total, 2);
  EXPECT_GT(ok.in_progress_at, 0);
  const batch::BatchInfo bad = f.WaitFinal(unknown.first);
  EXPECT_EQ(bad.status, batch::kFailed);
  ASSERT_EQ(bad.errors["data"].size(), 1u);
  EXPECT_EQ(bad.errors["data"][0]["code"], "model_not_found");
  EXPECT_EQ(bad.errors["data"][0]["line"], 2);
  const batch::BatchInfo gone = f.WaitFinal(deleted.first);
  EXPECT_EQ(gone.status, batch::kFailed);
  EXPECT_EQ(gone.errors["data"][0]["code"], "file_not_found");
  EXPECT_EQ(gone.errors["data"][0]["param"], "input_file_id");
  w.Stop(5000);
  EXPECT_EQ(calls.load(), 2);  // only the good batch's requests ran
  EXPECT_EQ(w.StatusJson()["validated_total"], 3);
}

// Nothing is validated while the server does not serve (width 0): whether a model is
// served is known only once it does.
TEST(BatchWorkerTest, ValidationWaitsForTheServerToServe) {
  Fixture f;
  std::atomic<int> width{0};
  BatchWorker w(*f.store, f.options, f.registry,
                [&](const batch::Entry&, std::function<void(BatchResponse)> done) { done(BatchResponse{200, "{}", "r"}); },
                [&] { return width.load(); });
  const std::string content = R"({"custom_id":"a","method":"POST","url":"/v1/completions","body":{"model":"m"}})";
  batch::FileInfo file{batch::NewId("file-"), "t", "in.jsonl", "batch", static_cast<int64_t>(content.size()),
                       batch::NowUnix()};
  ASSERT_TRUE(f.store->PutFile(file, content).ok());
  batch::BatchInfo b;
  b.id = batch::NewId("batch_");
  b.tenant = "t";
  b.endpoint = "/v1/completions";
  b.input_file_id = file.id;
  b.created_at = batch::NowUnix();
  batch::SetStatus(b, batch::kValidating, b.created_at);
  ASSERT_TRUE(f.store->CreateBatch(b, {}).ok());
  w.Start();
  // Several turns of the loop (poll_ms 5): it stays validating.
  const auto until = std::chrono::steady_clock::now() + 200ms;
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_EQ(f.store->GetBatch("t", b.id)->status, batch::kValidating);
    std::this_thread::sleep_for(10ms);
  }
  width = 1;
  EXPECT_EQ(f.WaitFinal(b.id).status, batch::kCompleted);
  w.Stop(5000);
}

TEST(BatchWorkerTest, OverloadAnswersAreRetriedNotRecorded) {
  Fixture f;
  std::atomic<int> calls{0};
  BatchWorker w(*f.store, f.options, f.registry,
                [&](const batch::Entry&, std::function<void(BatchResponse)> done) {
                  // The first two answers say "busy"; then the request succeeds.
                  const int n = calls++;
                  done(BatchResponse{n < 2 ? (n == 0 ? 429 : 503) : 200, "{}", "r"});
                },
                [] { return 1; });
  w.Start();
  const batch::BatchInfo b = f.WaitFinal(f.Submit(1));
  w.Stop(5000);
  EXPECT_EQ(b.completed, 1);
  EXPECT_EQ(b.failed, 0);
  EXPECT_EQ(calls.load(), 3);
}

// A request whose server died with it three times (three leases that lapsed) is recorded
// as failed on its fourth lease, with OpenAI's error line, and never dispatched again.
TEST(BatchWorkerTest, ARequestPastMaxAttemptsFailsWithoutRunning) {
  Fixture f;
  f.options.lease_ms = 100;
  f.options.max_attempts = 3;
  f.store.reset();  // one store per data directory at a time
  auto reopened = batch::OpenStore(f.options);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  f.store = std::move(reopened).value();
  const std::string id = f.Submit(1);
  for (int dead = 1; dead <= 3; ++dead) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    std::vector<batch::Entry> got;
    while (got.empty() && std::chrono::steady_clock::now() < deadline) {
      got = *f.store->Lease("dead-" + std::to_string(dead), 1);  // leased, then never renewed
      if (got.empty()) std::this_thread::sleep_for(20ms);
    }
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].attempts, dead);
  }
  std::atomic<int> calls{0};
  BatchWorker w(*f.store, f.options, f.registry,
                [&](const batch::Entry&, std::function<void(BatchResponse)> done) {
                  ++calls;
                  done(BatchResponse{200, "{}", "r"});
                },
                [] { return 1; });
  w.Start();
  const batch::BatchInfo b = f.WaitFinal(id);
  w.Stop(5000);
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(b.failed, 1);
  EXPECT_EQ(b.completed, 0);
  const std::string errors = *f.store->FileContent("t", b.error_file_id);
  const json line = json::parse(errors.substr(0, errors.find('\n')));
  EXPECT_EQ(line["custom_id"], "c0");
  EXPECT_EQ(line["error"]["code"], "max_attempts_exceeded");
}

TEST(BatchWorkerTest, WidthZeroLeasesNothing) {
  Fixture f;
  std::atomic<int> calls{0};
  std::atomic<int> width{0};
  BatchWorker w(*f.store, f.options, f.registry,
                [&](const batch::Entry&, std::function<void(BatchResponse)> done) {
                  ++calls;
                  done(BatchResponse{200, "{}", "r"});
                },
                [&] { return width.load(); });
  w.Start();
  const std::string id = f.Submit(3);
  std::this_thread::sleep_for(100ms);  // 20 poll periods: nothing may run
  EXPECT_EQ(calls.load(), 0);
  width = 2;  // the server is serving again
  EXPECT_EQ(f.WaitFinal(id).completed, 3);
  w.Stop(5000);
}

TEST(BatchWorkerTest, CaptureWriterDeliversOnceAndCollectsStreams) {
  std::vector<BatchResponse> got;
  auto w = MakeCaptureWriter("req-9", [&](BatchResponse r) { got.push_back(r); });
  w->StartStream(200, "text/event-stream");
  w->Write("a");
  w->Write("b");
  w->End();
  w->Send(500, "application/json", "late");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, 200);
  EXPECT_EQ(got[0].body, "ab");
  EXPECT_EQ(got[0].request_id, "req-9");
  std::vector<BatchResponse> dropped;
  { auto never = MakeCaptureWriter("req-0", [&](BatchResponse r) { dropped.push_back(r); }); }
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].status, 500);
}

}  // namespace
}  // namespace ferry::serve
