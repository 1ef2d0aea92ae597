#include "sched/kv_sizing.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "backend/cuda_backend.h"

#include "core/logging.h"
#include "model/decoder.h"

namespace ferry::sched {

namespace fs = std::filesystem;

namespace {

// What a GPU holds besides weights, KV and the profiled step: step-graph recordings of the
// decode buckets (their own pool), cuBLASLt's plans, sampling scratch.
constexpr int64_t kGpuReserveBytes = 256ll << 20;

// vLLM's profile run: the largest step the options allow — max_num_batched_tokens prompt
// tokens over up to max_num_seqs sequences, a logits row each — run once against a cache
// just big enough for it. Returns the device memory the step took beyond what was held
// before (activations, logits, GEMM scratch).
Result<int64_t> ProfileStepPeak(engine::Engine& e, const engine::KvCacheConfig& kc,
                                const ContinuousBatchingOptions& b, int max_seq) {
  backend::Backend& be = e.backend();
  model::DecoderModel& model = *e.decoder();
  const int vocab = e.config().vocab_size;
  const int per_seq_max = std::max(1, max_seq - 1);
  const int seqs = std::max(1, std::min(b.max_num_seqs, b.max_num_batched_tokens));
  const int tokens = std::min(b.max_num_batched_tokens, seqs * per_seq_max);
  std::vector<int> lengths(seqs, tokens / seqs);
  for (int s = 0; s < tokens % seqs; ++s) ++lengths[s];
  engine::KvCacheConfig pc = kc;
  pc.prefix_caching = false;
  pc.num_blocks = 0;
  for (int len : lengths) pc.num_blocks += (std::max(len, 1) + kc.block_tokens - 1) / kc.block_tokens;
  FERRY_RETURN_IF_ERROR(be.Synchronize());
  be.ReleaseCachedMemory();
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<engine::KvCache> cache, engine::KvCache::Create(pc, be));
  FERRY_RETURN_IF_ERROR(be.Synchronize());
  const int64_t before = static_cast<int64_t>(be.DeviceBytesHeld());
  model::DecoderBatch batch;
  int32_t row = 0;
  for (int s = 0; s < seqs; ++s) {
    const int len = lengths[s];
    if (len <= 0) continue;
    FERRY_RETURN_IF_ERROR(cache->Reserve(s, len));
    for (int p = 0; p < len; ++p) {
      batch.token_ids.push_back(static_cast<int32_t>((static_cast<int64_t>(row + p) * 7919 + 13) % vocab));
      batch.positions.push_back(p);
      batch.slots.push_back(cache->Slot(s, p));
    }
    batch.spans.push_back(backend::SeqSpan{row, len, len, cache->BlockTable(s).data()});
    row += len;
    batch.logit_rows.push_back(row - 1);
  }
  {
    Tensor logits;
    FERRY_RETURN_IF_ERROR(model.Forward(batch, cache->layers(), logits).WithContext("the KV sizing's profiling step"));
    FERRY_ASSIGN_OR_RETURN(Tensor host_logits, be.ToHost(logits));  // what returning logits costs, too
    FERRY_RETURN_IF_ERROR(be.Synchronize());
  }
  const int64_t peak = static_cast<int64_t>(be.DeviceBytesHeld()) - before;
  for (int s = 0; s < seqs; ++s) cache->Free(s);
  cache.reset();
  be.ReleaseCachedMemory();  // the profiling cache and scratch go back to the device
  return std::max<int64_t>(0, peak);
}

}  // namespace

int64_t EstimateActivationBytes(const io::ModelConfig& c, const ContinuousBatchingOptions& b,
                                size_t activation_dtype_bytes) {
  const int64_t q_dim = static_cast<int64_t>(c.num_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  // The buffers one step keeps at once: residual, normed input, block output, qkv, q, k, v,
  // attention output, gate/up and the MLP product.
  const int64_t per_token = 3 * c.hidden_size + (q_dim + 2 * kv_dim) + q_dim + 2 * kv_dim + q_dim +
                            2 * c.intermediate_size + c.intermediate_size;
  const int64_t rows = b.max_num_batched_tokens;
  // Logits in the activation dtype, their f32 copy and the sampler's scratch.
  const int64_t logits = static_cast<int64_t>(b.max_num_seqs) * c.vocab_size * 4 * 3;
  return rows * per_token * static_cast<int64_t>(activation_dtype_bytes) + logits;
}

Status PrecheckMemoryBudget(const std::string& name, const std::string& path, const DeviceSpec& device,
                            const KvSizingOptions& o) {
  if (device.is_cuda() && o.gpu_memory_utilization > 0) {
    Result<backend::CudaMemoryInfo> memory = backend::QueryCudaMemory(device.index);
    if (!memory.ok()) return Status::Ok();  // the load itself will tell
    const int64_t share = static_cast<int64_t>(static_cast<double>(memory->total_bytes) * o.gpu_memory_utilization);
    if (share > static_cast<int64_t>(memory->free_bytes)) {
      char fraction[32];
      std::snprintf(fraction, sizeof(fraction), "%.3g", o.gpu_memory_utilization);
      return ResourceExhausted("model '" + name + "' on " + device.ToString() + ": its budget (gpu_memory_utilization " +
                               fraction + " of " + FormatBinaryBytes(static_cast<int64_t>(memory->total_bytes)) +
                               ") is " + FormatBinaryBytes(share) + " but only " +
                               FormatBinaryBytes(static_cast<int64_t>(memory->free_bytes)) +
                               " are free (other models or processes hold the rest); lower gpu_memory_utilization "
                               "or unload something first");
    }
    return Status::Ok();
  }
  if (device.is_cpu() && o.host_memory_budget_bytes > 0) {
    std::error_code ec;
    int64_t weights = 0;
    if (fs::is_directory(path, ec)) {
      for (const auto& entry : fs::directory_iterator(path, ec)) {
        if (entry.path().extension() == ".safetensors") weights += static_cast<int64_t>(entry.file_size(ec));
      }
    } else {
      weights = static_cast<int64_t>(fs::file_size(path, ec));
      if (ec) weights = 0;
    }
    if (weights >= o.host_memory_budget_bytes) {
      return ResourceExhausted("model '" + name + "' on cpu does not fit: its weights (" + path + ", " +
                               FormatBinaryBytes(weights) + ") exceed its host_memory_budget_bytes of " +
                               FormatBinaryBytes(o.host_memory_budget_bytes) + " before any KV cache");
    }
  }
  return Status::Ok();
}

Result<KvBudgetDecision> SizeKvCache(const std::string& name, engine::Engine& e, const engine::KvCacheConfig& kc,
                                     const ContinuousBatchingOptions& batching, int max_seq_len,
                                     const KvSizingOptions& o) {
  backend::Backend& be = e.backend();
  KvBudgetInput in;
  in.model = name;
  in.device = be.device().ToString();
  in.block_bytes = 2ll * kc.num_layers * kc.num_kv_heads * kc.block_tokens * kc.head_dim *
                   static_cast<int64_t>(DTypeSize(kc.dtype));
  in.blocks_per_sequence = (max_seq_len + kc.block_tokens - 1) / kc.block_tokens;
  in.max_seq_len = max_seq_len;
  in.default_blocks = o.default_seqs * in.blocks_per_sequence;
  const auto memory = be.DeviceMemory();
  if (memory && o.gpu_memory_utilization > 0) {
    const auto [free, total] = *memory;
    FERRY_RETURN_IF_ERROR(be.FinishLoading());
    in.weights_bytes = static_cast<int64_t>(be.DeviceBytesHeld());
    in.budget_bytes = static_cast<int64_t>(static_cast<double>(total) * o.gpu_memory_utilization);
    char source[96];
    std::snprintf(source, sizeof(source), "gpu_memory_utilization %.3g of %s", o.gpu_memory_utilization,
                  FormatBinaryBytes(static_cast<int64_t>(total)).c_str());
    in.budget_source = source;
    in.available_bytes = static_cast<int64_t>(free) + in.weights_bytes;
    in.reserve_bytes = kGpuReserveBytes;
    in.fill = true;
    // Refused before the profiling step when even the weights do not fit in the share.
    if (in.budget_bytes < in.weights_bytes + in.reserve_bytes) {
      in.activation_bytes = 0;
      return DecideKvBlocks(in);
    }
    FERRY_ASSIGN_OR_RETURN(in.activation_bytes, ProfileStepPeak(e, kc, batching, max_seq_len));
  } else if (!memory && o.host_memory_budget_bytes > 0) {
    in.budget_bytes = o.host_memory_budget_bytes;
    in.budget_source = "host_memory_budget_bytes";
    in.weights_bytes = static_cast<int64_t>(e.load_stats().weight_bytes);
    in.activation_bytes = EstimateActivationBytes(e.config(), batching, DTypeSize(be.activation_dtype()));
    in.fill = false;
  } else {
    if (o.gpu_memory_utilization > 0) {
      FERRY_LOG_WARN("{}: gpu_memory_utilization applies to GPUs; the KV cache on {} holds max_num_seqs sequences",
                     name, in.device);
    }
  }
  Result<KvBudgetDecision> d = DecideKvBlocks(in);
  if (d.ok()) FERRY_LOG_INFO("{} on {}: {}", name, in.device, d->summary);
  return d;
}

}  // namespace ferry::sched
