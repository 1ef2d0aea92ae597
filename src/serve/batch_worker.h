// Runs queued batch requests against this server's models: leases entries from the store
// (as many at once as the server's capacity callback allows: queue.max_in_flight when no
// online work runs, fewer while it does), hands each to the same route an online request
// takes (in the batch tier, below every configured tier), records each result once, and
// keeps its leases alive while they run. It also checks the input files of new batches
// (`validating` → in_progress or failed) and deletes expired files. One thread; results that cannot be recorded yet
// (the store is unreachable) wait in memory and are retried with backoff.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "batch/store.h"
#include "serve/http_server.h"
#include "serve/metrics.h"

namespace ferry::serve {

// The response to one batch request (what the route would have sent a client).
struct BatchResponse {
  int status = 0;
  std::string body;
  std::string request_id;
};

class BatchWorker {
 public:
  // Runs one request; calls `done` exactly once, from any thread.
  using Dispatch = std::function<void(const batch::Entry& entry, std::function<void(BatchResponse)> done)>;

  // `capacity`: how many batch requests may run now (0 while the server is not serving).
  BatchWorker(batch::Store& store, const batch::QueueOptions& options, MetricsRegistry& registry, Dispatch dispatch,
              std::function<int()> capacity);
  ~BatchWorker();

  // Whether a model is served here: a batch whose lines name another fails validation
  // (model_not_found). Unset: not checked. Before Start.
  void SetModelCheck(std::function<bool(const std::string&)> check) { model_check_ = std::move(check); }

  void Start();
  // Looks for work now rather than at the next poll (a batch was just created).
  void Wake();
  // Stops leasing; waits up to `timeout_ms` for running requests and records their
  // results; what is left is run again elsewhere once its lease runs out.
  void Stop(int64_t timeout_ms);

  const std::string& consumer() const { return consumer_; }
  // For /admin/batches: consumer, running, pending results, leased and recorded counts.
  nlohmann::json StatusJson() const;

  // The line of an output or error file for a response.
  static batch::EntryResult ToResult(const batch::Entry& entry, const BatchResponse& response);

 private:
  void Loop();
  void RecordPending();
  void Refresh();
  // Checks the input files of batches in `validating` and starts or fails them.
  void ValidateBatches();

  batch::Store& store_;
  const batch::QueueOptions options_;
  Dispatch dispatch_;
  std::function<int()> capacity_;
  std::function<bool(const std::string&)> model_check_;
  std::string consumer_;
  GaugeFamily& requests_gauge_;  // ferry:batch_requests{state}
  GaugeFamily& jobs_gauge_;      // ferry:batch_jobs{state}

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                                   // GUARDED_BY(mu_)
  bool wake_ = false;                                   // GUARDED_BY(mu_)
  std::map<std::string, batch::Entry> running_;         // key: batch/index; GUARDED_BY(mu_)
  std::deque<std::pair<batch::Entry, batch::EntryResult>> pending_;  // GUARDED_BY(mu_)
  std::deque<std::pair<int64_t, batch::Entry>> retry_;  // (due ms, entry) requests refused with 429/503
  int64_t leased_total_ = 0, recorded_total_ = 0, duplicates_total_ = 0;  // GUARDED_BY(mu_)
  int64_t validated_total_ = 0, files_expired_total_ = 0;                 // GUARDED_BY(mu_)
  std::string last_error_;                              // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace ferry::serve

namespace ferry::serve {
// A ResponseWriter that hands the whole response to `done` (once) instead of a connection:
// what a batch request is answered through. A streamed response is collected.
std::shared_ptr<ResponseWriter> MakeCaptureWriter(std::string request_id, std::function<void(BatchResponse)> done);
}  // namespace ferry::serve
