// One encoder request in flight. Every model input of the request (each input, or each
// window of a long one) becomes one item of the model's dynamic batcher, queued together,
// so windows of many requests share batches and one request's windows may span several;
// the request completes when its last item returns. Priority and timeout apply to all of
// them; the first failure or a client disconnect cancels whatever is still queued.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "serve/model_repository.h"
#include "serve/request_context.h"

namespace ferry::serve {

struct EncoderJobSpec {
  EncoderWork::Kind kind = EncoderWork::Kind::kEmbed;
  std::vector<engine::EncodedInput> items;  // every model input, in order
  int priority = 0;                         // batcher level; 0: the model's default
  int64_t timeout_us = 0;                   // 0: the level's policy
  int inputs = 0;                           // request inputs (for the log)
  int64_t prompt_tokens = 0;                // tokens the model reads (usage, metrics)
  // Builds the response body from every item's row, in item order. Runs on an output
  // worker, never on the batcher's thread; an error becomes the response.
  std::function<Result<nlohmann::json>(std::vector<std::vector<float>>& rows)> finish;
};

// Queues the items and answers the request when they are done: 200 with finish's body, or
// the first error (429 when the queue is full, 504 on timeout, 500 on an engine error).
void RunEncoderJob(std::shared_ptr<RequestContext> ctx, ServedModel& model, ThreadPool& workers, EncoderJobSpec spec);

}  // namespace ferry::serve
