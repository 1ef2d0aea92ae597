// PagedAttention: validation, the decode split plan, the decode kernels (one CTA per
// sequence, KV head and key split, all query heads of the group together: head columns for
// groups of up to 8 heads, 16-row tiles for wider ones) and the reduction over splits.
// Prefill rows are handed to attention_prefill.cu, f32 to attention_simt.cu.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_decode_columns.cuh"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace ferry::cuda {
namespace {

using attention_detail::Aligned16;
using attention_detail::Bf16;
using attention_detail::Fp8;
using attention_detail::Half;
using attention_detail::Mode;
using attention_detail::Params;

// Decode shape of the tensor-core kernel: 16 rows (the heads of one KV head), 4 warps each
// taking alternate 16-key tiles, so a pipeline stage holds 64 keys.
constexpr int kDecodeKeyTile = 16;
constexpr int kDecodeStageKeys = 4 * kDecodeKeyTile;
// At most this many splits per sequence, each at least one pipeline stage long.
constexpr int kMaxSplits = 32;
// Decode CTAs resident per multiprocessor (shared memory and the kernel's launch bounds allow
// 3 at head_dim 128, with a 16-bit or an fp8 cache; checked below).
constexpr int kDecodeCtasPerSm = 3;

template <typename T, typename KvT, int HD>
using DecodeConfig = attention_detail::FlashConfig<T, KvT, HD, 1, 4, kDecodeKeyTile>;

// Whether kDecodeCtasPerSm CTAs of config C fit a multiprocessor's shared memory (228 KB on
// sm_90, of which the system reserves 1 KB per CTA).
template <typename C>
constexpr bool FitsDecodeCtas() {
  return kDecodeCtasPerSm * (C::kSmemBytes + 1024) <= 228 * 1024;
}
static_assert(FitsDecodeCtas<DecodeConfig<Bf16, Bf16, 128>>() && FitsDecodeCtas<DecodeConfig<Bf16, Fp8, 128>>(),
              "the split plan assumes kDecodeCtasPerSm resident decode CTAs");

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int RowTiles(int group) { return static_cast<int>(CeilDiv(group, 16)); }

int SplitCap(int max_context_len) {
  return static_cast<int>(std::clamp<int64_t>(CeilDiv(std::max(max_context_len, 1), kDecodeStageKeys), 1, kMaxSplits));
}

// The most decode CTAs either kernel keeps resident per multiprocessor (bounds the workspace).
constexpr int kMaxDecodeCtasPerSm = std::max(kDecodeCtasPerSm, attention_detail::kColumnCtasPerSm);

// Upper limit on the splits considered: enough CTAs for about two full waves.
int SplitLimit(int64_t ctas_per_split, int num_sms, int ctas_per_sm) {
  const int64_t slots = static_cast<int64_t>(num_sms) * ctas_per_sm;
  return static_cast<int>(std::max<int64_t>(1, CeilDiv(2 * slots, ctas_per_split)));
}

struct DecodePlan {
  int splits = 1;
};

// Chooses the split of the longest context that minimizes (waves of CTAs) x (keys per CTA +
// a fixed cost of about one stage per CTA). Short contexts and large batches get one split.
// ctas_per_kv_head: RowTiles(group) for the 16-row kernel, 1 for head columns.
DecodePlan PlanDecode(int num_seqs, int num_kv_heads, int ctas_per_kv_head, int max_context_len, int num_sms,
                      int ctas_per_sm) {
  const int64_t ctas_per_split = static_cast<int64_t>(num_seqs) * num_kv_heads * ctas_per_kv_head;
  const int64_t slots = static_cast<int64_t>(num_sms) * ctas_per_sm;
  const int64_t ctx = std::max(max_context_len, 1);
  const int limit = std::min(SplitCap(max_context_len), SplitLimit(ctas_per_split, num_sms, ctas_per_sm));
  DecodePlan best;
  int64_t best_cost = -1;
  for (int s = 1; s <= limit; ++s) {
    const int64_t tokens = CeilDiv(CeilDiv(ctx, s), kDecodeStageKeys) * kDecodeStageKeys;
    const int64_t used = CeilDiv(ctx, tokens);
    const int64_t cost = CeilDiv(ctas_per_split * used, slots) * (tokens + kDecodeStageKeys);
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best.splits = static_cast<int>(used);
    }
  }
  return best;
}

// The automatic choice for groups of up to 8 heads (CudaAttentionTiming, H200, 32 / 8 heads,
// 512 keys of context): at head_dim 128 head columns took 0.68-0.86x the 16-row kernel's
// time from 32 sequences up (an e4m3 cache 0.54-0.69x) and about the same at 1-8; at
// head_dim 64 0.78-0.80x at 32 sequences but 0.97-1.07x at 128-256, where both kernels move
// the same bytes per second. So head_dim 64 and below takes head columns while one CTA per
// sequence and KV head fits one wave.
bool ColumnsByDefault(int head_dim, int num_seqs, int num_kv_heads, int num_sms) {
  if (head_dim >= 128) return true;
  return static_cast<int64_t>(num_seqs) * num_kv_heads <=
         static_cast<int64_t>(num_sms) * attention_detail::kColumnCtasPerSm;
}

size_t PartialBytes(int64_t partial_rows, int num_heads, int head_dim) {
  return static_cast<size_t>(partial_rows) * num_heads * (head_dim + 1) * sizeof(float);
}

// Multiprocessors of the current device, queried once per device.
Result<int> CurrentSmCount() {
  static std::atomic<int> cached[64] = {};
  int device = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  if (device < 64) {
    const int sms = cached[device].load(std::memory_order_relaxed);
    if (sms > 0) return sms;
  }
  int sms = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (device < 64) cached[device].store(sms, std::memory_order_relaxed);
  return sms;
}

Status CheckArgs(const PagedAttentionArgs& a) {
  auto bad = [](const std::string& what) { return InvalidArgument("PagedAttention: " + what); };
  if (a.num_seqs < 0 || a.num_tokens < 0) return bad("negative num_seqs or num_tokens");
  FERRY_RETURN_IF_ERROR(attention_detail::CheckHeads("PagedAttention", a.num_heads, a.num_kv_heads, a.head_dim));
  if (a.act_dtype != DType::kBF16 && a.act_dtype != DType::kF16 && a.act_dtype != DType::kF32) {
    return bad(std::string("activation dtype ") + std::string(DTypeName(a.act_dtype)) + " (bf16, f16 or f32)");
  }
  if (a.kv_dtype != DType::kBF16 && a.kv_dtype != DType::kF16 && a.kv_dtype != DType::kF8E4M3 &&
      a.kv_dtype != DType::kF32) {
    return bad(std::string("cache dtype ") + std::string(DTypeName(a.kv_dtype)) + " (bf16, f16, f8e4m3 or f32)");
  }
  if (a.num_seqs == 0 || a.num_tokens == 0) return Status::Ok();
  if (a.num_seqs > 65535) return bad("at most 65535 sequences per call");
  if (a.block_tokens <= 0 || a.max_blocks_per_seq <= 0) return bad("block_tokens and max_blocks_per_seq must be positive");
  if (a.max_q_len <= 0 || a.max_context_len <= 0) return bad("max_q_len and max_context_len must be positive");
  if ((a.prefill_tokens >= 0) != (a.prefill_seqs >= 0) || a.prefill_tokens > a.num_tokens ||
      a.prefill_seqs > a.num_seqs || a.prefill_seq_begin < 0 || a.prefill_seq_begin > a.num_seqs) {
    return bad("prefill_tokens, prefill_seqs and prefill_seq_begin must be -1, -1, 0 or describe the batch");
  }
  if (!a.q || !a.out || !a.k_cache || !a.v_cache || !a.q_begin || !a.q_len || !a.context_len || !a.block_tables) {
    return bad("null q, out, cache or batch array");
  }
  if (!Aligned16(a.q) || !Aligned16(a.out) || !Aligned16(a.k_cache) || !Aligned16(a.v_cache)) {
    return bad("q, out and the caches must be 16-byte aligned");
  }
  const int64_t width = static_cast<int64_t>(a.num_heads) * a.head_dim;
  for (const int64_t stride : {a.q_row_stride, a.out_row_stride}) {
    if (stride != 0 && (stride < width || stride % 8 != 0)) {
      return bad("row stride " + std::to_string(stride) + " must be 0 or a multiple of 8 that is >= " +
                 std::to_string(width));
    }
  }
  return Status::Ok();
}

// The tensor-core path runs for 16-bit activations over a cache of the same dtype or e4m3;
// everything else (f32 activations, an f32 cache, mismatched 16-bit dtypes) on the f32 kernel.
bool UseTensorCores(DType act, DType kv) {
  return (act == DType::kBF16 || act == DType::kF16) && (kv == act || kv == DType::kF8E4M3);
}

template <typename T, typename KvT, int HD>
Status LaunchDecode(const Params& p, cudaStream_t stream) {
  using C = DecodeConfig<T, KvT, HD>;
  const dim3 grid(p.splits, p.num_kv_heads * RowTiles(p.group), p.num_seqs);
  if (p.softcap > 0.0f) {
    FERRY_RETURN_IF_ERROR(
        (attention_detail::LaunchWithSmem<
            attention_detail::FlashAttentionKernel<T, KvT, HD, 1, 4, kDecodeKeyTile, Mode::kDecode, true>>(
            grid, dim3(C::kThreads), C::kSmemBytes, stream, p)));
  } else {
    FERRY_RETURN_IF_ERROR(
        (attention_detail::LaunchWithSmem<
            attention_detail::FlashAttentionKernel<T, KvT, HD, 1, 4, kDecodeKeyTile, Mode::kDecode, false>>(
            grid, dim3(C::kThreads), C::kSmemBytes, stream, p)));
  }
  if (p.splits > 1) {
    LaunchKernel(attention_detail::CombineSplitsKernel<T, HD>, dim3(p.num_heads, p.num_seqs), dim3(HD), 0, stream, p);
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  }
  return Status::Ok();
}

template <typename T, typename KvT, int HD>
Status LaunchColumns(const Params& p, cudaStream_t stream) {
  const dim3 grid(p.splits, p.num_kv_heads, p.num_seqs);
  const dim3 block(32 * attention_detail::kColumnWarps);
  if (p.softcap > 0.0f) {
    LaunchKernel(attention_detail::DecodeColumnsKernel<T, KvT, HD, true>, grid, block, 0, stream, p);
  } else {
    LaunchKernel(attention_detail::DecodeColumnsKernel<T, KvT, HD, false>, grid, block, 0, stream, p);
  }
  FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  if (p.splits > 1) {
    LaunchKernel(attention_detail::CombineSplitsKernel<T, HD>, dim3(p.num_heads, p.num_seqs), dim3(HD), 0, stream, p);
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  }
  return Status::Ok();
}

template <typename T>
Status LaunchDecodeForAct(const Params& p, DType kv, int head_dim, bool columns, cudaStream_t stream) {
  return attention_detail::WithHeadDim("PagedAttention", head_dim, [&](auto hd) -> Status {
    constexpr int kHd = decltype(hd)::value;
    if (columns) {
      if (kv == DType::kF8E4M3) return LaunchColumns<T, Fp8, kHd>(p, stream);
      return LaunchColumns<T, T, kHd>(p, stream);
    }
    if (kv == DType::kF8E4M3) return LaunchDecode<T, Fp8, kHd>(p, stream);
    return LaunchDecode<T, T, kHd>(p, stream);
  });
}

}  // namespace

Result<size_t> PagedAttentionWorkspaceBytes(int max_seqs, int num_heads, int num_kv_heads, int head_dim,
                                            int max_context_len) {
  if (max_seqs <= 0 || num_heads <= 0 || num_kv_heads <= 0 || head_dim <= 0 || num_heads % num_kv_heads != 0) {
    return InvalidArgument("PagedAttentionWorkspaceBytes: sizes must be positive, num_heads a multiple of num_kv_heads");
  }
  FERRY_ASSIGN_OR_RETURN(const int sms, CurrentSmCount());
  // n * splits(n) <= n * cap, and splits <= ceil(X / n) gives n * splits < X + n: both bounds
  // grow with n and the context, so the size covers every smaller batch. (The head-columns
  // kernel has one CTA per KV head, no more than RowTiles(group) = 1 for its groups.)
  const int64_t per_seq = static_cast<int64_t>(num_kv_heads) * RowTiles(num_heads / num_kv_heads);
  const int64_t x = CeilDiv(2 * static_cast<int64_t>(sms) * kMaxDecodeCtasPerSm, per_seq);
  const int64_t rows = std::min<int64_t>(static_cast<int64_t>(max_seqs) * SplitCap(max_context_len), x + max_seqs);
  return PartialBytes(rows, num_heads, head_dim);
}

Status PagedAttention(const PagedAttentionArgs& a, cudaStream_t stream) {
  FERRY_RETURN_IF_ERROR(CheckArgs(a));
  if (a.num_seqs == 0 || a.num_tokens == 0) return Status::Ok();

  Params p;
  p.q = a.q;
  p.out = a.out;
  const int64_t width = static_cast<int64_t>(a.num_heads) * a.head_dim;
  p.q_stride = a.q_row_stride ? a.q_row_stride : width;
  p.out_stride = a.out_row_stride ? a.out_row_stride : width;
  p.k = a.k_cache;
  p.v = a.v_cache;
  p.block_tokens = a.block_tokens;
  p.max_blocks = a.max_blocks_per_seq;
  p.block_tables = a.block_tables;
  p.q_begin = a.q_begin;
  p.q_len = a.q_len;
  p.context_len = a.context_len;
  p.num_seqs = a.num_seqs;
  p.num_heads = a.num_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.group = a.num_heads / a.num_kv_heads;
  p.scale = a.scale;
  p.scale_log2 = a.scale * 1.4426950408889634f;
  p.causal = a.causal;
  p.window = a.causal ? a.window : 0;
  p.softcap = a.softcap;

  if (!UseTensorCores(a.act_dtype, a.kv_dtype)) {
    return attention_detail::LaunchSimt(p, false, a.act_dtype, a.kv_dtype, a.head_dim, a.num_tokens, stream);
  }

  using DecodeKernel = PagedAttentionArgs::DecodeKernel;
  const bool columns_fit = p.group <= attention_detail::kColumnMaxGroup;
  if (a.decode_kernel == DecodeKernel::kHeadColumns && !columns_fit) {
    return InvalidArgument("PagedAttention: the head-columns decode kernel serves groups of at most " +
                           std::to_string(attention_detail::kColumnMaxGroup) + " heads, not " +
                           std::to_string(p.group));
  }
  FERRY_ASSIGN_OR_RETURN(const int sms, CurrentSmCount());
  const bool columns = columns_fit && (a.decode_kernel == DecodeKernel::kHeadColumns ||
                                       (a.decode_kernel == DecodeKernel::kAuto &&
                                        ColumnsByDefault(a.head_dim, a.num_seqs, a.num_kv_heads, sms)));
  const DecodePlan plan =
      columns ? PlanDecode(a.num_seqs, a.num_kv_heads, 1, a.max_context_len, sms, attention_detail::kColumnCtasPerSm)
              : PlanDecode(a.num_seqs, a.num_kv_heads, RowTiles(p.group), a.max_context_len, sms, kDecodeCtasPerSm);
  p.splits = plan.splits;
  p.split_granule = kDecodeStageKeys;
  if (plan.splits > 1) {
    const size_t need = PartialBytes(static_cast<int64_t>(a.num_seqs) * plan.splits, a.num_heads, a.head_dim);
    if (a.workspace == nullptr || a.workspace_bytes < need || !Aligned16(a.workspace)) {
      return InvalidArgument("PagedAttention: the workspace (" + std::to_string(a.workspace_bytes) +
                             " bytes) is smaller than the " + std::to_string(need) +
                             " bytes this batch needs, or not 16-byte aligned");
    }
    p.partial_o = static_cast<float*>(a.workspace);
    p.partial_lse = p.partial_o + static_cast<int64_t>(a.num_seqs) * plan.splits * a.num_heads * a.head_dim;
  }

  if (a.act_dtype == DType::kBF16) {
    FERRY_RETURN_IF_ERROR(LaunchDecodeForAct<Bf16>(p, a.kv_dtype, a.head_dim, columns, stream));
  } else {
    FERRY_RETURN_IF_ERROR(LaunchDecodeForAct<Half>(p, a.kv_dtype, a.head_dim, columns, stream));
  }
  if (a.max_q_len > 1 && a.prefill_seqs != 0) {
    // The host's count of the prefill rows where it has one; else every row and sequence.
    const bool known = a.prefill_tokens >= 0 && a.prefill_seqs >= 0;
    p.item_seq_begin = known ? a.prefill_seq_begin : 0;
    FERRY_RETURN_IF_ERROR(attention_detail::LaunchPagedPrefill(p, a.act_dtype, a.kv_dtype, a.head_dim,
                                                               known ? a.prefill_tokens : a.num_tokens,
                                                               known ? a.prefill_seqs : a.num_seqs, stream));
  }
  return Status::Ok();
}

}  // namespace ferry::cuda
