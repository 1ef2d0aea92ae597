// Device pieces shared by ferry's 8-bit wgmma GEMMs: w8_gemm.cu (decode batches, up to
// kW8MmaMaxM rows) and w8_tile_gemm.cu (128 x 128 tiles past that). Both take x and W as e4m3
// (an fp8 linear) or int8 (W8A8) bytes, x quantized per token and W per output channel, and
// apply the scales, bias and activation to the accumulator in registers; w8_gemm.cu's header
// comment describes the operand layout (128-byte swizzled tiles streamed by cp.async, the
// weight as the MMA's M side and the tokens as N).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_common.cuh"

namespace ferry::cuda::gemm_kernels::w8_internal {

using kernels_internal::FromF32;

constexpr int kBn = 128;       // output channels per block: two m64 tiles
constexpr int kBk = 128;       // K bytes per stage: one swizzle atom
constexpr int kThreads = 128;  // one warpgroup

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FERRY_W8_WGMMA 1
#endif

#if defined(FERRY_W8_WGMMA)
__device__ __forceinline__ void CpAsync16(uint32_t smem_addr, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled, nothing is read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr), "l"(gmem), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// The byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a tile of 128-byte rows, in
// the tensor cores' 128-byte swizzle.
__device__ __forceinline__ uint32_t Swizzled(int row, int chunk) {
  return static_cast<uint32_t>(row * kBk + ((chunk ^ (row & 7)) << 4));
}

// A K-major shared-memory operand with 128-byte swizzle: rows of 128 bytes, 8-row atoms of
// 1024 bytes one after another (the stride byte offset); the leading byte offset is unused.
__device__ __forceinline__ uint64_t Descriptor(uint32_t smem_addr) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

// The copy plan of a tile of kRows rows of 128 K-bytes, fixed for a whole K loop: thread tid
// copies 16-byte chunk tid % 8 of tile rows tid / 8 + 16 i. Rows 16 apart share a swizzle phase,
// so their shared-memory offsets differ by a constant, and a stage only adds its K offset to
// pointers computed once. With two or three blocks a multiprocessor each warp's own instruction
// stream had set these kernels' rate, at about 400 instructions a stage when every copy worked its
// row, chunk, swizzle and 64-bit address out again. Rows at or past `limit` are zero-filled (the
// source size is 0; the address is clamped to a row that exists).
template <int kRows>
struct TileCopy {
  static constexpr int kCopies = (kRows + 15) / 16;
  const uint8_t* src[kCopies];
  uint32_t valid = 0;
  uint32_t dst0;
  bool active;  // kRows = 8: the first 64 threads copy

  __device__ __forceinline__ TileCopy(const uint8_t* base, int64_t ld, int64_t first, int64_t limit, int64_t k0,
                                      int tid) {
    const int chunk = tid & 7, row0 = tid >> 3;
    dst0 = Swizzled(row0, chunk);
    active = kRows >= 16 || row0 < kRows;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const int64_t row = first + row0 + 16 * i;
      if (row < limit) valid |= 1u << i;
      src[i] = base + min(row, limit - 1) * ld + k0 + chunk * 16;
    }
  }
  // The tile's bytes at K offset k_off (from k0) into the swizzled tile at dst.
  __device__ __forceinline__ void Load(uint32_t dst, int64_t k_off) const {
    if (!active) return;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      CpAsync16(dst + dst0 + i * 16 * kBk, src[i] + k_off, ((valid >> i) & 1u) != 0);
    }
  }
};

// The descriptor of the operand `bytes` (a multiple of 16) past d's: the address field is the
// byte address / 16 in the low 14 bits, and a block's shared memory ends below 2^18 bytes, so the
// offset adds without a carry into the other fields.
__device__ __forceinline__ uint64_t DescriptorPlus(uint64_t d, int bytes) {
  return d + static_cast<uint64_t>(bytes >> 4);
}

// The TMA kernels' mbarriers and copies (w8_tma_gemm.cu, w8_gemm.cu).
__device__ __forceinline__ void BarrierInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void BarrierExpectBytes(uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void BarrierArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Waits until the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void BarrierWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// A 2-D tile of the tensor `map` at (inner byte offset x, row y) into shared memory at dst; the
// bytes are counted on barrier bar.
__device__ __forceinline__ void TmaLoad(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
#endif  // FERRY_W8_WGMMA

template <bool kInt8>
struct Acc;
template <>
struct Acc<false> {
  using T = float;
};
template <>
struct Acc<true> {
  using T = int;
};

// d (m64 x kNt, f32 or s32) += A (64 x 32 from descriptor a) . B (32 x kNt from descriptor b).
template <bool kInt8, int kNt>
struct Wgmma;
#if defined(FERRY_W8_WGMMA)
template <>
struct Wgmma<false, 8> {
  static __device__ __forceinline__ void Run(float (&d)[4], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, %4, %5, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "l"(a), "l"(b), "r"(1));
  }
};
template <>
struct Wgmma<true, 8> {
  static __device__ __forceinline__ void Run(int (&d)[4], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8 {%0,%1,%2,%3}, %4, %5, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "l"(a), "l"(b), "r"(1));
  }
};
template <>
struct Wgmma<false, 16> {
  static __device__ __forceinline__ void Run(float (&d)[8], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(a), "l"(b), "r"(1));
  }
};
template <>
struct Wgmma<true, 16> {
  static __device__ __forceinline__ void Run(int (&d)[8], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7])
        : "l"(a), "l"(b), "r"(1));
  }
};
template <>
struct Wgmma<false, 32> {
  static __device__ __forceinline__ void Run(float (&d)[16], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "r"(1));
  }
};
template <>
struct Wgmma<true, 32> {
  static __device__ __forceinline__ void Run(int (&d)[16], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
        : "l"(a), "l"(b), "r"(1));
  }
};
template <>
struct Wgmma<false, 64> {
  static __device__ __forceinline__ void Run(float (&d)[32], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(1));
  }
};
template <>
struct Wgmma<true, 64> {
  static __device__ __forceinline__ void Run(int (&d)[32], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
        : "l"(a), "l"(b), "r"(1));
  }
};
template <>
struct Wgmma<false, 128> {
  static __device__ __forceinline__ void Run(float (&d)[64], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(1));
  }
};
template <>
struct Wgmma<true, 128> {
  static __device__ __forceinline__ void Run(int (&d)[64], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
        : "l"(a), "l"(b), "r"(1));
  }
};
template <>
struct Wgmma<false, 256> {
  static __device__ __forceinline__ void Run(float (&d)[128], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(a), "l"(b), "r"(1));
  }
};
template <>
struct Wgmma<true, 256> {
  static __device__ __forceinline__ void Run(int (&d)[128], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]), "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]), "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]), "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]), "+r"(d[88]), "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]), "+r"(d[96]), "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]), "+r"(d[104]), "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]), "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]), "+r"(d[120]), "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
        : "l"(a), "l"(b), "r"(1));
  }
};
__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void WgmmaWaitAll() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
// Waits until at most kPending committed wgmma groups of this warpgroup are still running.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void FenceToAsyncProxy() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
#endif

struct Params {
  const uint8_t* x;  // [m, ldx] bytes
  int64_t ldx;
  int64_t m;
  const uint8_t* w;  // [n, k] bytes
  int64_t n, k;
  const float* x_scale;
  bool per_row;
  const float* w_scale;
  bool per_col;
  GemmActivation act;
  int64_t ldy;
  int64_t stages_per_split;
  int64_t splits;  // > 1: the blocks of a cluster along y
};

// One output: the accumulator times the token's and the channel's scales, plus the bias, then
// the activation (the same float operations as LtGemm's scale epilogue pass).
template <typename Out, typename AccT>
__device__ __forceinline__ Out FinishScaled(AccT value, float row_scale, float col_scale, float bias, GemmActivation act) {
  const float v = ScaleAndBias(static_cast<float>(value), row_scale, col_scale, bias);
  return FromF32<Out>(Activate(v, act));
}
__device__ __forceinline__ float RowScale(const Params& p, int64_t row) {
  return p.x_scale != nullptr ? p.x_scale[p.per_row ? row : 0] : 1.0f;
}
__device__ __forceinline__ float ColScale(const Params& p, int64_t col) {
  return p.w_scale != nullptr ? p.w_scale[p.per_col ? col : 0] : 1.0f;
}
template <typename Out, typename AccT>
__device__ __forceinline__ Out Finish(const Params& p, const BiasRef<Out>& bias, int64_t row, int64_t col, AccT value) {
  return FinishScaled<Out>(value, RowScale(p, row), ColScale(p, col), bias.At(col), p.act);
}

// The tile kernels' epilogue. A finished tile is staged in shared memory as rows of tokens of
// kBn channels, each row padded by 16 bytes (the four tq of a store then fall eight banks apart).
template <typename Out>
constexpr int TileRowElems() {
  return kBn + 16 / static_cast<int>(sizeof(Out));
}

// Stages one m64 accumulator (channels ch0 .. ch0 + 63 of the tile) finished: register i of
// thread tid holds channel ch0 + 16 * warp + g (+ 8 for i % 4 >= 2) and token 8 * (i / 4) +
// 2 * tq (+ 1 for odd i), warp being the thread's warp within its warpgroup.
template <typename Out, int kRegs, typename AccT>
__device__ __forceinline__ void StageM64(Out* tile, const AccT (&acc)[kRegs], int ch0, const float* row_scales,
                                         const float* col_scales, const float* col_bias, GemmActivation act,
                                         int tid) {
  const int lane = tid & 31, g = lane >> 2, tq = lane & 3, warp = (tid >> 5) & 3;
#pragma unroll
  for (int i = 0; i < kRegs; ++i) {
    const int ch = ch0 + warp * 16 + g + ((i & 2) != 0 ? 8 : 0);
    const int tok = 8 * (i / 4) + 2 * tq + (i & 1);
    tile[tok * TileRowElems<Out>() + ch] =
        FinishScaled<Out>(acc[i], row_scales[tok], col_scales[ch], col_bias[ch], act);
  }
}

// Writes the staged tile of kTokens tokens (from m0) x kBn channels (from n0) to y, kThreadsUsed
// threads with ids tid, in 16-byte vectors along the output rows where the rows allow.
template <typename Out, int kTokens, int kThreadsUsed>
__device__ __forceinline__ void StoreTile(const Out* tile, const Params& p, Out* y, int64_t m0, int64_t n0, int tid) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(Out));
  constexpr int kChunksPerRow = kBn / kVec;
  const bool vectors = p.ldy % kVec == 0 && (reinterpret_cast<uintptr_t>(y) & 15) == 0;
  for (int c = tid; c < kTokens * kChunksPerRow; c += kThreadsUsed) {
    const int tok = c / kChunksPerRow, ch = (c % kChunksPerRow) * kVec;
    const int64_t row = m0 + tok, col = n0 + ch;
    if (row >= p.m || col >= p.n) continue;
    const Out* src = tile + tok * TileRowElems<Out>() + ch;
    Out* dst = y + row * p.ldy + col;
    if (vectors && col + kVec <= p.n) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < kVec && col + e < p.n; ++e) dst[e] = src[e];
    }
  }
}

// The tile kernels, for p.m > kW8MmaMaxM: y = act(x . W^T * scales + bias). W8Tile runs the one
// W8TileKernelVariant() names (the cp.async kernel of w8_tile_gemm.cu or W8TileTma's), by
// default the TMA kernel with 256-token tiles where wide_tile asks and 128-token ones elsewhere.
Status W8Tile(bool int8, const Params& p, const void* bias, DType bias_dtype, void* y, DType y_dtype,
              cudaStream_t stream, bool wide_tile);
// A tensor map of a row-major byte matrix of `rows` rows of `cols` bytes, `ld` bytes apart, read
// in tiles of kBk bytes x box_rows rows in the 128-byte swizzle; rows past the matrix read as
// zeros (w8_tma_gemm.cu; cuTensorMapEncodeTiled, found through the runtime).
Status EncodeOperand(const uint8_t* base, int64_t rows, int64_t cols, int64_t ld, int box_rows, CUtensorMap* map);
// The TMA kernel (w8_tma_gemm.cu), variants 1-3 (gemm.h, W8TileKernelVariant).
Status W8TileTma(int variant, bool int8, const Params& p, const void* bias, DType bias_dtype, void* y, DType y_dtype,
                 cudaStream_t stream);

}  // namespace ferry::cuda::gemm_kernels::w8_internal
