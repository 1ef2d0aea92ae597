#include "sched/kv_budget.h"

#include <algorithm>
#include <cstdio>

namespace ferry::sched {

std::string FormatBinaryBytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / (1 << 30));
  } else if (bytes >= (int64_t{1} << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / (1 << 20));
  } else if (bytes >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.0f KiB", b / 1024);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  }
  return buf;
}

Result<KvBudgetDecision> DecideKvBlocks(const KvBudgetInput& in) {
  if (in.block_bytes <= 0 || in.blocks_per_sequence <= 0 || in.default_blocks < 0) {
    return InvalidArgument("KV budget: block size, blocks per sequence and default blocks must be positive");
  }
  KvBudgetDecision d;
  if (in.budget_bytes <= 0) {
    d.blocks = in.default_blocks;
    d.kv_bytes = static_cast<int64_t>(d.blocks) * in.block_bytes;
    d.summary = std::to_string(d.blocks) + " KV blocks (" + FormatBinaryBytes(d.kv_bytes) + ", " +
                std::to_string(d.blocks / in.blocks_per_sequence) + " sequences of " + std::to_string(in.max_seq_len) +
                " tokens); no memory budget set";
    return d;
  }
  const std::string where = "model '" + in.model + "' on " + in.device;
  if (in.available_bytes >= 0 && in.budget_bytes > in.available_bytes) {
    return ResourceExhausted(where + ": its budget (" + in.budget_source + ") is " +
                             FormatBinaryBytes(in.budget_bytes) + " but only " +
                             FormatBinaryBytes(in.available_bytes) +
                             " are free for it (other models or processes hold the rest); lower the budget or "
                             "unload something first");
  }
  const int64_t fixed = in.weights_bytes + in.activation_bytes + in.reserve_bytes;
  const int64_t left = in.budget_bytes - fixed;
  const int64_t one_sequence = static_cast<int64_t>(in.blocks_per_sequence) * in.block_bytes;
  const std::string breakdown = "weights " + FormatBinaryBytes(in.weights_bytes) + " + activations " +
                                FormatBinaryBytes(in.activation_bytes) + " + reserve " +
                                FormatBinaryBytes(in.reserve_bytes) + " = " + FormatBinaryBytes(fixed) + " of " +
                                FormatBinaryBytes(in.budget_bytes) + " (" + in.budget_source + ")";
  if (left < one_sequence) {
    return ResourceExhausted(where + " does not fit: " + breakdown + ", leaving " +
                             FormatBinaryBytes(std::max<int64_t>(0, left)) + " for the KV cache; one sequence of " +
                             std::to_string(in.max_seq_len) + " tokens needs " + FormatBinaryBytes(one_sequence) +
                             " (" + std::to_string(in.blocks_per_sequence) + " blocks of " +
                             FormatBinaryBytes(in.block_bytes) +
                             "); raise the budget, lower max_seq_len or max_num_batched_tokens, or use an fp8 KV "
                             "cache or a smaller precision");
  }
  const int64_t fit = left / in.block_bytes;
  d.blocks = static_cast<int>(std::min<int64_t>(fit, in.fill ? int64_t{1} << 30 : in.default_blocks));
  d.kv_bytes = static_cast<int64_t>(d.blocks) * in.block_bytes;
  char seqs[32];
  std::snprintf(seqs, sizeof(seqs), "%.1f", static_cast<double>(d.blocks) / in.blocks_per_sequence);
  d.summary = std::to_string(d.blocks) + " KV blocks (" + FormatBinaryBytes(d.kv_bytes) + ", " + seqs +
              " sequences of " + std::to_string(in.max_seq_len) + " tokens) from " + breakdown +
              (in.fill ? "" : "; at most max_num_seqs sequences on the host");
  return d;
}

}  // namespace ferry::sched
