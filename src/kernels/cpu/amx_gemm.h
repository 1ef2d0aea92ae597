// Prefill GEMMs on AMX tiles. bf16 and int8 weight-only weights: y[M, N] = x[M, K] ·
// W[N, K]^T (· per-column scale) (+ bias), straight from ferry's panels (no second copy of the
// weight). The activations go in as three bf16 planes whose sum is exactly x (24 significant
// bits) and the weights are exact in bf16 (int8 ones too; their scales apply to the sums), so
// the tiles multiply what the f32 kernels multiply and only the order of the f32 sums differs.
// Decode (fewer than kAmxMinRows rows) keeps the f32 kernels.
#pragma once

#include <cstdint>

#include "kernels/cpu/packed_weight.h"

namespace ferry::kernels::cpu {

// Rows from which a linear of an eligible weight runs on the tiles.
inline constexpr int64_t kAmxMinRows = 64;

// The CPU has AMX-BF16, AMX-INT8 and AVX512-BF16 and the kernel granted this process the tile
// state.
bool AmxSupported();
// Supported, and not turned off by FERRY_AMX=0 in the environment at start-up or by
// SetAmxEnabled(false). Covers both routes below.
bool AmxEnabled();
// Tests and benchmarks compare the routes; returns false (and changes nothing) when enabling
// on a CPU without support.
bool SetAmxEnabled(bool enabled);

// bf16 weights and int8 weight-only weights (kRows panels), at least kAmxMinRows rows, enabled.
bool AmxGemmApplies(const PackedWeight& w, int64_t m);

// Requires AmxGemmApplies(w, m) (apart from the row count, which may be any m > 0). With
// `gelu`, y = GELU(x · W^T + bias), applied as each output block is stored (the bytes of
// the separate pass, Gelu in activations.h).
void GemmAmxBf16(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                 int64_t ldy, bool gelu = false);

// W8A8 (kQuads panels, whose 64-byte lines are exactly the int8 B tile's rows): q [m_pad, ldq]
// int8 activations row-major, m_pad = m rounded up to AmxInt8RowPad(), ldq = AmxInt8Ld(w)
// (>= AmxInt8K(w)), zeros from K to AmxInt8K(w) and in the padding rows; row_scale [m]. The tiles' int32 sums are exact, and
// the epilogue is the W8A8 kernels' own, y = fma(float(acc), col_scale * row_scale, bias), so
// the results are their bytes (`gelu`: as for GemmAmxBf16).
int64_t AmxInt8RowPad();
int64_t AmxInt8K(const PackedWeight& w);  // K rounded up to the tiles' 64
int64_t AmxInt8Ld(const PackedWeight& w);
void GemmAmxInt8(const int8_t* q, int64_t ldq, const float* row_scale, int64_t m, const PackedWeight& w,
                 const float* bias, float* y, int64_t ldy, bool gelu = false);

// Dense attention of one sequence, heads [first_head, first_head + heads), with bf16 products
// (on AMX tiles where AmxEnabled(), else on AVX512-BF16's vdpbf16ps), for encoders whose
// linears are W8A8 (their activations are already int8, so bf16 scores cost them no accuracy
// that matters; the f32 path is the default everywhere else). Bidirectional, no window or soft-capping: out[t] = softmax(scale * q[t] · K^T) · V over
// all `tokens` keys. q and k are rounded to bf16 (q after scaling), the scores summed in f32,
// the softmax in f32, its probabilities rounded to bf16 for P · V (f32 sums), and each row
// divided by the f32 sum of the unrounded ones. head_dim must satisfy Bf16AttentionApplies.
struct Bf16AttentionHeads {
  const float* q;  // the sequence's first row of all heads' q, rows ldq apart; likewise k, v, out
  const float* k;
  const float* v;
  float* out;
  int64_t ldq, ldk, ldv, ldo;
  int64_t tokens;
  int head_dim;
  int first_head;
  int heads;
  int group;  // query heads per KV head
  float scale;
  bool stream;  // out written with non-temporal stores (a large output; out and ldo 64-byte aligned)
};
// The vdpbf16ps route: the same roundings and products as the tiles' (each product of two bf16
// is exact in f32), the f32 sums in another order. On where the CPU has AVX512-BF16, unless
// FERRY_BF16_DOT_ATTENTION=0 at start-up or SetBf16DotAttentionEnabled(false); AMX, where
// enabled, takes precedence.
bool Bf16DotSupported();
bool Bf16DotAttentionEnabled();
bool SetBf16DotAttentionEnabled(bool enabled);  // false (no change) when enabling without support
// AMX or the vdpbf16ps route is on, and head_dim is a multiple of 32 up to 256.
bool Bf16AttentionApplies(int head_dim);
// Every tile 16 rows of 64 bytes (palette 1), for this thread; the routes here configure their own.
void ConfigureAmxTiles();
void Bf16Attention(const Bf16AttentionHeads& h);

}  // namespace ferry::kernels::cpu
