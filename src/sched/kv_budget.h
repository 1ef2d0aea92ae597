// How many KV-cache blocks a decoder gets from its memory budget, as a pure function of
// measured sizes (tested without a device; EngineCore::Create measures and asks).
//
// With a budget the KV cache takes what the model's weights, the activations of its largest
// step and a fixed reserve leave of it: on a GPU all of it (vLLM's gpu_memory_utilization:
// the budget is that fraction of the device's memory, and several models or versions share
// one GPU by each taking its fraction); on the host at most max_num_seqs sequences of
// max_seq_len (what no budget gives), since host memory is shared with everything else on
// the machine. A budget that cannot hold one sequence after the weights and activations
// is refused with every size named, before a single block is allocated.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace ferry::sched {

struct KvBudgetInput {
  std::string model;            // for messages
  std::string device;           // "cuda:0", "cpu"
  int64_t budget_bytes = 0;     // what this model may hold in all; 0: no budget (default_blocks)
  std::string budget_source;    // "gpu_memory_utilization 0.45 of 139.80 GiB", "host_memory_budget_bytes"
  // GPU: device memory free now plus what this model already holds; the budget must fit in
  // it (another model or process may hold the rest). -1: not known (the host).
  int64_t available_bytes = -1;
  int64_t weights_bytes = 0;     // what the loaded model holds (GPU: device bytes after load)
  int64_t activation_bytes = 0;  // peak of the largest step (GPU: measured by a profiling step)
  int64_t reserve_bytes = 0;     // step graphs, library workspaces, sampling scratch
  int64_t block_bytes = 0;       // one block: K and V of every layer
  int blocks_per_sequence = 1;   // one sequence of max_seq_len
  int max_seq_len = 0;
  int default_blocks = 0;        // max_num_seqs sequences of max_seq_len
  bool fill = true;              // take everything left (GPU) or at most default_blocks (host)
};

struct KvBudgetDecision {
  int blocks = 0;
  int64_t kv_bytes = 0;
  std::string summary;  // the numbers behind the choice, for the startup log
};

// InvalidArgument for a malformed input; ResourceExhausted, naming every size, for a budget
// that is not there or cannot hold one sequence.
Result<KvBudgetDecision> DecideKvBlocks(const KvBudgetInput& in);

// "1.50 GiB", "640.0 MiB", "12 KiB", "100 B".
std::string FormatBinaryBytes(int64_t bytes);

}  // namespace ferry::sched
