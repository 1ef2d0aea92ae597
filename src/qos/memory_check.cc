#include "qos/memory_check.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "backend/cuda_backend.h"
#include "io/engine_file.h"
#include "io/hf_cache.h"
#include "io/model_config.h"
#include "io/model_source.h"
#include "io/safetensors.h"
#include "model/weights.h"
#include "sched/kv_budget.h"

namespace ferry::qos {

namespace fs = std::filesystem;

namespace {

// A number from a one-line file (cgroup v2 memory.max / memory.current); nullopt for "max"
// or anything unreadable.
std::optional<int64_t> ReadCgroupValue(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    return static_cast<int64_t>(std::stoll(text));
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

std::string FormatBytes(int64_t bytes) { return sched::FormatBinaryBytes(bytes); }

Result<MemoryNeed> EstimateMemory(const VariantPlan& given) {
  // A Hub id is measured at its snapshot in the Hugging Face cache, where it will load from.
  VariantPlan plan = given;
  FERRY_ASSIGN_OR_RETURN(plan.path, io::ResolveModelPath(given.path));
  MemoryNeed need;
  need.variant = plan.variant;
  need.device = plan.device.ToString();
  std::error_code ec;
  io::ModelConfig config;
  int build_max_seq = 0;
  DType activations = plan.activations;
  if (fs::is_regular_file(plan.path, ec) && io::EngineFile::LooksLikeEngine(plan.path)) {
    FERRY_ASSIGN_OR_RETURN(std::shared_ptr<io::EngineFile> file, io::EngineFile::Open(plan.path));
    const io::EngineManifest& m = file->manifest();
    auto it = m.files.find("config.json");
    if (it == m.files.end()) return DataLoss(plan.path + ": the engine holds no config.json");
    FERRY_ASSIGN_OR_RETURN(config, io::ParseModelConfig(it->second));
    build_max_seq = m.build.max_seq_len;
    if (m.build.activations) activations = *m.build.activations;
    need.weights_bytes = static_cast<int64_t>(file->size());
  } else if (fs::is_directory(plan.path, ec) || io::ModelSource::IsGguf(plan.path)) {
    FERRY_ASSIGN_OR_RETURN(std::shared_ptr<io::ModelSource> source, io::ModelSource::Open(plan.path));
    FERRY_ASSIGN_OR_RETURN(config, source->Config());
    int64_t bytes = static_cast<int64_t>(source->WeightBytes());
    if (!config.quantization.method.empty() && !source->is_gguf()) {
      // Pre-quantized weights are unpacked at load: plan for their dequantized size.
      FERRY_ASSIGN_OR_RETURN(std::shared_ptr<io::Checkpoint> checkpoint, io::Checkpoint::Open(plan.path));
      bytes = model::DequantizedBytes(*checkpoint, config);
    }
    if (plan.device.is_cuda() && config.torch_dtype == "float32" && DTypeSize(activations) == 2) bytes /= 2;
    need.weights_bytes = bytes;
  } else {
    return NotFound("variant '" + plan.variant + "': no checkpoint directory, GGUF file or engine file at " + plan.path);
  }
  if (config.family == io::ModelFamily::kDecoder) {
    int max_seq = plan.batching.max_seq_len;
    if (max_seq <= 0) max_seq = build_max_seq;
    if (max_seq <= 0) max_seq = std::min(config.max_position_embeddings, 4096);
    max_seq = std::min(max_seq, config.max_position_embeddings);
    const int64_t block = std::max(1, plan.batching.kv_block_tokens);
    int64_t blocks = static_cast<int64_t>(plan.batching.max_num_seqs) * ((max_seq + block - 1) / block);
    DType kv = DType::kF32;  // the CPU backend's cache
    if (plan.device.is_cuda()) {
      kv = plan.kv_cache_dtype.value_or(activations);
      blocks += 1;  // the block that padded graph rows write into
    }
    need.kv_bytes = blocks * block * config.num_layers * config.num_kv_heads * config.head_dim * 2 *
                    static_cast<int64_t>(DTypeSize(kv));
  }
  return need;
}

Result<MemoryBudget> QueryMemory(const DeviceSpec& device) {
  MemoryBudget b;
  b.device = device.ToString();
  if (device.is_cuda()) {
    FERRY_ASSIGN_OR_RETURN(const backend::CudaMemoryInfo info, backend::QueryCudaMemory(device.index));
    b.available_bytes = static_cast<int64_t>(info.free_bytes);
    b.total_bytes = static_cast<int64_t>(info.total_bytes);
    b.source = "cudaMemGetInfo";
    return b;
  }
  std::ifstream in("/proc/meminfo");
  if (!in) return Unavailable("cannot read /proc/meminfo");
  std::string line;
  std::map<std::string, int64_t> kb;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t value = 0;
    if (fields >> key >> value) kb[key] = value;
  }
  if (kb.count("MemTotal:") == 0) return Unavailable("/proc/meminfo has no MemTotal");
  b.total_bytes = kb["MemTotal:"] * 1024;
  b.available_bytes = (kb.count("MemAvailable:") ? kb["MemAvailable:"] : kb["MemFree:"]) * 1024;
  b.source = "/proc/meminfo";
  // A container's limit is what the kernel enforces, whatever the host has.
  const std::optional<int64_t> limit = ReadCgroupValue("/sys/fs/cgroup/memory.max");
  if (limit && *limit < b.total_bytes) {
    const int64_t used = ReadCgroupValue("/sys/fs/cgroup/memory.current").value_or(0);
    b.total_bytes = *limit;
    b.available_bytes = std::min(b.available_bytes, std::max<int64_t>(0, *limit - used));
    b.source = "cgroup memory.max";
  }
  return b;
}

Status CheckGroupMemory(const std::string& group, const std::vector<MemoryNeed>& needs,
                        const std::vector<MemoryBudget>& budgets, double usable_fraction) {
  std::map<std::string, int64_t> per_device;
  for (const MemoryNeed& n : needs) per_device[n.device] += n.total();
  for (const auto& [device, total] : per_device) {
    const MemoryBudget* budget = nullptr;
    for (const MemoryBudget& b : budgets) {
      if (b.device == device) budget = &b;
    }
    if (budget == nullptr) continue;  // nothing known about this device: the load will tell
    const int64_t usable = static_cast<int64_t>(static_cast<double>(budget->available_bytes) * usable_fraction);
    if (total <= usable) continue;
    std::string parts;
    for (const MemoryNeed& n : needs) {
      if (n.device != device) continue;
      parts += (parts.empty() ? "" : "; ") + n.variant + ": weights " + FormatBytes(n.weights_bytes) + " + KV " +
               FormatBytes(n.kv_bytes);
    }
    char fraction[16];
    std::snprintf(fraction, sizeof(fraction), "%.0f%%", usable_fraction * 100);
    return ResourceExhausted("the variants of model '" + group + "' need " + FormatBytes(total) + " on " + device +
                             " (" + parts + ") but " + device + " has " + FormatBytes(budget->available_bytes) +
                             " available of " + FormatBytes(budget->total_bytes) + " (" + budget->source +
                             "; " + fraction + " of it may be used); drop a variant, lower max_num_seqs or "
                             "max_seq_len, or use an fp8 KV cache");
  }
  return Status::Ok();
}

}  // namespace ferry::qos
