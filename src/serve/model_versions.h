// The model repository while serving: `DIR/NAME/VERSION/` directories become served
// versions, reloaded while the server runs (docs/model-repository.md).
//
// One manager thread owns every change: it scans the repository (woken by inotify, by the
// admin API, by a request finishing on a draining version, and every poll_s anyway), loads
// and warms the versions each model's policy selects while the old ones serve, switches new
// requests to a version once it is ready, drains the versions it replaces and unloads them
// when their last request has finished (or drain_timeout_ms has passed). A version that
// fails (corrupt or half-written files, a fingerprint from another machine, not enough
// memory) is marked failed with the reason and the one before it keeps serving.
//
// A request holds a Lease: the version it started on stays loaded until the request is
// finished, whatever is published meanwhile.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "serve/config.h"
#include "serve/metrics.h"
#include "serve/model_repository.h"
#include "serve/repository_config.h"

namespace ferry::serve {

enum class VersionState { kLoading, kWarming, kReady, kDraining, kUnloaded, kFailed };
std::string_view VersionStateName(VersionState s);

// Thread-safe.
class ModelVersions {
 public:
  // `taken(name)`: a model of that name is served from the config (the repository's is refused).
  ModelVersions(const ServerConfig& config, ServerMetrics& metrics, std::function<bool(const std::string&)> taken);
  ~ModelVersions();
  ModelVersions(const ModelVersions&) = delete;
  ModelVersions& operator=(const ModelVersions&) = delete;

  // Loads what the policies select (blocking: the server is ready after it), then starts
  // the manager thread.
  void Start();
  // Stops watching; every version finishes its running work within `timeout_ms`.
  void Stop(int64_t timeout_ms);

  struct Lease {
    std::shared_ptr<ServedModel> model;
    int64_t version = 0;
    // Held while the request is in flight: the manager drains a version until none is left.
    std::shared_ptr<const void> in_flight;
  };
  // "NAME" → its newest ready version; "NAME@VERSION" → that version if ready.
  // NotFound for an unknown model or version (the reason for a failed one), Unavailable
  // while the model has no ready version but one is loading.
  Result<Lease> Acquire(const std::string& id);

  struct ReadyModel {
    std::string name;
    std::shared_ptr<ServedModel> newest;
    std::vector<int64_t> versions;  // ascending
  };
  std::vector<ReadyModel> Ready() const;

  // GET /admin/models: every model and version with its state (and the reason of a failure).
  nlohmann::json StatusJson() const;
  // POST /admin/models/NAME/load {version?}: (re)loads, in the background; with a version,
  // serves exactly it until the next load without one. NotFound when not on disk.
  Result<nlohmann::json> Load(const std::string& name, std::optional<int64_t> version);
  // POST /admin/models/NAME/unload: new requests are refused at once; running ones finish.
  Result<nlohmann::json> Unload(const std::string& name);

 private:
  struct Version {
    int64_t number = 0;
    std::string load_path;
    std::string signature;
    VersionState state = VersionState::kLoading;
    std::string reason;  // failed: why; unloaded/draining: what replaced or removed it
    std::shared_ptr<ServedModel> model;
    std::shared_ptr<std::atomic<int>> in_flight = std::make_shared<std::atomic<int>>(0);
    std::chrono::steady_clock::time_point drain_started;
    int64_t memory_bytes = 0;  // the estimate its load was checked with
    int64_t changed_unix_ms = 0;
  };
  struct Seen {
    std::string signature;
    std::chrono::steady_clock::time_point since;
  };
  struct Model {
    std::string name;
    RepositoryModelConfig config;
    std::string config_error;
    std::map<int64_t, Version> versions;
    std::map<int64_t, Seen> seen;  // versions on disk and since when their files are unchanged
    bool admin_unloaded = false;
    std::optional<int64_t> admin_version;
  };
  struct LoadJob {
    std::string name;
    int64_t version = 0;
    std::string load_path;
    std::string signature;
    ModelConfig config;
  };
  class Waker;

  void Run();
  // Scans the repository; returns the versions to load now (their entries set to loading).
  std::vector<LoadJob> Plan(bool* pending);
  void LoadOne(const LoadJob& job);
  // Versions no longer selected start draining once something else serves their model.
  void StartDrains();
  // Unloads the drained versions; true while some are still draining. `unloaded`: how many
  // were unloaded now (a load waiting for them can go ahead).
  bool FinishDrains(bool stopping, int* unloaded = nullptr);
  void SetState(Version& v, const std::string& name, VersionState s, std::string reason);
  // `host_left`: on the host with host_memory_budget_bytes set, what the budget leaves
  // this version (its KV cache is sized within it); -1 otherwise.
  Status CheckMemory(const LoadJob& job, int64_t& estimate, int64_t& host_left);
  void Watch();
  bool ReadWatchEvents();
  nlohmann::json ModelJson(const Model& m) const;

  const ServerConfig config_;
  ServerMetrics& metrics_;
  std::function<bool(const std::string&)> taken_;
  CounterFamily& loads_total_;
  GaugeFamily& ready_gauge_;
  std::shared_ptr<Waker> waker_;
  int inotify_fd_ = -1;
  std::map<std::string, int> watches_;  // path → watch descriptor

  mutable std::mutex mu_;
  std::map<std::string, Model> models_;  // GUARDED_BY(mu_)
  bool stop_ = false;                    // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace ferry::serve
