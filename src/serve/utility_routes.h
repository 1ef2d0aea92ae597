// vLLM's utility routes: POST /tokenize (a prompt, or chat messages through the model's
// chat template, to token ids) and POST /detokenize (token ids to text).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "serve/generation_job.h"
#include "serve/model_repository.h"
#include "serve/request_context.h"

namespace ferry::serve {

void HandleTokenize(std::shared_ptr<RequestContext> ctx, ServedModel& model, const std::string& raw_body,
                    const nlohmann::json& body, const RouteEnv& env);
void HandleDetokenize(std::shared_ptr<RequestContext> ctx, ServedModel& model, const nlohmann::json& body,
                      const RouteEnv& env);

}  // namespace ferry::serve
