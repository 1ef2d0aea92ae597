#include "serve/model_versions.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>

#include "core/logging.h"
#include "qos/memory_check.h"

namespace ferry::serve {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string_view VersionStateName(VersionState s) {
  switch (s) {
    case VersionState::kLoading: return "loading";
    case VersionState::kWarming: return "warming";
    case VersionState::kReady: return "ready";
    case VersionState::kDraining: return "draining";
    case VersionState::kUnloaded: return "unloaded";
    case VersionState::kFailed: return "failed";
  }
  return "unknown";
}

// Wakes the manager thread from any thread (a request finishing, the admin API); outlives
// the repository while leases hold it.
class ModelVersions::Waker {
 public:
  Waker() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Waker() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }
  void Wake() const {
    const uint64_t one = 1;
    if (fd_ >= 0) [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof(one));
  }
  void Drain() const {
    uint64_t value = 0;
    if (fd_ >= 0) [[maybe_unused]] ssize_t n = ::read(fd_, &value, sizeof(value));
  }

 private:
  int fd_;
};

namespace {

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool ParseId(const std::string& id, std::string& name, std::optional<int64_t>& version) {
  const size_t at = id.rfind('@');
  if (at == std::string::npos) {
    name = id;
    return true;
  }
  name = id.substr(0, at);
  int64_t v = 0;
  const char* b = id.data() + at + 1;
  const char* e = id.data() + id.size();
  const auto [ptr, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || ptr != e || v <= 0) return false;
  version = v;
  return true;
}

}  // namespace

ModelVersions::ModelVersions(const ServerConfig& config, ServerMetrics& metrics,
                             std::function<bool(const std::string&)> taken)
    : config_(config),
      metrics_(metrics),
      taken_(std::move(taken)),
      loads_total_(metrics.registry.AddCounter("ferry:model_loads_total",
                                               "Loads of model versions from the model repository, by result",
                                               {"model_name", "version", "result"})),
      ready_gauge_(metrics.registry.AddGauge("ferry:model_ready",
                                             "1 while a version of a repository model serves new requests",
                                             {"model_name", "version"})),
      waker_(std::make_shared<Waker>()) {
  if (config_.model_repository.watch) {
    inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_fd_ < 0) {
      FERRY_LOG_WARN("model repository: inotify unavailable ({}); polling every {} s", std::strerror(errno),
                     config_.model_repository.poll_s);
    }
  }
}

ModelVersions::~ModelVersions() {
  Stop(0);
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
}

void ModelVersions::Start() {
  // The first pass loads synchronously: the server turns ready with the repository's models.
  bool pending = false;
  Watch();
  for (int round = 0; round < 2; ++round) {
    for (const LoadJob& job : Plan(&pending)) LoadOne(job);
    StartDrains();
    FinishDrains(false);
    if (!pending) break;
    // A version whose files were written just now: wait for them to settle once.
    std::this_thread::sleep_for(std::chrono::milliseconds(config_.model_repository.settle_ms + 10));
  }
  thread_ = std::thread([this] { Run(); });
}

void ModelVersions::Stop(int64_t timeout_ms) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) {
      // Already stopped; the models may still need stopping below.
    }
    stop_ = true;
  }
  waker_->Wake();
  if (thread_.joinable()) thread_.join();
  std::vector<std::shared_ptr<ServedModel>> models;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, m] : models_) {
      for (auto& [number, v] : m.versions) {
        if (v.model != nullptr) models.push_back(v.model);
      }
    }
  }
  for (auto& m : models) m->Stop(timeout_ms);
}

void ModelVersions::Watch() {
  if (inotify_fd_ < 0) return;
  const uint32_t mask = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_CLOSE_WRITE | IN_ATTRIB;
  std::vector<std::string> dirs = {config_.model_repository.path};
  for (const std::string& name : ListRepositoryModels(config_.model_repository.path)) {
    dirs.push_back((fs::path(config_.model_repository.path) / name).string());
  }
  for (const std::string& d : dirs) {
    if (watches_.count(d) != 0) continue;
    const int wd = ::inotify_add_watch(inotify_fd_, d.c_str(), mask);
    if (wd >= 0) watches_[d] = wd;
  }
}

bool ModelVersions::ReadWatchEvents() {
  if (inotify_fd_ < 0) return false;
  alignas(inotify_event) char buf[8192];
  bool any = false;
  for (;;) {
    const ssize_t n = ::read(inotify_fd_, buf, sizeof(buf));
    if (n <= 0) break;
    any = true;
    for (char* p = buf; p < buf + n;) {
      auto* ev = reinterpret_cast<inotify_event*>(p);
      if (ev->mask & IN_IGNORED) {
        for (auto it = watches_.begin(); it != watches_.end(); ++it) {
          if (it->second == ev->wd) {
            watches_.erase(it);
            break;
          }
        }
      }
      p += sizeof(inotify_event) + ev->len;
    }
  }
  return any;
}

void ModelVersions::Run() {
  const int64_t poll_ms = static_cast<int64_t>(config_.model_repository.poll_s * 1000);
  auto next_scan = Clock::now();
  bool pending = false;
  bool draining = false;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    Watch();
    for (const LoadJob& job : Plan(&pending)) {
      LoadOne(job);
      StartDrains();
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) return;
      }
    }
    StartDrains();
    int unloaded = 0;
    draining = FinishDrains(false, &unloaded);
    if (unloaded > 0) continue;  // an admin load may have been waiting for the version to unload
    if (poll_ms > 0) next_scan = Clock::now() + std::chrono::milliseconds(poll_ms);
    // Sleep until an event, the next poll, or (while files settle or requests drain) a short tick.
    int timeout = poll_ms > 0 ? static_cast<int>(std::min<int64_t>(poll_ms, 1 << 30)) : -1;
    if (pending || draining) timeout = 50;
    pollfd fds[2] = {{waker_->fd(), POLLIN, 0}, {inotify_fd_, POLLIN, 0}};
    const int nfds = inotify_fd_ >= 0 ? 2 : 1;
    const int r = ::poll(fds, nfds, timeout);
    if (r > 0) {
      waker_->Drain();
      if (ReadWatchEvents()) {
        // Let a burst of changes (a copy, a rename) arrive before scanning.
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ReadWatchEvents();
      }
    }
  }
}

std::vector<ModelVersions::LoadJob> ModelVersions::Plan(bool* pending) {
  const std::string& root = config_.model_repository.path;
  const std::vector<std::string> names = ListRepositoryModels(root);
  // Files are read outside the lock: the requests' lookups never wait on the disk.
  struct Disk {
    Result<RepositoryModelConfig> config;
    std::vector<VersionOnDisk> versions;
  };
  std::map<std::string, Disk> disk;
  for (const std::string& name : names) {
    disk.emplace(name, Disk{LoadRepositoryModelConfig(root, name), ListVersions(root, name)});
  }
  const auto now = Clock::now();
  const auto settle = std::chrono::milliseconds(config_.model_repository.settle_ms);
  std::vector<LoadJob> jobs;
  *pending = false;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, d] : disk) {
    Model& m = models_[name];
    m.name = name;
    if (taken_ && taken_(name)) {
      m.config_error = "a model named '" + name + "' is served from the config's models; the repository's is ignored";
      continue;
    }
    if (!d.config.ok()) {
      if (m.config_error != d.config.status().message()) {
        FERRY_LOG_ERROR("model repository: {}: {}", name, d.config.status().message());
      }
      m.config_error = d.config.status().message();
      continue;  // what serves keeps serving; nothing new loads until the config is fixed
    }
    m.config_error.clear();
    m.config = *d.config;
    std::vector<int64_t> settled, failed, on_disk;
    std::map<int64_t, const VersionOnDisk*> by_number;
    for (const VersionOnDisk& v : d.versions) {
      on_disk.push_back(v.version);
      by_number[v.version] = &v;
      Seen& s = m.seen[v.version];
      if (s.signature != v.signature) {
        s.signature = v.signature;
        s.since = now;
      }
      auto it = m.versions.find(v.version);
      if (it != m.versions.end() && it->second.state == VersionState::kFailed) {
        if (it->second.signature == v.signature) {
          failed.push_back(v.version);
        } else {
          m.versions.erase(it);  // new files under the failed number: try again
        }
      }
      if (now - s.since >= settle) settled.push_back(v.version);
    }
    for (auto it = m.seen.begin(); it != m.seen.end();) {
      it = by_number.count(it->first) ? std::next(it) : m.seen.erase(it);
    }
    if (m.admin_unloaded) continue;
    VersionPolicy policy = m.config.policy;
    if (m.admin_version) {
      policy.kind = VersionPolicy::Kind::kSpecific;
      policy.specific = {*m.admin_version};
    }
    // Selected among every version on disk: a version still being written holds back the
    // older ones it will replace, rather than letting them be selected and dropped again.
    for (int64_t v : policy.Select(on_disk, failed)) {
      if (std::find(settled.begin(), settled.end(), v) == settled.end()) {
        *pending = true;
        continue;
      }
      auto it = m.versions.find(v);
      if (it != m.versions.end() && it->second.state != VersionState::kUnloaded) continue;
      Version& entry = m.versions[v];
      entry = Version();
      entry.number = v;
      entry.load_path = by_number[v]->load_path;
      entry.signature = by_number[v]->signature;
      entry.changed_unix_ms = UnixMs();
      LoadJob job;
      job.name = name;
      job.version = v;
      job.load_path = entry.load_path;
      job.signature = entry.signature;
      job.config = m.config.model;
      job.config.name = name;
      job.config.path = entry.load_path;
      jobs.push_back(std::move(job));
    }
  }
  // Models whose directory is gone: every version drains.
  for (auto& [name, m] : models_) {
    if (disk.count(name) == 0) m.seen.clear();
  }
  return jobs;
}

Status ModelVersions::CheckMemory(const LoadJob& job, int64_t& estimate, int64_t& host_left) {
  host_left = -1;
  qos::VariantPlan plan;
  plan.variant = job.name + "@" + std::to_string(job.version);
  plan.path = job.load_path;
  plan.device = job.config.device;
  plan.activations = job.config.activations;
  plan.kv_cache_dtype = job.config.kv_cache_dtype;
  plan.batching = job.config.batching;
  FERRY_ASSIGN_OR_RETURN(qos::MemoryNeed need, qos::EstimateMemory(plan));
  Result<qos::MemoryBudget> budget = qos::QueryMemory(job.config.device);
  double fraction = 0.9;
  if (budget.ok() && job.config.device.is_cuda() && job.config.gpu_memory_utilization > 0) {
    // The version takes its share of the device, whatever its KV cache would hold otherwise:
    // the whole share must be free now.
    const int64_t share =
        static_cast<int64_t>(static_cast<double>(budget->total_bytes) * job.config.gpu_memory_utilization);
    need.kv_bytes = std::max<int64_t>(0, share - need.weights_bytes);
    fraction = 1.0;
  }
  estimate = need.total();
  if (!budget.ok()) return Status::Ok();  // nothing known: the load itself will tell
  if (!job.config.device.is_cuda() && config_.host_memory_budget_bytes > 0) {
    int64_t used = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [name, m] : models_) {
        for (const auto& [number, v] : m.versions) {
          if (v.model != nullptr || v.state == VersionState::kLoading || v.state == VersionState::kWarming) {
            if (!(name == job.name && number == job.version)) used += v.memory_bytes;
          }
        }
      }
    }
    const int64_t left = std::max<int64_t>(0, config_.host_memory_budget_bytes - used);
    host_left = left;
    if (left < budget->available_bytes) {
      budget->available_bytes = left;
      budget->total_bytes = config_.host_memory_budget_bytes;
      budget->source = "host_memory_budget_bytes, " + qos::FormatBytes(used) + " taken by loaded versions";
      fraction = 1.0;
      // The KV cache is sized within what is left (sched/kv_budget.h): the version needs its
      // weights and one sequence up front, and takes at most the budget that is left.
      need.kv_bytes /= std::max(1, job.config.batching.max_num_seqs);
      estimate = std::min(estimate, left);
    }
  }
  return qos::CheckGroupMemory(plan.variant, {need}, {*budget}, fraction);
}

void ModelVersions::LoadOne(const LoadJob& job) {
  const std::string id = job.name + "@" + std::to_string(job.version);
  FERRY_LOG_INFO("model repository: loading {} from {}", id, job.load_path);
  int64_t estimate = 0;
  int64_t host_left = -1;
  Status status = CheckMemory(job, estimate, host_left);
  ModelConfig config = job.config;
  if (host_left >= 0) {
    // The version's KV cache is sized within what the repository's budget leaves it.
    config.host_memory_budget_bytes = config.host_memory_budget_bytes > 0
                                          ? std::min(config.host_memory_budget_bytes, host_left)
                                          : host_left;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    Model& m = models_[job.name];
    auto it = m.versions.find(job.version);
    if (it != m.versions.end()) it->second.memory_bytes = estimate;
  }
  std::shared_ptr<ServedModel> served;
  if (status.ok()) {
    VariantHooks hooks;
    hooks.on_phase = [this, name = job.name, number = job.version](std::string_view phase) {
      if (phase != "warmup") return;
      std::lock_guard<std::mutex> lock(mu_);
      auto it = models_[name].versions.find(number);
      if (it != models_[name].versions.end() && it->second.state == VersionState::kLoading) {
        it->second.state = VersionState::kWarming;
      }
    };
    auto created = ServedModel::Create(config, metrics_, std::move(hooks));
    status = created.status();
    if (created.ok()) served = std::shared_ptr<ServedModel>(std::move(created).value());
  }
  const std::string version = std::to_string(job.version);
  std::lock_guard<std::mutex> lock(mu_);
  Model& m = models_[job.name];
  Version& v = m.versions[job.version];
  if (!status.ok()) {
    FERRY_LOG_ERROR("model repository: {} failed to load: {}", id, status.message());
    loads_total_.WithLabels({job.name, version, "failure"}).Inc();
    SetState(v, job.name, VersionState::kFailed, status.message());
    return;
  }
  loads_total_.WithLabels({job.name, version, "success"}).Inc();
  v.model = std::move(served);
  if (stop_) {
    SetState(v, job.name, VersionState::kDraining, "the server is shutting down");
    return;
  }
  SetState(v, job.name, VersionState::kReady, "");
  const sched::PreloadTimings& t = v.model->timings();
  FERRY_LOG_INFO("model repository: {} ready (load {:.0f} ms, allocate {:.0f} ms, warm-up {:.0f} ms)", id,
                 t.load_ms, t.allocate_ms, t.warmup_ms);
}

void ModelVersions::SetState(Version& v, const std::string& name, VersionState s, std::string reason) {
  const bool was_ready = v.state == VersionState::kReady;
  v.state = s;
  v.reason = std::move(reason);
  v.changed_unix_ms = UnixMs();
  if (s == VersionState::kDraining) v.drain_started = Clock::now();
  if (was_ready != (s == VersionState::kReady)) {
    ready_gauge_.WithLabels({name, std::to_string(v.number)}).Set(s == VersionState::kReady ? 1 : 0);
  }
}

void ModelVersions::StartDrains() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, m] : models_) {
    std::vector<int64_t> on_disk, failed;
    for (const auto& [number, seen] : m.seen) on_disk.push_back(number);
    for (const auto& [number, v] : m.versions) {
      if (v.state == VersionState::kFailed) failed.push_back(number);
    }
    VersionPolicy policy = m.config.policy;
    if (m.admin_version) {
      policy.kind = VersionPolicy::Kind::kSpecific;
      policy.specific = {*m.admin_version};
    }
    const std::vector<int64_t> wanted = m.admin_unloaded ? std::vector<int64_t>() : policy.Select(on_disk, failed);
    bool wanted_ready = false;
    for (int64_t w : wanted) {
      auto it = m.versions.find(w);
      wanted_ready = wanted_ready || (it != m.versions.end() && it->second.state == VersionState::kReady);
    }
    for (auto& [number, v] : m.versions) {
      if (v.state != VersionState::kReady) continue;
      if (std::find(wanted.begin(), wanted.end(), number) != wanted.end()) continue;
      const bool gone = m.seen.count(number) == 0;
      if (m.admin_unloaded) {
        SetState(v, name, VersionState::kDraining, "unloaded through the admin API");
      } else if (gone) {
        SetState(v, name, VersionState::kDraining, "removed from the repository");
      } else if (wanted_ready) {
        SetState(v, name, VersionState::kDraining, "replaced by version " + std::to_string(wanted.back()));
      }
      // Otherwise it keeps serving until what replaces it is ready.
    }
  }
}

bool ModelVersions::FinishDrains(bool stopping, int* unloaded) {
  std::vector<std::pair<std::shared_ptr<ServedModel>, int64_t>> to_stop;  // model, budget ms
  bool still = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = Clock::now();
    const auto limit = std::chrono::milliseconds(config_.model_repository.drain_timeout_ms);
    for (auto& [name, m] : models_) {
      for (auto& [number, v] : m.versions) {
        if (v.state != VersionState::kDraining) continue;
        const bool idle = v.in_flight->load() == 0;
        if (idle || stopping || now - v.drain_started >= limit) {
          to_stop.emplace_back(v.model, idle ? 0 : 1000);
        } else {
          still = true;
        }
      }
    }
  }
  for (auto& [model, budget] : to_stop) {
    if (model != nullptr) model->Stop(budget);
  }
  if (unloaded != nullptr) *unloaded = static_cast<int>(to_stop.size());
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, m] : models_) {
    for (auto& [number, v] : m.versions) {
      for (auto& [model, budget] : to_stop) {
        if (v.state == VersionState::kDraining && v.model == model) {
          if (v.in_flight->load() > 0) {
            FERRY_LOG_WARN("model repository: {}@{} unloaded with {} request(s) cancelled after drain_timeout_ms",
                           name, number, v.in_flight->load());
          }
          v.model.reset();  // requests still holding it free it when they are done
          v.state = VersionState::kUnloaded;
          v.changed_unix_ms = UnixMs();
          FERRY_LOG_INFO("model repository: {}@{} unloaded ({})", name, number, v.reason);
        }
      }
    }
  }
  return still;
}

Result<ModelVersions::Lease> ModelVersions::Acquire(const std::string& id) {
  std::string name;
  std::optional<int64_t> version;
  if (!ParseId(id, name, version)) return NotFound("the model '" + id + "' does not exist");
  std::lock_guard<std::mutex> lock(mu_);
  auto mit = models_.find(name);
  if (mit == models_.end() || (!mit->second.config_error.empty() && mit->second.versions.empty())) {
    return NotFound("the model '" + id + "' does not exist");
  }
  Model& m = mit->second;
  Version* chosen = nullptr;
  bool loading = false;
  for (auto it = m.versions.rbegin(); it != m.versions.rend(); ++it) {
    Version& v = it->second;
    if (version && v.number != *version) continue;
    if (v.state == VersionState::kReady && chosen == nullptr) chosen = &v;
    loading = loading || v.state == VersionState::kLoading || v.state == VersionState::kWarming;
  }
  if (chosen == nullptr) {
    if (version) {
      auto it = m.versions.find(*version);
      if (it == m.versions.end()) return NotFound("the model '" + name + "' has no version " + std::to_string(*version));
      const Version& v = it->second;
      const std::string why = v.reason.empty() ? "" : ": " + v.reason;
      if (loading) return Unavailable("version " + std::to_string(*version) + " of model '" + name + "' is " +
                                      std::string(VersionStateName(v.state)));
      return NotFound("version " + std::to_string(*version) + " of model '" + name + "' is " +
                      std::string(VersionStateName(v.state)) + why);
    }
    if (loading) return Unavailable("model '" + name + "' is loading");
    return NotFound("the model '" + name + "' has no ready version");
  }
  Lease lease;
  lease.model = chosen->model;
  lease.version = chosen->number;
  std::shared_ptr<std::atomic<int>> counter = chosen->in_flight;
  counter->fetch_add(1);
  std::shared_ptr<Waker> waker = waker_;
  lease.in_flight = std::shared_ptr<const void>(nullptr, [counter, waker](const void*) {
    if (counter->fetch_sub(1) == 1) waker->Wake();
  });
  return lease;
}

std::vector<ModelVersions::ReadyModel> ModelVersions::Ready() const {
  std::vector<ReadyModel> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, m] : models_) {
    ReadyModel r;
    r.name = name;
    for (const auto& [number, v] : m.versions) {
      if (v.state != VersionState::kReady) continue;
      r.versions.push_back(number);
      r.newest = v.model;
    }
    if (r.newest != nullptr) out.push_back(std::move(r));
  }
  return out;
}

json ModelVersions::ModelJson(const Model& m) const {
  json versions = json::array();
  for (const auto& [number, v] : m.versions) {
    json j = {{"version", number}, {"state", VersionStateName(v.state)}, {"path", v.load_path},
              {"in_flight", v.in_flight->load()}, {"changed_unix_ms", v.changed_unix_ms}};
    if (!v.reason.empty()) j["reason"] = v.reason;
    if (v.memory_bytes > 0) j["memory_estimate_bytes"] = v.memory_bytes;
    if (v.model != nullptr) {
      const sched::PreloadTimings& t = v.model->timings();
      j["preload_ms"] = {{"load", t.load_ms}, {"allocate", t.allocate_ms}, {"warmup", t.warmup_ms}};
    }
    versions.push_back(std::move(j));
  }
  json out = {{"name", m.name}, {"version_policy", m.config.policy.ToString()}, {"versions", versions}};
  json on_disk = json::array();
  for (const auto& [number, seen] : m.seen) on_disk.push_back(number);
  out["on_disk"] = on_disk;
  if (!m.config_error.empty()) out["config_error"] = m.config_error;
  if (m.admin_unloaded) out["unloaded_by_admin"] = true;
  if (m.admin_version) out["pinned_version"] = *m.admin_version;
  return out;
}

json ModelVersions::StatusJson() const {
  json models = json::array();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, m] : models_) models.push_back(ModelJson(m));
  return {{"repository", config_.model_repository.path}, {"models", models}};
}

Result<json> ModelVersions::Load(const std::string& name, std::optional<int64_t> version) {
  const std::vector<VersionOnDisk> disk = ListVersions(config_.model_repository.path, name);
  const std::vector<std::string> names = ListRepositoryModels(config_.model_repository.path);
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    return NotFound("the model repository has no model '" + name + "'");
  }
  if (version) {
    bool found = false;
    for (const VersionOnDisk& d : disk) found = found || d.version == *version;
    if (!found) return NotFound("the model '" + name + "' has no version " + std::to_string(*version) + " on disk");
  }
  json out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Model& m = models_[name];
    m.name = name;
    m.admin_unloaded = false;
    m.admin_version = version;
    // An explicit load tries failed versions again.
    for (auto it = m.versions.begin(); it != m.versions.end();) {
      it = it->second.state == VersionState::kFailed ? m.versions.erase(it) : std::next(it);
    }
    out = ModelJson(m);
  }
  waker_->Wake();
  return out;
}

Result<json> ModelVersions::Unload(const std::string& name) {
  json out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(name);
    if (it == models_.end()) return NotFound("the model repository has no model '" + name + "'");
    Model& m = it->second;
    m.admin_unloaded = true;
    m.admin_version.reset();
    for (auto& [number, v] : m.versions) {
      if (v.state == VersionState::kReady) SetState(v, name, VersionState::kDraining, "unloaded through the admin API");
    }
    out = ModelJson(m);
  }
  waker_->Wake();
  return out;
}

}  // namespace ferry::serve
