// POST /v1/completions (OpenAI wire format) on a decoder model: prompts as text or token
// ids (one or many), n choices, echo, the legacy logprobs object; the shared generation
// fields and the job live in generation_job.h.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>

#include "serve/generation_job.h"
#include "serve/model_repository.h"
#include "serve/request_context.h"

namespace ferry::serve {

// Output work (detokenizing, stop strings, formatting) runs on the env's output workers,
// never on the model's scheduler thread.
void HandleCompletion(std::shared_ptr<RequestContext> ctx, ServedModel& model, const std::string& raw_body,
                      const nlohmann::json& body,
                      const RouteEnv& env);

}  // namespace ferry::serve
