// Where files, batches and queued requests live: one interface, two backends.
//   local: an SQLite database in WAL mode in a data directory (one server)
//   redis: Redis Streams with a consumer group (many replicas on many machines)
// Every result is written once per (batch, custom_id): an entry run twice (its lease ran
// out, its server died after running it) finds its result already there.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "batch/queue_options.h"
#include "batch/types.h"
#include "core/status.h"

namespace ferry::batch {

struct Page {
  std::string after;  // the id the previous page ended with; "" from the start
  int limit = 20;
};

// Thread-safe. Errors: NotFound (no such file or batch, or another tenant's),
// Unavailable (the backend cannot be reached: the caller retries), FailedPrecondition
// (a cancel of a finished batch), DataLoss.
class Store {
 public:
  virtual ~Store() = default;
  virtual std::string backend() const = 0;

  // ---- files
  virtual Status PutFile(const FileInfo& info, const std::string& content) = 0;
  virtual Result<FileInfo> GetFile(const std::string& tenant, const std::string& id) = 0;
  virtual Result<std::string> FileContent(const std::string& tenant, const std::string& id) = 0;
  // Newest first; `purpose` "" for any. Returns up to page.limit + 1 (the caller sees has_more).
  virtual Result<std::vector<FileInfo>> ListFiles(const std::string& tenant, const std::string& purpose,
                                                  const Page& page) = 0;
  virtual Status DeleteFile(const std::string& tenant, const std::string& id) = 0;
  // Deletes the rows and content of files past their expires_at; returns how many. Until
  // then an expired file already reads as NotFound and is not listed.
  virtual Result<int64_t> SweepExpiredFiles(int64_t now) = 0;

  // ---- batches
  // Stores the batch and queues its entries (none for a batch that failed validation). A
  // batch stored in `validating` (no entries) waits for a worker to check its input file:
  // LeaseValidation, then FinishValidation.
  virtual Status CreateBatch(const BatchInfo& batch, const std::vector<Entry>& entries) = 0;
  // Up to `max` batches in `validating` for `consumer` to check (redis: each under a lock
  // of lease_ms, so that one replica checks a batch at a time; a dead one's lock lapses).
  virtual Result<std::vector<BatchInfo>> LeaseValidation(const std::string& consumer, int max) = 0;
  // The end of a batch's validation, atomically and only while it is still `validating`
  // (a cancel may have come first): `errors` null → in_progress with `entries` queued and
  // total set; else failed with OpenAI's errors object. A batch no longer validating is
  // left as it is (Ok).
  virtual Status FinishValidation(const std::string& id, const std::vector<Entry>& entries,
                                  const nlohmann::json& errors) = 0;
  // `tenant` "" (the admin view): any tenant's.
  virtual Result<BatchInfo> GetBatch(const std::string& tenant, const std::string& id) = 0;
  // Newest first, up to page.limit + 1; `tenant` "" for every tenant's.
  virtual Result<std::vector<BatchInfo>> ListBatches(const std::string& tenant, const Page& page) = 0;
  // in_progress → cancelling (requests not yet run are then recorded as cancelled; those
  // running finish and are kept); validating → cancelled at once (nothing was queued); a
  // cancelling or cancelled batch is returned as it is.
  virtual Result<BatchInfo> CancelBatch(const std::string& tenant, const std::string& id) = 0;

  // ---- the worker's side
  // Up to `max` entries for `consumer` to run: new ones, then those whose lease ran out
  // (lease_ms without a Renew or Complete). Entries of a cancelling or expired batch come
  // with `skip` set: complete them as cancelled without running them.
  virtual Result<std::vector<Entry>> Lease(const std::string& consumer, int max) = 0;
  // Extends the leases of entries still running.
  virtual Status Renew(const std::string& consumer, const std::vector<Entry>& running) = 0;
  // Records the entry's result unless it already has one; true when this call wrote it.
  // The last result of a batch finalizes it (output and error files, final status).
  virtual Result<bool> Complete(const Entry& entry, const EntryResult& result) = 0;
  // Finalizes batches whose last result is in but whose files are not (a finalizer died),
  // releases what finished batches no longer need, and (local) records the queued
  // requests of batches past their expires_at as batch_expired at once (redis: each is
  // skipped as its entry is leased). Called now and then by the worker.
  virtual Status Maintain() = 0;
  virtual Result<QueueCounts> Counts() = 0;
};

// Opens the configured backend (creating the data directory or consumer group).
Result<std::unique_ptr<Store>> OpenStore(const QueueOptions& options);

}  // namespace ferry::batch
