// `queue:` — where the Batch API keeps its files, batches and queued requests.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace ferry::batch {

enum class QueueBackend { kNone, kLocal, kRedis };

struct QueueOptions {
  QueueBackend backend = QueueBackend::kNone;  // none: the Batch API answers 404
  std::string path;          // local: the data directory (created; one server at a time)
  std::string url;           // redis: redis://[:password@]host:port[/db]
  std::string key_prefix = "ferry";  // redis: every key starts with "<prefix>:"
  std::string consumer;      // redis: this replica's consumer name; "" = host name + pid
  int64_t lease_ms = 60000;  // an entry not renewed for this long is run again elsewhere
  // Leases of one request before it is recorded as failed without running again: a request
  // whose server dies every time it runs (a poison request) must not take down every
  // replica in turn, forever.
  int max_attempts = 3;
  int max_in_flight = 32;    // batch requests this server runs at once when no online work runs
  // ... and while online requests run (or ran within the last second): batch work takes
  // only what online traffic leaves. 0: none then (batches wait for idle time).
  int max_in_flight_under_load = 2;
  int64_t poll_ms = 200;     // how often an idle worker looks for work
  int64_t max_file_bytes = 200 << 20;  // an upload over this is refused with 413
  int64_t max_requests_per_batch = 50000;
  int64_t reconnect_max_ms = 5000;  // redis: backoff between reconnects doubles up to this
  std::string tier = "batch";
  // Retention. An upload's expires_after[seconds] must be in [min_file_expiry_s, 2592000]
  // (OpenAI's bounds; tests lower the minimum); a batch's output and error files expire
  // output_file_expiry_s after they are written unless the batch asks otherwise (0: never).
  int64_t min_file_expiry_s = 3600;
  int64_t output_file_expiry_s = 2592000;
  // A batch's expires_at is this long after its creation (the "24h" completion window);
  // a test and operations knob: shorter windows expire batches sooner.
  int64_t completion_window_s = 86400;  // the tier name batch requests are logged and measured under

  static constexpr int64_t kMaxFileExpiryS = 2592000;  // 30 days, OpenAI's maximum

  bool enabled() const { return backend != QueueBackend::kNone; }
  Status Validate() const;
};

std::string_view QueueBackendName(QueueBackend b);

}  // namespace ferry::batch
