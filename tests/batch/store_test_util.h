// Stores of both backends for the batch tests: a local store in a temporary directory, or
// a redis store on a real redis-server the helper starts.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "batch/store.h"
#include "redis_server.h"

namespace ferry::batch::testing {

inline std::string TempDir() {
  char tmpl[] = "/tmp/ferry_batch_XXXXXX";
  return mkdtemp(tmpl);
}

// Entries of a batch of `n` completions, custom ids "c0".."c{n-1}".
inline std::vector<Entry> MakeEntries(const std::string& batch_id, int n) {
  std::vector<Entry> out;
  for (int i = 0; i < n; ++i) {
    Entry e;
    e.batch_id = batch_id;
    e.index = i;
    e.custom_id = "c" + std::to_string(i);
    e.url = "/v1/completions";
    e.body = R"({"model":"m","prompt":"p)" + std::to_string(i) + R"("})";
    out.push_back(e);
  }
  return out;
}

inline BatchInfo MakeBatch(const std::string& tenant, int n) {
  BatchInfo b;
  b.id = NewId("batch_");
  b.tenant = tenant;
  b.endpoint = "/v1/completions";
  b.input_file_id = "file-x";
  b.created_at = NowUnix();
  b.expires_at = b.created_at + 86400;
  b.total = n;
  SetStatus(b, kInProgress, b.created_at);
  return b;
}

inline EntryResult Ok(const Entry& e) {
  return EntryResult{Outcome::kSucceeded, R"({"custom_id":")" + e.custom_id + R"(","response":{"status_code":200}})"};
}

}  // namespace ferry::batch::testing
