#include "kernels/int4_groups.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/thread_pool.h"

namespace ferry::kernels {

int64_t DefaultInt4GroupSize(int64_t in) {
  if (in > 0 && in % 128 == 0) return 128;
  if (in > 0 && in % 32 == 0) return in;
  return 0;
}

Result<Int4Groups> QuantizeInt4(const float* w, int64_t out, int64_t in, int64_t group_size) {
  if (out <= 0 || in <= 0 || group_size <= 0 || in % group_size != 0) {
    return InvalidArgument("int4 quantization of a [" + std::to_string(out) + ", " + std::to_string(in) +
                           "] weight needs a group size dividing " + std::to_string(in) + ", got " +
                           std::to_string(group_size));
  }
  Int4Groups g;
  g.out = out;
  g.in = in;
  g.group_size = group_size;
  const int64_t groups = in / group_size;
  g.q.resize(static_cast<size_t>(out * in));
  g.scales.resize(static_cast<size_t>(out * groups));
  g.zeros.resize(static_cast<size_t>(out * groups));
  // Rows are independent: an 8B model's weights are billions of values.
  ParallelFor(out, 16, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      for (int64_t gi = 0; gi < groups; ++gi) {
        const float* src = w + o * in + gi * group_size;
        float lo = 0.0f, hi = 0.0f;  // the range always holds 0, so zero is a valid code
        for (int64_t i = 0; i < group_size; ++i) {
          lo = std::min(lo, src[i]);
          hi = std::max(hi, src[i]);
        }
        const float scale = hi > lo ? (hi - lo) / 15.0f : 1.0f;
        const float zero = std::clamp(std::nearbyint(-lo / scale), 0.0f, 15.0f);
        g.scales[static_cast<size_t>(o * groups + gi)] = scale;
        g.zeros[static_cast<size_t>(o * groups + gi)] = static_cast<uint8_t>(zero);
        uint8_t* dst = g.q.data() + o * in + gi * group_size;
        for (int64_t i = 0; i < group_size; ++i) {
          dst[i] = static_cast<uint8_t>(std::clamp(std::nearbyint(src[i] / scale) + zero, 0.0f, 15.0f));
        }
      }
    }
  });
  return g;
}

void DequantizeInt4(const Int4Groups& g, float* w) {
  const int64_t groups = g.groups();
  ParallelFor(g.out, 16, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      for (int64_t i = 0; i < g.in; ++i) {
        const size_t s = static_cast<size_t>(o * groups + i / g.group_size);
        w[o * g.in + i] = static_cast<float>(static_cast<int>(g.q[static_cast<size_t>(o * g.in + i)]) -
                                             static_cast<int>(g.zeros[s])) *
                          g.scales[s];
      }
    }
  });
}

Result<Int4Groups> ConcatInt4Rows(const std::vector<Int4Groups>& parts) {
  if (parts.empty()) return InvalidArgument("no int4 row blocks to stack");
  if (parts.size() == 1) return parts[0];
  Int4Groups all;
  all.in = parts[0].in;
  all.group_size = parts[0].group_size;
  for (const Int4Groups& p : parts) {
    if (p.in != all.in || p.group_size != all.group_size) {
      return InvalidArgument("int4 row blocks of different widths or group sizes (" + std::to_string(p.in) + "/" +
                             std::to_string(p.group_size) + " vs " + std::to_string(all.in) + "/" +
                             std::to_string(all.group_size) + ")");
    }
    all.out += p.out;
    all.q.insert(all.q.end(), p.q.begin(), p.q.end());
    all.scales.insert(all.scales.end(), p.scales.begin(), p.scales.end());
    all.zeros.insert(all.zeros.end(), p.zeros.begin(), p.zeros.end());
  }
  return all;
}

std::vector<uint32_t> PackInt4Rows(const Int4Groups& g) {
  const int64_t words = g.in / 8;
  std::vector<uint32_t> packed(static_cast<size_t>(g.out * words), 0u);
  ParallelFor(g.out, 64, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const uint8_t* row = g.q.data() + o * g.in;
      for (int64_t j = 0; j < words; ++j) {
        uint32_t word = 0;
        for (int b = 0; b < 8; ++b) word |= static_cast<uint32_t>(row[8 * j + b] & 0xfu) << (4 * b);
        packed[static_cast<size_t>(o * words + j)] = word;
      }
    }
  });
  return packed;
}

}  // namespace ferry::kernels
