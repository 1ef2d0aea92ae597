#include "serve/queue_config.h"

#include "serve/config_yaml.h"

namespace ferry::serve {

using namespace config_yaml;  // NOLINT(google-build-using-namespace): the config readers

Status ParseQueueConfig(const YAML::Node& node, const std::string& path, batch::QueueOptions& out) {
  FERRY_ASSIGN_OR_RETURN(const MapReader m,
                         MapReader::Open(node, path,
                                         {"backend", "path", "url", "key_prefix", "consumer", "lease_ms", "max_attempts",
                                          "max_in_flight", "max_in_flight_under_load", "poll_ms", "max_file_bytes", "max_requests_per_batch",
                                          "reconnect_max_ms", "tier", "min_file_expiry_s", "output_file_expiry_s",
                                          "completion_window_s"}));
  std::string backend = "none";
  FERRY_RETURN_IF_ERROR(m.String("backend", backend));
  if (backend == "none") {
    out.backend = batch::QueueBackend::kNone;
  } else if (backend == "local") {
    out.backend = batch::QueueBackend::kLocal;
  } else if (backend == "redis") {
    out.backend = batch::QueueBackend::kRedis;
  } else {
    return ErrorAt(*m.Find("backend"), m.Path("backend"), "expected none, local or redis");
  }
  FERRY_RETURN_IF_ERROR(m.String("path", out.path));
  FERRY_RETURN_IF_ERROR(m.String("url", out.url));
  FERRY_RETURN_IF_ERROR(m.String("key_prefix", out.key_prefix));
  FERRY_RETURN_IF_ERROR(m.String("consumer", out.consumer));
  FERRY_RETURN_IF_ERROR(m.Int("lease_ms", out.lease_ms));
  FERRY_RETURN_IF_ERROR(m.Int("max_attempts", out.max_attempts));
  FERRY_RETURN_IF_ERROR(m.Int("max_in_flight", out.max_in_flight));
  // Unset: at most the default, and never above max_in_flight.
  out.max_in_flight_under_load = std::min(out.max_in_flight_under_load, out.max_in_flight);
  FERRY_RETURN_IF_ERROR(m.Int("max_in_flight_under_load", out.max_in_flight_under_load));
  FERRY_RETURN_IF_ERROR(m.Int("poll_ms", out.poll_ms));
  FERRY_RETURN_IF_ERROR(m.Int("max_file_bytes", out.max_file_bytes));
  FERRY_RETURN_IF_ERROR(m.Int("max_requests_per_batch", out.max_requests_per_batch));
  FERRY_RETURN_IF_ERROR(m.Int("reconnect_max_ms", out.reconnect_max_ms));
  FERRY_RETURN_IF_ERROR(m.String("tier", out.tier));
  FERRY_RETURN_IF_ERROR(m.Int("min_file_expiry_s", out.min_file_expiry_s));
  FERRY_RETURN_IF_ERROR(m.Int("output_file_expiry_s", out.output_file_expiry_s));
  FERRY_RETURN_IF_ERROR(m.Int("completion_window_s", out.completion_window_s));
  return Status::Ok();
}

}  // namespace ferry::serve
