#include "serve/batch_routes.h"

#include <charconv>

#include "batch/input_file.h"
#include "serve/multipart.h"
#include "serve/request_fields.h"

namespace ferry::serve {

namespace {

using json = nlohmann::json;

ApiError NotFoundError(const std::string& message) { return ApiError{404, message, "not_found_error", "", ""}; }

ApiError StoreError(const Status& s) {
  if (s.code() == StatusCode::kNotFound) return NotFoundError(s.message());
  if (s.code() == StatusCode::kFailedPrecondition) return ApiError{409, s.message(), "invalid_request_error", "", ""};
  if (s.code() == StatusCode::kUnavailable) {
    ApiError e = FromStatus(Unavailable("the batch queue cannot be reached: " + s.message()));
    e.retry_after_s = 1;
    return e;
  }
  return FromStatus(s);
}

MaybeError ReadPage(const std::map<std::string, std::string>& q, batch::Page& page, int max_limit) {
  auto it = q.find("limit");
  if (it != q.end()) {
    int v = 0;
    auto [p, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
    if (ec != std::errc() || p != it->second.data() + it->second.size() || v < 1 || v > max_limit) {
      return BadRequest("limit: must be an integer in [1, " + std::to_string(max_limit) + "]", "limit");
    }
    page.limit = v;
  }
  it = q.find("after");
  if (it != q.end()) page.after = it->second;
  return std::nullopt;
}

// OpenAI's expires_after: anchor "created_at" and seconds in [queue.min_file_expiry_s,
// 2592000]. `prefix` names the field in messages.
MaybeError CheckExpiry(const std::string& anchor, int64_t seconds, const batch::QueueOptions& o,
                       const std::string& prefix) {
  if (anchor != "created_at") {
    return BadRequest(prefix + "[anchor]: must be 'created_at'", prefix + "[anchor]");
  }
  if (seconds < o.min_file_expiry_s || seconds > batch::QueueOptions::kMaxFileExpiryS) {
    return BadRequest(prefix + "[seconds]: must be an integer in [" + std::to_string(o.min_file_expiry_s) + ", " +
                          std::to_string(batch::QueueOptions::kMaxFileExpiryS) + "]",
                      prefix + "[seconds]");
  }
  return std::nullopt;
}

bool ParseInt64(const std::string& text, int64_t& out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && p == text.data() + text.size();
}

template <typename T>
json ListBody(std::vector<T> items, int limit) {
  const bool more = static_cast<int>(items.size()) > limit;
  if (more) items.resize(static_cast<size_t>(limit));
  json data = json::array();
  for (const T& i : items) data.push_back(i.ToJson());
  json out = {{"object", "list"}, {"data", data}, {"has_more", more}};
  out["first_id"] = items.empty() ? json(nullptr) : json(items.front().id);
  out["last_id"] = items.empty() ? json(nullptr) : json(items.back().id);
  return out;
}

void UploadFile(const std::shared_ptr<RequestContext>& ctx, const HttpRequest& req, const BatchApi& api) {
  const std::string tenant = ctx->principal().tenant;
  if (static_cast<int64_t>(req.body.size()) > api.options.max_file_bytes) {
    return ctx->ReplyError(ApiError{413, "the upload is over queue.max_file_bytes (" +
                                             std::to_string(api.options.max_file_bytes) + " bytes)",
                                    "invalid_request_error", "file", "file_too_large"});
  }
  Result<std::string> boundary = MultipartBoundary(req.Header("content-type"));
  if (!boundary.ok()) return ctx->ReplyError(BadRequest(boundary.status().message()));
  Result<std::vector<FormPart>> parts = ParseMultipart(req.body, *boundary);
  if (!parts.ok()) return ctx->ReplyError(BadRequest(parts.status().message()));
  const FormPart* file = nullptr;
  std::string purpose, anchor, seconds_text;
  bool has_purpose = false, has_anchor = false, has_seconds = false;
  for (const FormPart& p : *parts) {
    if (p.name == "file") {
      if (file != nullptr) return ctx->ReplyError(BadRequest("file: given more than once", "file"));
      file = &p;
    } else if (p.name == "purpose") {
      purpose = p.data;
      has_purpose = true;
    } else if (p.name == "expires_after[anchor]") {
      anchor = p.data;
      has_anchor = true;
    } else if (p.name == "expires_after[seconds]") {
      seconds_text = p.data;
      has_seconds = true;
    } else {
      return ctx->ReplyError(BadRequest("unknown form field '" + p.name.substr(0, 64) +
                                            "'; expected file, purpose and expires_after[anchor], expires_after[seconds]",
                                        p.name.substr(0, 64)));
    }
  }
  int64_t expires_after_s = 0;
  if (has_anchor || has_seconds) {
    if (!has_anchor || !has_seconds) {
      return ctx->ReplyError(BadRequest("expires_after: both expires_after[anchor] and expires_after[seconds] are required",
                                        has_anchor ? "expires_after[seconds]" : "expires_after[anchor]"));
    }
    if (!ParseInt64(seconds_text, expires_after_s)) expires_after_s = -1;
    if (MaybeError e = CheckExpiry(anchor, expires_after_s, api.options, "expires_after")) return ctx->ReplyError(*e);
  }
  if (!has_purpose) return ctx->ReplyError(BadRequest("purpose: required (batch)", "purpose"));
  if (purpose != "batch") {
    return ctx->ReplyError(BadRequest("purpose: only 'batch' is served here, got '" + purpose.substr(0, 64) + "'", "purpose"));
  }
  if (file == nullptr) return ctx->ReplyError(BadRequest("file: required (a JSONL of requests)", "file"));
  const batch::InputCheck check = batch::CheckInputFile(file->data, api.options.max_requests_per_batch);
  if (!check.ok()) {
    ApiError e = BadRequest("the file is not a valid batch input: " + check.Summary(), "file", "invalid_file");
    return ctx->ReplyError(e);
  }
  batch::FileInfo info;
  info.id = batch::NewId("file-");
  info.tenant = tenant;
  info.filename = file->filename.empty() ? "input.jsonl" : file->filename;
  info.purpose = purpose;
  info.bytes = static_cast<int64_t>(file->data.size());
  info.created_at = batch::NowUnix();
  info.expires_at = expires_after_s > 0 ? info.created_at + expires_after_s : 0;
  if (Status st = api.store.PutFile(info, file->data); !st.ok()) return ctx->ReplyError(StoreError(st));
  ctx->SetLog("file_id", info.id);
  ctx->SetLog("batch_requests", check.entries.size());
  return ctx->ReplyJson(200, info.ToJson());
}

void CreateBatch(const std::shared_ptr<RequestContext>& ctx, const HttpRequest& req, const BatchApi& api) {
  json body;
  if (MaybeError e = ParseJsonObject(req.body, body)) return ctx->ReplyError(*e);
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (it.key() != "input_file_id" && it.key() != "endpoint" && it.key() != "completion_window" &&
        it.key() != "metadata" && it.key() != "output_expires_after") {
      return ctx->ReplyError(BadRequest("unknown field '" + it.key().substr(0, 64) + "'", it.key().substr(0, 64)));
    }
  }
  std::string input_file_id, endpoint, window = "24h";
  if (MaybeError e = RequireString(body, "input_file_id", input_file_id)) return ctx->ReplyError(*e);
  if (MaybeError e = RequireString(body, "endpoint", endpoint)) return ctx->ReplyError(*e);
  if (MaybeError e = ReadString(body, "completion_window", window)) return ctx->ReplyError(*e);
  if (!batch::IsBatchEndpoint(endpoint)) {
    return ctx->ReplyError(BadRequest("endpoint: must be one of " + batch::BatchEndpointList(), "endpoint"));
  }
  if (window != "24h") return ctx->ReplyError(BadRequest("completion_window: only '24h' is supported", "completion_window"));
  json metadata = nullptr;
  if (body.contains("metadata") && !body["metadata"].is_null()) {
    metadata = body["metadata"];
    if (!metadata.is_object() || metadata.size() > 16) {
      return ctx->ReplyError(BadRequest("metadata: an object of at most 16 string values", "metadata"));
    }
    for (auto it = metadata.begin(); it != metadata.end(); ++it) {
      if (!it->is_string() || it.key().size() > 64 || it->get_ref<const std::string&>().size() > 512) {
        return ctx->ReplyError(BadRequest("metadata: keys of at most 64 and string values of at most 512 characters", "metadata"));
      }
    }
  }
  int64_t output_expiry_s = api.options.output_file_expiry_s;
  if (body.contains("output_expires_after") && !body["output_expires_after"].is_null()) {
    const json& oe = body["output_expires_after"];
    if (!oe.is_object() || !oe.contains("anchor") || !oe["anchor"].is_string() || !oe.contains("seconds") ||
        !oe["seconds"].is_number_integer() || oe.size() != 2) {
      return ctx->ReplyError(BadRequest("output_expires_after: an object {anchor: \"created_at\", seconds: integer}",
                                        "output_expires_after"));
    }
    output_expiry_s = oe["seconds"].get<int64_t>();
    if (MaybeError e = CheckExpiry(oe["anchor"].get<std::string>(), output_expiry_s, api.options, "output_expires_after")) {
      return ctx->ReplyError(*e);
    }
  }
  const std::string& tenant = ctx->principal().tenant;
  Result<batch::FileInfo> file = api.store.GetFile(tenant, input_file_id);
  if (!file.ok()) {
    if (file.status().code() == StatusCode::kNotFound) {
      return ctx->ReplyError(ApiError{404, "no file with id '" + input_file_id.substr(0, 64) + "'", "not_found_error",
                                      "input_file_id", ""});
    }
    return ctx->ReplyError(StoreError(file.status()));
  }
  if (file->purpose != "batch") {
    return ctx->ReplyError(BadRequest("input_file_id: the file's purpose is " + file->purpose + ", not batch", "input_file_id"));
  }
  // The input file is checked against the batch (its lines' url, models, custom ids) by a
  // batch worker, not here: a large file does not hold up an API thread, and the batch is
  // seen in `validating` meanwhile, as OpenAI reports it.
  batch::BatchInfo b;
  b.id = batch::NewId("batch_");
  b.tenant = tenant;
  b.endpoint = endpoint;
  b.input_file_id = input_file_id;
  b.completion_window = window;
  b.metadata = metadata;
  b.created_at = batch::NowUnix();
  b.expires_at = b.created_at + api.options.completion_window_s;
  b.output_expires_after_s = output_expiry_s;
  batch::SetStatus(b, batch::kValidating, b.created_at);
  if (Status st = api.store.CreateBatch(b, {}); !st.ok()) return ctx->ReplyError(StoreError(st));
  if (api.worker != nullptr) api.worker->Wake();
  ctx->SetLog("batch_id", b.id);
  return ctx->ReplyJson(200, b.ToJson());
}

}  // namespace

bool IsBatchPath(const std::string& path) {
  return path == "/v1/files" || path.rfind("/v1/files/", 0) == 0 || path == "/v1/batches" ||
         path.rfind("/v1/batches/", 0) == 0 || path == "/admin/batches";
}

std::string BatchRouteLabel(const std::string& path) {
  if (path == "/v1/files" || path == "/v1/batches" || path == "/admin/batches") return path;
  if (path.rfind("/v1/files/", 0) == 0) {
    return path.size() > 8 && path.compare(path.size() - 8, 8, "/content") == 0 ? "/v1/files/{id}/content"
                                                                                  : "/v1/files/{id}";
  }
  return path.size() > 7 && path.compare(path.size() - 7, 7, "/cancel") == 0 ? "/v1/batches/{id}/cancel"
                                                                             : "/v1/batches/{id}";
}

void HandleBatchRoute(const std::shared_ptr<RequestContext>& ctx, const HttpRequest& req, const BatchApi& api) {
  const std::string& path = req.path;
  const std::string& tenant = ctx->principal().tenant;
  const bool get = req.method == "GET" || req.method == "HEAD";
  const auto method_error = [&](const char* allowed) {
    ctx->ReplyError(ApiError{405, path + " takes " + allowed, "invalid_request_error", "", ""});
  };
  const std::map<std::string, std::string> query = ParseQuery(req.target);
  if (path == "/admin/batches") {
    if (!get) return method_error("GET");
    batch::Page page;
    if (MaybeError e = ReadPage(query, page, 1000)) return ctx->ReplyError(*e);
    Result<std::vector<batch::BatchInfo>> list = api.store.ListBatches("", page);
    if (!list.ok()) return ctx->ReplyError(StoreError(list.status()));
    json out = ListBody(std::move(list).value(), page.limit);
    for (json& b : out["data"]) b.erase("metadata");
    Result<batch::QueueCounts> counts = api.store.Counts();
    if (counts.ok()) {
      out["jobs"] = counts->jobs;
      out["requests"] = {{"total", counts->requests_total}, {"completed", counts->completed},
                         {"failed", counts->failed}, {"cancelled", counts->cancelled}};
    }
    if (api.worker != nullptr) out["worker"] = api.worker->StatusJson();
    return ctx->ReplyJson(200, out);
  }
  if (path == "/v1/files") {
    if (req.method == "POST") return UploadFile(ctx, req, api);
    if (!get) return method_error("GET or POST");
    batch::Page page;
    page.limit = 10000;
    if (MaybeError e = ReadPage(query, page, 10000)) return ctx->ReplyError(*e);
    auto purpose = query.find("purpose");
    Result<std::vector<batch::FileInfo>> list =
        api.store.ListFiles(tenant, purpose == query.end() ? "" : purpose->second, page);
    if (!list.ok()) return ctx->ReplyError(StoreError(list.status()));
    return ctx->ReplyJson(200, ListBody(std::move(list).value(), page.limit));
  }
  if (path.rfind("/v1/files/", 0) == 0) {
    std::string id = path.substr(std::string("/v1/files/").size());
    const bool content = id.size() > 8 && id.compare(id.size() - 8, 8, "/content") == 0;
    if (content) id.resize(id.size() - 8);
    if (id.empty() || id.find('/') != std::string::npos) return ctx->ReplyError(NotFoundError("no route for " + path));
    if (content) {
      if (!get) return method_error("GET");
      Result<std::string> data = api.store.FileContent(tenant, id);
      if (!data.ok()) return ctx->ReplyError(StoreError(data.status()));
      return ctx->ReplyBody(200, "application/jsonl", std::move(data).value());
    }
    if (req.method == "DELETE") {
      if (Status st = api.store.DeleteFile(tenant, id); !st.ok()) return ctx->ReplyError(StoreError(st));
      return ctx->ReplyJson(200, {{"id", id}, {"object", "file"}, {"deleted", true}});
    }
    if (!get) return method_error("GET or DELETE");
    Result<batch::FileInfo> f = api.store.GetFile(tenant, id);
    if (!f.ok()) return ctx->ReplyError(StoreError(f.status()));
    return ctx->ReplyJson(200, f->ToJson());
  }
  if (path == "/v1/batches") {
    if (req.method == "POST") return CreateBatch(ctx, req, api);
    if (!get) return method_error("GET or POST");
    batch::Page page;
    if (MaybeError e = ReadPage(query, page, 100)) return ctx->ReplyError(*e);
    Result<std::vector<batch::BatchInfo>> list = api.store.ListBatches(tenant, page);
    if (!list.ok()) return ctx->ReplyError(StoreError(list.status()));
    return ctx->ReplyJson(200, ListBody(std::move(list).value(), page.limit));
  }
  std::string id = path.substr(std::string("/v1/batches/").size());
  const bool cancel = id.size() > 7 && id.compare(id.size() - 7, 7, "/cancel") == 0;
  if (cancel) id.resize(id.size() - 7);
  if (id.empty() || id.find('/') != std::string::npos) return ctx->ReplyError(NotFoundError("no route for " + path));
  if (cancel) {
    if (req.method != "POST") return method_error("POST");
    Result<batch::BatchInfo> b = api.store.CancelBatch(tenant, id);
    if (!b.ok()) return ctx->ReplyError(StoreError(b.status()));
    return ctx->ReplyJson(200, b->ToJson());
  }
  if (!get) return method_error("GET");
  Result<batch::BatchInfo> b = api.store.GetBatch(tenant, id);
  if (!b.ok()) return ctx->ReplyError(StoreError(b.status()));
  return ctx->ReplyJson(200, b->ToJson());
}

}  // namespace ferry::serve
