#include "kernels/logit_adjust.h"

#include <algorithm>

namespace ferry::kernels {

bool NeedsAdjustments(const RowPenalties& p) {
  return !p.logit_bias.empty() || !p.banned.empty() || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

void CollectLogitAdjustments(const RowPenalties& p, int32_t row, int32_t vocab, std::vector<LogitAdjustment>& out) {
  // (id, kind, value): kind 0 history, 1 output, 2 bias, 3 ban; sorted, then merged per id.
  struct Item {
    int32_t id;
    int kind;
    float value;
  };
  std::vector<Item> items;
  const size_t generated = std::min(p.generated, p.history.size());
  const size_t prompt = p.history.size() - generated;
  const bool output_penalties = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  for (size_t i = 0; i < p.history.size(); ++i) {
    const int32_t id = p.history[i];
    if (id < 0 || id >= vocab) continue;
    if (p.repetition_penalty != 1.0f) items.push_back({id, 0, 0.0f});
    if (output_penalties && i >= prompt) items.push_back({id, 1, 0.0f});
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= 0 && id < vocab) items.push_back({id, 2, bias});
  }
  for (int32_t id : p.banned) {
    if (id >= 0 && id < vocab) items.push_back({id, 3, 0.0f});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.id < b.id; });
  for (size_t i = 0; i < items.size();) {
    LogitAdjustment a;
    a.row = row;
    a.id = items[i].id;
    a.repetition = p.repetition_penalty;
    int count = 0;
    for (; i < items.size() && items[i].id == a.id; ++i) {
      switch (items[i].kind) {
        case 0: a.flags |= kLogitRepeated; break;
        case 1: ++count; break;
        case 2: a.bias += items[i].value; break;
        default: a.flags |= kLogitBanned; break;
      }
    }
    if (count > 0) a.subtract = p.frequency_penalty * static_cast<float>(count) + p.presence_penalty;
    out.push_back(a);
  }
}

}  // namespace ferry::kernels
