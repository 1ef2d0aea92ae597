#include "engine/request_latency.h"

#include <algorithm>
#include <chrono>

namespace ferry::engine {

double RequestLatencies::median_rest_ms() const {
  if (rest_ms.empty()) return 0;
  std::vector<double> v = rest_ms;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

Result<RequestLatencies> MeasureRequestLatencies(PreloadedModel& model, const RequestLatencyOptions& o) {
  if (o.requests < 0 || o.prompt_tokens <= 0 || o.max_tokens <= 0) return InvalidArgument("bad request shape");
  const Engine& engine = *model.engine();
  const int vocab = engine.config().vocab_size;
  const int len = std::min(o.prompt_tokens, model.options().max_seq_len - (engine.is_decoder() ? o.max_tokens : 0));
  if (len <= 0) return InvalidArgument("prompt does not fit the context");
  RequestLatencies r;
  for (int i = 0; i <= o.requests; ++i) {
    // A different prompt each time, so no cache of any kind could serve a repeat.
    std::vector<int32_t> ids(len);
    for (int t = 0; t < len; ++t) ids[t] = static_cast<int32_t>((i * 131 + t * 7919 + 17) % vocab);
    const auto t0 = std::chrono::steady_clock::now();
    if (engine.is_decoder()) {
      GenerateRequest req;
      req.prompt = ids;
      req.sampling.temperature = 0;
      req.max_tokens = o.max_tokens;
      FERRY_ASSIGN_OR_RETURN(std::vector<GenerateResult> res, model.runner()->Generate({req}));
    } else {
      FERRY_ASSIGN_OR_RETURN(Tensor out, Embed(engine, {EncodedInput{ids, std::vector<int32_t>(len, 0)}},
                                               Pooling::kCls, false));
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i == 0) {
      r.first_ms = ms;
    } else {
      r.rest_ms.push_back(ms);
    }
  }
  return r;
}

}  // namespace ferry::engine
