// POST /v1/embeddings and POST /v1/classify on an encoder model. Every input of a request
// becomes one item of the model's dynamic batcher, so inputs from many requests share
// encoder passes; the request is answered when its last input is done.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>

#include "serve/model_repository.h"
#include "serve/request_context.h"

namespace ferry::serve {

void HandleEmbeddings(std::shared_ptr<RequestContext> ctx, ServedModel& model, const nlohmann::json& body);
void HandleClassify(std::shared_ptr<RequestContext> ctx, ServedModel& model, const nlohmann::json& body);

}  // namespace ferry::serve
