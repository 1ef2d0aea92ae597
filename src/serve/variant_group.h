// A QoS variant group: one model to clients, served by several precision variants of it
// (most accurate first), each a full ServedModel with its own engine and batcher (and, for
// decoders, its own engine core and KV cache). A qos::Controller decides where NEW requests
// go; a running sequence finishes on the variant where it started, so KV caches never mix
// and nothing is dropped or restarted by a switch. Encoders: each variant's dynamic batcher
// forms its own whole batches.
//
// At creation every variant's memory is checked up front, then every variant is loaded
// and warmed, probed (how fast is it really here?) and canary-checked before the group
// reports ready. Afterwards a controller thread samples the batchers and decides every
// `qos.tick_ms`; a canary thread re-checks the lower variants every
// `rollback.canary_interval_s`.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "qos/controller.h"
#include "serve/config.h"
#include "serve/model_repository.h"
#include "serve/qos_metrics.h"

namespace ferry::serve {

// Thread-safe after Create.
class VariantGroup {
 public:
  // Every decision record, as it is made (the server writes one JSON log line each).
  using DecisionSink = std::function<void(const qos::DecisionRecord&)>;

  // `config` is the group's model entry (with variants); `server` gives the tiers and their
  // rules. Fails, before loading anything, when the variants cannot fit in memory.
  static Result<std::unique_ptr<VariantGroup>> Create(const ServerConfig& server, const ModelConfig& config,
                                                      ServerMetrics& metrics, QosMetrics& qos_metrics,
                                                      DecisionSink sink);
  ~VariantGroup();
  VariantGroup(const VariantGroup&) = delete;
  VariantGroup& operator=(const VariantGroup&) = delete;

  const std::string& name() const { return config_.name; }
  const ModelConfig& config() const { return config_; }
  int size() const { return static_cast<int>(variants_.size()); }
  ServedModel& variant(int i) const { return *variants_[static_cast<size_t>(i)]; }
  ServedModel& top() const { return *variants_.front(); }
  qos::Controller& controller() { return *controller_; }

  // The variant a new request of `tier` is admitted to (counted in the metrics); null when
  // no healthy variant is at or above the tier's floor.
  ServedModel* Admit(const std::string& tier);

  // Stops the controller and canary threads, then every variant's batcher (running work
  // finishes within `timeout_ms`).
  void Stop(int64_t timeout_ms);

  // GET /admin/qos: the controller's state, signals and decisions, with each variant's path,
  // device and last canary.
  nlohmann::json QosJson() const;
  // The variants as /v1/models shows them.
  nlohmann::json VariantsJson() const;
  // Each variant's preload timings and batcher state, for GET /admin/status.
  nlohmann::json BatchersJson() const;
  // POST /admin/qos/MODEL with {"pin": VARIANT | "auto", "clear": VARIANT | "all"}: the new
  // state. InvalidArgument for a bad body or an unknown variant, FailedPrecondition for a pin
  // to an unhealthy variant.
  Result<nlohmann::json> Admin(const nlohmann::json& body);

 private:
  class Observer;
  struct CanaryResult {
    bool checked = false;
    bool passed = false;
    double score = 0;
    int64_t unix_ms = 0;
    std::string detail;
  };

  VariantGroup() = default;
  Status CheckMemory() const;
  Status Load();
  Status Probe();
  Status PrepareCanary();
  void CheckCanaries();
  void StartThreads();
  void TickLoop();
  void CanaryLoop();
  void SampleLoad(qos::Clock::time_point now);
  void Publish(const std::vector<qos::DecisionRecord>& records);
  void PublishGauges();
  // After the controller's routes change (a switch, a pin, a rollback): moves the requests
  // still waiting for their first step in a variant their tier no longer routes to.
  void MoveWaiting();
  // Step pacing (qos.inactive_step_ms): none for the variants new requests are steered to
  // (the active one, or where an unhealthy active one's traffic goes), the group's inactive
  // pace for the others (tier-floor traffic, sequences draining after a switch). Logs and
  // records each change; publishes the pacing gauges and paced-wait counters.
  void ApplyPacing();
  // qos.step_turns: the decoder variants on one device (GPUs only under auto) take turns
  // step by step (sched::StepTurns).
  void ShareDevices();
  // qos.share_cores: the decoder variants on the CPU that do not take step turns split its
  // cores while more than one has work (sched::CoreShare). After ShareDevices.
  void ShareCores();
  // The TPOT targets set in the config: the group's slo.tpot_ms and every tier's own.
  std::vector<double> TpotTargetsMs() const;
  void OnEncoderItem(int variant, const EncoderItemReport& r);

  ServerConfig server_;  // tiers and their rules
  ModelConfig config_;
  ServerMetrics* metrics_ = nullptr;
  QosMetrics* qos_metrics_ = nullptr;
  ServerMetrics::ModelMetrics model_metrics_;
  DecisionSink sink_;
  std::unique_ptr<qos::Controller> controller_;
  std::vector<std::unique_ptr<Observer>> observers_;
  std::vector<std::unique_ptr<ServedModel>> variants_;
  bool decoder_ = true;

  // Canary: the top variant's reference for the prompt (decoders: its greedy tokens;
  // encoders: its output row).
  std::vector<int32_t> canary_prompt_;
  std::vector<int32_t> canary_reference_tokens_;
  std::vector<float> canary_reference_row_;
  mutable std::mutex canary_mu_;
  std::vector<CanaryResult> canary_results_;  // GUARDED_BY(canary_mu_)

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // GUARDED_BY(mu_)
  std::map<std::string, std::optional<int>> last_routes_;  // ticker thread only: tier -> variant
  double inactive_step_ms_ = 0;  // resolved at Create (after the probe); 0 = off
  std::mutex pacing_mu_;         // ApplyPacing runs on the ticker and admin threads
  std::vector<double> paced_seconds_;  // GUARDED_BY(pacing_mu_): per variant, last published
  std::vector<uint64_t> paced_waits_;  // GUARDED_BY(pacing_mu_)
  std::vector<bool> step_turns_;       // per variant: takes turns on its device (set at Create)
  std::vector<bool> share_cores_;      // per variant: splits the CPU's cores (set at Create)
  std::thread ticker_;
  std::thread canary_;
};

}  // namespace ferry::serve
