// The Batch API's records (OpenAI's wire format): files, batches, and the entries a
// batch's input file is split into. Pure values; the stores keep them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace ferry::batch {

// An uploaded or produced file. `purpose`: batch (input), batch_output (results).
struct FileInfo {
  std::string id;        // file-...
  std::string tenant;    // who owns it; only that tenant sees it
  std::string filename;
  std::string purpose;
  int64_t bytes = 0;
  int64_t created_at = 0;  // unix seconds
  int64_t expires_at = 0;  // unix seconds; 0: kept until deleted (null on the wire)

  // Past its expires_at (the sweeper deletes it; until then it reads as not found).
  bool Expired(int64_t now) const { return expires_at > 0 && now >= expires_at; }
  // OpenAI's file object.
  nlohmann::json ToJson() const;
};

// OpenAI's batch statuses.
inline constexpr const char* kValidating = "validating";
inline constexpr const char* kFailed = "failed";
inline constexpr const char* kInProgress = "in_progress";
inline constexpr const char* kFinalizing = "finalizing";
inline constexpr const char* kCompleted = "completed";
inline constexpr const char* kExpired = "expired";
inline constexpr const char* kCancelling = "cancelling";
inline constexpr const char* kCancelled = "cancelled";
// Every status, for metrics.
inline constexpr const char* kAllStatuses[] = {kValidating, kFailed,   kInProgress, kFinalizing,
                                               kCompleted,  kExpired,  kCancelling, kCancelled};
bool IsTerminal(const std::string& status);

struct BatchInfo {
  std::string id;  // batch_...
  std::string tenant;
  std::string endpoint;  // /v1/completions, /v1/chat/completions, /v1/embeddings, /v1/classify
  std::string input_file_id;
  std::string completion_window = "24h";
  std::string status;
  nlohmann::json metadata;  // null or an object of strings
  nlohmann::json errors;    // null or {object: list, data: [{code, message, param, line}]}
  std::string output_file_id;
  std::string error_file_id;
  // Unix seconds; 0: not reached (null on the wire).
  int64_t created_at = 0, in_progress_at = 0, expires_at = 0, finalizing_at = 0, completed_at = 0, failed_at = 0,
          expired_at = 0, cancelling_at = 0, cancelled_at = 0;
  // request_counts; `cancelled` (ferry's addition) counts requests never run because the
  // batch was cancelled or expired first.
  int64_t total = 0, completed = 0, failed = 0, cancelled = 0;
  // The output and error files expire this long after they are written (the request's
  // output_expires_after.seconds, else queue.output_file_expiry_s); 0: never.
  int64_t output_expires_after_s = 0;

  nlohmann::json ToJson() const;
  // The stores' own serialization (every field, the tenant included).
  nlohmann::json ToRecord() const;
  static BatchInfo FromRecord(const nlohmann::json& j);
};

// One request of a batch, as queued.
struct Entry {
  std::string batch_id;
  int64_t index = 0;  // its line in the input file, from 0
  std::string custom_id;
  std::string url;
  std::string body;  // the request's JSON object, as text
  // Filled by Lease: the batch's tenant, and whether the entry is to be skipped (the batch
  // is cancelling or past its window) rather than run.
  std::string tenant;
  std::string skip;     // "" run it; else kCancelled or kExpired
  std::string lease;    // the store's handle (the stream entry id for redis)
  int attempts = 1;     // leases of this entry so far, this one included

  nlohmann::json ToRecord() const;  // batch_id, index, custom_id, url, body
  static Result<Entry> FromRecord(const std::string& text);
};

enum class Outcome { kSucceeded, kFailed, kCancelled };

// What became of an entry: the line written to the batch's output file (succeeded) or
// error file (failed, cancelled).
struct EntryResult {
  Outcome outcome = Outcome::kSucceeded;
  std::string line;
};

// Request counts by state, over the batches a store holds (ferry:batch_requests).
struct QueueCounts {
  std::map<std::string, int64_t> jobs;      // by batch status
  int64_t requests_total = 0, completed = 0, failed = 0, cancelled = 0;  // over every batch
};

// Identifiers: prefix + 24 random hex digits.
std::string NewId(const char* prefix);
int64_t NowUnix();

// The output and error file contents of a finished batch from its results (in input
// order; each result's line already ends without a newline).
struct BatchOutputs {
  std::string output;  // JSONL of succeeded requests
  std::string errors;  // JSONL of failed and cancelled requests
};
BatchOutputs AssembleOutputs(const std::vector<std::pair<int64_t, EntryResult>>& results);

// The status a batch ends in once every entry has a result: cancelled when it was being
// cancelled, expired when requests were skipped past its window, else completed.
std::string FinalStatus(const BatchInfo& b, int64_t now);
// Sets the status and its timestamp (in_progress_at, completed_at, ...).
void SetStatus(BatchInfo& b, const std::string& status, int64_t now);

}  // namespace ferry::batch

namespace ferry::batch {
// The error-file line of a request never run: {"id", "custom_id", "response": null,
// "error": {"code": "batch_cancelled" | "batch_expired", "message"}}.
std::string SkippedLine(const Entry& entry, const std::string& why);
// The error line of a request leased more than max_attempts times without a result.
std::string ExhaustedLine(const Entry& entry, int max_attempts);
}  // namespace ferry::batch
