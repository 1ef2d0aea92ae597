// Shared by the benchmark programs: `--threads=N` sets ferry's compute threads (kernels and
// oneDNN) and is removed before Google Benchmark parses the remaining arguments.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/thread_pool.h"

namespace ferry::bench {

// Applies --threads=N (0 or absent: all cores) and returns the other arguments.
inline std::vector<char*> ApplyThreadsFlag(int argc, char** argv) {
  int threads = 0;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
    } else {
      args.push_back(argv[i]);
    }
  }
  SetComputeThreads(threads);
  benchmark::AddCustomContext("compute_threads", std::to_string(ComputeThreads()));
  return args;
}

}  // namespace ferry::bench
