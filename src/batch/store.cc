#include "batch/store.h"

#include "batch/local_store.h"
#include "batch/redis_store.h"

namespace ferry::batch {

std::string_view QueueBackendName(QueueBackend b) {
  switch (b) {
    case QueueBackend::kNone: return "none";
    case QueueBackend::kLocal: return "local";
    case QueueBackend::kRedis: return "redis";
  }
  return "none";
}

Status QueueOptions::Validate() const {
  if (backend == QueueBackend::kLocal && path.empty()) return InvalidArgument("queue.path: the local backend needs a data directory");
  if (backend == QueueBackend::kRedis && url.empty()) return InvalidArgument("queue.url: the redis backend needs redis://host:port");
  if (lease_ms < 100 || lease_ms > 86400000) return InvalidArgument("queue.lease_ms: must be in [100, 86400000]");
  if (max_attempts < 1 || max_attempts > 1000) return InvalidArgument("queue.max_attempts: must be in [1, 1000]");
  if (max_in_flight < 1 || max_in_flight > 4096) return InvalidArgument("queue.max_in_flight: must be in [1, 4096]");
  if (max_in_flight_under_load < 0 || max_in_flight_under_load > max_in_flight) {
    return InvalidArgument("queue.max_in_flight_under_load: must be in [0, max_in_flight]");
  }
  if (poll_ms < 1 || poll_ms > 60000) return InvalidArgument("queue.poll_ms: must be in [1, 60000]");
  if (max_file_bytes < 1) return InvalidArgument("queue.max_file_bytes: must be positive");
  if (max_requests_per_batch < 1) return InvalidArgument("queue.max_requests_per_batch: must be positive");
  if (reconnect_max_ms < 10) return InvalidArgument("queue.reconnect_max_ms: must be >= 10");
  if (key_prefix.empty()) return InvalidArgument("queue.key_prefix: must not be empty");
  if (tier.empty()) return InvalidArgument("queue.tier: must not be empty");
  if (min_file_expiry_s < 1 || min_file_expiry_s > kMaxFileExpiryS) {
    return InvalidArgument("queue.min_file_expiry_s: must be in [1, 2592000]");
  }
  if (output_file_expiry_s != 0 && (output_file_expiry_s < min_file_expiry_s || output_file_expiry_s > kMaxFileExpiryS)) {
    return InvalidArgument("queue.output_file_expiry_s: must be 0 (never) or in [queue.min_file_expiry_s, 2592000]");
  }
  if (completion_window_s < 1 || completion_window_s > 86400) {
    return InvalidArgument("queue.completion_window_s: must be in [1, 86400]");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Store>> OpenStore(const QueueOptions& options) {
  FERRY_RETURN_IF_ERROR(options.Validate());
  if (options.backend == QueueBackend::kLocal) return OpenLocalStore(options);
  if (options.backend == QueueBackend::kRedis) return OpenRedisStore(options);
  return InvalidArgument("queue.backend: none has no store");
}

}  // namespace ferry::batch
