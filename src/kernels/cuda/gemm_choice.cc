// GEMM kinds' names, the tuned choices as text (how engine files store them) and the M
// buckets they are tuned for.
#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <charconv>
#include <string>

namespace ferry::cuda {

std::string_view GemmKindName(GemmKind kind) {
  switch (kind) {
    case GemmKind::kF32: return "f32";
    case GemmKind::kBF16: return "bf16";
    case GemmKind::kF16: return "f16";
    case GemmKind::kFp8: return "fp8";
    case GemmKind::kInt8: return "int8";
    case GemmKind::kInt8WeightOnly: return "int8_weight_only";
    case GemmKind::kInt4WeightOnly: return "int4_weight_only";
  }
  return "?";
}

std::string GemmChoice::ToString() const {
  if (route == Route::kSmallM) return "small_m";
  if (route == Route::kInt4Mma) return "int4_mma";
  if (route == Route::kW8Mma) return wide_tile ? "w8_mma:t256" : "w8_mma";
  static const char kHex[] = "0123456789abcdef";
  std::string s = route == Route::kCublasLtAcc ? "lt_acc:" : "lt:";
  for (uint64_t word : algo) {
    for (int shift = 60; shift >= 0; shift -= 4) s += kHex[(word >> shift) & 0xf];
  }
  s += ":" + std::to_string(workspace_bytes);
  return s;
}

Result<GemmChoice> GemmChoice::FromString(std::string_view text) {
  GemmChoice c;
  if (text == "small_m") {
    c.route = Route::kSmallM;
    return c;
  }
  if (text == "int4_mma") {
    c.route = Route::kInt4Mma;
    return c;
  }
  if (text == "w8_mma" || text == "w8_mma:t256") {
    c.route = Route::kW8Mma;
    c.wide_tile = text != "w8_mma";
    return c;
  }
  const auto bad = [&] { return InvalidArgument("malformed GEMM choice '" + std::string(text) + "'"); };
  const bool acc = text.substr(0, 7) == "lt_acc:";
  const size_t head = acc ? 7 : 3;
  if (!acc && text.substr(0, 3) != "lt:") return bad();
  if (text.size() < head + 128 + 2 || text[head + 128] != ':') return bad();
  for (int w = 0; w < 8; ++w) {
    uint64_t word = 0;
    for (int i = 0; i < 16; ++i) {
      const char ch = text[head + w * 16 + i];
      int digit;
      if (ch >= '0' && ch <= '9') digit = ch - '0';
      else if (ch >= 'a' && ch <= 'f') digit = ch - 'a' + 10;
      else return bad();
      word = (word << 4) | static_cast<uint64_t>(digit);
    }
    c.algo[w] = word;
  }
  const std::string_view ws = text.substr(head + 128 + 1);
  const auto [end, ec] = std::from_chars(ws.data(), ws.data() + ws.size(), c.workspace_bytes);
  if (ec != std::errc() || end != ws.data() + ws.size()) return bad();
  c.route = acc ? Route::kCublasLtAcc : Route::kCublasLt;
  return c;
}

int GemmMBucket(int64_t m) {
  if (m <= 1) return 0;
  if (m <= 4) return 1;
  if (m <= 8) return 2;
  if (m <= 16) return 3;
  if (m <= 32) return 4;
  if (m <= 64) return 5;
  if (m <= 128) return 6;
  if (m <= 256) return 7;
  if (m <= 512) return 8;
  if (m <= 1024) return 9;
  if (m <= kGemmMaxTunedM) return 10;
  return kGemmMBuckets;
}

int64_t GemmBucketTuneM(int bucket) {
  static constexpr int64_t kTuneM[kGemmMBuckets] = {1, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};
  return kTuneM[std::clamp(bucket, 0, kGemmMBuckets - 1)];
}

}  // namespace ferry::cuda
