// The Batch API (OpenAI's wire format): /v1/files and /v1/batches, and /admin/batches.
// Every call is scoped to the caller's tenant: another tenant's file or batch is 404.
#pragma once

#include <memory>
#include <string>

#include "batch/store.h"
#include "serve/batch_worker.h"
#include "serve/http_server.h"
#include "serve/request_context.h"

namespace ferry::serve {

// /v1/files..., /v1/batches..., /admin/batches.
bool IsBatchPath(const std::string& path);
// The metrics label of a batch path ("/v1/files/{id}/content", ...).
std::string BatchRouteLabel(const std::string& path);

struct BatchApi {
  batch::Store& store;
  const batch::QueueOptions& options;
  BatchWorker* worker;  // for the admin view
};

// Runs on a request worker (the store does I/O).
void HandleBatchRoute(const std::shared_ptr<RequestContext>& ctx, const HttpRequest& req, const BatchApi& api);

}  // namespace ferry::serve
