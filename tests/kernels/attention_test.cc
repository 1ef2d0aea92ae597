#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kernel_test_util.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/gemm.h"

namespace ferry {
namespace {

using backend::AttentionParams;
using backend::KvLayer;
using backend::SeqSpan;
using testing::ConvertTo;
using testing::ExpectClose;
using testing::Poisoned;
using testing::RandomTensor;
using testing::Values;

struct SpanSpec {
  int q_len;
  int context_len;
};

struct Scenario {
  std::string name;
  int num_heads = 8;
  int kv_heads = 2;
  int head_dim = 64;
  int block_tokens = 16;
  DType dtype = DType::kF32;
  bool causal = true;
  int window = 0;         // sliding window (0: none)
  float softcap = 0.0f;   // score soft-capping (0: none)
  std::vector<SpanSpec> spans;
};

// The keys/values of one sequence, [context, kv_heads*head_dim], as the cache holds them.
struct SeqKv {
  std::vector<double> k, v;
};

// softmax(scale·q·k^T)·v per (span, row, head) in double; with a window the row at position
// p sees keys (p - window, p] (causal) or [p - window, p + window] (bidirectional); with softcap the scaled scores go through cap·tanh(s / cap).
std::vector<double> ReferenceAttention(const std::vector<double>& q, const std::vector<SeqKv>& kv,
                                       const std::vector<SeqSpan>& spans, const AttentionParams& p) {
  const int64_t width = static_cast<int64_t>(p.num_heads) * p.head_dim;
  const int64_t kv_width = static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  const int group = p.num_heads / p.num_kv_heads;
  std::vector<double> out(q.size(), 0.0);
  for (size_t s = 0; s < spans.size(); ++s) {
    const SeqSpan& sp = spans[s];
    for (int t = 0; t < sp.q_len; ++t) {
      const int64_t row = sp.q_begin + t;
      const int64_t pos = sp.context_len - sp.q_len + t;
      int64_t last = p.causal ? pos : sp.context_len - 1;
      int64_t first = p.window > 0 ? std::max<int64_t>(0, last - p.window + 1) : 0;
      if (!p.causal && p.window > 0) {
        first = std::max<int64_t>(0, pos - p.window);
        last = std::min<int64_t>(sp.context_len - 1, pos + p.window);
      }
      for (int h = 0; h < p.num_heads; ++h) {
        const int kvh = h / group;
        std::vector<double> scores(static_cast<size_t>(last + 1), 0.0);
        double mx = -1e300;
        for (int64_t j = first; j <= last; ++j) {
          double dot = 0;
          for (int d = 0; d < p.head_dim; ++d) {
            dot += q[row * width + h * p.head_dim + d] * kv[s].k[j * kv_width + kvh * p.head_dim + d];
          }
          scores[j] = dot * p.scale;
          if (p.softcap > 0.0f) scores[j] = p.softcap * std::tanh(scores[j] / p.softcap);
          mx = std::max(mx, scores[j]);
        }
        double sum = 0;
        for (int64_t j = first; j <= last; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
        for (int d = 0; d < p.head_dim; ++d) {
          double acc = 0;
          for (int64_t j = first; j <= last; ++j) acc += scores[j] * kv[s].v[j * kv_width + kvh * p.head_dim + d];
          out[row * width + h * p.head_dim + d] = acc / sum;
        }
      }
    }
  }
  return out;
}

struct PagedSetup {
  Tensor q;
  KvLayer layer;
  std::vector<std::vector<int32_t>> tables;
  std::vector<SeqSpan> spans;
  std::vector<SeqKv> kv;
  std::vector<Tensor> k_rows, v_rows;  // f32 keys/values per span as written
  AttentionParams params;
};

// Random q/k/v, a shuffled (non-contiguous) block assignment, keys written with WriteKv.
PagedSetup MakePaged(const Scenario& sc, backend::Backend& be, uint32_t seed) {
  std::mt19937 rng(seed);
  PagedSetup st;
  st.params.num_heads = sc.num_heads;
  st.params.num_kv_heads = sc.kv_heads;
  st.params.head_dim = sc.head_dim;
  st.params.scale = 1.0f / std::sqrt(static_cast<float>(sc.head_dim));
  st.params.causal = sc.causal;
  st.params.window = sc.window;
  st.params.softcap = sc.softcap;
  int64_t total_q = 0, total_blocks = 3;  // spare blocks that nobody uses
  for (const SpanSpec& s : sc.spans) {
    total_q += s.q_len;
    total_blocks += (s.context_len + sc.block_tokens - 1) / sc.block_tokens;
  }
  // Larger q sharpens the softmax so wrong masking shows.
  st.q = RandomTensor({total_q, static_cast<int64_t>(sc.num_heads) * sc.head_dim}, rng, -2.5f, 2.5f);
  const int64_t kv_width = static_cast<int64_t>(sc.kv_heads) * sc.head_dim;
  st.layer.block_tokens = sc.block_tokens;
  st.layer.k = Tensor::Zeros({total_blocks, sc.kv_heads, sc.block_tokens, sc.head_dim}, sc.dtype);
  st.layer.v = Tensor::Zeros({total_blocks, sc.kv_heads, sc.block_tokens, sc.head_dim}, sc.dtype);
  std::vector<int32_t> ids(static_cast<size_t>(total_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next_id = 0;
  int32_t q_begin = 0;
  st.tables.resize(sc.spans.size());
  for (size_t i = 0; i < sc.spans.size(); ++i) {
    const SpanSpec& s = sc.spans[i];
    const int blocks = (s.context_len + sc.block_tokens - 1) / sc.block_tokens;
    for (int b = 0; b < blocks; ++b) st.tables[i].push_back(ids[next_id++]);
    const Tensor k = RandomTensor({s.context_len, kv_width}, rng);
    const Tensor v = RandomTensor({s.context_len, kv_width}, rng);
    std::vector<int32_t> slots(static_cast<size_t>(s.context_len));
    for (int p = 0; p < s.context_len; ++p) {
      slots[p] = st.tables[i][p / sc.block_tokens] * sc.block_tokens + p % sc.block_tokens;
    }
    EXPECT_TRUE(be.WriteKv(k, v, backend::HostIndices(slots), st.layer).ok());
    st.kv.push_back({Values(ConvertTo(k, sc.dtype)), Values(ConvertTo(v, sc.dtype))});
    st.k_rows.push_back(k);
    st.v_rows.push_back(v);
    st.spans.push_back({q_begin, s.q_len, s.context_len, st.tables[i].data()});
    q_begin += s.q_len;
  }
  return st;
}

class PagedAttentionTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(PagedAttentionTest, MatchesReference) {
  const Scenario& sc = GetParam();
  auto be = backend::MakeCpuBackend();
  const PagedSetup st = MakePaged(sc, *be, 71);
  Tensor out = Poisoned(st.q.shape());
  const Status status = be->PagedAttention(st.q, st.layer, st.spans, st.params, out);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ExpectClose(out, ReferenceAttention(Values(st.q), st.kv, st.spans, st.params), 1e-5, sc.name);
}

std::vector<Scenario> Scenarios() {
  std::vector<Scenario> v;
  auto add = [&](Scenario s) { v.push_back(std::move(s)); };
  Scenario s;
  s.name = "causal_prefill_gqa";
  s.spans = {{37, 37}};
  add(s);
  s.name = "chunked_prefill";
  s.spans = {{20, 75}};
  add(s);
  s.name = "decode_batch";
  s.spans = {{1, 1}, {1, 16}, {1, 17}, {1, 100}, {1, 513}};
  add(s);
  s.name = "ragged_mix";
  s.spans = {{30, 30}, {10, 50}, {1, 77}, {1, 5}, {70, 140}};
  add(s);
  s.name = "mqa";
  s.num_heads = 4;
  s.kv_heads = 1;
  s.spans = {{9, 40}, {1, 33}};
  add(s);
  s.name = "mha";
  s.num_heads = 3;
  s.kv_heads = 3;
  add(s);
  s = Scenario();
  s.name = "bf16_cache";
  s.dtype = DType::kBF16;
  s.spans = {{25, 60}, {1, 130}, {8, 8}};
  add(s);
  s.name = "f16_cache";
  s.dtype = DType::kF16;
  add(s);
  s = Scenario();
  s.name = "head_dim_80_block_32";
  s.head_dim = 80;
  s.block_tokens = 32;
  s.spans = {{33, 70}, {1, 65}};
  add(s);
  s.name = "head_dim_80_bf16";
  s.dtype = DType::kBF16;
  add(s);
  s = Scenario();
  s.name = "head_dim_8_block_5";
  s.head_dim = 8;
  s.block_tokens = 5;
  s.spans = {{12, 23}, {1, 4}};
  add(s);
  s = Scenario();
  s.name = "block_128_long";
  s.block_tokens = 128;
  s.spans = {{130, 300}};
  add(s);
  s = Scenario();
  s.name = "non_causal";
  s.causal = false;
  s.spans = {{12, 40}, {5, 5}};
  add(s);
  s = Scenario();
  s.name = "large_group";
  s.num_heads = 96;
  s.kv_heads = 1;
  s.head_dim = 16;
  s.spans = {{3, 20}};
  add(s);
  // Sliding windows (Mistral, Gemma 2): prefill longer than the window, chunked prefill,
  // decode rows, windows that cut blocks and chunks anywhere, a window wider than the context.
  s = Scenario();
  s.name = "window_prefill";
  s.window = 8;
  s.spans = {{37, 37}};
  add(s);
  s.name = "window_chunked_and_decode";
  s.window = 19;
  s.spans = {{20, 75}, {1, 100}, {1, 5}, {1, 513}, {70, 140}};
  add(s);
  s.name = "window_1";
  s.window = 1;
  s.spans = {{9, 40}, {1, 33}};
  add(s);
  s.name = "window_wider_than_context";
  s.window = 4096;
  s.spans = {{30, 30}, {1, 77}};
  add(s);
  s.name = "window_block_5_head_dim_8";
  s.head_dim = 8;
  s.block_tokens = 5;
  s.window = 7;
  s.spans = {{12, 23}, {1, 40}};
  add(s);
  s = Scenario();
  s.name = "window_bf16_cache";
  s.dtype = DType::kBF16;
  s.window = 65;
  s.spans = {{25, 160}, {1, 130}, {8, 8}};
  add(s);
  s = Scenario();
  s.name = "softcap";
  s.softcap = 2.0f;  // far below the scores of these queries: the cap bites
  s.spans = {{30, 30}, {10, 50}, {1, 77}};
  add(s);
  s.name = "softcap_and_window";
  s.window = 16;
  s.spans = {{40, 40}, {1, 90}};
  add(s);
  s.name = "softcap_non_causal";
  s.window = 0;
  s.causal = false;
  s.spans = {{12, 40}, {5, 5}};
  add(s);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, PagedAttentionTest, ::testing::ValuesIn(Scenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& info) { return info.param.name; });

// Whole sequences (q_len == context_len): the paged and dense paths must agree.
TEST(AttentionTest, PagedAgreesWithDense) {
  for (bool causal : {true, false}) {
    Scenario sc;
    sc.causal = causal;
    sc.spans = {{23, 23}, {64, 64}, {1, 1}, {40, 40}};
    auto be = backend::MakeCpuBackend();
    const PagedSetup st = MakePaged(sc, *be, 72);
    Tensor paged = Poisoned(st.q.shape());
    ASSERT_TRUE(be->PagedAttention(st.q, st.layer, st.spans, st.params, paged).ok());

    const int64_t total = st.q.dim(0), kv_width = static_cast<int64_t>(sc.kv_heads) * sc.head_dim;
    Tensor k = Tensor::Empty({total, kv_width}, DType::kF32), v = Tensor::Empty({total, kv_width}, DType::kF32);
    for (size_t i = 0; i < st.spans.size(); ++i) {
      std::copy_n(st.k_rows[i].data<float>(), st.k_rows[i].numel(), k.data<float>() + st.spans[i].q_begin * kv_width);
      std::copy_n(st.v_rows[i].data<float>(), st.v_rows[i].numel(), v.data<float>() + st.spans[i].q_begin * kv_width);
    }
    std::vector<SeqSpan> dense_spans = st.spans;
    for (SeqSpan& s : dense_spans) {
      s.block_table = nullptr;
      s.context_len = 0;  // ignored by the dense path
    }
    Tensor dense = Poisoned(st.q.shape());
    ASSERT_TRUE(be->DenseAttention(st.q, k, v, dense_spans, st.params, dense).ok());
    ExpectClose(dense, Values(paged), 1e-6, causal ? "dense vs paged (causal)" : "dense vs paged (bidirectional)");
    ExpectClose(dense, ReferenceAttention(Values(st.q), st.kv, st.spans, st.params), 1e-5, "dense vs reference");
  }
}

TEST(AttentionTest, DenseBidirectionalEncoderBatch) {
  std::mt19937 rng(73);
  auto be = backend::MakeCpuBackend();
  AttentionParams p;
  p.num_heads = 12;
  p.num_kv_heads = 12;
  p.head_dim = 64;
  p.scale = 0.125f;
  p.causal = false;
  const std::vector<int> lens = {7, 128, 1, 50};
  std::vector<SeqSpan> spans;
  int32_t begin = 0;
  for (int len : lens) {
    spans.push_back({begin, len, 0, nullptr});
    begin += len;
  }
  const int64_t width = static_cast<int64_t>(p.num_heads) * p.head_dim;
  const Tensor q = RandomTensor({begin, width}, rng, -2, 2);
  const Tensor k = RandomTensor({begin, width}, rng);
  const Tensor v = RandomTensor({begin, width}, rng);
  std::vector<SeqKv> kv;
  std::vector<SeqSpan> ref_spans;
  const std::vector<double> kv_k = Values(k), kv_v = Values(v);
  for (const SeqSpan& s : spans) {
    kv.push_back({std::vector<double>(kv_k.begin() + s.q_begin * width, kv_k.begin() + (s.q_begin + s.q_len) * width),
                  std::vector<double>(kv_v.begin() + s.q_begin * width, kv_v.begin() + (s.q_begin + s.q_len) * width)});
    ref_spans.push_back({s.q_begin, s.q_len, s.q_len, nullptr});
  }
  Tensor out = Poisoned(q.shape());
  ASSERT_TRUE(be->DenseAttention(q, k, v, spans, p, out).ok());
  ExpectClose(out, ReferenceAttention(Values(q), kv, ref_spans, p), 1e-5, "dense encoder");
}

// ModernBERT's local layers: bidirectional attention within a half-width window, on spans
// shorter than, as long as and longer than the window, a window of 1, and one wider than
// every span; grouped heads and a head_dim that is not a multiple of 16.
TEST(AttentionTest, DenseBidirectionalWindow) {
  std::mt19937 rng(75);
  auto be = backend::MakeCpuBackend();
  for (const int window : {1, 4, 13, 64, 1000}) {
    for (const int head_dim : {16, 24}) {
      AttentionParams p;
      p.num_heads = 4;
      p.num_kv_heads = 2;
      p.head_dim = head_dim;
      p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      p.causal = false;
      p.window = window;
      const std::vector<int> lens = {3, 9, 130, 1, 40};
      std::vector<SeqSpan> spans;
      int32_t begin = 0;
      for (int len : lens) {
        spans.push_back({begin, len, 0, nullptr});
        begin += len;
      }
      const int64_t width = static_cast<int64_t>(p.num_heads) * head_dim;
      const int64_t kv_width = static_cast<int64_t>(p.num_kv_heads) * head_dim;
      const Tensor q = RandomTensor({begin, width}, rng, -2, 2);
      const Tensor k = RandomTensor({begin, kv_width}, rng, -2, 2);
      const Tensor v = RandomTensor({begin, kv_width}, rng);
      std::vector<SeqKv> kv;
      std::vector<SeqSpan> ref_spans;
      const std::vector<double> kv_k = Values(k), kv_v = Values(v);
      for (const SeqSpan& s : spans) {
        kv.push_back(
            {std::vector<double>(kv_k.begin() + s.q_begin * kv_width, kv_k.begin() + (s.q_begin + s.q_len) * kv_width),
             std::vector<double>(kv_v.begin() + s.q_begin * kv_width, kv_v.begin() + (s.q_begin + s.q_len) * kv_width)});
        ref_spans.push_back({s.q_begin, s.q_len, s.q_len, nullptr});
      }
      Tensor out = Poisoned(q.shape());
      ASSERT_TRUE(be->DenseAttention(q, k, v, spans, p, out).ok());
      const std::string name = "window " + std::to_string(window) + " head_dim " + std::to_string(head_dim);
      ExpectClose(out, ReferenceAttention(Values(q), kv, ref_spans, p), 1e-5, name);
      if (window < 130) {
        // The window must matter: the unwindowed result differs on the long span.
        AttentionParams full = p;
        full.window = 0;
        Tensor unwindowed = Poisoned(q.shape());
        ASSERT_TRUE(be->DenseAttention(q, k, v, spans, full, unwindowed).ok());
        const float* a = out.data<float>();
        const float* b = unwindowed.data<float>();
        double diff = 0;
        for (int64_t i = 0; i < out.numel(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
        EXPECT_GT(diff, 1e-3) << name;
      }
    }
  }
}

TEST(AttentionTest, RejectsBadInput) {
  Scenario sc;
  sc.spans = {{4, 20}};
  auto be = backend::MakeCpuBackend();
  PagedSetup st = MakePaged(sc, *be, 74);
  Tensor out = Poisoned(st.q.shape());
  ASSERT_TRUE(be->PagedAttention(st.q, st.layer, st.spans, st.params, out).ok());

  std::vector<int32_t> bad_table = {0, 999};
  std::vector<SeqSpan> spans = st.spans;
  spans[0].block_table = bad_table.data();
  EXPECT_FALSE(be->PagedAttention(st.q, st.layer, spans, st.params, out).ok()) << "block id out of range";
  spans = st.spans;
  spans[0].context_len = 3;
  EXPECT_FALSE(be->PagedAttention(st.q, st.layer, spans, st.params, out).ok()) << "context < q_len";
  spans = st.spans;
  spans[0].q_len = 5;
  EXPECT_FALSE(be->PagedAttention(st.q, st.layer, spans, st.params, out).ok()) << "rows beyond q";
  spans = st.spans;
  spans[0].block_table = nullptr;
  EXPECT_FALSE(be->PagedAttention(st.q, st.layer, spans, st.params, out).ok()) << "no block table";
  AttentionParams p = st.params;
  p.num_kv_heads = 3;
  EXPECT_FALSE(be->PagedAttention(st.q, st.layer, st.spans, p, out).ok()) << "heads not divisible";
  p = st.params;
  p.num_kv_heads = 4;
  EXPECT_FALSE(be->PagedAttention(st.q, st.layer, st.spans, p, out).ok()) << "cache kv heads mismatch";
  p = st.params;
  p.head_dim = 32;
  EXPECT_FALSE(be->PagedAttention(st.q, st.layer, st.spans, p, out).ok()) << "head_dim mismatch";
  Tensor out_bad = Poisoned({4, 100});
  EXPECT_FALSE(be->PagedAttention(st.q, st.layer, st.spans, st.params, out_bad).ok()) << "out shape";
  EXPECT_FALSE(be->PagedAttention(st.q, st.layer, st.spans, st.params, st.q).ok()) << "out aliases q";

  Tensor k = RandomTensor({4, 100}, *std::make_unique<std::mt19937>(1));
  EXPECT_FALSE(be->DenseAttention(st.q, k, k, st.spans, st.params, out).ok()) << "dense k width";
}

// Encoder attention (bidirectional) over heads / kv_heads / head_dim.
struct EncoderHeads {
  int heads, kv_heads, head_dim;
};
AttentionParams EncoderParams(const EncoderHeads& h) {
  AttentionParams p;
  p.num_heads = h.heads;
  p.num_kv_heads = h.kv_heads;
  p.head_dim = h.head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(h.head_dim));
  p.causal = false;
  return p;
}

// Consecutive spans of the given lengths; `rows` gets their total.
std::vector<SeqSpan> PackedSpans(const std::vector<int>& lens, int32_t& rows) {
  std::vector<SeqSpan> spans;
  rows = 0;
  for (int len : lens) {
    spans.push_back({rows, len, 0, nullptr});
    rows += len;
  }
  return spans;
}

// The encoders' attention on one projection's output, [q | k | v] read in place, gives the
// bytes of the same attention on the three column blocks copied out; and the AVX-512 tiles
// give the AVX2 tiles' bytes. Spans of 1 to 200 rows (tiles of every remainder), grouped
// heads and a head_dim that is not a multiple of 32.
TEST(AttentionTest, PackedQkvAndAvx512TilesGiveTheSameBytes) {
  using kernels::cpu::GemmKernel;
  std::mt19937 rng(76);
  auto be = backend::MakeCpuBackend();
  const GemmKernel saved = kernels::cpu::ActiveGemmKernel();
  for (const EncoderHeads h : {EncoderHeads{12, 12, 64}, EncoderHeads{8, 2, 64}, EncoderHeads{4, 4, 80},
                               EncoderHeads{6, 3, 48}}) {
    const AttentionParams p = EncoderParams(h);
    int32_t rows = 0;
    const std::vector<SeqSpan> spans = PackedSpans({1, 2, 7, 8, 13, 14, 50, 128, 200}, rows);
    const int64_t qw = static_cast<int64_t>(h.heads) * h.head_dim, kvw = static_cast<int64_t>(h.kv_heads) * h.head_dim;
    const Tensor qkv = RandomTensor({rows, qw + 2 * kvw}, rng, -2, 2);
    Tensor q = Poisoned({rows, qw}), k = Poisoned({rows, kvw}), v = Poisoned({rows, kvw});
    ASSERT_TRUE(be->CopyColumns(qkv, 0, q).ok());
    ASSERT_TRUE(be->CopyColumns(qkv, qw, k).ok());
    ASSERT_TRUE(be->CopyColumns(qkv, qw + kvw, v).ok());
    const std::string what = std::to_string(h.heads) + "/" + std::to_string(h.kv_heads) + " heads of " +
                             std::to_string(h.head_dim);
    std::vector<Tensor> outs;
    for (const GemmKernel kernel : {GemmKernel::kAvx2, GemmKernel::kAvx512}) {
      if (!kernels::cpu::SetActiveGemmKernel(kernel)) continue;
      Tensor copied = Poisoned({rows, qw}), packed = Poisoned({rows, qw});
      ASSERT_TRUE(be->DenseAttention(q, k, v, spans, p, copied).ok()) << what;
      ASSERT_TRUE(be->DenseAttentionQkv(qkv, spans, p, packed).ok()) << what;
      EXPECT_EQ(0, std::memcmp(copied.raw(), packed.raw(), copied.nbytes())) << what << ": packed qkv";
      // The portable default (split with CopyColumns into tensors of its own) gives them too.
      Tensor split = Poisoned({rows, qw});
      ASSERT_TRUE(be->backend::Backend::DenseAttentionQkv(qkv, spans, p, split).ok()) << what;
      EXPECT_EQ(0, std::memcmp(copied.raw(), split.raw(), copied.nbytes())) << what << ": the default";
      outs.push_back(copied);
    }
    if (outs.size() == 2) {
      EXPECT_EQ(0, std::memcmp(outs[0].raw(), outs[1].raw(), outs[0].nbytes())) << what << ": AVX-512 tiles";
    }
  }
  kernels::cpu::SetActiveGemmKernel(saved);
  Tensor out = Poisoned({4, 64});
  AttentionParams p;
  p.num_heads = 1;
  p.num_kv_heads = 1;
  p.head_dim = 64;
  std::vector<SeqSpan> spans = {{0, 4, 0, nullptr}};
  EXPECT_FALSE(be->DenseAttentionQkv(RandomTensor({4, 100}, rng), spans, p, out).ok())
      << "qkv width";
  EXPECT_FALSE(be->backend::Backend::DenseAttentionQkv(RandomTensor({4, 100}, rng), spans, p, out).ok())
      << "qkv width, the default";
}

// W8A8 encoders' attention with bf16 products, on AMX and on vdpbf16ps (each where the CPU
// has it): within bf16's rounding of the f32 path (scores, probabilities and values each
// rounded once), on spans of 1 to 700 rows (partial tiles of queries and keys), grouped heads
// and head_dims 32, 64 and 128, whatever the number of spans (heads grouped per item or not),
// stored or streamed; the two routes within f32 summation order of each other. Where it does
// not apply (both routes off, causal, a window, a head_dim off 32) the flag changes no byte.
TEST(AttentionTest, Bf16ProductsStayCloseToF32) {
  std::mt19937 rng(77);
  auto be = backend::MakeCpuBackend();
  const bool saved_amx = kernels::cpu::AmxEnabled();
  const bool saved_dot = kernels::cpu::Bf16DotAttentionEnabled();
  const auto max_diff = [](const Tensor& a, const Tensor& b) {
    double worst = 0.0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const double d = std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]);
      worst = std::isfinite(d) ? std::max(worst, d) : 1e30;
    }
    return worst;
  };
  for (const EncoderHeads h : {EncoderHeads{12, 12, 64}, EncoderHeads{8, 2, 32}, EncoderHeads{2, 2, 128},
                               EncoderHeads{4, 4, 48}}) {
    // The last set: an output of over 4 MB at 12 heads of 64, written with non-temporal stores.
    for (const std::vector<int>& lens : {std::vector<int>{1, 2, 15, 16, 17, 31, 32, 33, 100, 200},
                                         std::vector<int>{77}, std::vector<int>{700, 700}}) {
      AttentionParams p = EncoderParams(h);
      int32_t rows = 0;
      const std::vector<SeqSpan> spans = PackedSpans(lens, rows);
      const int64_t qw = static_cast<int64_t>(h.heads) * h.head_dim,
                    kvw = static_cast<int64_t>(h.kv_heads) * h.head_dim;
      const Tensor qkv = RandomTensor({rows, qw + 2 * kvw}, rng, -2, 2);
      const std::string what = std::to_string(h.heads) + "/" + std::to_string(h.kv_heads) + " heads of " +
                               std::to_string(h.head_dim) + ", " + std::to_string(spans.size()) + " spans";
      Tensor f32 = Poisoned({rows, qw});
      ASSERT_TRUE(be->DenseAttentionQkv(qkv, spans, p, f32).ok()) << what;
      p.bf16_products = true;
      const bool applies = (kernels::cpu::AmxSupported() || kernels::cpu::Bf16DotSupported()) && h.head_dim % 32 == 0;
      if (!applies) {
        Tensor bf16 = Poisoned({rows, qw});
        ASSERT_TRUE(be->DenseAttentionQkv(qkv, spans, p, bf16).ok()) << what;
        EXPECT_EQ(0, std::memcmp(f32.raw(), bf16.raw(), f32.nbytes())) << what << ": not applicable";
        continue;
      }
      // Each supported route alone: AMX, then vdpbf16ps with AMX off.
      std::vector<Tensor> routes;
      for (const bool amx : {true, false}) {
        if (amx ? !kernels::cpu::AmxSupported() : !kernels::cpu::Bf16DotSupported()) continue;
        ASSERT_TRUE(kernels::cpu::SetAmxEnabled(amx));
        ASSERT_TRUE(kernels::cpu::SetBf16DotAttentionEnabled(!amx));
        Tensor bf16 = Poisoned({rows, qw});
        ASSERT_TRUE(be->DenseAttentionQkv(qkv, spans, p, bf16).ok()) << what;
        const double worst = max_diff(f32, bf16);
        // Values in [-2, 2]: three bf16 roundings (2^-9 relative each) and score errors of a few
        // 2^-9 through the exponential.
        EXPECT_LT(worst, 3e-2) << what << (amx ? ", AMX" : ", vdpbf16ps");
        EXPECT_GT(worst, 0.0) << what << ": the bf16 route did not run";
        routes.push_back(std::move(bf16));
      }
      // The same products summed in another order: a score's last bits can move a probability's
      // bf16 rounding by one step (2^-8 of it at most), so |difference| <= 2^-8 * max |v|.
      if (routes.size() == 2) {
        EXPECT_LT(max_diff(routes[0], routes[1]), 8e-3) << what << ": AMX vs vdpbf16ps";
      }
      // Off the route: both routes turned off, causal, a window.
      ASSERT_TRUE(kernels::cpu::SetAmxEnabled(false));
      ASSERT_TRUE(kernels::cpu::SetBf16DotAttentionEnabled(false));
      Tensor off = Poisoned({rows, qw});
      ASSERT_TRUE(be->DenseAttentionQkv(qkv, spans, p, off).ok()) << what;
      EXPECT_EQ(0, std::memcmp(f32.raw(), off.raw(), f32.nbytes())) << what << ": routes off";
      ASSERT_TRUE(kernels::cpu::SetAmxEnabled(kernels::cpu::AmxSupported()));
      ASSERT_TRUE(kernels::cpu::SetBf16DotAttentionEnabled(kernels::cpu::Bf16DotSupported()));
      for (const bool causal : {true, false}) {
        AttentionParams other = p;
        other.causal = causal;
        other.window = causal ? 0 : 8;
        Tensor a = Poisoned({rows, qw}), b = Poisoned({rows, qw});
        ASSERT_TRUE(be->DenseAttentionQkv(qkv, spans, other, a).ok()) << what;
        other.bf16_products = false;
        ASSERT_TRUE(be->DenseAttentionQkv(qkv, spans, other, b).ok()) << what;
        EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes())) << what << (causal ? ": causal" : ": window");
      }
    }
  }
  kernels::cpu::SetAmxEnabled(saved_amx);
  kernels::cpu::SetBf16DotAttentionEnabled(saved_dot);
}

}  // namespace
}  // namespace ferry
