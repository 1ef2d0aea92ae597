#include "backend/cuda/attention_ops.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/kernels.h"

namespace ferry::backend {
namespace {

// FERRY_DECODE_ATTENTION=rows forces the 16-row decode kernel (the one before head columns),
// so one binary measures both; read once.
cuda::PagedAttentionArgs::DecodeKernel DecodeKernelChoice() {
  static const cuda::PagedAttentionArgs::DecodeKernel choice = [] {
    const char* v = std::getenv("FERRY_DECODE_ATTENTION");
    return v != nullptr && std::strcmp(v, "rows") == 0 ? cuda::PagedAttentionArgs::DecodeKernel::kRowTiles
                                                       : cuda::PagedAttentionArgs::DecodeKernel::kAuto;
  }();
  return choice;
}

}  // namespace

Result<const int32_t*> CudaAttention::Meta(const AttentionBatch& batch, int block_tokens, int max_blocks) {
  if (batch.meta.defined()) {
    if (batch.meta.dtype() != DType::kI32 || batch.meta.device() != ctx_.device()) {
      return InvalidArgument("attention batch " + batch.meta.DebugString() + " is not on " + ctx_.device().ToString());
    }
    return batch.meta.data<const int32_t>();
  }
  const int S = static_cast<int>(batch.spans.size());
  meta_.resize(static_cast<size_t>(3 * S + S * max_blocks));
  PackAttentionMeta(batch.spans, block_tokens, max_blocks, meta_.data());
  FERRY_ASSIGN_OR_RETURN(void* d_meta, ctx_.Stage(meta_.data(), meta_.size() * sizeof(int32_t)));
  return static_cast<const int32_t*>(d_meta);
}

Status CudaAttention::Paged(const Tensor& q, const KvLayer& layer, const AttentionBatch& batch,
                            const AttentionParams& params, Tensor& out) {
  const int S = batch.num_seqs;
  if (S == 0) return Status::Ok();
  const int bt = layer.block_tokens;
  if (bt <= 0) return InvalidArgument("PagedAttention: a cache without a block size");
  // The uploaded batch brings its plan (for a step graph: the graph's context); the host
  // form is planned for its own longest context.
  const int max_ctx = batch.max_context_len;
  const int max_blocks = batch.meta.defined() ? batch.max_blocks_per_seq : std::max(1, (max_ctx + bt - 1) / bt);
  if (static_cast<int64_t>(max_blocks) * bt < max_ctx) {
    return InvalidArgument("PagedAttention: the batch's block tables (" + std::to_string(max_blocks) +
                           " entries) do not cover its context of " + std::to_string(max_ctx) +
                           " tokens in blocks of " + std::to_string(bt));
  }
  FERRY_ASSIGN_OR_RETURN(const int32_t* dm, Meta(batch, bt, max_blocks));
  cuda::PagedAttentionArgs a;
  a.q = q.raw();
  a.out = out.raw();
  a.act_dtype = q.dtype();
  a.num_tokens = static_cast<int>(q.dim(0));
  a.k_cache = layer.k.raw();
  a.v_cache = layer.v.raw();
  a.kv_dtype = layer.k.dtype();
  a.block_tokens = bt;
  a.num_seqs = S;
  a.q_begin = dm;
  a.q_len = dm + S;
  a.context_len = dm + 2 * S;
  a.block_tables = dm + 3 * S;
  a.max_blocks_per_seq = max_blocks;
  a.max_q_len = batch.max_q_len;
  a.max_context_len = max_ctx;
  a.num_heads = params.num_heads;
  a.num_kv_heads = params.num_kv_heads;
  a.head_dim = params.head_dim;
  a.scale = params.scale;
  a.causal = params.causal;
  a.window = params.window;
  a.softcap = params.softcap;
  a.decode_kernel = DecodeKernelChoice();
  if (batch.max_q_len > 1 && static_cast<int>(batch.spans.size()) == S) {
    // An eager step with prompt rows (step graphs are decode-only): the prefill launch covers
    // just the sequences with more than one query row.
    a.prefill_tokens = 0;
    a.prefill_seqs = 0;
    a.prefill_seq_begin = S;
    for (int i = 0; i < S; ++i) {
      if (batch.spans[i].q_len <= 1) continue;
      a.prefill_tokens += batch.spans[i].q_len;
      a.prefill_seqs += 1;
      a.prefill_seq_begin = std::min(a.prefill_seq_begin, i);
    }
  }
  FERRY_ASSIGN_OR_RETURN(size_t ws, cuda::PagedAttentionWorkspaceBytes(S, params.num_heads, params.num_kv_heads,
                                                                       params.head_dim, max_ctx));
  Tensor workspace;
  if (ws > 0) {
    FERRY_ASSIGN_OR_RETURN(workspace, ctx_.Allocate({static_cast<int64_t>(ws)}, DType::kI8));
    a.workspace = workspace.raw();
    a.workspace_bytes = ws;
  }
  return cuda::PagedAttention(a, ctx_.stream());
}

Status CudaAttention::Dense(const void* q, const void* k, const void* v, int64_t q_stride, int64_t kv_stride,
                            DType dtype, int64_t tokens, const AttentionBatch& batch, const AttentionParams& params,
                            Tensor& out) {
  const int S = batch.num_seqs;
  if (S == 0) return Status::Ok();
  // Without a cache only q_begin[S] and q_len[S] are read.
  FERRY_ASSIGN_OR_RETURN(const int32_t* dm, Meta(batch, 0, 0));
  cuda::DenseAttentionArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.q_row_stride = q_stride;
  a.kv_row_stride = kv_stride;
  a.out = out.raw();
  a.dtype = dtype;
  a.num_tokens = static_cast<int>(tokens);
  a.num_seqs = S;
  a.q_begin = dm;
  a.q_len = dm + S;
  a.num_heads = params.num_heads;
  a.num_kv_heads = params.num_kv_heads;
  a.head_dim = params.head_dim;
  a.scale = params.scale;
  a.causal = params.causal;
  a.softcap = params.softcap;
  a.window = params.window;
  return cuda::DenseAttention(a, ctx_.stream());
}

Status CudaAttention::Pool(const Tensor& x, const AttentionBatch& batch, PoolMode mode, Tensor& out) {
  const int64_t S = batch.num_seqs;
  if (out.dim(0) != S || out.dim(1) != x.dim(1) || out.dtype() != x.dtype()) {
    return InvalidArgument("PoolRows: cannot pool " + x.DebugString() + " into " + out.DebugString());
  }
  for (const SeqSpan& s : batch.spans) {
    if (s.q_begin < 0 || s.q_len <= 0 || s.q_begin + s.q_len > x.dim(0)) {
      return InvalidArgument("PoolRows: span outside the rows");
    }
  }
  if (S == 0) return Status::Ok();
  // The batch description starts with q_begin[S], then q_len[S]: the rows and their counts.
  FERRY_ASSIGN_OR_RETURN(const int32_t* begin, Meta(batch, 0, 0));
  if (mode == PoolMode::kFirst)
    return cuda::EmbeddingGather(x.raw(), x.dtype(), begin, S, x.dim(1), out.raw(), out.dtype(), ctx_.stream());
  const cuda::RowReduce reduce = mode == PoolMode::kMean  ? cuda::RowReduce::kMean
                                 : mode == PoolMode::kMax ? cuda::RowReduce::kMax
                                                          : cuda::RowReduce::kLast;
  return cuda::ReduceRows(x.raw(), x.dim(1), begin, begin + S, S, reduce, out.raw(), x.dtype(), ctx_.stream());
}

}  // namespace ferry::backend
