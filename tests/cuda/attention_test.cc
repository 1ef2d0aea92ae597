// The CUDA attention kernels against the CPU backend's PagedAttention / DenseAttention on
// random inputs (the CPU sees f32 tensors holding exactly the values the GPU reads, already
// rounded to the activation and cache dtypes). Skips without a GPU.
#include "kernels/cuda/attention.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace ferry {
namespace {

using backend::AttentionParams;
using backend::KvLayer;
using backend::SeqSpan;

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define FERRY_SKIP_WITHOUT_GPU()                   \
  do {                                             \
    if (!HaveGpu()) {                              \
      GTEST_SKIP() << "no CUDA device";            \
    }                                              \
  } while (0)

// One cudaMalloc allocation, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) {
      EXPECT_EQ(cudaMalloc(&ptr_, bytes), cudaSuccess) << "cudaMalloc of " << bytes << " bytes";
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <typename T>
DeviceBuffer Upload(const std::vector<T>& host) {
  DeviceBuffer d(host.size() * sizeof(T));
  if (!host.empty()) {
    EXPECT_EQ(cudaMemcpy(d.get(), host.data(), d.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  return d;
}

// A stream, destroyed with the object.
class Stream {
 public:
  Stream() { EXPECT_EQ(cudaStreamCreate(&stream_), cudaSuccess); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (stream_) cudaStreamDestroy(stream_);
  }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Random values as stored in `dtype` (bytes) and as the f32 values those bytes hold.
struct Encoded {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

Encoded RandomEncoded(size_t n, DType dtype, float amplitude, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-amplitude, amplitude);
  std::vector<float> raw(n);
  for (float& x : raw) x = dist(rng);
  Encoded e;
  e.bytes.resize(n * DTypeSize(dtype));
  if (dtype == DType::kF8E4M3) {
    // Nearest e4m3 code by binary search (ConvertFromF32's exhaustive search is too slow for
    // millions of values); the kernels read the bytes, so any rounding rule would do.
    static const std::vector<float> magnitudes = [] {
      std::vector<float> m(0x7f);
      for (int c = 0; c < 0x7f; ++c) m[c] = F8E4M3ToF32(static_cast<uint8_t>(c));
      return m;
    }();
    for (size_t i = 0; i < n; ++i) {
      const float a = std::fabs(raw[i]);
      size_t c = std::lower_bound(magnitudes.begin(), magnitudes.end(), a) - magnitudes.begin();
      if (c == magnitudes.size() || (c > 0 && a - magnitudes[c - 1] < magnitudes[c] - a)) --c;
      e.bytes[i] = static_cast<uint8_t>(c) | (raw[i] < 0 ? 0x80 : 0);
    }
  } else {
    ConvertFromF32(dtype, raw.data(), e.bytes.data(), n);
  }
  e.values.resize(n);
  ConvertToF32(dtype, e.bytes.data(), e.values.data(), n);
  return e;
}

std::vector<float> Download(const DeviceBuffer& d, DType dtype, size_t n) {
  std::vector<uint8_t> bytes(n * DTypeSize(dtype));
  EXPECT_EQ(cudaMemcpy(bytes.data(), d.get(), bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<float> out(n);
  ConvertToF32(dtype, bytes.data(), out.data(), n);
  return out;
}

double Tolerance(DType act) { return act == DType::kF32 ? 1e-5 : 1e-2; }

// Per sequence: every element written (the output was poisoned with NaN) and
// max |got - ref| / max |ref| < tol.
void ExpectMatches(const std::vector<float>& got, const Tensor& ref, const std::vector<int32_t>& q_begin,
                   const std::vector<int32_t>& q_len, int64_t width, double tol, const std::string& what) {
  const float* r = ref.data<float>();
  for (size_t s = 0; s < q_begin.size(); ++s) {
    double ref_max = 0.0, diff_max = 0.0;
    int64_t nan_at = -1;
    for (int64_t i = q_begin[s] * width; i < (q_begin[s] + q_len[s]) * width; ++i) {
      if (!std::isfinite(got[i])) {
        nan_at = i;
        break;
      }
      ref_max = std::max(ref_max, std::fabs(static_cast<double>(r[i])));
      diff_max = std::max(diff_max, std::fabs(static_cast<double>(got[i]) - r[i]));
    }
    ASSERT_EQ(nan_at, -1) << what << ": sequence " << s << " has a non-finite output at element " << nan_at
                          << " (unwritten?)";
    EXPECT_LT(diff_max, tol * ref_max) << what << ": sequence " << s << " (q_len " << q_len[s]
                                       << ") max |diff| " << diff_max << ", max |ref| " << ref_max;
  }
}

struct SeqSpec {
  int q_len;
  int context_len;
};

struct PagedCase {
  int num_heads = 32;
  int num_kv_heads = 8;
  int head_dim = 128;
  int block_tokens = 16;
  DType act = DType::kBF16;
  DType kv = DType::kBF16;
  bool causal = true;
  float q_amplitude = 2.0f;
  std::vector<SeqSpec> seqs;
  uint32_t seed = 1;
  int window = 0;         // sliding window (Mistral, Gemma 2)
  float softcap = 0.0f;   // score soft-capping (Gemma 2)
  cuda::PagedAttentionArgs::DecodeKernel decode_kernel = cuda::PagedAttentionArgs::DecodeKernel::kAuto;
};

std::string Describe(const PagedCase& c) {
  using DecodeKernel = cuda::PagedAttentionArgs::DecodeKernel;
  return std::string(DTypeName(c.act)) + "/" + std::string(DTypeName(c.kv)) + " heads " +
         std::to_string(c.num_heads) + "/" + std::to_string(c.num_kv_heads) + " head_dim " +
         std::to_string(c.head_dim) + " block " + std::to_string(c.block_tokens) +
         (c.decode_kernel == DecodeKernel::kRowTiles       ? " row-tile decode"
          : c.decode_kernel == DecodeKernel::kHeadColumns ? " head-column decode"
                                                           : "");
}

// Runs one paged batch on the GPU and on the CPU backend, and compares. The GPU runs it
// twice, first with the prefill grid sized from the whole batch, then from the host's count
// of the prefill rows (as an eager step passes it): the results must be bitwise identical.
void RunPaged(const PagedCase& c) {
  const std::string what = Describe(c);
  std::mt19937 rng(c.seed);
  const int num_seqs = static_cast<int>(c.seqs.size());
  std::vector<int32_t> q_begin(num_seqs), q_len(num_seqs), context_len(num_seqs);
  int tokens = 0, max_q = 1, max_ctx = 1, max_blocks = 1, used_blocks = 0;
  for (int s = 0; s < num_seqs; ++s) {
    q_begin[s] = tokens;
    q_len[s] = c.seqs[s].q_len;
    context_len[s] = c.seqs[s].context_len;
    tokens += q_len[s];
    max_q = std::max(max_q, q_len[s]);
    max_ctx = std::max(max_ctx, context_len[s]);
    const int blocks = (context_len[s] + c.block_tokens - 1) / c.block_tokens;
    max_blocks = std::max(max_blocks, blocks);
    used_blocks += blocks;
  }
  // Random, non-contiguous block tables over a cache with some blocks left unused; the
  // unused table entries are -1, which a kernel must never follow.
  const int num_blocks = used_blocks + 7;
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(static_cast<size_t>(num_seqs) * max_blocks, -1);
  for (int s = 0, next = 0; s < num_seqs; ++s) {
    const int blocks = (context_len[s] + c.block_tokens - 1) / c.block_tokens;
    for (int b = 0; b < blocks; ++b) tables[static_cast<size_t>(s) * max_blocks + b] = perm[next++];
  }

  const int64_t width = static_cast<int64_t>(c.num_heads) * c.head_dim;
  const size_t q_elems = static_cast<size_t>(tokens) * width;
  const size_t kv_elems = static_cast<size_t>(num_blocks) * c.num_kv_heads * c.block_tokens * c.head_dim;
  const Encoded q = RandomEncoded(q_elems, c.act, c.q_amplitude, rng);
  const Encoded k = RandomEncoded(kv_elems, c.kv, 1.0f, rng);
  const Encoded v = RandomEncoded(kv_elems, c.kv, 1.0f, rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  // Reference.
  auto cpu = backend::MakeCpuBackend();
  std::vector<SeqSpan> spans(num_seqs);
  for (int s = 0; s < num_seqs; ++s) {
    spans[s] = {q_begin[s], q_len[s], context_len[s], tables.data() + static_cast<size_t>(s) * max_blocks};
  }
  const Shape cache_shape = {num_blocks, c.num_kv_heads, c.block_tokens, c.head_dim};
  const KvLayer layer{Tensor::FromVector(k.values, cache_shape), Tensor::FromVector(v.values, cache_shape),
                      c.block_tokens};
  AttentionParams params{c.num_heads, c.num_kv_heads, c.head_dim, scale, c.causal};
  params.window = c.window;
  params.softcap = c.softcap;
  Tensor ref = Tensor::Empty({tokens, width}, DType::kF32);
  const Status cpu_status = cpu->PagedAttention(Tensor::FromVector(q.values, {tokens, width}), layer, spans, params, ref);
  ASSERT_TRUE(cpu_status.ok()) << cpu_status.ToString();

  // GPU.
  const DeviceBuffer d_q = Upload(q.bytes), d_k = Upload(k.bytes), d_v = Upload(v.bytes);
  const DeviceBuffer d_begin = Upload(q_begin), d_len = Upload(q_len), d_ctx = Upload(context_len);
  const DeviceBuffer d_tables = Upload(tables);
  const DeviceBuffer d_out(q_elems * DTypeSize(c.act));
  const Result<size_t> ws_bytes =
      cuda::PagedAttentionWorkspaceBytes(num_seqs, c.num_heads, c.num_kv_heads, c.head_dim, max_ctx);
  ASSERT_TRUE(ws_bytes.ok()) << ws_bytes.status().ToString();
  const DeviceBuffer d_ws(*ws_bytes);

  cuda::PagedAttentionArgs a;
  a.q = d_q.get();
  a.out = d_out.get();
  a.act_dtype = c.act;
  a.num_tokens = tokens;
  a.k_cache = d_k.get();
  a.v_cache = d_v.get();
  a.kv_dtype = c.kv;
  a.block_tokens = c.block_tokens;
  a.num_seqs = num_seqs;
  a.q_begin = d_begin.as<int32_t>();
  a.q_len = d_len.as<int32_t>();
  a.context_len = d_ctx.as<int32_t>();
  a.block_tables = d_tables.as<int32_t>();
  a.max_blocks_per_seq = max_blocks;
  a.max_q_len = max_q;
  a.max_context_len = max_ctx;
  a.num_heads = c.num_heads;
  a.num_kv_heads = c.num_kv_heads;
  a.head_dim = c.head_dim;
  a.scale = scale;
  a.causal = c.causal;
  a.window = c.window;
  a.softcap = c.softcap;
  a.decode_kernel = c.decode_kernel;
  a.workspace = d_ws.get();
  a.workspace_bytes = d_ws.bytes();

  int prefill_tokens = 0, prefill_seqs = 0, prefill_seq_begin = num_seqs;
  for (int s = 0; s < num_seqs; ++s) {
    if (q_len[s] <= 1) continue;
    prefill_tokens += q_len[s];
    prefill_seqs += 1;
    prefill_seq_begin = std::min(prefill_seq_begin, s);
  }

  Stream stream;
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    if (run == 1) {
      a.prefill_tokens = prefill_tokens;
      a.prefill_seqs = prefill_seqs;
      a.prefill_seq_begin = prefill_seq_begin;
    }
    // NaN everywhere (0xff bytes are NaN in f32, bf16 and f16), the workspace included.
    ASSERT_EQ(cudaMemset(d_out.get(), 0xff, d_out.bytes()), cudaSuccess);
    if (d_ws.bytes() > 0) {
      ASSERT_EQ(cudaMemset(d_ws.get(), 0xff, d_ws.bytes()), cudaSuccess);
    }
    const Status st = cuda::PagedAttention(a, stream.get());
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
    std::vector<float> got = Download(d_out, c.act, q_elems);
    if (run == 0) {
      ExpectMatches(got, ref, q_begin, q_len, width, Tolerance(c.act), what);
      first = std::move(got);
    } else {
      EXPECT_EQ(std::memcmp(first.data(), got.data(), first.size() * sizeof(float)), 0)
          << what << ": the run with the host's prefill counts differs from the one without";
    }
  }
}

struct DtypePair {
  DType act;
  DType kv;
};

// The tensor-core paths (16-bit activations over a same-dtype or e4m3 cache) and the f32 path.
const DtypePair kDtypePairs[] = {{DType::kBF16, DType::kBF16},
                                 {DType::kF16, DType::kF16},
                                 {DType::kF32, DType::kBF16},
                                 {DType::kBF16, DType::kF8E4M3},
                                 {DType::kF16, DType::kF8E4M3}};

void RunForDtypes(PagedCase c) {
  for (const DtypePair& d : kDtypePairs) {
    c.act = d.act;
    c.kv = d.kv;
    SCOPED_TRACE(Describe(c));
    RunPaged(c);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Sliding windows: decode rows whose window cuts the split ranges anywhere, prefill and
// chunked prefill longer than the window, a window wider than the context; against the CPU
// kernel (itself checked against a double reference).
TEST(CudaPagedAttention, SlidingWindow) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.window = 100;
  c.seqs = {{1, 1}, {1, 99}, {1, 101}, {1, 700}, {1, 4000}, {37, 37}, {150, 150}, {20, 300}, {64, 90}};
  RunForDtypes(c);
  c.window = 5000;
  c.seqs = {{1, 4000}, {40, 120}};
  RunForDtypes(c);
  c.head_dim = 32;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.window = 8;
  c.seqs = {{17, 17}, {64, 64}, {1, 88}, {3, 30}};
  RunForDtypes(c);
}

// Gemma 2's soft-capped scores, alone and with a window, on sharp scores (the cap bites).
TEST(CudaPagedAttention, SoftCapping) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.softcap = 5.0f;
  c.q_amplitude = 6.0f;
  c.seqs = {{1, 1}, {1, 300}, {1, 3000}, {45, 45}, {20, 200}};
  RunForDtypes(c);
  c.window = 64;
  RunForDtypes(c);
}

TEST(CudaPagedAttention, DecodeVariedContexts) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.seqs = {{1, 1}, {1, 15}, {1, 16}, {1, 17}, {1, 500}, {1, 4000}};
  RunForDtypes(c);
}

// The 16-row decode kernel on groups the head-column kernel would take by default (it stays
// the kernel of wider groups, and of any group when asked for).
TEST(CudaPagedAttention, RowTileDecodeOnNarrowGroups) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.decode_kernel = cuda::PagedAttentionArgs::DecodeKernel::kRowTiles;
  c.seqs = {{1, 1}, {1, 17}, {1, 500}, {1, 4000}, {20, 200}};
  c.seed = 21;
  RunForDtypes(c);
  c.window = 100;
  c.softcap = 30.0f;
  RunForDtypes(c);
  c = PagedCase{};
  c.decode_kernel = cuda::PagedAttentionArgs::DecodeKernel::kRowTiles;
  c.num_heads = 8;
  c.num_kv_heads = 1;
  c.head_dim = 64;
  c.seqs = {{1, 900}, {1, 17}};
  RunForDtypes(c);
}

// Every group size the head-column kernel serves (1 to 8 heads), with a context that is split.
TEST(CudaPagedAttention, HeadColumnDecodeEveryGroupSize) {
  FERRY_SKIP_WITHOUT_GPU();
  for (int group = 1; group <= 8; ++group) {
    PagedCase c;
    c.decode_kernel = cuda::PagedAttentionArgs::DecodeKernel::kHeadColumns;
    c.num_kv_heads = 2;
    c.num_heads = 2 * group;
    c.seqs = {{1, 3}, {1, 64}, {1, 77}, {1, 2500}};
    c.seed = 30 + group;
    SCOPED_TRACE("group " + std::to_string(group));
    RunForDtypes(c);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(CudaPagedAttention, DecodeSingleLongContextSplits) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.seqs = {{1, 4000}};  // one sequence: the context is split over many CTAs
  c.seed = 2;
  RunForDtypes(c);
}

TEST(CudaPagedAttention, LongPrefill) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.seqs = {{1000, 1000}};
  c.seed = 3;
  RunForDtypes(c);
}

TEST(CudaPagedAttention, ChunkedPrefill) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.seqs = {{37, 300}};
  c.seed = 4;
  RunForDtypes(c);
}

TEST(CudaPagedAttention, MixedBatch) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.seqs = {{1, 700}, {200, 200}, {1, 33}, {37, 300}, {1, 1}, {64, 193}, {1, 4000}, {2, 50}, {5, 5}};
  c.seed = 5;
  RunForDtypes(c);
}

// A serving step's order: many decode rows first, then the prompts that arrived (and a
// chunk of a longer one), so the prefill CTAs search past the decode rows.
TEST(CudaPagedAttention, MixedBatchDecodesFirst) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  for (int i = 0; i < 150; ++i) c.seqs.push_back({1, 1 + (i * 37) % 300});
  c.seqs.push_back({128, 128});
  c.seqs.push_back({77, 77});
  c.seqs.push_back({64, 400});
  c.seed = 15;
  RunForDtypes(c);
}

TEST(CudaPagedAttention, MqaHeadDim64) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.num_heads = 8;
  c.num_kv_heads = 1;
  c.head_dim = 64;
  c.seqs = {{1, 900}, {100, 100}, {1, 17}, {37, 300}};
  c.seed = 6;
  RunForDtypes(c);
}

TEST(CudaPagedAttention, GqaHeadDim64SmallBlocks) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.head_dim = 64;
  c.block_tokens = 8;
  c.seqs = {{1, 4000}, {300, 300}, {1, 15}, {37, 300}};
  c.seed = 7;
  RunForDtypes(c);
}

// 32 query heads on one KV head: more rows per KV head than one 16-row tile.
TEST(CudaPagedAttention, WideGroupLargeBlocks) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.num_heads = 32;
  c.num_kv_heads = 1;
  c.block_tokens = 32;
  c.seqs = {{1, 2000}, {1, 40}, {70, 90}};
  c.seed = 8;
  RunForDtypes(c);
}

// Peaked softmax (large scores): the running maximum must be rescaled correctly.
TEST(CudaPagedAttention, SharpScores) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.q_amplitude = 8.0f;
  c.seqs = {{1, 3000}, {129, 129}, {1, 64}};
  c.seed = 9;
  RunForDtypes(c);
}

TEST(CudaPagedAttention, NonCausal) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.causal = false;
  c.seqs = {{50, 120}, {1, 33}, {16, 16}};
  c.seed = 10;
  RunForDtypes(c);
}

// A 16-bit cache of the other 16-bit dtype runs on the f32 kernel.
TEST(CudaPagedAttention, MismatchedSixteenBitCache) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.act = DType::kBF16;
  c.kv = DType::kF16;
  c.seqs = {{1, 300}, {20, 40}};
  c.seed = 11;
  RunPaged(c);
}

// An f32 cache (f32 models keep their cache in f32 to match their CPU references) runs on
// the f32 kernel, under f32 and under 16-bit activations.
TEST(CudaPagedAttention, F32Cache) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.kv = DType::kF32;
  c.seqs = {{1, 500}, {37, 300}, {1, 17}, {100, 100}};
  c.seed = 12;
  for (DType act : {DType::kF32, DType::kBF16, DType::kF16}) {
    c.act = act;
    SCOPED_TRACE(Describe(c));
    RunPaged(c);
    if (HasFatalFailure()) return;
  }
}

// Small heads: 16 (the test models) and 32 (the demo decoder), on the tensor-core kernels
// (16-bit and e4m3 caches) and on the f32 kernel (f32 activations over bf16 and f32 caches,
// and a mismatched 16-bit cache), which splits a warp over keys below head_dim 32.
const DtypePair kSmallHeadDtypePairs[] = {{DType::kBF16, DType::kBF16},  {DType::kF16, DType::kF16},
                                          {DType::kBF16, DType::kF8E4M3}, {DType::kF32, DType::kBF16},
                                          {DType::kF32, DType::kF32},     {DType::kBF16, DType::kF16}};

// Runs `c` for head_dim 16 and 32, GQA 4/2 and 4/1, every dtype pair above.
void RunSmallHeads(PagedCase c) {
  for (int head_dim : {16, 32}) {
    for (int kv_heads : {2, 1}) {
      for (const DtypePair& d : kSmallHeadDtypePairs) {
        c.num_heads = 4;
        c.num_kv_heads = kv_heads;
        c.head_dim = head_dim;
        c.act = d.act;
        c.kv = d.kv;
        SCOPED_TRACE(Describe(c));
        RunPaged(c);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(CudaPagedAttention, SmallHeadDimsDecode) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.seqs = {{1, 1}, {1, 2}, {1, 15}, {1, 16}, {1, 17}, {1, 63}, {1, 64}, {1, 65}, {1, 129}, {1, 300}};
  c.seed = 13;
  RunSmallHeads(c);
}

// One sequence alone: its 300 keys are split over several CTAs and merged.
TEST(CudaPagedAttention, SmallHeadDimsDecodeSplits) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.seqs = {{1, 300}};
  c.seed = 14;
  RunSmallHeads(c);
}

TEST(CudaPagedAttention, SmallHeadDimsPrefill) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.seqs = {{2, 2}, {17, 17}, {64, 64}, {65, 65}, {300, 300}};
  c.seed = 15;
  RunSmallHeads(c);
}

TEST(CudaPagedAttention, SmallHeadDimsMixed) {
  FERRY_SKIP_WITHOUT_GPU();
  for (int block_tokens : {8, 16, 32}) {
    PagedCase c;
    c.block_tokens = block_tokens;
    c.seqs = {{1, 300}, {200, 200}, {1, 1}, {37, 300}, {5, 5}, {1, 33}, {2, 50}, {16, 16}};
    c.seed = 16 + block_tokens;
    RunSmallHeads(c);
    if (HasFatalFailure()) return;
  }
}

TEST(CudaPagedAttention, SmallHeadDimsNonCausalSharp) {
  FERRY_SKIP_WITHOUT_GPU();
  PagedCase c;
  c.causal = false;
  c.q_amplitude = 8.0f;
  c.seqs = {{50, 120}, {1, 33}, {16, 16}, {1, 300}};
  c.seed = 17;
  RunSmallHeads(c);
}

TEST(CudaPagedAttention, RejectsBadArguments) {
  FERRY_SKIP_WITHOUT_GPU();
  DeviceBuffer buf(1 << 20);
  const std::vector<int32_t> ones = {1};
  const DeviceBuffer d_ones = Upload(ones);
  const std::vector<int32_t> table = {0};
  const DeviceBuffer d_table = Upload(table);
  cuda::PagedAttentionArgs a;
  a.q = buf.get();
  a.k_cache = buf.get();
  a.v_cache = buf.get();
  a.out = buf.as<uint8_t>() + 4096;
  a.num_tokens = 1;
  a.block_tokens = 16;
  a.num_seqs = 1;
  a.q_begin = a.q_len = a.context_len = d_ones.as<int32_t>();
  a.block_tables = d_table.as<int32_t>();
  a.max_blocks_per_seq = 1;
  a.max_q_len = 1;
  a.max_context_len = 1;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.scale = 0.1f;

  a.head_dim = 96;
  EXPECT_EQ(cuda::PagedAttention(a, nullptr).code(), StatusCode::kUnimplemented);
  a.head_dim = 64;
  a.num_kv_heads = 3;
  EXPECT_EQ(cuda::PagedAttention(a, nullptr).code(), StatusCode::kInvalidArgument);
  a.num_kv_heads = 2;
  a.kv_dtype = DType::kI8;
  EXPECT_EQ(cuda::PagedAttention(a, nullptr).code(), StatusCode::kInvalidArgument);
  a.kv_dtype = DType::kBF16;
  a.q_row_stride = 100;  // not a multiple of 8
  EXPECT_EQ(cuda::PagedAttention(a, nullptr).code(), StatusCode::kInvalidArgument);
  a.q_row_stride = 0;
  // The head-column decode kernel serves groups of at most 8 heads.
  a.num_heads = 18;
  a.decode_kernel = cuda::PagedAttentionArgs::DecodeKernel::kHeadColumns;
  EXPECT_EQ(cuda::PagedAttention(a, nullptr).code(), StatusCode::kInvalidArgument);
  a.num_heads = 4;
  a.decode_kernel = cuda::PagedAttentionArgs::DecodeKernel::kAuto;
  // The host's prefill counts: both or neither, and within the batch.
  a.prefill_tokens = 1;
  EXPECT_EQ(cuda::PagedAttention(a, nullptr).code(), StatusCode::kInvalidArgument);
  a.prefill_seqs = 2;
  EXPECT_EQ(cuda::PagedAttention(a, nullptr).code(), StatusCode::kInvalidArgument);
  a.prefill_seqs = 1;
  a.prefill_seq_begin = 2;
  EXPECT_EQ(cuda::PagedAttention(a, nullptr).code(), StatusCode::kInvalidArgument);
  a.prefill_tokens = a.prefill_seqs = -1;
  a.prefill_seq_begin = 0;
  // A long context is split and then needs a workspace.
  a.max_context_len = 8192;
  EXPECT_EQ(cuda::PagedAttention(a, nullptr).code(), StatusCode::kInvalidArgument);
  const Result<size_t> ws = cuda::PagedAttentionWorkspaceBytes(1, 4, 2, 64, 8192);
  ASSERT_TRUE(ws.ok());
  EXPECT_GT(*ws, 0u);
  // An empty batch is a no-op.
  a.num_seqs = 0;
  EXPECT_TRUE(cuda::PagedAttention(a, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(CudaPagedAttention, WorkspaceBoundCoversSmallerBatches) {
  FERRY_SKIP_WITHOUT_GPU();
  const Result<size_t> big = cuda::PagedAttentionWorkspaceBytes(64, 32, 8, 128, 8192);
  ASSERT_TRUE(big.ok());
  for (int n = 1; n <= 64; ++n) {
    for (int ctx : {1, 100, 512, 4000, 8192}) {
      const Result<size_t> small = cuda::PagedAttentionWorkspaceBytes(n, 32, 8, 128, ctx);
      ASSERT_TRUE(small.ok());
      EXPECT_LE(*small, *big) << n << " sequences, context " << ctx;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Dense (encoder) attention.

struct DenseCase {
  int num_heads = 12;
  int num_kv_heads = 12;
  int head_dim = 64;
  DType dtype = DType::kBF16;
  bool causal = false;
  bool fused_qkv = false;  // q, k, v read in place from one [T, (H + 2 KVH) * head_dim] buffer
  int window = 0;          // causal: (p - window, p]; bidirectional: [p - window, p + window]
  std::vector<int> lens;
  uint32_t seed = 1;
};

void RunDense(const DenseCase& c) {
  const std::string what = std::string(DTypeName(c.dtype)) + " heads " + std::to_string(c.num_heads) + "/" +
                           std::to_string(c.num_kv_heads) + " head_dim " + std::to_string(c.head_dim) +
                           (c.fused_qkv ? " fused" : "") + (c.causal ? " causal" : "") +
                           (c.window > 0 ? " window " + std::to_string(c.window) : "");
  std::mt19937 rng(c.seed);
  const int num_seqs = static_cast<int>(c.lens.size());
  std::vector<int32_t> q_begin(num_seqs), q_len(num_seqs);
  int tokens = 0;
  for (int s = 0; s < num_seqs; ++s) {
    q_begin[s] = tokens;
    q_len[s] = c.lens[s];
    tokens += c.lens[s];
  }
  const int64_t q_width = static_cast<int64_t>(c.num_heads) * c.head_dim;
  const int64_t kv_width = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  const int64_t fused_width = q_width + 2 * kv_width;
  // One buffer [T, fused_width] holding q | k | v; the unfused case copies the parts out.
  const Encoded qkv = RandomEncoded(static_cast<size_t>(tokens) * fused_width, c.dtype, 2.0f, rng);
  const size_t esize = DTypeSize(c.dtype);
  std::vector<float> q_f(static_cast<size_t>(tokens) * q_width), k_f(static_cast<size_t>(tokens) * kv_width),
      v_f(static_cast<size_t>(tokens) * kv_width);
  std::vector<uint8_t> q_b(q_f.size() * esize), k_b(k_f.size() * esize), v_b(v_f.size() * esize);
  for (int t = 0; t < tokens; ++t) {
    const size_t row = static_cast<size_t>(t) * fused_width;
    std::copy_n(qkv.values.begin() + row, q_width, q_f.begin() + t * q_width);
    std::copy_n(qkv.values.begin() + row + q_width, kv_width, k_f.begin() + t * kv_width);
    std::copy_n(qkv.values.begin() + row + q_width + kv_width, kv_width, v_f.begin() + t * kv_width);
    std::memcpy(q_b.data() + t * q_width * esize, qkv.bytes.data() + row * esize, q_width * esize);
    std::memcpy(k_b.data() + t * kv_width * esize, qkv.bytes.data() + (row + q_width) * esize, kv_width * esize);
    std::memcpy(v_b.data() + t * kv_width * esize, qkv.bytes.data() + (row + q_width + kv_width) * esize,
                kv_width * esize);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  auto cpu = backend::MakeCpuBackend();
  std::vector<SeqSpan> spans(num_seqs);
  for (int s = 0; s < num_seqs; ++s) spans[s] = {q_begin[s], q_len[s], q_len[s], nullptr};
  AttentionParams params{c.num_heads, c.num_kv_heads, c.head_dim, scale, c.causal};
  params.window = c.window;
  Tensor ref = Tensor::Empty({tokens, q_width}, DType::kF32);
  const Status cpu_status = cpu->DenseAttention(Tensor::FromVector(q_f, {tokens, q_width}),
                                                Tensor::FromVector(k_f, {tokens, kv_width}),
                                                Tensor::FromVector(v_f, {tokens, kv_width}), spans, params, ref);
  ASSERT_TRUE(cpu_status.ok()) << cpu_status.ToString();

  const DeviceBuffer d_fused = Upload(qkv.bytes);
  const DeviceBuffer d_q = Upload(q_b), d_k = Upload(k_b), d_v = Upload(v_b);
  const DeviceBuffer d_begin = Upload(q_begin), d_len = Upload(q_len);
  const size_t out_elems = static_cast<size_t>(tokens) * q_width;
  const DeviceBuffer d_out(out_elems * esize);
  cuda::DenseAttentionArgs a;
  if (c.fused_qkv) {
    const auto* base = d_fused.as<uint8_t>();
    a.q = base;
    a.k = base + q_width * esize;
    a.v = base + (q_width + kv_width) * esize;
    a.q_row_stride = a.kv_row_stride = fused_width;
  } else {
    a.q = d_q.get();
    a.k = d_k.get();
    a.v = d_v.get();
  }
  a.out = d_out.get();
  a.dtype = c.dtype;
  a.num_tokens = tokens;
  a.num_seqs = num_seqs;
  a.q_begin = d_begin.as<int32_t>();
  a.q_len = d_len.as<int32_t>();
  a.num_heads = c.num_heads;
  a.num_kv_heads = c.num_kv_heads;
  a.head_dim = c.head_dim;
  a.scale = scale;
  a.causal = c.causal;
  a.window = c.window;

  Stream stream;
  ASSERT_EQ(cudaMemset(d_out.get(), 0xff, d_out.bytes()), cudaSuccess);
  const Status st = cuda::DenseAttention(a, stream.get());
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
  ExpectMatches(Download(d_out, c.dtype, out_elems), ref, q_begin, q_len, q_width, Tolerance(c.dtype), what);
}

TEST(CudaDenseAttention, BertLikeRaggedBatch) {
  FERRY_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    DenseCase c;
    c.dtype = dtype;
    c.lens = {1, 7, 128, 384, 64, 200, 512};
    RunDense(c);
    if (HasFatalFailure()) return;
  }
}

TEST(CudaDenseAttention, FusedQkvInPlace) {
  FERRY_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    DenseCase c;
    c.dtype = dtype;
    c.fused_qkv = true;
    c.lens = {33, 250, 3};
    c.seed = 2;
    RunDense(c);
    if (HasFatalFailure()) return;
  }
}

TEST(CudaDenseAttention, CausalGqaHeadDim128) {
  FERRY_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    DenseCase c;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim = 128;
    c.dtype = dtype;
    c.causal = true;
    c.lens = {300, 1, 65, 17};
    c.seed = 3;
    RunDense(c);
    if (HasFatalFailure()) return;
  }
}

TEST(CudaDenseAttention, SmallHeadDims) {
  FERRY_SKIP_WITHOUT_GPU();
  for (int head_dim : {16, 32}) {
    for (int kv_heads : {2, 1}) {
      for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
        for (bool causal : {false, true}) {
          DenseCase c;
          c.num_heads = 4;
          c.num_kv_heads = kv_heads;
          c.head_dim = head_dim;
          c.dtype = dtype;
          c.causal = causal;
          c.fused_qkv = kv_heads == 1;
          c.lens = {1, 7, 65, 300, 16};
          c.seed = 4;
          RunDense(c);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Sliding windows on dense batches: ModernBERT's bidirectional local layers (a half-width
// window, keys [p - w, p + w]) and a causal window, narrower and wider than the spans, on
// every tensor-core head size (row tiles of 16 and of 32 per warp) and on the f32 kernel.
TEST(CudaDenseAttention, SlidingWindows) {
  FERRY_SKIP_WITHOUT_GPU();
  for (int head_dim : {64, 128, 32}) {
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      for (bool causal : {false, true}) {
        for (int window : {64, 5, 1000}) {
          DenseCase c;
          c.num_heads = 4;
          c.num_kv_heads = 2;
          c.head_dim = head_dim;
          c.dtype = dtype;
          c.causal = causal;
          c.window = window;
          c.lens = {1, 7, 130, 300, 64, 511};
          c.seed = 5;
          RunDense(c);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(CudaDenseAttention, RejectsUnsupportedHeadDim) {
  FERRY_SKIP_WITHOUT_GPU();
  cuda::DenseAttentionArgs a;
  a.num_heads = 4;
  a.num_kv_heads = 4;
  a.head_dim = 80;
  EXPECT_EQ(cuda::DenseAttention(a, nullptr).code(), StatusCode::kUnimplemented);
  a.head_dim = 8;
  EXPECT_EQ(cuda::DenseAttention(a, nullptr).code(), StatusCode::kUnimplemented);
}

// ---------------------------------------------------------------------------------------
// Timings (run explicitly: --gtest_also_run_disabled_tests --gtest_filter=*Timing*).

// Median milliseconds per call of f(i), over `groups` groups of `per_group` back-to-back
// calls with one pair of events around each group (the host enqueues while the GPU runs,
// as an engine's decode loop or a replayed graph would).
template <typename F>
double MedianMs(cudaStream_t stream, int groups, int per_group, F&& f) {
  cudaEvent_t start, stop;
  EXPECT_EQ(cudaEventCreate(&start), cudaSuccess);
  EXPECT_EQ(cudaEventCreate(&stop), cudaSuccess);
  std::vector<float> ms;
  for (int g = 0; g < groups; ++g) {
    EXPECT_EQ(cudaEventRecord(start, stream), cudaSuccess);
    for (int i = 0; i < per_group; ++i) f(g * per_group + i);
    EXPECT_EQ(cudaEventRecord(stop, stream), cudaSuccess);
    EXPECT_EQ(cudaEventSynchronize(stop), cudaSuccess);
    float t = 0;
    EXPECT_EQ(cudaEventElapsedTime(&t, start, stop), cudaSuccess);
    ms.push_back(t / per_group);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Fills a device buffer with random bf16 values in [-1, 1] by repeating one random host chunk.
void FillRandomBf16(const DeviceBuffer& d, std::mt19937& rng) {
  std::vector<uint16_t> chunk(8 << 20);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (uint16_t& x : chunk) x = F32ToBf16(dist(rng));
  const size_t chunk_bytes = chunk.size() * 2;
  for (size_t off = 0; off < d.bytes(); off += chunk_bytes) {
    const size_t n = std::min(chunk_bytes, d.bytes() - off);
    ASSERT_EQ(cudaMemcpy(d.as<uint8_t>() + off, chunk.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  }
}

TEST(CudaAttentionTiming, DISABLED_Llama3Shape) {
  FERRY_SKIP_WITHOUT_GPU();
  constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlock = 16;
  constexpr int kCacheBlocks = 65536;  // 2 x 2 GiB: rotating block sets keep the L2 out of it
  const size_t block_bytes = static_cast<size_t>(kKvHeads) * kBlock * kHeadDim * 2;
  std::mt19937 rng(42);
  const DeviceBuffer d_k(kCacheBlocks * block_bytes), d_v(kCacheBlocks * block_bytes);
  FillRandomBf16(d_k, rng);
  FillRandomBf16(d_v, rng);
  const int max_tokens = 4096;
  const DeviceBuffer d_q(static_cast<size_t>(max_tokens) * kHeads * kHeadDim * 2);
  const DeviceBuffer d_out(static_cast<size_t>(max_tokens) * kHeads * kHeadDim * 2);
  FillRandomBf16(d_q, rng);
  Stream stream;
  std::vector<int32_t> perm(2 * kCacheBlocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);

  struct TimedShape {
    int batch, q_len, context;
    DType kv;
    int head_dim = kHeadDim;
  };
  // The fp8 rows read the same random bytes as e4m3 (values are irrelevant to the timing).
  const TimedShape shapes[] = {{1, 1, 512, DType::kBF16},       {8, 1, 512, DType::kBF16},
                               {32, 1, 512, DType::kBF16},      {64, 1, 512, DType::kBF16},
                               {128, 1, 512, DType::kBF16},     {256, 1, 512, DType::kBF16},
                               {1, 1, 4096, DType::kBF16},      {64, 1, 2048, DType::kBF16},
                               {1, 1, 512, DType::kF8E4M3},     {8, 1, 512, DType::kF8E4M3},
                               {32, 1, 512, DType::kF8E4M3},    {64, 1, 512, DType::kF8E4M3},
                               {128, 1, 512, DType::kF8E4M3},   {256, 1, 512, DType::kF8E4M3},
                               {1, 1, 4096, DType::kF8E4M3},    {64, 1, 2048, DType::kF8E4M3},
                               {1, 2048, 2048, DType::kBF16},   {4, 512, 512, DType::kBF16},
                               {1, 2048, 2048, DType::kF8E4M3}, {4, 512, 512, DType::kF8E4M3},
                               // llama-3.2-1b's heads (32 / 8, head_dim 64)
                               {1, 1, 512, DType::kBF16, 64},   {32, 1, 512, DType::kBF16, 64},
                               {128, 1, 512, DType::kBF16, 64}, {256, 1, 512, DType::kBF16, 64},
                               {32, 1, 512, DType::kF8E4M3, 64}, {128, 1, 512, DType::kF8E4M3, 64},
                               {256, 1, 512, DType::kF8E4M3, 64}};
  std::printf("\n%-42s %10s %12s %12s\n", "shape (bf16 act, 32/8 heads, d128)", "median us", "KV GB/s", "TFLOP/s");
  for (const TimedShape& sh : shapes) {
    const int blocks_per_seq = (sh.context + kBlock - 1) / kBlock;
    const int cache_blocks = kCacheBlocks * (sh.kv == DType::kF8E4M3 ? 2 : 1);
    const int rotations = std::max(1, std::min(8, cache_blocks / (sh.batch * blocks_per_seq)));
    std::vector<DeviceBuffer> tables;
    for (int r = 0, next = 0; r < rotations; ++r) {
      std::vector<int32_t> t(static_cast<size_t>(sh.batch) * blocks_per_seq);
      for (int32_t& x : t) {
        while (perm[next] >= cache_blocks) ++next;
        x = perm[next++];
      }
      tables.push_back(Upload(t));
    }
    std::vector<int32_t> q_begin(sh.batch), q_len(sh.batch, sh.q_len), ctx(sh.batch, sh.context);
    for (int s = 0; s < sh.batch; ++s) q_begin[s] = s * sh.q_len;
    const DeviceBuffer d_begin = Upload(q_begin), d_len = Upload(q_len), d_ctx = Upload(ctx);
    const Result<size_t> ws = cuda::PagedAttentionWorkspaceBytes(sh.batch, kHeads, kKvHeads, sh.head_dim, sh.context);
    ASSERT_TRUE(ws.ok());
    const DeviceBuffer d_ws(*ws);
    cuda::PagedAttentionArgs a;
    a.q = d_q.get();
    a.out = d_out.get();
    a.act_dtype = DType::kBF16;
    a.num_tokens = sh.batch * sh.q_len;
    a.k_cache = d_k.get();
    a.v_cache = d_v.get();
    a.kv_dtype = sh.kv;
    a.block_tokens = kBlock;
    a.num_seqs = sh.batch;
    a.q_begin = d_begin.as<int32_t>();
    a.q_len = d_len.as<int32_t>();
    a.context_len = d_ctx.as<int32_t>();
    a.max_blocks_per_seq = blocks_per_seq;
    a.max_q_len = sh.q_len;
    a.max_context_len = sh.context;
    a.num_heads = kHeads;
    a.num_kv_heads = kKvHeads;
    a.head_dim = sh.head_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim));
    a.workspace = d_ws.get();
    a.workspace_bytes = d_ws.bytes();
    auto run = [&](int i) {
      a.block_tables = tables[i % rotations].as<int32_t>();
      const Status st = cuda::PagedAttention(a, stream.get());
      EXPECT_TRUE(st.ok()) << st.ToString();
    };
    // Decode shapes: both decode kernels, one after the other on the same inputs.
    using DecodeKernel = cuda::PagedAttentionArgs::DecodeKernel;
    const std::vector<DecodeKernel> kernels = sh.q_len == 1
                                                  ? std::vector<DecodeKernel>{DecodeKernel::kRowTiles, DecodeKernel::kHeadColumns}
                                                  : std::vector<DecodeKernel>{DecodeKernel::kAuto};
    for (const DecodeKernel kernel : kernels) {
      a.decode_kernel = kernel;
      for (int i = 0; i < 2 * rotations; ++i) run(i);
      ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
      const double ms = MedianMs(stream.get(), 15, 8, run);
      // Bytes: every sequence's K and V, once. FLOPs: 4 * head_dim per (query, head, visible key).
      const double kv_bytes = 2.0 * sh.batch * sh.context * kKvHeads * sh.head_dim * DTypeSize(sh.kv);
      double visible = 0;
      for (int t = 0; t < sh.q_len; ++t) visible += sh.context - sh.q_len + t + 1;
      const double flops = 4.0 * sh.head_dim * kHeads * visible * sh.batch;
      char name[80];
      std::snprintf(name, sizeof(name), "b=%d q=%d ctx=%d kv=%s%s%s", sh.batch, sh.q_len, sh.context,
                    std::string(DTypeName(sh.kv)).c_str(), sh.head_dim == kHeadDim ? "" : " d64",
                    kernel == DecodeKernel::kRowTiles      ? " rows"
                    : kernel == DecodeKernel::kHeadColumns ? " columns"
                                                           : "");
      std::printf("%-42s %10.1f %12.0f %12.1f\n", name, ms * 1e3, kv_bytes / (ms * 1e-3) / 1e9,
                  flops / (ms * 1e-3) / 1e12);
    }
  }
}

}  // namespace
}  // namespace ferry
