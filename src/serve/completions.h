// POST /v1/completions (OpenAI wire format) on a decoder model: request validation,
// prompts as text or token ids (one or many), n choices, stop strings, streaming (SSE),
// logprobs and echo, usage counts; cancellation when the client goes away.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>

#include "serve/model_repository.h"
#include "serve/request_context.h"

namespace ferry::serve {

void HandleCompletion(std::shared_ptr<RequestContext> ctx, ServedModel& model, const nlohmann::json& body);

}  // namespace ferry::serve
