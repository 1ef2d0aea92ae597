#include "serve/encoder_routes.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>

#include "serve/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace ferry::serve {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxInputs = 2048;

struct EncoderParams {
  EncoderWork::Kind kind = EncoderWork::Kind::kEmbed;
  std::vector<engine::EncodedInput> inputs;
  int priority = 0;        // batcher level; 0: the model's default
  int64_t timeout_us = 0;  // 0: the level's policy
  std::string user;
};

MaybeError ReadInputs(const json& body, const ServedModel& model, EncoderParams& p) {
  auto it = body.find("input");
  if (it == body.end() || it->is_null()) return BadRequest("missing required field: input", "input");
  const engine::Engine& e = model.engine();
  const int context = model.max_seq_len();
  auto add_text = [&](const std::string& text) -> MaybeError {
    if (e.tokenizer() == nullptr) return BadRequest("this model has no tokenizer; send token ids", "input");
    if (text.empty()) return BadRequest("inputs must not be empty strings", "input");
    auto enc = e.tokenizer()->EncodeWithSpecial(text);
    if (!enc.ok()) return BadRequest("cannot tokenize the input: " + enc.status().message(), "input");
    if (static_cast<int>(enc.value().ids.size()) > context) {
      return BadRequest("input " + std::to_string(p.inputs.size()) + " has " + std::to_string(enc.value().ids.size()) +
                            " tokens; this model's maximum context length is " + std::to_string(context),
                        "input", "context_length_exceeded");
    }
    p.inputs.push_back(engine::EncodedInput{std::move(enc.value().ids), std::move(enc.value().type_ids)});
    return std::nullopt;
  };
  auto add_ids = [&](const json& arr) -> MaybeError {
    if (arr.empty()) return BadRequest("token-id inputs must not be empty", "input");
    if (static_cast<int>(arr.size()) > context) {
      return BadRequest("input " + std::to_string(p.inputs.size()) + " has " + std::to_string(arr.size()) +
                            " tokens; this model's maximum context length is " + std::to_string(context),
                        "input", "context_length_exceeded");
    }
    engine::EncodedInput in;
    for (const json& v : arr) {
      if (!v.is_number_integer()) return BadRequest("token ids must be integers", "input");
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id >= e.config().vocab_size) {
        return BadRequest("token id " + std::to_string(id) + " is outside the vocabulary", "input");
      }
      in.ids.push_back(static_cast<int32_t>(id));
    }
    in.type_ids.assign(in.ids.size(), 0);
    p.inputs.push_back(std::move(in));
    return std::nullopt;
  };
  return ForEachTextOrIds(*it, "input", kMaxInputs, add_text, add_ids);
}

MaybeError ReadCommon(const json& body, const ServedModel& model, const Principal& who, EncoderParams& p) {
  if (auto e = ReadInputs(body, model, p)) return e;
  if (auto e = ReadString(body, "user", p.user)) return e;
  const int levels = model.config().dynamic_batching.priority_levels;
  // The tenant's tier sets the level; a request may ask for a lower one (a larger number).
  int64_t level = std::min(who.priority, levels);
  if (auto e = ReadInt(body, "priority", 1, levels, level)) return e;
  p.priority = std::max(std::min(who.priority, levels), static_cast<int>(level));
  if (auto e = ReadInt(body, "timeout_us", 1, int64_t{1} << 40, p.timeout_us)) return e;
  return std::nullopt;
}

// One encoder request's inputs in flight.
class EncoderJob : public std::enable_shared_from_this<EncoderJob> {
 public:
  EncoderJob(std::shared_ptr<RequestContext> ctx, ServedModel& model, EncoderParams params,
             std::function<json(const std::vector<std::vector<float>>&, int64_t)> format)
      : ctx_(std::move(ctx)), model_(model), p_(std::move(params)), format_(std::move(format)),
        tier_(ctx_->metrics().ForTier(model.name(), ctx_->principal().tier, /*decoder=*/false)) {}

  void Start() {
    const size_t n = p_.inputs.size();
    rows_.resize(n);
    remaining_ = static_cast<int>(n);
    for (const auto& in : p_.inputs) prompt_tokens_ += static_cast<int64_t>(in.ids.size());
    ctx_->SetLog("model", model_.name());
    ctx_->SetLog("inputs", n);
    ctx_->SetUserLog(p_.user);
    auto self = shared_from_this();
    ctx_->writer().OnDisconnect([self] { self->CancelAll(); });
    for (size_t i = 0; i < n; ++i) {
      auto work = std::make_shared<EncoderWork>();
      work->kind = p_.kind;
      work->input = std::move(p_.inputs[i]);
      work->queue_time = tier_.request_queue_time_seconds;
      work->done = [self, i](Result<std::vector<float>> r) { self->OnDone(i, std::move(r)); };
      auto item = std::make_shared<sched::BatchItem>();
      item->priority_level = p_.priority;
      item->timeout_us = p_.timeout_us;
      item->payload = work;
      item->on_reject = [work](const Status& s) { work->Complete(s); };
      Result<uint64_t> id = model_.encoder()->Enqueue(item);
      if (!id.ok()) {
        CancelAll();  // the request fails as a whole
        work->Complete(id.status());
        // Inputs never queued count as done with that error.
        for (size_t j = i + 1; j < n; ++j) OnDone(j, id.status());
        return;
      }
      std::lock_guard<std::mutex> lock(mu_);
      ids_.push_back(id.value());
    }
  }

 private:
  // Cancels every queued input. Cancel calls on_reject on this thread, which re-enters
  // OnDone, so the lock is not held while cancelling.
  void CancelAll() {
    std::vector<uint64_t> ids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ids = ids_;
    }
    for (uint64_t id : ids) model_.encoder()->Cancel(id);
  }

  void OnDone(size_t i, Result<std::vector<float>> r) {
    bool cancel_rest = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (r.ok()) {
        rows_[i] = std::move(r).value();
      } else if (error_.ok()) {
        error_ = r.status();
        cancel_rest = true;
      }
    }
    if (cancel_rest) CancelAll();  // the request fails as a whole
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--remaining_ > 0) return;
    }
    const std::string& name = model_.name();
    const std::string& tier = ctx_->principal().tier;
    tier_.e2e_request_latency_seconds->Observe(std::chrono::duration<double>(Clock::now() - ctx_->arrival()).count());
    tier_.prompt_tokens->Inc(static_cast<double>(prompt_tokens_));
    tier_.request_prompt_tokens->Observe(static_cast<double>(prompt_tokens_));
    ctx_->SetLog("prompt_tokens", prompt_tokens_);
    ctx_->CountTokens(prompt_tokens_);
    if (!error_.ok()) {
      const ApiError e = FromStatus(error_);
      const std::string_view reason = e.http_status == 429 ? kFailureRejectedQueueFull
                           : error_.code() == StatusCode::kDeadlineExceeded ? kFailureTimeout
                           : error_.code() == StatusCode::kCancelled       ? kFailureCancelled
                                                                            : kFailureEngineError;
      ctx_->metrics().RecordFailure(name, tier, reason);
      ctx_->ReplyError(e);
      return;
    }
    ctx_->metrics().RecordSuccess(name, tier, kFinishedStop);
    ctx_->ReplyJson(200, format_(rows_, prompt_tokens_));
  }

  std::shared_ptr<RequestContext> ctx_;
  ServedModel& model_;
  EncoderParams p_;  // inputs are moved into the queue items
  std::function<json(const std::vector<std::vector<float>>&, int64_t)> format_;
  ServerMetrics::TierMetrics tier_;
  int64_t prompt_tokens_ = 0;
  std::mutex mu_;
  std::vector<uint64_t> ids_;                 // GUARDED_BY(mu_)
  std::vector<std::vector<float>> rows_;      // GUARDED_BY(mu_)
  int remaining_ = 0;                         // GUARDED_BY(mu_)
  Status error_;                              // GUARDED_BY(mu_)
};

// OpenAI's base64 embeddings: the little-endian float32 bytes, base64-encoded.
std::string Base64Floats(const std::vector<float>& v) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = reinterpret_cast<const unsigned char*>(v.data());
  const size_t n = v.size() * sizeof(float);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b0 = bytes[i];
    const uint32_t b1 = i + 1 < n ? bytes[i + 1] : 0;
    const uint32_t b2 = i + 2 < n ? bytes[i + 2] : 0;
    const uint32_t triple = (b0 << 16) | (b1 << 8) | b2;
    out += kAlphabet[(triple >> 18) & 63];
    out += kAlphabet[(triple >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(triple >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[triple & 63] : '=';
  }
  return out;
}

void Reject(const std::shared_ptr<RequestContext>& ctx, const ServedModel& model, const ApiError& e) {
  ctx->metrics().RecordFailure(model.name(), ctx->principal().tier, kFailureInvalidRequest);
  ctx->ReplyError(e);
}

}  // namespace

void HandleEmbeddings(std::shared_ptr<RequestContext> ctx, ServedModel& model, const json& body) {
  EncoderParams p;
  p.kind = EncoderWork::Kind::kEmbed;
  std::string encoding = "float";
  MaybeError err = RejectUnknownFields(body, {"model", "input", "encoding_format", "dimensions", "user", "priority",
                                              "timeout_us"});
  if (!err) err = ReadCommon(body, model, ctx->principal(), p);
  if (!err) err = ReadString(body, "encoding_format", encoding);
  if (!err && encoding != "float" && encoding != "base64") {
    err = BadRequest("encoding_format must be \"float\" or \"base64\"", "encoding_format");
  }
  const int hidden = model.engine().config().hidden_size;
  int64_t dims = hidden;
  if (!err) err = ReadInt(body, "dimensions", 1, 1 << 20, dims);
  if (!err && dims != hidden) {
    err = BadRequest("this model's embeddings have " + std::to_string(hidden) + " dimensions", "dimensions");
  }
  if (err) return Reject(ctx, model, *err);
  const std::string name = model.name();
  const bool base64 = encoding == "base64";
  auto format = [name, base64](const std::vector<std::vector<float>>& rows, int64_t tokens) {
    json data = json::array();
    for (size_t i = 0; i < rows.size(); ++i) {
      json embedding = base64 ? json(Base64Floats(rows[i])) : json(rows[i]);
      data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", std::move(embedding)}});
    }
    return json{{"object", "list"}, {"data", data}, {"model", name},
                {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
  };
  std::make_shared<EncoderJob>(ctx, model, std::move(p), format)->Start();
}

void HandleClassify(std::shared_ptr<RequestContext> ctx, ServedModel& model, const json& body) {
  EncoderParams p;
  p.kind = EncoderWork::Kind::kClassify;
  MaybeError err = RejectUnknownFields(body, {"model", "input", "user", "priority", "timeout_us"});
  if (!err && !model.engine().encoder()->has_classifier()) {
    err = BadRequest("model '" + model.name() + "' has no classification head", "model");
  }
  if (!err) err = ReadCommon(body, model, ctx->principal(), p);
  if (err) return Reject(ctx, model, *err);
  const std::string name = model.name();
  const std::map<int, std::string> labels = model.engine().config().id2label;
  auto format = [name, labels](const std::vector<std::vector<float>>& rows, int64_t tokens) {
    json data = json::array();
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::vector<float>& logits = rows[i];
      const float mx = *std::max_element(logits.begin(), logits.end());
      std::vector<double> probs(logits.size());
      double sum = 0;
      for (size_t k = 0; k < logits.size(); ++k) sum += probs[k] = std::exp(static_cast<double>(logits[k] - mx));
      size_t best = 0;
      json scores = json::object();
      json probs_json = json::array();
      for (size_t k = 0; k < logits.size(); ++k) {
        probs[k] /= sum;
        if (probs[k] > probs[best]) best = k;
        auto it = labels.find(static_cast<int>(k));
        const std::string label = it == labels.end() ? "LABEL_" + std::to_string(k) : it->second;
        scores[label] = probs[k];
        probs_json.push_back(probs[k]);
      }
      auto it = labels.find(static_cast<int>(best));
      data.push_back({{"index", i},
                      {"label", it == labels.end() ? "LABEL_" + std::to_string(best) : it->second},
                      {"score", probs[best]},
                      {"scores", scores},
                      {"probs", probs_json},
                      {"num_classes", logits.size()}});
    }
    return json{{"object", "list"}, {"data", data}, {"model", name},
                {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
  };
  std::make_shared<EncoderJob>(ctx, model, std::move(p), format)->Start();
}

}  // namespace ferry::serve
