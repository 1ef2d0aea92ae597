// The process's file descriptors: every connection (server or load generator) is one, so a
// process that holds many raises its soft limit to the hard one and plans within it.
#pragma once

#include <cstdint>

namespace ferry {

// Raises RLIMIT_NOFILE's soft limit to the hard limit (where it is lower) and returns the
// soft limit then in force; -1 when unlimited or unreadable.
int64_t RaiseFileLimit();

// RLIMIT_NOFILE's soft limit as it is; -1 when unlimited or unreadable.
int64_t FileLimit();

// Descriptors open in this process now (entries of /proc/self/fd; -1 without /proc).
int64_t OpenFileCount();

}  // namespace ferry
