// The encoder routes: POST /v1/embeddings, /v1/classify, /v1/token-classify and /v1/score.
// Every model input of a request (each input, or each window of a long one under
// `truncation: "chunk"`) becomes one item of the model's dynamic batcher (encoder_job.h),
// so inputs and windows of many requests share encoder passes; the request is answered
// when its last item is done, with the windows' results merged by chunk/.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>

#include "core/thread_pool.h"
#include "serve/model_repository.h"
#include "serve/request_context.h"
#include "serve/request_fields.h"

namespace ferry::serve {

void HandleEmbeddings(std::shared_ptr<RequestContext> ctx, ServedModel& model, const nlohmann::json& body,
                      ThreadPool& workers);
void HandleClassify(std::shared_ptr<RequestContext> ctx, ServedModel& model, const nlohmann::json& body,
                    ThreadPool& workers);
// token_classify.cc
void HandleTokenClassify(std::shared_ptr<RequestContext> ctx, ServedModel& model, const nlohmann::json& body,
                         ThreadPool& workers);
// score.cc
void HandleScore(std::shared_ptr<RequestContext> ctx, ServedModel& model, const nlohmann::json& body,
                 ThreadPool& workers);

// What the encoder routes share: the common fields, the job of a list of planned inputs.
struct EncoderCommon {
  int priority = 0;        // batcher level; 0: the model's default
  int64_t timeout_us = 0;  // 0: the level's policy
  std::string user;
};
MaybeError ReadEncoderCommon(const nlohmann::json& body, const ServedModel& model, const Principal& who,
                             EncoderCommon& out);
// A 400 already counted in the metrics.
void RejectEncoderRequest(const std::shared_ptr<RequestContext>& ctx, const ServedModel& model, const ApiError& e);

}  // namespace ferry::serve
