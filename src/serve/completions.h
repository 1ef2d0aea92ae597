// POST /v1/completions (OpenAI wire format) on a decoder model: request validation,
// prompts as text or token ids (one or many), n choices, stop strings, streaming (SSE),
// logprobs and echo, usage counts; cancellation when the client goes away.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>

#include "core/thread_pool.h"
#include "serve/model_repository.h"
#include "serve/request_context.h"

namespace ferry::serve {

// Output work (detokenizing, stop strings, formatting) runs on `output_workers`, never on
// the model's scheduler thread.
void HandleCompletion(std::shared_ptr<RequestContext> ctx, ServedModel& model, const nlohmann::json& body,
                      ThreadPool& output_workers);

}  // namespace ferry::serve
