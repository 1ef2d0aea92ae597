#include "engine/encoder_runner.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace ferry::engine {

namespace {

// Runs the encoder and brings back only what is asked for: the logits, and with `pooling`
// the pooled rows (reduced on the device), never the whole hidden state.
Result<model::EncoderOutput> RunEncoder(const Engine& engine, const std::vector<EncodedInput>& inputs,
                                        std::optional<Pooling> pooling) {
  if (engine.encoder() == nullptr) return InvalidArgument("model '" + engine.path() + "' is not an encoder");
  if (inputs.empty()) return InvalidArgument("no inputs");
  model::EncoderBatch b;
  for (const EncodedInput& in : inputs) {
    if (in.ids.empty()) return InvalidArgument("empty input");
    if (!in.type_ids.empty() && in.type_ids.size() != in.ids.size()) {
      return InvalidArgument("type ids do not match the input ids");
    }
    if (static_cast<int>(in.ids.size()) > engine.config().max_position_embeddings) {
      return OutOfRange("input of " + std::to_string(in.ids.size()) + " tokens exceeds the model's context of " +
                        std::to_string(engine.config().max_position_embeddings));
    }
    backend::SeqSpan span;
    span.q_begin = static_cast<int32_t>(b.token_ids.size());
    span.q_len = static_cast<int32_t>(in.ids.size());
    span.context_len = span.q_len;
    for (size_t i = 0; i < in.ids.size(); ++i) {
      b.token_ids.push_back(in.ids[i]);
      b.type_ids.push_back(in.type_ids.empty() ? 0 : in.type_ids[i]);
      b.positions.push_back(static_cast<int32_t>(i));
    }
    b.spans.push_back(span);
  }
  model::EncoderOutput out;
  FERRY_RETURN_IF_ERROR(engine.encoder()->Forward(b, out));
  backend::Backend& be = engine.backend();
  if (pooling.has_value()) {
    FERRY_ASSIGN_OR_RETURN(Tensor pooled,
                           be.Allocate({static_cast<int64_t>(b.spans.size()), out.hidden.dim(1)}, out.hidden.dtype()));
    const backend::PoolMode mode = *pooling == Pooling::kMean  ? backend::PoolMode::kMean
                                   : *pooling == Pooling::kMax ? backend::PoolMode::kMax
                                   : *pooling == Pooling::kLast ? backend::PoolMode::kLast
                                                                : backend::PoolMode::kFirst;
    FERRY_RETURN_IF_ERROR(be.PoolRows(out.hidden, b.spans, mode, pooled));
    FERRY_ASSIGN_OR_RETURN(out.hidden, be.ToHost(pooled));
  } else {
    out.hidden = Tensor();
  }
  if (out.logits.defined()) {
    FERRY_ASSIGN_OR_RETURN(out.logits, engine.backend().ToHost(out.logits));
  }
  if (out.token_logits.defined()) {
    FERRY_ASSIGN_OR_RETURN(out.token_logits, engine.backend().ToHost(out.token_logits));
  }
  return out;
}

}  // namespace

Result<Tensor> Classify(const Engine& engine, const std::vector<EncodedInput>& inputs) {
  if (engine.encoder() != nullptr && !engine.encoder()->has_classifier()) {
    return InvalidArgument("model '" + engine.path() + "' has no classification head");
  }
  FERRY_ASSIGN_OR_RETURN(model::EncoderOutput out, RunEncoder(engine, inputs, std::nullopt));
  return out.logits;
}

Result<Tensor> ClassifyTokens(const Engine& engine, const std::vector<EncodedInput>& inputs) {
  if (engine.encoder() != nullptr && !engine.encoder()->has_token_classifier()) {
    return InvalidArgument("model '" + engine.path() + "' has no token-classification head");
  }
  FERRY_ASSIGN_OR_RETURN(model::EncoderOutput out, RunEncoder(engine, inputs, std::nullopt));
  return out.token_logits;
}

Result<Tensor> Embed(const Engine& engine, const std::vector<EncodedInput>& inputs, Pooling pooling, bool normalize) {
  FERRY_ASSIGN_OR_RETURN(model::EncoderOutput out, RunEncoder(engine, inputs, pooling));
  Tensor emb = out.hidden;  // [inputs, hidden] f32, pooled
  if (normalize) {
    const int64_t H = emb.dim(1);
    for (int64_t s = 0; s < emb.dim(0); ++s) {
      float* dst = emb.data<float>() + s * H;
      double norm = 0.0;
      for (int64_t j = 0; j < H; ++j) norm += static_cast<double>(dst[j]) * dst[j];
      const float inv = static_cast<float>(1.0 / std::max(std::sqrt(norm), 1e-12));
      for (int64_t j = 0; j < H; ++j) dst[j] *= inv;
    }
  }
  return emb;
}

}  // namespace ferry::engine
