// ferry's HTTP server: auth → routes → batchers, health, metrics, request logs, graceful
// shutdown. Models load and warm up in the background; /health/ready says 200 only once
// every configured model is ready (503 before and during shutdown).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "batch/store.h"
#include "core/thread_pool.h"
#include "serve/auth.h"
#include "serve/batch_worker.h"
#include "serve/config.h"
#include "serve/cors.h"
#include "serve/http_server.h"
#include "serve/metrics.h"
#include "serve/model_repository.h"
#include "serve/model_versions.h"
#include "serve/qos_metrics.h"
#include "serve/request_context.h"
#include "serve/variant_group.h"

namespace ferry::serve {

// Thread-safe.
class Server {
 public:
  static Result<std::unique_ptr<Server>> Create(ServerConfig config);
  ~Server();

  // Listens, starts the I/O threads and the background model loading. Returns at once.
  Status Start();
  int port() const { return http_->port(); }
  bool ready() const { return ready_.load(); }
  // Blocks until every model is loaded (true) or loading failed (false), up to `timeout_ms`.
  bool WaitUntilReady(int64_t timeout_ms);
  // Asks Run() to return (what SIGTERM/SIGINT do).
  void RequestShutdown();
  // Reads the listener's TLS certificate and key again (what SIGHUP does).
  Status ReloadTls();
  // Blocks until a shutdown is requested or model loading fails, then shuts down
  // gracefully; returns the process exit code (0, or 1 if a model failed to load).
  int Run();
  // Stop accepting, finish or cancel in-flight work within shutdown_timeout_ms, close.
  void Shutdown();

  ServerMetrics& metrics() { return metrics_; }
  const ServerConfig& config() const { return config_; }

  // Serves one parsed request, exactly as the HTTP server does once it has read it: health,
  // metrics, auth, limits, routing, the route. Runs on the caller's thread and does not
  // block; the reply arrives through `writer`, maybe later. For in-process callers (the
  // request fuzzer) as much as for the listener.
  void Handle(HttpRequest&& req, std::shared_ptr<ResponseWriter> writer);

 private:
  explicit Server(ServerConfig config, Authenticator auth);
  void LoadModels();
  void HandleApi(HttpRequest&& req, std::shared_ptr<ResponseWriter> writer, const std::string& route);
  // On a request worker: parses a work route's body and hands it to its route.
  void RouteBody(const std::shared_ptr<RequestContext>& ctx, const std::string& path, const std::string& text);
  ServedModel* Find(const std::string& name);
  VariantGroup* FindGroup(const std::string& name);
  nlohmann::json ModelCard(const ServedModel& m) const;
  nlohmann::json GroupCard(const VariantGroup& g) const;
  nlohmann::json AdminStatus() const;
  // GET /admin/qos, GET and POST /admin/qos/MODEL.
  void HandleQosAdmin(const std::shared_ptr<RequestContext>& ctx, const HttpRequest& req, const std::string& path);
  void LogDecision(const qos::DecisionRecord& record);
  // GET /admin/models, POST /admin/models/NAME/load and /unload (the model repository).
  void HandleModelsAdmin(const std::shared_ptr<RequestContext>& ctx, const HttpRequest& req, const std::string& path);
  // One queued batch request through RouteBody, as the batch's tenant in the batch tier
  // (below every configured tier); the response goes to `done`.
  void RunBatchEntry(const batch::Entry& entry, std::function<void(BatchResponse)> done);
  // How many batch requests may run now: 0 while loading or stopping,
  // queue.max_in_flight_under_load while online requests run, else queue.max_in_flight.
  int BatchCapacity() const;
  // A configured model or variant group, or a model of the repository: what a batch's
  // lines may name (checked while the batch is validating).
  bool ServesModel(const std::string& name);

  const ServerConfig config_;
  const Authenticator auth_;
  ServerMetrics metrics_;
  RequestLogger logger_;
  const CorsPolicy cors_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<ThreadPool> output_workers_;   // events → responses, off the scheduler threads
  std::unique_ptr<ThreadPool> request_workers_;  // bodies → parsed, tokenized requests, off the I/O threads

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<ServedModel>> models_;  // GUARDED_BY(mu_) while loading; fixed once ready
  std::vector<std::unique_ptr<VariantGroup>> groups_;  // QoS variant groups; as models_
  std::unique_ptr<QosMetrics> qos_metrics_;
  std::unique_ptr<ModelVersions> versions_;  // the model repository, when configured
  std::unique_ptr<batch::Store> batch_store_;  // the Batch API's queue, when queue.backend is set
  std::unique_ptr<BatchWorker> batch_worker_;  // runs its requests here; started with the server
  std::unique_ptr<ThreadPool> batch_api_workers_;  // the Batch API's routes (they wait on the store)
  std::map<std::string, int> tenant_inflight_;         // GUARDED_BY(mu_)
  RateLimiter rate_limiter_;
  bool load_done_ = false;                             // GUARDED_BY(mu_)
  bool load_failed_ = false;                           // GUARDED_BY(mu_)
  bool shutdown_requested_ = false;                    // GUARDED_BY(mu_)
  bool shut_down_ = false;                             // GUARDED_BY(mu_)
  std::atomic<bool> ready_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<int> online_in_flight_{0};     // online work requests not yet finished
  std::atomic<int64_t> last_online_ms_{0};   // steady-clock ms when the last one finished
  std::thread loader_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (call before any thread starts, so
// all inherit the mask) and starts a thread that turns SIGINT and SIGTERM into
// RequestShutdown() and SIGHUP into ReloadTls().
void ShutdownOnSignals(Server& server);

}  // namespace ferry::serve
