#include "serve/server.h"

#include <cmath>
#include <filesystem>

#include <signal.h>

#include <cctype>
#include <ctime>
#include <random>

#include "core/logging.h"
#include "core/version.h"
#include "serve/batch_routes.h"
#include "serve/chat_completions.h"
#include "serve/completions.h"
#include "serve/cors.h"
#include "serve/encoder_routes.h"
#include "serve/request_fields.h"
#include "serve/tool_parser.h"
#include "serve/utility_routes.h"

namespace ferry::serve {

namespace {

using json = nlohmann::json;

std::string RequestId(const HttpRequest& req) {
  const std::string& given = req.Header("x-request-id");
  bool ok = !given.empty() && given.size() <= 64;
  for (char c : given) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
  if (ok) return given;
  thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[32];
  std::snprintf(buf, sizeof(buf), "req-%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

void SendJson(ResponseWriter& w, int status, const json& body) {
  w.Send(status, "application/json", Dump(body));
}

// The routes a model serves, from what sits on its encoder.
json ModelRoutes(const ServedModel& m) {
  if (m.is_decoder()) {
    json routes = json::array({"/v1/completions"});
    if (m.chat().has_template()) routes.push_back("/v1/chat/completions");
    return routes;
  }
  const model::EncoderModel& e = *m.engine().encoder();
  json routes = json::array();
  if (m.embedding_pooling().unsupported.empty()) routes.push_back("/v1/embeddings");
  if (e.has_classifier()) routes.push_back("/v1/classify");
  if (e.has_token_classifier()) routes.push_back("/v1/token-classify");
  const bool cross_encoder = e.has_classifier() && m.engine().config().num_labels == 1;
  const bool bi_encoder = e.head() == model::EncoderHead::kNone && m.embedding_pooling().unsupported.empty();
  if (cross_encoder || bi_encoder) routes.push_back("/v1/score");
  return routes;
}

}  // namespace

Result<std::unique_ptr<Server>> Server::Create(ServerConfig config) {
  FERRY_RETURN_IF_ERROR(config.Validate());
  if (config.models.empty() && config.model_repository.path.empty()) {
    return InvalidArgument("no models to serve: give --model NAME=PATH, --model-repository DIR or a config with models");
  }
  if (!config.model_repository.path.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(config.model_repository.path, ec)) {
      return InvalidArgument("model_repository: " + config.model_repository.path + " is not a directory");
    }
  }
  FERRY_ASSIGN_OR_RETURN(Authenticator auth, Authenticator::Create(config));
  std::unique_ptr<batch::Store> store;
  if (config.queue.enabled()) {
    FERRY_ASSIGN_OR_RETURN(store, batch::OpenStore(config.queue));
  }
  auto server = std::unique_ptr<Server>(new Server(std::move(config), std::move(auth)));
  server->batch_store_ = std::move(store);
  return server;
}

Server::Server(ServerConfig config, Authenticator auth)
    : config_(std::move(config)), auth_(std::move(auth)), logger_(config_.log.request_log), cors_(config_.cors) {
  HttpServerOptions ho;
  ho.host = config_.listener.host;
  ho.port = config_.listener.port;
  ho.io_threads = config_.listener.io_threads;
  ho.max_body_bytes = static_cast<size_t>(config_.listener.max_body_bytes);
  ho.max_header_bytes = static_cast<size_t>(config_.listener.max_header_bytes);
  ho.header_timeout_ms = config_.listener.header_timeout_ms;
  ho.idle_timeout_ms = config_.listener.idle_timeout_ms;
  ho.write_timeout_ms = std::max<int64_t>(config_.listener.idle_timeout_ms, 10000);
  ho.max_connections = config_.listener.max_connections;
  ho.tls = config_.listener.tls;
  qos_metrics_ = std::make_unique<QosMetrics>(metrics_.registry);
  if (!config_.model_repository.path.empty()) {
    versions_ = std::make_unique<ModelVersions>(config_, metrics_, [this](const std::string& name) {
      for (const ModelConfig& mc : config_.models) {
        if (mc.name == name) return true;
      }
      return false;
    });
  }
  http_ = std::make_unique<HttpServer>(
      ho, [this](HttpRequest&& r, std::shared_ptr<ResponseWriter> w) { Handle(std::move(r), std::move(w)); },
      [](int status, const std::string& message) { return ErrorBody(status, message); });
}

Server::~Server() {
  Shutdown();
  if (loader_.joinable()) loader_.join();
}

Status Server::Start() {
  FERRY_RETURN_IF_ERROR(http_->Listen());
  // Threads start here, not in the constructor: ShutdownOnSignals blocks the signals in
  // between, and every thread must inherit that mask.
  output_workers_ = std::make_unique<ThreadPool>(config_.listener.output_threads, "output");
  request_workers_ = std::make_unique<ThreadPool>(config_.listener.request_threads, "request");
  if (batch_store_ != nullptr) {
    // The Batch API's routes wait on the store (an fsync, a round trip to Redis): their own
    // threads, so that online requests never queue behind them.
    batch_api_workers_ = std::make_unique<ThreadPool>(2, "batch-api");
    batch_worker_ = std::make_unique<BatchWorker>(
        *batch_store_, config_.queue, metrics_.registry,
        [this](const batch::Entry& e, std::function<void(BatchResponse)> done) { RunBatchEntry(e, std::move(done)); },
        [this] { return BatchCapacity(); });
    batch_worker_->SetModelCheck([this](const std::string& name) { return ServesModel(name); });
    batch_worker_->Start();
    FERRY_LOG_INFO("batch queue: {} backend, consumer {}, {} requests in flight at most", batch_store_->backend(),
                   batch_worker_->consumer(), config_.queue.max_in_flight);
  }
  http_->Start();
  FERRY_LOG_INFO("listening on {}://{}:{} (auth: {})", http_->tls() ? "https" : "http", config_.listener.host,
                 http_->port(), AuthModeName(config_.auth.mode));
  loader_ = std::thread([this] { LoadModels(); });
  return Status::Ok();
}

void Server::LoadModels() {
  for (const ModelConfig& mc : config_.models) {
    if (stopping_.load()) break;
    Status status;
    if (!mc.variants.empty()) {
      auto g = VariantGroup::Create(config_, mc, metrics_, *qos_metrics_,
                                    [this](const qos::DecisionRecord& r) { LogDecision(r); });
      status = g.status();
      if (g.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        groups_.push_back(std::move(g).value());
      }
    } else {
      auto m = ServedModel::Create(mc, metrics_);
      status = m.status();
      if (m.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        models_.push_back(std::move(m).value());
      }
    }
    if (!status.ok()) {
      FERRY_LOG_ERROR("cannot serve model '{}': {}", mc.name, status.message());
      std::fprintf(stderr, "error: %s\n", status.message().c_str());
      std::lock_guard<std::mutex> lock(mu_);
      load_failed_ = true;
      load_done_ = true;
      cv_.notify_all();
      return;
    }
  }
  if (versions_ != nullptr && !stopping_.load()) versions_->Start();
  std::lock_guard<std::mutex> lock(mu_);
  load_done_ = true;
  if (!stopping_.load()) {
    ready_ = true;
    FERRY_LOG_INFO("ready: {} model(s) loaded and warmed up{}", models_.size() + groups_.size(),
                   versions_ != nullptr ? ", " + std::to_string(versions_->Ready().size()) + " from the repository" : "");
  }
  cv_.notify_all();
}

bool Server::WaitUntilReady(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return load_done_; });
  return load_done_ && !load_failed_;
}

Status Server::ReloadTls() { return http_->ReloadTls(); }

void Server::RequestShutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_requested_ = true;
  cv_.notify_all();
}

int Server::Run() {
  bool failed;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return shutdown_requested_ || load_failed_; });
    failed = load_failed_;
  }
  Shutdown();
  return failed ? 1 : 0;
}

void Server::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  FERRY_LOG_INFO("shutting down: no new connections; finishing requests in flight");
  stopping_ = true;
  ready_ = false;
  http_->StopAccepting();
  if (loader_.joinable()) loader_.join();
  const int64_t budget = config_.listener.shutdown_timeout_ms;
  // Batch requests running here finish and are recorded within the budget; the rest are
  // left to their leases (another replica, or this server's next start, runs them).
  if (batch_worker_ != nullptr) batch_worker_->Stop(budget / 2);
  std::vector<ServedModel*> models;
  std::vector<VariantGroup*> groups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& m : models_) models.push_back(m.get());
    for (auto& g : groups_) groups.push_back(g.get());
  }
  for (ServedModel* m : models) m->Stop(budget);  // running work finishes, the rest is cancelled
  for (VariantGroup* g : groups) g->Stop(budget);
  if (versions_ != nullptr) versions_->Stop(budget);
  const int64_t spent =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  http_->Shutdown(std::max<int64_t>(budget - spent, 1000));
  request_workers_.reset();  // after the I/O threads: nothing submits to it any more
  batch_api_workers_.reset();
  output_workers_.reset();  // runs what the batchers' last events queued, while the models still exist
  FERRY_LOG_INFO("shut down");
}

ServedModel* Server::Find(const std::string& name) {
  if (!ready_.load()) return nullptr;
  for (auto& m : models_) {
    if (m->name() == name) return m.get();
  }
  return nullptr;
}

VariantGroup* Server::FindGroup(const std::string& name) {
  if (!ready_.load()) return nullptr;
  for (auto& g : groups_) {
    if (g->name() == name) return g.get();
  }
  return nullptr;
}

void Server::LogDecision(const qos::DecisionRecord& record) {
  json line = record.ToJson();
  const std::time_t secs = static_cast<std::time_t>(record.unix_ms / 1000);
  std::tm tm;
  gmtime_r(&secs, &tm);
  char ts[40];
  std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
  char full[48];
  std::snprintf(full, sizeof(full), "%s.%03dZ", ts, static_cast<int>(record.unix_ms % 1000));
  line["ts"] = full;
  line["event"] = "qos_decision";
  logger_.LogEvent(line);
}

json Server::GroupCard(const VariantGroup& g) const {
  json card = ModelCard(g.top());
  card["ferry"]["variants"] = g.VariantsJson();
  return card;
}

json Server::ModelCard(const ServedModel& m) const {
  const io::ModelConfig& c = m.engine().config();
  json card = {{"id", m.name()}, {"object", "model"}, {"created", m.created_unix()}, {"owned_by", "ferry"},
               {"max_model_len", m.max_seq_len()}};
  card["ferry"] = {{"kind", m.is_decoder() ? "decoder" : "encoder"},
                   {"architecture", c.model_type},
                   {"routes", ModelRoutes(m)}};
  if (m.is_decoder()) {
    card["ferry"]["chat_template"] = m.chat().has_template();
    card["ferry"]["tool_call_parser"] = std::string(ToolCallParserName(m.chat().parser));
  } else {
    const EmbeddingPooling& p = m.embedding_pooling();
    card["ferry"]["pooling"] = {{"mode", io::PoolingModeName(p.mode)}, {"normalize", p.normalize},
                                {"source", p.source}};
    if (!p.unsupported.empty()) card["ferry"]["pooling"]["unsupported"] = p.unsupported;
    const chunk::LongInputOptions& l = m.config().long_inputs;
    card["ferry"]["long_inputs"] = {{"truncation", chunk::TruncationName(l.truncation)},
                                    {"chunk_tokens", l.chunk_tokens > 0 ? l.chunk_tokens : m.max_seq_len()},
                                    {"max_input_tokens", l.max_input_tokens}};
    if (!c.id2label.empty()) {
      json labels = json::array();
      for (const auto& [id, label] : c.id2label) labels.push_back(label);
      card["ferry"]["labels"] = labels;
    }
  }
  return card;
}

json Server::AdminStatus() const {
  json models = json::array();
  for (const auto& m : models_) {
    json j = ModelCard(*m);
    const sched::PreloadTimings& t = m->timings();
    j["preload_ms"] = {{"load", t.load_ms}, {"allocate", t.allocate_ms}, {"warmup", t.warmup_ms},
                       {"warmup_passes", t.warmup_passes}};
    if (m->decoder() != nullptr) {
      const sched::BatcherSnapshot s = m->decoder()->Snapshot();
      j["batcher"] = {{"running", s.running}, {"waiting", s.waiting}, {"waiting_tokens", s.waiting_tokens},
                      {"kv_free_blocks", s.kv_free_blocks}, {"kv_blocks", s.kv_blocks}, {"steps", s.steps},
                      {"preemptions", s.preemptions}};
    } else {
      const sched::DynamicBatcherStats s = m->encoder()->Stats();
      j["batcher"] = {{"queued", s.queued_total}, {"batches", s.batches_run}, {"items", s.items_run},
                      {"last_batch_size", s.last_batch_size}, {"rejected_queue_full", s.rejected_queue_full},
                      {"rejected_timeout", s.rejected_timeout}, {"cancelled", s.cancelled}};
    }
    models.push_back(std::move(j));
  }
  for (const auto& g : groups_) {
    json j = GroupCard(*g);
    j["variant_batchers"] = g->BatchersJson();
    models.push_back(std::move(j));
  }
  const double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  json out{{"ready", ready_.load()}, {"uptime_s", uptime}, {"connections", http_->active_connections()},
           {"requests_in_flight", http_->active_requests()}, {"models", models}};
  if (versions_ != nullptr) out["model_repository"] = versions_->StatusJson();
  return out;
}

namespace {

// Mode none only: a browser page on another site can reach a loopback server by pointing
// its own host name at 127.0.0.1 (DNS rebinding); its requests then carry that name in
// Host. So only loopback names, and the names configured, are answered.
bool HostAllowed(std::string host, const std::vector<std::string>& allowed) {
  if (host.empty()) return true;  // HTTP/1.0 without Host: no browser sends that
  for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (host.front() == '[') {
    host = host.substr(0, host.find(']') + 1);
  } else if (host.find(':') != std::string::npos && host.find(':') == host.rfind(':')) {
    host = host.substr(0, host.find(':'));  // name:port (one colon; a bare IPv6 has several)
  }
  if (host == "localhost" || IsLoopbackHost(host)) return true;
  for (const std::string& a : allowed) {
    if (host == a) return true;
  }
  return false;
}

}  // namespace

void Server::Handle(HttpRequest&& req, std::shared_ptr<ResponseWriter> writer) {
  const std::string& path = req.path;
  if (config_.auth.mode == AuthMode::kNone && !HostAllowed(req.Header("host"), config_.auth.allowed_hosts)) {
    metrics_.RecordHttpRequest("other", 403);
    return writer->Send(403, "application/json",
                        ErrorBody(403, "the Host header is not a loopback name; with auth mode none only loopback "
                                       "names and auth.allowed_hosts are answered"));
  }
  const bool get = req.method == "GET" || req.method == "HEAD";
  // CORS first: a preflight carries no API key, and every answer to an allowed origin
  // carries the Access-Control headers.
  if (req.method == "OPTIONS") {
    const CorsPolicy::Preflight p = cors_.AnswerPreflight(req);
    metrics_.RecordHttpRequest("OPTIONS", p.status);
    if (p.status != 204) return writer->Send(p.status, "application/json", ErrorBody(p.status, p.error), p.headers);
    return writer->Send(204, "", "", p.headers);
  }
  if (cors_.enabled()) writer = WithHeaders(std::move(writer), cors_.ResponseHeaders(req.Header("origin")));
  if (path == "/health/live" || path == "/health" || path == "/ping") {
    // Liveness (vLLM's /health, SageMaker's /ping): the process serves HTTP.
    if (!get && !(path == "/ping" && req.method == "POST")) {
      return SendJson(*writer, 405, json::parse(ErrorBody(405, "use GET")));
    }
    metrics_.RecordHttpRequest(path, 200);
    return SendJson(*writer, 200, {{"status", "live"}});
  }
  if (path == "/version") {
    if (!get) return SendJson(*writer, 405, json::parse(ErrorBody(405, "use GET")));
    metrics_.RecordHttpRequest(path, 200);
    return SendJson(*writer, 200, {{"version", kVersion}});
  }
  if (path == "/health/ready") {
    if (!get) return SendJson(*writer, 405, json::parse(ErrorBody(405, "use GET")));
    const bool ok = ready_.load();
    metrics_.RecordHttpRequest(path, ok ? 200 : 503);
    return SendJson(*writer, ok ? 200 : 503, {{"status", ok ? "ready" : (stopping_ ? "stopping" : "loading")}});
  }
  if (path == "/metrics") {
    if (!get) return SendJson(*writer, 405, json::parse(ErrorBody(405, "use GET")));
    if (config_.auth.metrics_require_key) {
      Result<Principal> who = auth_.Authenticate(req.Header("authorization"), /*admin_route=*/false);
      if (!who.ok()) {
        metrics_.RecordHttpRequest(path, 401);
        return writer->Send(401, "application/json", ErrorBody(401, "/metrics needs an API key"),
                            {{"WWW-Authenticate", std::string(kWwwAuthenticate)}});
      }
    }
    metrics_.RecordHttpRequest(path, 200);
    return writer->Send(200, std::string(kPrometheusContentType), metrics_.Render());
  }
  const bool api = path.rfind("/v1/", 0) == 0 || path.rfind("/admin/", 0) == 0 || path == "/tokenize" ||
                   path == "/detokenize";
  if (!api) {
    metrics_.RecordHttpRequest("other", 404);
    return writer->Send(404, "application/json", ErrorBody(404, "no route for " + req.method + " " + path));
  }
  HandleApi(std::move(req), std::move(writer), path);
}

void Server::HandleApi(HttpRequest&& req, std::shared_ptr<ResponseWriter> writer, const std::string& path) {
  const bool admin = path.rfind("/admin/", 0) == 0;
  // Route label for metrics: fixed names, never raw paths (unbounded label values).
  std::string route = path;
  if (path.rfind("/v1/models/", 0) == 0) route = "/v1/models/{id}";
  if (path.rfind("/admin/qos/", 0) == 0) route = "/admin/qos/{model}";
  if (path.rfind("/admin/models/", 0) == 0) route = "/admin/models/{model}";
  const bool batch_api = IsBatchPath(path);
  if (batch_api) route = BatchRouteLabel(path);
  if (route != "/v1/completions" && route != "/v1/chat/completions" && route != "/v1/embeddings" &&
      route != "/v1/classify" && route != "/v1/token-classify" && route != "/v1/score" && route != "/v1/models" &&
      route != "/v1/models/{id}" && route != "/admin/status" && route != "/admin/qos" &&
      route != "/admin/qos/{model}" && route != "/admin/models" && route != "/admin/models/{model}" &&
      route != "/tokenize" && route != "/detokenize" && !batch_api) {
    route = "other";
  }
  Result<Principal> who = auth_.Authenticate(req.Header("authorization"), admin);
  if (!who.ok()) {
    const int status = AuthHttpStatus(who.status());
    auto ctx = std::make_shared<RequestContext>(RequestId(req), route, Principal{"unknown", "none", 0, false, 0, RateLimits{}},
                                                writer, metrics_, logger_, nullptr);
    ApiError e;
    e.http_status = status;
    e.message = who.status().message();
    e.type = status == 401 ? "authentication_error" : "permission_error";
    e.code = status == 401 ? "invalid_api_key" : "insufficient_permissions";
    return ctx->ReplyError(e);
  }
  const Principal& p = who.value();
  // Per-tenant rate limits (requests and tokens per minute).
  const RateLimiter::Admission rate = rate_limiter_.Admit(p.tenant, p.rate_limits);
  if (!rate.admitted) {
    auto ctx = std::make_shared<RequestContext>(RequestId(req), route, p, writer, metrics_, logger_, nullptr);
    ctx->AddResponseHeaders(rate.headers);
    metrics_.rate_limited.WithLabels({p.tenant, rate.limit}).Inc();
    ApiError e;
    e.http_status = 429;
    e.type = "rate_limit_error";
    e.code = "rate_limit_exceeded";
    e.message = "tenant '" + p.tenant + "' is over its rate limit of " +
                (rate.limit == "requests" ? std::to_string(p.rate_limits.requests_per_minute) + " requests"
                                          : std::to_string(p.rate_limits.tokens_per_minute) + " tokens") +
                " per minute; retry in " + RateLimiter::Duration(rate.retry_after_s);
    e.retry_after_s = static_cast<int>(std::ceil(rate.retry_after_s));
    return ctx->ReplyError(e);
  }
  // Per-tenant concurrency limit.
  std::function<void()> release;
  if (p.max_concurrent_requests > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    int& n = tenant_inflight_[p.tenant];
    if (n >= p.max_concurrent_requests) {
      auto ctx = std::make_shared<RequestContext>(RequestId(req), route, p, writer, metrics_, logger_, nullptr);
      ApiError e = FromStatus(ResourceExhausted("tenant '" + p.tenant + "' has " + std::to_string(n) +
                                                " requests in flight, its limit"));
      return ctx->ReplyError(e);
    }
    ++n;
    release = [this, tenant = p.tenant] {
      std::lock_guard<std::mutex> lock(mu_);
      --tenant_inflight_[tenant];
    };
  }
  if (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/embeddings" ||
      path == "/v1/classify" || path == "/v1/token-classify" || path == "/v1/score") {
    // Online work in flight: the batch worker yields to it (queue.max_in_flight_under_load).
    online_in_flight_.fetch_add(1);
    release = [this, inner = std::move(release)] {
      if (inner) inner();
      online_in_flight_.fetch_sub(1);
      last_online_ms_.store(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now().time_since_epoch()).count());
    };
  }
  auto ctx = std::make_shared<RequestContext>(RequestId(req), route, p, writer, metrics_, logger_, std::move(release));
  ctx->AddResponseHeaders(rate.headers);
  if (p.rate_limits.tokens_per_minute > 0) ctx->ChargeTokensTo(&rate_limiter_);
  ctx->SetLog("method", req.method);
  ctx->SetLog("remote", req.remote);
  const bool get = req.method == "GET" || req.method == "HEAD";

  if (path == "/admin/status") {
    if (!get) return ctx->ReplyError(ApiError{405, "use GET", "invalid_request_error", "", ""});
    return ctx->ReplyJson(200, AdminStatus());
  }
  if (path == "/admin/qos" || path.rfind("/admin/qos/", 0) == 0) return HandleQosAdmin(ctx, req, path);
  if (batch_api) {
    if (batch_store_ == nullptr) {
      return ctx->ReplyError(ApiError{404, "the Batch API is off: the server has no queue (queue.backend: local or redis)",
                                      "not_found_error", "", ""});
    }
    // The store does I/O (an fsync, a round trip to Redis): never on an I/O thread.
    return batch_api_workers_->Submit([this, ctx, r = std::move(req)] {
      try {
        HandleBatchRoute(ctx, r, BatchApi{*batch_store_, config_.queue, batch_worker_.get()});
      } catch (const std::exception& ex) {
        ctx->ReplyError(FromStatus(Internal(std::string("unexpected error: ") + ex.what())));
      }
    });
  }
  if (path == "/admin/models" || path.rfind("/admin/models/", 0) == 0) return HandleModelsAdmin(ctx, req, path);
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
    if (!get) return ctx->ReplyError(ApiError{405, "use GET", "invalid_request_error", "", ""});
    if (!ready_.load()) return ctx->ReplyError(FromStatus(Unavailable("models are still loading")));
    if (path == "/v1/models") {
      json data = json::array();
      for (const ModelConfig& mc : config_.models) {  // in the config's order; a group once
        if (ServedModel* m = Find(mc.name)) data.push_back(ModelCard(*m));
        if (VariantGroup* g = FindGroup(mc.name)) data.push_back(GroupCard(*g));
      }
      if (versions_ != nullptr) {
        for (const ModelVersions::ReadyModel& r : versions_->Ready()) {
          json card = ModelCard(*r.newest);
          card["ferry"]["version"] = r.versions.back();
          card["ferry"]["versions"] = r.versions;
          data.push_back(std::move(card));
        }
      }
      return ctx->ReplyJson(200, {{"object", "list"}, {"data", data}});
    }
    const std::string id = path.substr(std::string("/v1/models/").size());
    if (ServedModel* m = Find(id)) return ctx->ReplyJson(200, ModelCard(*m));
    if (VariantGroup* g = FindGroup(id)) return ctx->ReplyJson(200, GroupCard(*g));
    if (versions_ != nullptr) {
      Result<ModelVersions::Lease> lease = versions_->Acquire(id);
      if (lease.ok()) {
        json card = ModelCard(*lease->model);
        card["id"] = id;
        card["ferry"]["version"] = lease->version;
        return ctx->ReplyJson(200, card);
      }
    }
    return ctx->ReplyError(ApiError{404, "the model does not exist", "not_found_error", "model", "model_not_found"});
  }
  const bool completions = path == "/v1/completions";
  const bool chat = path == "/v1/chat/completions";
  const bool embeddings = path == "/v1/embeddings";
  const bool classify = path == "/v1/classify";
  const bool token_classify = path == "/v1/token-classify";
  const bool score = path == "/v1/score";
  const bool utility = path == "/tokenize" || path == "/detokenize";
  if (!completions && !chat && !embeddings && !classify && !token_classify && !score && !utility) {
    return ctx->ReplyError(ApiError{404, "no route for " + req.method + " " + path, "not_found_error", "", ""});
  }
  if (req.method != "POST") {
    return ctx->ReplyError(ApiError{405, path + " takes POST", "invalid_request_error", "", ""});
  }
  if (stopping_.load()) return ctx->ReplyError(FromStatus(Unavailable("the server is shutting down")));
  if (!ready_.load()) return ctx->ReplyError(FromStatus(Unavailable("models are still loading")));
  // Parsing and tokenizing a large body takes time: never on an I/O thread, where it would
  // hold up every connection that thread serves (health probes included).
  request_workers_->Submit([this, ctx, path, text = std::move(req.body)] {
    try {
      RouteBody(ctx, path, text);
    } catch (const std::exception& ex) {
      ctx->ReplyError(FromStatus(Internal(std::string("unexpected error: ") + ex.what())));
    }
  });
}

void Server::RouteBody(const std::shared_ptr<RequestContext>& ctx, const std::string& path, const std::string& text) {
  const bool completions = path == "/v1/completions";
  const bool chat = path == "/v1/chat/completions";
  const bool embeddings = path == "/v1/embeddings";
  const bool token_classify = path == "/v1/token-classify";
  const bool score = path == "/v1/score";
  const bool utility = path == "/tokenize" || path == "/detokenize";
  if (stopping_.load()) return ctx->ReplyError(FromStatus(Unavailable("the server is shutting down")));
  json body;
  if (MaybeError e = ParseJsonObject(text, body)) return ctx->ReplyError(*e);
  std::string model_name;
  if (MaybeError e = RequireString(body, "model", model_name)) return ctx->ReplyError(*e);
  ServedModel* m = Find(model_name);
  if (VariantGroup* g = m == nullptr ? FindGroup(model_name) : nullptr) {
    // A variant group: the controller picks the variant this request runs on, from start to end.
    const std::string& tier = ctx->principal().tier;
    m = g->Admit(tier);
    if (m == nullptr) {
      return ctx->ReplyError(FromStatus(Unavailable("model '" + model_name + "' has no healthy variant at or above "
                                                    "the floor of tier '" + tier + "'")));
    }
    ctx->AddResponseHeader("X-Ferry-Variant", m->variant());
    ctx->SetLog("variant", m->variant());
  }
  if (m == nullptr && versions_ != nullptr) {
    // The model repository: the request holds the version it starts on until it is finished.
    Result<ModelVersions::Lease> lease = versions_->Acquire(model_name);
    if (!lease.ok()) {
      if (lease.status().code() == StatusCode::kUnavailable) return ctx->ReplyError(FromStatus(lease.status()));
      return ctx->ReplyError(ApiError{404, lease.status().message(), "not_found_error", "model", "model_not_found"});
    }
    m = lease->model.get();
    ctx->Hold(lease->model, lease->in_flight);
    ctx->AddResponseHeader("X-Ferry-Model-Version", std::to_string(lease->version));
    ctx->SetLog("model_version", lease->version);
  }
  if (m == nullptr) {
    return ctx->ReplyError(ApiError{404, "the model '" + model_name + "' does not exist", "not_found_error", "model",
                                    "model_not_found"});
  }
  if (!utility && (completions || chat) != m->is_decoder()) {
    return ctx->ReplyError(BadRequest("model '" + model_name + "' is " + (m->is_decoder() ? "a decoder" : "an encoder") +
                                          "; it does not serve " + path, "model"));
  }
  const RouteEnv env{*output_workers_, config_.api.unknown_fields, config_.api.chat_special_tokens,
                     config_.api.max_choices, config_.api.max_logprobs};
  if (completions) return HandleCompletion(ctx, *m, text, body, env);
  if (chat) return HandleChatCompletion(ctx, *m, text, body, env);
  if (path == "/tokenize") return HandleTokenize(ctx, *m, text, body, env);
  if (path == "/detokenize") return HandleDetokenize(ctx, *m, body, env);
  if (embeddings) return HandleEmbeddings(ctx, *m, body, *output_workers_);
  if (token_classify) return HandleTokenClassify(ctx, *m, body, *output_workers_);
  if (score) return HandleScore(ctx, *m, body, *output_workers_);
  return HandleClassify(ctx, *m, body, *output_workers_);
}

void Server::HandleQosAdmin(const std::shared_ptr<RequestContext>& ctx, const HttpRequest& req,
                            const std::string& path) {
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (!ready_.load()) return ctx->ReplyError(FromStatus(Unavailable("models are still loading")));
  if (path == "/admin/qos") {
    if (!get) return ctx->ReplyError(ApiError{405, "use GET", "invalid_request_error", "", ""});
    json models = json::array();
    for (const auto& g : groups_) models.push_back(g->QosJson());
    return ctx->ReplyJson(200, {{"models", models}});
  }
  const std::string name = path.substr(std::string("/admin/qos/").size());
  VariantGroup* g = FindGroup(name);
  if (g == nullptr) {
    return ctx->ReplyError(ApiError{404, "no QoS variant group named '" + name + "'", "not_found_error", "model",
                                    "model_not_found"});
  }
  if (get) return ctx->ReplyJson(200, g->QosJson());
  if (req.method != "POST") return ctx->ReplyError(ApiError{405, path + " takes GET or POST", "invalid_request_error", "", ""});
  json body;
  if (MaybeError e = ParseJsonObject(req.body, body)) return ctx->ReplyError(*e);
  Result<json> r = g->Admin(body);
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kFailedPrecondition) {
      return ctx->ReplyError(ApiError{409, r.status().message(), "invalid_request_error", "pin", "variant_unhealthy"});
    }
    return ctx->ReplyError(FromStatus(r.status()));
  }
  return ctx->ReplyJson(200, *r);
}

void Server::HandleModelsAdmin(const std::shared_ptr<RequestContext>& ctx, const HttpRequest& req,
                               const std::string& path) {
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (versions_ == nullptr) {
    return ctx->ReplyError(ApiError{404, "the server has no model repository (--model-repository DIR)",
                                    "not_found_error", "", ""});
  }
  if (path == "/admin/models") {
    if (!get) return ctx->ReplyError(ApiError{405, "use GET", "invalid_request_error", "", ""});
    return ctx->ReplyJson(200, versions_->StatusJson());
  }
  const std::string rest = path.substr(std::string("/admin/models/").size());
  const size_t slash = rest.rfind('/');
  const std::string name = slash == std::string::npos ? rest : rest.substr(0, slash);
  const std::string action = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (action != "load" && action != "unload") {
    return ctx->ReplyError(ApiError{404, "no route for " + req.method + " " + path +
                                             "; use /admin/models/NAME/load or /admin/models/NAME/unload",
                                    "not_found_error", "", ""});
  }
  if (req.method != "POST") return ctx->ReplyError(ApiError{405, path + " takes POST", "invalid_request_error", "", ""});
  if (stopping_.load()) return ctx->ReplyError(FromStatus(Unavailable("the server is shutting down")));
  std::optional<int64_t> version;
  if (action == "load" && !req.body.empty()) {
    json body;
    if (MaybeError e = ParseJsonObject(req.body, body)) return ctx->ReplyError(*e);
    if (body.contains("version")) {
      const json& v = body["version"];
      if (!v.is_number_integer() || v.get<int64_t>() < 1) {
        return ctx->ReplyError(BadRequest("version: must be a positive integer", "version"));
      }
      version = v.get<int64_t>();
    }
  }
  Result<json> r = action == "load" ? versions_->Load(name, version) : versions_->Unload(name);
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kNotFound) {
      return ctx->ReplyError(ApiError{404, r.status().message(), "not_found_error", "model", "model_not_found"});
    }
    return ctx->ReplyError(FromStatus(r.status()));
  }
  return ctx->ReplyJson(202, *r);
}

int Server::BatchCapacity() const {
  if (!ready_.load() || stopping_.load()) return 0;
  // Online requests in flight, or finished within the last second: batch work keeps to
  // the smaller width so that online latency stays as it is.
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  const bool online = online_in_flight_.load() > 0 || now - last_online_ms_.load() < 1000;
  return online ? config_.queue.max_in_flight_under_load : config_.queue.max_in_flight;
}

bool Server::ServesModel(const std::string& name) {
  for (const ModelConfig& mc : config_.models) {
    if (mc.name == name) return true;
  }
  if (versions_ == nullptr) return false;
  // The model repository: a known model counts even while a version loads.
  return versions_->Acquire(name).status().code() != StatusCode::kNotFound;
}

void Server::RunBatchEntry(const batch::Entry& entry, std::function<void(BatchResponse)> done) {
  int lowest = 1;
  for (const auto& [name, priority] : config_.tiers) lowest = std::max(lowest, priority);
  const Principal who{entry.tenant, config_.queue.tier, lowest + 1, /*is_admin=*/false, 0, RateLimits{}};
  const std::string id = batch::NewId("batch_req_");
  auto ctx = std::make_shared<RequestContext>(id, entry.url, who, MakeCaptureWriter(id, std::move(done)), metrics_,
                                              logger_, nullptr);
  ctx->SetLog("batch_id", entry.batch_id);
  ctx->SetLog("custom_id", entry.custom_id);
  if (stopping_.load() || !ready_.load()) return ctx->ReplyError(FromStatus(Unavailable("the server is not serving")));
  request_workers_->Submit([this, ctx, url = entry.url, body = entry.body] {
    try {
      ctx->SetLog("dispatch_ms", std::chrono::duration<double, std::milli>(RequestContext::Clock::now() - ctx->arrival()).count());
      RouteBody(ctx, url, body);
    } catch (const std::exception& ex) {
      ctx->ReplyError(FromStatus(Internal(std::string("unexpected error: ") + ex.what())));
    }
  });
}

void ShutdownOnSignals(Server& server) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([&server, set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) return;
      if (sig == SIGHUP) {
        // The certificate was renewed on disk: new connections use the new one.
        Status reloaded = server.ReloadTls();
        if (reloaded.ok()) {
          FERRY_LOG_INFO("SIGHUP: TLS certificate reloaded");
        } else {
          FERRY_LOG_ERROR("SIGHUP: TLS certificate not reloaded, the old one stays: {}", reloaded.message());
        }
        continue;
      }
      FERRY_LOG_INFO("received signal {}", sig);
      server.RequestShutdown();
      return;
    }
  }).detach();
}

}  // namespace ferry::serve
