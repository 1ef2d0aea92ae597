// The local backend: one SQLite database (WAL, synchronous=FULL) in the data directory.
// Every change is one transaction, committed to disk before the call returns, so a kill -9
// loses nothing acknowledged. A lock file keeps a second server off the same directory.
#pragma once

#include <memory>

#include "batch/store.h"

namespace ferry::batch {

Result<std::unique_ptr<Store>> OpenLocalStore(const QueueOptions& options);

}  // namespace ferry::batch
