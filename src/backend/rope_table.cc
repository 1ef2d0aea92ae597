#include <cmath>

#include "backend/backend.h"

namespace ferry::backend {

RopeTable MakeRopeTable(int head_dim, float theta, const RopeScalingParams& scaling) {
  RopeTable table;
  table.head_dim = head_dim;
  const int half = head_dim / 2;
  if (scaling.type == RopeScalingParams::Type::kLongRope) {
    // inv_freq_i = 1 / (factor_i * theta^(2i / d)), short set then long set.
    table.long_factors = true;
    table.inv_freq.resize(static_cast<size_t>(head_dim));
    for (int i = 0; i < half; ++i) {
      const double base = std::pow(static_cast<double>(theta), (2.0 * i) / head_dim);
      const double s = i < static_cast<int>(scaling.short_factor.size()) ? scaling.short_factor[i] : 1.0;
      const double l = i < static_cast<int>(scaling.long_factor.size()) ? scaling.long_factor[i] : 1.0;
      table.inv_freq[i] = static_cast<float>(1.0 / (s * base));
      table.inv_freq[half + i] = static_cast<float>(1.0 / (l * base));
    }
    return table;
  }
  table.inv_freq.resize(half);
  for (int i = 0; i < half; ++i) {
    // Computed in double, as transformers does in float64 for its reference, then rounded.
    double inv = 1.0 / std::pow(static_cast<double>(theta), (2.0 * i) / head_dim);
    switch (scaling.type) {
      case RopeScalingParams::Type::kNone:
        break;
      case RopeScalingParams::Type::kLinear:
        inv /= scaling.factor;
        break;
      case RopeScalingParams::Type::kLlama3: {
        // Long wavelengths are divided by `factor`, short ones kept, and the band between
        // interpolated smoothly (Llama 3.1's published recipe).
        const double low_wavelen = scaling.original_max_position / scaling.low_freq_factor;
        const double high_wavelen = scaling.original_max_position / scaling.high_freq_factor;
        const double wavelen = 2.0 * M_PI / inv;
        if (wavelen > low_wavelen) {
          inv /= scaling.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth = (scaling.original_max_position / wavelen - scaling.low_freq_factor) /
                                (scaling.high_freq_factor - scaling.low_freq_factor);
          inv = (1.0 - smooth) * inv / scaling.factor + smooth * inv;
        }
        break;
      }
      case RopeScalingParams::Type::kLongRope:
        break;  // handled above
    }
    table.inv_freq[i] = static_cast<float>(inv);
  }
  return table;
}

}  // namespace ferry::backend
