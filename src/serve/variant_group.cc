#include "serve/variant_group.h"

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <map>

#include "core/logging.h"
#include "core/thread_pool.h"
#include "qos/canary.h"
#include "qos/memory_check.h"
#include "serve/qos_config.h"
#include "tokenizer/tokenizer.h"

namespace ferry::serve {

namespace {

using json = nlohmann::json;
constexpr std::chrono::milliseconds kStartupTimeout{300000};
constexpr std::chrono::milliseconds kCanaryTimeout{120000};

void NameThread(const std::string& name) { pthread_setname_np(pthread_self(), name.substr(0, 15).c_str()); }

// Runs encoder inputs through a variant's dynamic batcher (like a request would) and waits
// for their rows.
Result<std::vector<std::vector<float>>> RunEncoderInputs(ServedModel& model, EncoderWork::Kind kind,
                                                         const std::vector<engine::EncodedInput>& inputs,
                                                         std::chrono::milliseconds timeout) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    int remaining = 0;
    Status error;
    std::vector<std::vector<float>> rows;
  };
  auto shared = std::make_shared<Shared>();
  shared->remaining = static_cast<int>(inputs.size());
  shared->rows.resize(inputs.size());
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto work = std::make_shared<EncoderWork>();
    work->kind = kind;
    work->input = inputs[i];
    work->tier = qos::kCanaryTier;
    work->done = [shared, i](Result<std::vector<float>> r) {
      std::lock_guard<std::mutex> lock(shared->mu);
      if (r.ok()) {
        shared->rows[i] = std::move(r).value();
      } else if (shared->error.ok()) {
        shared->error = r.status();
      }
      if (--shared->remaining == 0) shared->cv.notify_all();
    };
    auto item = std::make_shared<sched::BatchItem>();
    item->payload = work;
    item->on_reject = [work](const Status& s) { work->Complete(s); };
    Result<uint64_t> id = model.encoder()->Enqueue(item);
    if (!id.ok()) {
      for (uint64_t queued : ids) model.encoder()->Cancel(queued);
      return id.status();
    }
    ids.push_back(*id);
  }
  std::unique_lock<std::mutex> lock(shared->mu);
  if (!shared->cv.wait_for(lock, timeout, [&shared] { return shared->remaining == 0; })) {
    lock.unlock();
    for (uint64_t id : ids) model.encoder()->Cancel(id);
    return DeadlineExceeded("encoder inputs did not finish within " + std::to_string(timeout.count()) + " ms");
  }
  if (!shared->error.ok()) return shared->error;
  return std::move(shared->rows);
}

std::string Fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

}  // namespace

// Feeds one variant's scheduler events into the group's load monitor and metrics.
class VariantGroup::Observer : public sched::BatcherObserver {
 public:
  Observer(VariantGroup& group, int index)
      : group_(group),
        index_(index),
        prompt_tokens_(group.qos_metrics_->prompt_tokens.WithLabels(
            {group.config_.name, group.config_.variants[static_cast<size_t>(index)].name})),
        generation_tokens_(group.qos_metrics_->generation_tokens.WithLabels(
            {group.config_.name, group.config_.variants[static_cast<size_t>(index)].name})),
        engine_errors_(group.qos_metrics_->engine_errors.WithLabels(
            {group.config_.name, group.config_.variants[static_cast<size_t>(index)].name})) {}

  void OnStep(const sched::StepStats& s) override {
    group_.controller_->monitor().RecordBusy(index_, s.seconds, qos::Clock::now());
  }
  void OnPreemption(int) override {}
  bool wants_requests() const override { return true; }
  void OnRequest(const sched::RequestProgress& p) override {
    const qos::Clock::time_point now = qos::Clock::now();
    qos::LoadMonitor& m = group_.controller_->monitor();
    if (p.queue_seconds) m.RecordQueueWait(p.tier, *p.queue_seconds, now);
    if (p.ttft_seconds) {
      m.RecordTtft(p.tier, *p.ttft_seconds, now);
    } else if (p.new_tokens > 0) {
      m.RecordTpot(p.tier, p.token_gap_seconds, now);
    }
    if (!p.finished) return;
    const bool engine_error = p.failure_reason == kFailureEngineError || p.failure_reason == kFailureNonfiniteLogits;
    m.RecordOutcome(index_, engine_error, now);
    if (engine_error) engine_errors_.Inc();
    if (p.tier != qos::kCanaryTier) {
      prompt_tokens_.Inc(static_cast<double>(p.prompt_tokens));
      generation_tokens_.Inc(static_cast<double>(p.generated_tokens));
    }
  }

 private:
  VariantGroup& group_;
  const int index_;
  Counter& prompt_tokens_;
  Counter& generation_tokens_;
  Counter& engine_errors_;
};

Result<std::unique_ptr<VariantGroup>> VariantGroup::Create(const ServerConfig& server, const ModelConfig& config,
                                                           ServerMetrics& metrics, QosMetrics& qos_metrics,
                                                           DecisionSink sink) {
  if (config.variants.empty()) return InvalidArgument("model '" + config.name + "' has no variants");
  std::unique_ptr<VariantGroup> g(new VariantGroup());
  g->server_ = server;
  g->server_.models.clear();  // only the tiers and their rules are kept
  g->config_ = config;
  g->metrics_ = &metrics;
  g->qos_metrics_ = &qos_metrics;
  g->sink_ = std::move(sink);
  FERRY_RETURN_IF_ERROR(g->CheckMemory());
  if (config.qos.min_dwell_s < config.qos.window_s) {
    FERRY_LOG_WARN("model '{}': qos.min_dwell_s ({}) is shorter than qos.window_s ({}): a decision may read a window "
                   "that still holds the previous variant's measurements",
                   config.name, config.qos.min_dwell_s, config.qos.window_s);
  }

  qos::ControllerOptions co;
  co.model = config.name;
  co.qos = config.qos;
  for (const VariantConfig& v : config.variants) co.variants.push_back(v.name);
  for (const auto& [tier, priority] : server.tiers) {
    const qos::TierRule rule = ResolveTierRule(server, config, tier);
    co.tiers.emplace_back(tier, qos::EffectiveSlo(config.qos.slo, rule.slo));
    if (rule.min_variant) {
      for (size_t i = 0; i < config.variants.size(); ++i) {
        if (config.variants[i].name == *rule.min_variant) co.floors[tier] = static_cast<int>(i);
      }
    }
  }
  const ModelConfig& top = config.variants.front().model;
  co.waiting_capacity = top.batching.max_num_seqs;
  co.waiting_tokens_capacity = top.batching.max_num_batched_tokens;
  g->controller_ = std::make_unique<qos::Controller>(std::move(co));
  g->canary_results_.resize(config.variants.size());

  FERRY_RETURN_IF_ERROR(g->Load());
  FERRY_RETURN_IF_ERROR(g->Probe());
  FERRY_RETURN_IF_ERROR(g->PrepareCanary());
  if (g->decoder_) {
    const std::vector<double> targets = g->TpotTargetsMs();
    g->inactive_step_ms_ = qos::InactiveStepMs(config.qos, targets, g->controller_->MaxUpgradeCost());
    if (g->inactive_step_ms_ > 0) {
      const double smallest = targets.empty() ? 0 : *std::min_element(targets.begin(), targets.end());
      FERRY_LOG_INFO("model '{}': variants new requests are not steered to step at most every {:.1f} ms "
                     "(qos.inactive_step_ms: {}; smallest TPOT target {:.0f} ms)",
                     config.name, g->inactive_step_ms_,
                     config.qos.inactive_step.mode == qos::InactivePacing::Mode::kAuto ? "auto" : "set", smallest);
      if (smallest > 0 && g->inactive_step_ms_ * g->controller_->MaxUpgradeCost() >= config.qos.upgrade_below * smallest) {
        FERRY_LOG_WARN("model '{}': qos.inactive_step_ms ({} ms) is so close to the TPOT target ({} ms) that a paced "
                       "tier's TPOT pressure may keep the group from moving back up",
                       config.name, g->inactive_step_ms_, smallest);
      }
    }
    g->paced_seconds_.assign(g->variants_.size(), 0.0);
    g->paced_waits_.assign(g->variants_.size(), 0);
    g->ShareDevices();
    g->ShareCores();
  }
  g->PublishGauges();
  g->ApplyPacing();
  g->StartThreads();
  std::string ladder;
  for (const VariantConfig& v : config.variants) ladder += (ladder.empty() ? "" : " > ") + v.name;
  FERRY_LOG_INFO("model '{}': QoS variant group ready ({}); new requests go to '{}'", config.name, ladder,
                 g->controller_->variant_name(g->controller_->active()));
  return g;
}

VariantGroup::~VariantGroup() { Stop(0); }

void VariantGroup::ShareDevices() {
  step_turns_.assign(variants_.size(), false);
  if (config_.qos.step_turns == qos::StepTurnsMode::kOff) return;
  std::map<std::string, std::vector<int>> by_device;
  for (int i = 0; i < size(); ++i) {
    const DeviceSpec& d = config_.variants[static_cast<size_t>(i)].model.device;
    if (config_.qos.step_turns == qos::StepTurnsMode::kAuto && d.is_cpu()) continue;
    by_device[d.ToString()].push_back(i);
  }
  for (const auto& [device, members] : by_device) {
    if (members.size() < 2) continue;
    auto turns = std::make_shared<sched::StepTurns>();
    std::string names;
    for (int i : members) {
      variant(i).decoder()->SetStepTurns(turns);
      step_turns_[static_cast<size_t>(i)] = true;
      names += (names.empty() ? "" : ", ") + config_.variants[static_cast<size_t>(i)].name;
    }
    FERRY_LOG_INFO("model '{}': variants {} share {} and take turns step by step (qos.step_turns)", config_.name,
                   names, device);
  }
}

void VariantGroup::ShareCores() {
  share_cores_.assign(variants_.size(), false);
  if (config_.qos.share_cores == qos::AutoSwitch::kOff) return;
  std::vector<int> members;
  int cores = 0;
  for (int i = 0; i < size(); ++i) {
    const ModelConfig& m = config_.variants[static_cast<size_t>(i)].model;
    if (!m.device.is_cpu() || step_turns_[static_cast<size_t>(i)]) continue;
    members.push_back(i);
    cores = std::max(cores, m.threads > 0 ? m.threads : AvailableCores());
  }
  if (members.size() < 2) return;
  auto share = std::make_shared<sched::CoreShare>(cores);
  std::string names;
  for (int i : members) {
    variant(i).decoder()->SetCoreShare(share, config_.variants[static_cast<size_t>(i)].model.threads);
    share_cores_[static_cast<size_t>(i)] = true;
    names += (names.empty() ? "" : ", ") + config_.variants[static_cast<size_t>(i)].name;
  }
  FERRY_LOG_INFO("model '{}': variants {} split {} CPU cores while more than one has work (qos.share_cores)",
                 config_.name, names, cores);
}

Status VariantGroup::CheckMemory() const {
  std::vector<qos::MemoryNeed> needs;
  std::vector<qos::MemoryBudget> budgets;
  std::map<std::string, bool> queried;
  for (const VariantConfig& v : config_.variants) {
    qos::VariantPlan plan;
    plan.variant = v.name;
    plan.path = v.model.path;
    plan.device = v.model.device;
    plan.activations = v.model.activations;
    plan.kv_cache_dtype = v.model.kv_cache_dtype;
    plan.batching = v.model.batching;
    Result<qos::MemoryNeed> need = qos::EstimateMemory(plan);
    if (!need.ok()) return need.status().WithContext("model '" + config_.name + "' variant '" + v.name + "'");
    needs.push_back(*need);
    const std::string device = v.model.device.ToString();
    if (queried[device]) continue;
    queried[device] = true;
    Result<qos::MemoryBudget> budget = qos::QueryMemory(v.model.device);
    if (budget.ok()) {
      budgets.push_back(*budget);
    } else {
      FERRY_LOG_WARN("model '{}': cannot query the memory of {} ({}); loading without the check", config_.name, device,
                     budget.status().message());
    }
  }
  FERRY_RETURN_IF_ERROR(qos::CheckGroupMemory(config_.name, needs, budgets));
  for (const qos::MemoryNeed& n : needs) {
    FERRY_LOG_INFO("model '{}' variant '{}' on {}: weights {} + KV {}", config_.name, n.variant, n.device,
                   qos::FormatBytes(n.weights_bytes), qos::FormatBytes(n.kv_bytes));
  }
  return Status::Ok();
}

Status VariantGroup::Load() {
  for (size_t i = 0; i < config_.variants.size(); ++i) {
    const int index = static_cast<int>(i);
    observers_.push_back(std::make_unique<Observer>(*this, index));
    VariantHooks hooks;
    hooks.variant = config_.variants[i].name;
    hooks.observer = observers_.back().get();
    hooks.model_gauges = false;
    hooks.on_encoder_batch = [this, index](const sched::BatchReport& r) {
      controller_->monitor().RecordBusy(index, static_cast<double>(r.run_us) * 1e-6, qos::Clock::now());
    };
    hooks.on_encoder_item = [this, index](const EncoderItemReport& r) { OnEncoderItem(index, r); };
    ModelConfig mc = config_.variants[i].model;
    mc.name = config_.name;
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<ServedModel> m, ServedModel::Create(mc, *metrics_, std::move(hooks)));
    if (!variants_.empty()) {
      const ServedModel& first = *variants_.front();
      const io::ModelConfig& a = first.engine().config();
      const io::ModelConfig& b = m->engine().config();
      if (m->is_decoder() != first.is_decoder() || a.vocab_size != b.vocab_size || a.hidden_size != b.hidden_size ||
          a.num_labels != b.num_labels) {
        return InvalidArgument("model '" + config_.name + "': variant '" + config_.variants[i].name +
                               "' is not a variant of the same model as '" + config_.variants.front().name +
                               "' (kind, vocabulary, hidden size and labels must match)");
      }
    }
    variants_.push_back(std::move(m));
  }
  decoder_ = variants_.front()->is_decoder();
  // An encoder group exports no KV-cache, preemption or prefix-cache series.
  model_metrics_ = metrics_->ForModel(config_.name, decoder_);
  return Status::Ok();
}

Status VariantGroup::Probe() {
  if (!config_.qos.project_upgrade) return Status::Ok();
  std::vector<double> seconds(variants_.size(), 0.0);
  for (size_t i = 0; i < variants_.size(); ++i) {
    ServedModel& m = *variants_[i];
    double best = 0;
    for (int round = 0; round < 2; ++round) {
      Result<double> t = 0.0;
      if (decoder_) {
        const int tokens = std::max(1, std::min(16, m.max_seq_len() / 4));
        const int prompt = std::max(1, std::min(32, m.max_seq_len() - tokens - 1));
        t = qos::ProbeSeconds(*m.decoder(), m.engine().config().vocab_size, 4, prompt, tokens, kStartupTimeout);
      } else {
        const int len = std::max(1, std::min(64, m.max_seq_len()));
        std::vector<int32_t> ids(static_cast<size_t>(len));
        for (int k = 0; k < len; ++k) ids[static_cast<size_t>(k)] = (k * 7919 + 13) % m.engine().config().vocab_size;
        std::vector<engine::EncodedInput> inputs(8, engine::EncodedInput{ids, std::vector<int32_t>(ids.size(), 0)});
        const auto t0 = std::chrono::steady_clock::now();
        Result<std::vector<std::vector<float>>> rows =
            RunEncoderInputs(m, EncoderWork::Kind::kEmbed, inputs, kStartupTimeout);
        if (rows.ok()) {
          t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        } else {
          t = rows.status();
        }
      }
      if (!t.ok()) return t.status().WithContext("model '" + config_.name + "' variant '" + config_.variants[i].name +
                                                 "': startup probe");
      best = round == 0 ? *t : std::min(best, *t);
    }
    seconds[i] = best;
    controller_->SetCost(static_cast<int>(i), best);
  }
  for (size_t i = 0; i < variants_.size(); ++i) {
    FERRY_LOG_INFO("model '{}' variant '{}': probe {:.1f} ms ({:.2f}x the top variant)", config_.name,
                   config_.variants[i].name, seconds[i] * 1000, seconds[i] / std::max(seconds[0], 1e-9));
    if (i > 0 && seconds[i] >= 0.95 * seconds[i - 1]) {
      FERRY_LOG_WARN("model '{}': variant '{}' is not faster than '{}' on this device ({:.1f} vs {:.1f} ms): moving "
                     "down to it under load will not relieve the pressure",
                     config_.name, config_.variants[i].name, config_.variants[i - 1].name, seconds[i] * 1000,
                     seconds[i - 1] * 1000);
    }
  }
  return Status::Ok();
}

Status VariantGroup::PrepareCanary() {
  const qos::RollbackOptions& rb = config_.qos.rollback;
  if (rb.canary_prompt.empty()) return Status::Ok();
  ServedModel& top = *variants_.front();
  const tokenizer::Tokenizer* tok = top.engine().tokenizer();
  if (tok == nullptr) {
    return InvalidArgument("model '" + config_.name + "': qos.rollback.canary_prompt needs a model with a tokenizer");
  }
  if (decoder_) {
    FERRY_ASSIGN_OR_RETURN(canary_prompt_, top.engine().EncodePrompt(rb.canary_prompt));
    if (static_cast<int>(canary_prompt_.size()) + rb.canary_tokens > top.max_seq_len()) {
      return InvalidArgument("model '" + config_.name + "': the canary prompt (" +
                             std::to_string(canary_prompt_.size()) + " tokens) and canary_tokens (" +
                             std::to_string(rb.canary_tokens) + ") exceed max_seq_len " +
                             std::to_string(top.max_seq_len()));
    }
    Result<std::vector<int32_t>> ref =
        qos::GreedyReference(*top.decoder(), canary_prompt_, rb.canary_tokens, kStartupTimeout);
    if (!ref.ok()) return ref.status().WithContext("model '" + config_.name + "': canary on the top variant");
    canary_reference_tokens_ = std::move(ref).value();
  } else {
    FERRY_ASSIGN_OR_RETURN(tokenizer::Encoding enc, tok->EncodeWithSpecial(rb.canary_prompt));
    if (static_cast<int>(enc.ids.size()) > top.max_seq_len()) enc.ids.resize(static_cast<size_t>(top.max_seq_len()));
    enc.type_ids.assign(enc.ids.size(), 0);
    canary_prompt_ = enc.ids;
    const auto kind = top.engine().config().num_labels > 0 ? EncoderWork::Kind::kClassify : EncoderWork::Kind::kEmbed;
    Result<std::vector<std::vector<float>>> rows =
        RunEncoderInputs(top, kind, {engine::EncodedInput{enc.ids, enc.type_ids}}, kStartupTimeout);
    if (!rows.ok()) return rows.status().WithContext("model '" + config_.name + "': canary on the top variant");
    canary_reference_row_ = std::move(rows->front());
  }
  CheckCanaries();
  return Status::Ok();
}

void VariantGroup::CheckCanaries() {
  const qos::RollbackOptions& rb = config_.qos.rollback;
  for (size_t i = 1; i < variants_.size(); ++i) {
    const int index = static_cast<int>(i);
    if (!controller_->healthy(index)) continue;
    ServedModel& m = *variants_[i];
    double score = 0;
    double threshold = 0;
    Status error;
    if (decoder_) {
      Result<double> agreement =
          qos::TeacherForcedAgreement(*m.decoder(), canary_prompt_, canary_reference_tokens_, kCanaryTimeout);
      if (agreement.ok()) score = *agreement;
      error = agreement.status();
      threshold = rb.canary_min_agreement;
    } else {
      const auto kind = m.engine().config().num_labels > 0 ? EncoderWork::Kind::kClassify : EncoderWork::Kind::kEmbed;
      const std::vector<int32_t> types(canary_prompt_.size(), 0);
      Result<std::vector<std::vector<float>>> rows =
          RunEncoderInputs(m, kind, {engine::EncodedInput{canary_prompt_, types}}, kCanaryTimeout);
      if (rows.ok()) score = qos::CosineSimilarity(canary_reference_row_, rows->front());
      error = rows.status();
      threshold = rb.canary_min_cosine;
    }
    const std::string what = decoder_ ? "teacher-forced agreement" : "cosine similarity";
    CanaryResult result;
    result.checked = error.ok();
    result.unix_ms = qos::Now::Current().unix_ms;
    result.score = score;
    if (!error.ok()) {
      // A canary that could not run (a timeout under load) says nothing about divergence;
      // engine errors it met are counted in the error window like any request's.
      result.detail = "not run: " + error.message();
      FERRY_LOG_WARN("model '{}' variant '{}': canary not run: {}", config_.name, config_.variants[i].name,
                     error.message());
    } else {
      result.passed = score >= threshold;
      result.detail = what + " " + Fixed(score, 3) + (result.passed ? " >= " : " < ") + Fixed(threshold, 3) +
                      " with the top variant";
      if (result.passed) {
        FERRY_LOG_DEBUG("model '{}' variant '{}': canary passed ({})", config_.name, config_.variants[i].name,
                        result.detail);
      } else {
        Publish(controller_->MarkUnhealthy(index, "canary", "canary " + result.detail, qos::Now::Current()));
      }
    }
    std::lock_guard<std::mutex> lock(canary_mu_);
    canary_results_[i] = result;
  }
}

void VariantGroup::StartThreads() {
  ticker_ = std::thread([this] { TickLoop(); });
  const qos::RollbackOptions& rb = config_.qos.rollback;
  if (!rb.canary_prompt.empty() && rb.canary_interval_s > 0 && variants_.size() > 1) {
    canary_ = std::thread([this] { CanaryLoop(); });
  }
}

void VariantGroup::TickLoop() {
  NameThread("qos:" + config_.name);
  const auto tick = std::chrono::milliseconds(config_.qos.tick_ms);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, tick, [this] { return stop_; })) return;
    }
    const qos::Now now = qos::Now::Current();
    SampleLoad(now.steady);
    Publish(controller_->Tick(now));
    PublishGauges();
    MoveWaiting();
    ApplyPacing();
  }
}

std::vector<double> VariantGroup::TpotTargetsMs() const {
  std::vector<double> targets;
  if (config_.qos.slo.tpot_ms) targets.push_back(*config_.qos.slo.tpot_ms);
  for (const auto& [tier, priority] : server_.tiers) {
    const qos::TierRule rule = ResolveTierRule(server_, config_, tier);
    if (rule.slo.tpot_ms) targets.push_back(*rule.slo.tpot_ms);
  }
  return targets;
}

void VariantGroup::ApplyPacing() {
  if (!decoder_) return;  // encoder batches are formed per variant and start at once
  std::lock_guard<std::mutex> lock(pacing_mu_);
  const int active = controller_->active();
  std::vector<bool> steered(variants_.size(), false);
  steered[static_cast<size_t>(active)] = true;
  const std::map<std::string, int>& floors = controller_->options().floors;
  for (const auto& [tier, priority] : server_.tiers) {
    auto floor = floors.find(tier);
    if (floor != floors.end() && floor->second < active) continue;  // its floor, not the controller, decides
    if (const std::optional<int> to = controller_->Route(tier)) steered[static_cast<size_t>(*to)] = true;
  }
  const auto pace = std::chrono::microseconds(static_cast<int64_t>(inactive_step_ms_ * 1000 + 0.5));
  std::vector<qos::DecisionRecord> records;
  for (int i = 0; i < size(); ++i) {
    sched::ContinuousBatcher& b = *variant(i).decoder();
    const std::string& v = config_.variants[static_cast<size_t>(i)].name;
    const auto want = steered[static_cast<size_t>(i)] ? std::chrono::microseconds(0) : pace;
    if (want != b.step_pacing()) {
      b.SetStepPacing(want);
      const std::string reason =
          want.count() > 0
              ? "steps at most every " + Fixed(inactive_step_ms_, 1) + " ms while only floor traffic and draining "
                "sequences run there ('" + controller_->variant_name(active) + "' is active)"
              : "unpaced: new requests are steered here";
      records.push_back(controller_->Note("pacing", i, want.count() > 0 ? "paced" : "unpaced", reason,
                                          qos::Now::Current()));
    }
    qos_metrics_->step_pacing_ms.WithLabels({config_.name, v}).Set(static_cast<double>(want.count()) / 1000.0);
    const sched::BatcherSnapshot snap = b.Snapshot();
    const size_t k = static_cast<size_t>(i);
    if (snap.paced_waits > paced_waits_[k]) {
      qos_metrics_->paced_waits.WithLabels({config_.name, v}).Inc(static_cast<double>(snap.paced_waits - paced_waits_[k]));
      paced_waits_[k] = snap.paced_waits;
    }
    if (snap.paced_seconds > paced_seconds_[k]) {
      qos_metrics_->paced_seconds.WithLabels({config_.name, v}).Inc(snap.paced_seconds - paced_seconds_[k]);
      paced_seconds_[k] = snap.paced_seconds;
    }
  }
  Publish(records);
}

void VariantGroup::MoveWaiting() {
  if (!decoder_) return;  // encoder batches are formed per variant and start at once
  std::map<std::string, std::optional<int>> routes;
  for (const auto& [tier, rank] : server_.tiers) routes[tier] = controller_->Route(tier);
  if (routes == last_routes_) return;
  const bool first = last_routes_.empty();
  last_routes_ = routes;
  if (first) return;  // nothing was admitted under other routes yet
  const auto started = std::chrono::steady_clock::now();
  for (int from = 0; from < size(); ++from) {
    sched::ContinuousBatcher* source = variant(from).decoder();
    std::vector<sched::GenerationRequest> taken = source->TakeWaiting(
        [&](const sched::GenerationRequest& r) {
          auto it = routes.find(r.tier);
          if (it == routes.end() || !it->second || *it->second == from) return false;
          return variant(*it->second).decoder()->Validate(r).ok();  // e.g. a shorter max_seq_len
        },
        std::chrono::milliseconds(2000));
    for (sched::GenerationRequest& r : taken) {
      const int to = *routes.at(r.tier);
      const std::string& from_name = config_.variants[static_cast<size_t>(from)].name;
      const std::string& to_name = config_.variants[static_cast<size_t>(to)].name;
      sched::ContinuousBatcher& target = *variant(to).decoder();
      auto on_moved = r.on_moved;
      auto on_event = r.on_event;
      const std::string tier = r.tier;
      Result<uint64_t> h = target.SubmitMoved(r);
      if (!h.ok()) {
        // Only a batcher that is shutting down refuses (the request was validated there).
        sched::GenerationEvent ev;
        ev.finished = true;
        ev.finish_reason = sched::FinishReason::kAbort;
        ev.error = h.status();
        ev.failure_reason = "shutdown";
        if (on_event) on_event(ev);
        continue;
      }
      qos_metrics_->moved.WithLabels({config_.name, from_name, to_name, tier}).Inc();
      if (on_moved) on_moved(target, h.value(), to_name);
    }
    if (!taken.empty()) {
      FERRY_LOG_INFO("model '{}': moved {} waiting requests from variant '{}' in {:.1f} ms", config_.name,
                     taken.size(), config_.variants[static_cast<size_t>(from)].name,
                     std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
    }
  }
}

void VariantGroup::CanaryLoop() {
  NameThread("canary:" + config_.name);
  const auto interval =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(config_.qos.rollback.canary_interval_s));
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, interval, [this] { return stop_; })) return;
    }
    CheckCanaries();
  }
}

void VariantGroup::SampleLoad(qos::Clock::time_point now) {
  double running = 0, waiting = 0;
  int64_t used_blocks = 0, blocks = 0;
  for (size_t i = 0; i < variants_.size(); ++i) {
    ServedModel& m = *variants_[i];
    if (m.decoder() != nullptr) {
      const sched::BatcherSnapshot s = m.decoder()->Snapshot();
      const double kv = s.kv_blocks > 0 ? 1.0 - static_cast<double>(s.kv_free_blocks) / s.kv_blocks : 0.0;
      controller_->monitor().RecordLoad(static_cast<int>(i), s.running, s.waiting,
                                        static_cast<double>(s.waiting_tokens), kv, now);
      running += s.running;
      waiting += s.waiting;
      used_blocks += s.kv_blocks - s.kv_free_blocks;
      blocks += s.kv_blocks;
    } else {
      const sched::DynamicBatcherStats s = m.encoder()->Stats();
      controller_->monitor().RecordLoad(static_cast<int>(i), 0, s.queued_total, 0, 0, now);
      waiting += s.queued_total;
    }
  }
  // The model's gauges cover the whole group.
  if (decoder_) model_metrics_.num_requests_running->Set(running);
  model_metrics_.num_requests_waiting->Set(waiting);
  if (decoder_) model_metrics_.kv_cache_usage_perc->Set(blocks > 0 ? static_cast<double>(used_blocks) / blocks : 0.0);
}

void VariantGroup::OnEncoderItem(int variant, const EncoderItemReport& r) {
  const qos::Clock::time_point now = qos::Clock::now();
  qos::LoadMonitor& m = controller_->monitor();
  m.RecordQueueWait(r.tier, r.queue_seconds, now);
  m.RecordTtft(r.tier, r.latency_seconds, now);  // an encoder's result is its first and only output
  m.RecordOutcome(variant, r.engine_error, now);
  const std::string& v = config_.variants[static_cast<size_t>(variant)].name;
  if (r.engine_error) qos_metrics_->engine_errors.WithLabels({config_.name, v}).Inc();
  if (r.tier != qos::kCanaryTier) qos_metrics_->prompt_tokens.WithLabels({config_.name, v}).Inc(static_cast<double>(r.tokens));
}

void VariantGroup::Publish(const std::vector<qos::DecisionRecord>& records) {
  for (const qos::DecisionRecord& r : records) {
    if (r.kind == "switch") {
      qos_metrics_->switches.WithLabels({config_.name, r.from, r.to, r.code}).Inc();
      FERRY_LOG_INFO("model '{}': {} -> {} ({}: {})", config_.name, r.from, r.to, r.code, r.reason);
    } else if (r.kind == "unhealthy") {
      FERRY_LOG_WARN("model '{}': variant '{}' marked unhealthy: {}", config_.name, r.from, r.reason);
    } else {
      FERRY_LOG_INFO("model '{}': {} {}: {}", config_.name, r.kind, r.code, r.reason);
    }
    if (sink_) sink_(r);
  }
}

void VariantGroup::PublishGauges() {
  const int active = controller_->active();
  for (int i = 0; i < size(); ++i) {
    const std::string& v = config_.variants[static_cast<size_t>(i)].name;
    qos_metrics_->active_variant.WithLabels({config_.name, v}).Set(i == active ? 1.0 : 0.0);
    qos_metrics_->healthy.WithLabels({config_.name, v}).Set(controller_->healthy(i) ? 1.0 : 0.0);
  }
  const qos::Signals s = controller_->last_signals();
  for (const qos::Pressure& p : s.pressures) qos_metrics_->pressure.WithLabels({config_.name, p.signal}).Set(p.value);
  qos_metrics_->pressure.WithLabels({config_.name, "max"}).Set(s.pressure);
}

ServedModel* VariantGroup::Admit(const std::string& tier) {
  const std::optional<int> v = controller_->Route(tier);
  if (!v) return nullptr;
  qos_metrics_->requests.WithLabels({config_.name, config_.variants[static_cast<size_t>(*v)].name, tier}).Inc();
  return variants_[static_cast<size_t>(*v)].get();
}

void VariantGroup::Stop(int64_t timeout_ms) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  if (canary_.joinable()) canary_.join();
  // Every variant drains at the same time, within the one budget.
  std::vector<std::future<void>> stops;
  for (auto& m : variants_) {
    ServedModel* model = m.get();
    stops.push_back(std::async(std::launch::async, [model, timeout_ms] { model->Stop(timeout_ms); }));
  }
  for (auto& f : stops) f.wait();
}

json VariantGroup::VariantsJson() const {
  json out = json::array();
  for (int i = 0; i < size(); ++i) {
    const ModelConfig& mc = config_.variants[static_cast<size_t>(i)].model;
    out.push_back({{"name", config_.variants[static_cast<size_t>(i)].name},
                   {"path", mc.path},
                   {"device", mc.device.ToString()},
                   {"healthy", controller_->healthy(i)},
                   {"active", i == controller_->active()}});
  }
  return out;
}

json VariantGroup::BatchersJson() const {
  json variants = json::array();
  for (int i = 0; i < size(); ++i) {
    const ServedModel& m = variant(i);
    const sched::PreloadTimings& t = m.timings();
    json v = {{"variant", m.variant()},
              {"preload_ms", {{"load", t.load_ms}, {"allocate", t.allocate_ms}, {"warmup", t.warmup_ms},
                              {"warmup_passes", t.warmup_passes}}}};
    if (m.decoder() != nullptr) {
      const sched::BatcherSnapshot s = m.decoder()->Snapshot();
      v["batcher"] = {{"running", s.running}, {"waiting", s.waiting}, {"waiting_tokens", s.waiting_tokens},
                      {"kv_free_blocks", s.kv_free_blocks}, {"kv_blocks", s.kv_blocks}, {"steps", s.steps},
                      {"preemptions", s.preemptions}, {"step_pacing_ms", static_cast<double>(s.step_pacing_us) / 1000.0},
                      {"paced_waits", s.paced_waits}};
    } else {
      const sched::DynamicBatcherStats s = m.encoder()->Stats();
      v["batcher"] = {{"queued", s.queued_total}, {"batches", s.batches_run}, {"items", s.items_run}};
    }
    variants.push_back(std::move(v));
  }
  return variants;
}

json VariantGroup::QosJson() const {
  json j = controller_->ToJson(qos::Now::Current());
  std::lock_guard<std::mutex> lock(canary_mu_);
  for (int i = 0; i < size(); ++i) {
    json& v = j["variants"][static_cast<size_t>(i)];
    const ModelConfig& mc = config_.variants[static_cast<size_t>(i)].model;
    v["path"] = mc.path;
    v["device"] = mc.device.ToString();
    if (decoder_) {
      const sched::BatcherSnapshot b = variant(i).decoder()->Snapshot();
      v["step_pacing_ms"] = static_cast<double>(b.step_pacing_us) / 1000.0;
      v["paced_waits"] = b.paced_waits;
      v["paced_seconds"] = b.paced_seconds;
      v["step_turns"] = static_cast<bool>(step_turns_[static_cast<size_t>(i)]);
      v["turn_waits"] = b.turn_waits;
      v["turn_wait_seconds"] = b.turn_wait_seconds;
      v["share_cores"] = static_cast<bool>(share_cores_[static_cast<size_t>(i)]);
      v["compute_threads"] = b.compute_threads;
    }
    const CanaryResult& c = canary_results_[static_cast<size_t>(i)];
    if (c.unix_ms != 0) {
      v["canary"] = {{"checked", c.checked}, {"passed", c.passed}, {"score", c.score}, {"unix_ms", c.unix_ms},
                     {"detail", c.detail}};
    }
  }
  j["kind"] = decoder_ ? "decoder" : "encoder";
  if (decoder_) j["inactive_step_ms"] = inactive_step_ms_;
  return j;
}

Result<json> VariantGroup::Admin(const json& body) {
  if (!body.is_object()) return InvalidArgument("the body must be a JSON object with \"pin\" and/or \"clear\"");
  for (const auto& [key, value] : body.items()) {
    if (key != "pin" && key != "clear") {
      return InvalidArgument("unrecognized field '" + key + "'; use \"pin\" (a variant or \"auto\") and \"clear\" "
                             "(a variant or \"all\")");
    }
    if (!value.is_string()) return InvalidArgument("\"" + key + "\" must be a string");
  }
  if (!body.contains("pin") && !body.contains("clear")) {
    return InvalidArgument("give \"pin\" (a variant or \"auto\") and/or \"clear\" (a variant or \"all\")");
  }
  const qos::Now now = qos::Now::Current();
  if (body.contains("clear")) {
    Result<std::vector<qos::DecisionRecord>> r = controller_->Clear(body["clear"].get<std::string>(), now);
    if (!r.ok()) return InvalidArgument(r.status().message());
    Publish(*r);
  }
  if (body.contains("pin")) {
    Result<std::vector<qos::DecisionRecord>> r = controller_->Pin(body["pin"].get<std::string>(), now);
    if (!r.ok()) {
      if (r.status().code() == StatusCode::kNotFound) return InvalidArgument(r.status().message());
      return r.status();
    }
    Publish(*r);
  }
  PublishGauges();
  ApplyPacing();
  return QosJson();
}

}  // namespace ferry::serve
