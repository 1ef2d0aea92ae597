// The `queue:` keys of the server config (batch::QueueOptions).
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "batch/queue_options.h"
#include "core/status.h"

namespace ferry::serve {

// queue: {backend: none | local | redis, path, url, key_prefix, consumer, lease_ms,
//         max_in_flight, poll_ms, max_file_bytes, max_requests_per_batch,
//         reconnect_max_ms, tier}
Status ParseQueueConfig(const YAML::Node& node, const std::string& path, batch::QueueOptions& out);

}  // namespace ferry::serve
