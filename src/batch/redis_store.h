// The redis backend, for several replicas sharing one queue. Keys (P = queue.key_prefix):
//   P:queue                  the stream of queued requests; consumer group P:workers
//   P:batch:{id}             a hash: the batch's record, status, counts, file ids, times
//   P:batch:{id}:results     a hash custom_id → result, each written once (HSETNX in a script
//                            that also counts it, atomically)
//   P:batches:{tenant}, P:batches:all   sorted sets of batch ids (newest last)
//   P:finalizing             batches whose last result is in; finalized under a lock
//   P:file:{id}, P:file:{id}:content, P:files:{tenant}
// Entries whose consumer stops renewing them (XCLAIM) for lease_ms are taken over with
// XAUTOCLAIM. Lost connections are re-made with a doubling backoff.
#pragma once

#include <memory>

#include "batch/store.h"

namespace ferry::batch {

Result<std::unique_ptr<Store>> OpenRedisStore(const QueueOptions& options);

}  // namespace ferry::batch
