// Rotary position embedding, Hugging Face rotate_half convention.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace ferry::kernels::cpu {

// In place on q [T, num_heads*head_dim] and k [T, num_kv_heads*head_dim] (k may be
// undefined). In each head, element i pairs with i + rot/2 where rot = 2*inv_freq.size()
// (<= head_dim; dims past rot, as in partial-rotary models, are left alone) and rotates by
// positions[t] * inv_freq[i]. The angle and its sin/cos are computed in double, so large
// positions keep full f32 accuracy.
// two_sets: inv_freq is the short set then the long set, and positions flagged with
// kRopeLongPosition turn by the long one.
Status Rope(Tensor& q, Tensor& k, int num_heads, int num_kv_heads, const int32_t* positions,
            const std::vector<float>& inv_freq, bool two_sets = false);

}  // namespace ferry::kernels::cpu
