#include "tools/request_latency.h"

#include <algorithm>
#include <chrono>

namespace ferry::tools {

double RequestLatencies::median_rest_ms() const {
  if (rest_ms.empty()) return 0;
  std::vector<double> v = rest_ms;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

Result<RequestLatencies> MeasureRequestLatencies(sched::PreloadedModel& model, const RequestLatencyOptions& o) {
  if (o.requests < 0 || o.prompt_tokens <= 0 || o.max_tokens <= 0) return InvalidArgument("bad request shape");
  const engine::Engine& e = *model.engine();
  const int vocab = e.config().vocab_size;
  const int len = std::min(o.prompt_tokens, model.max_seq_len() - (e.is_decoder() ? o.max_tokens : 0));
  if (len <= 0) return InvalidArgument("prompt does not fit the context");
  RequestLatencies r;
  for (int i = 0; i <= o.requests; ++i) {
    // A different prompt each time, so no cache of any kind could serve a repeat.
    std::vector<int32_t> ids(len);
    for (int t = 0; t < len; ++t) ids[t] = static_cast<int32_t>((i * 131 + t * 7919 + 17) % vocab);
    const auto t0 = std::chrono::steady_clock::now();
    if (e.is_decoder()) {
      sched::GenerationRequest req;
      req.prompt = ids;
      req.sampling.temperature = 0;
      req.max_tokens = o.max_tokens;
      FERRY_ASSIGN_OR_RETURN(std::vector<sched::GenerationEvent> res, sched::GenerateAll(*model.core(), {req}));
      if (!res[0].error.ok()) return res[0].error;
    } else {
      FERRY_ASSIGN_OR_RETURN(Tensor out, engine::Embed(e, {engine::EncodedInput{ids, std::vector<int32_t>(len, 0)}},
                                                       engine::Pooling::kCls, false));
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

}  // namespace ferry::tools
