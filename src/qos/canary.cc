#include "qos/canary.h"

#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>

namespace ferry::qos {

namespace {

// One request's events merged, and whether it has finished.
struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  sched::GenerationEvent merged;
};

Result<sched::GenerationEvent> RunAndWait(sched::ContinuousBatcher& batcher, sched::GenerationRequest request,
                                          std::chrono::milliseconds timeout) {
  auto c = std::make_shared<Collected>();
  request.tier = kCanaryTier;
  request.on_event = [c](sched::GenerationEvent& ev) {
    std::lock_guard<std::mutex> lock(c->mu);
    for (auto& t : ev.tokens) c->merged.tokens.push_back(std::move(t));
    for (auto& t : ev.prompt_tokens) c->merged.prompt_tokens.push_back(std::move(t));
    if (ev.finished) {
      c->merged.finished = true;
      c->merged.finish_reason = ev.finish_reason;
      c->merged.error = ev.error;
      c->merged.failure_reason = ev.failure_reason;
      c->done = true;
      c->cv.notify_all();
    }
    return sched::EventAction::kContinue;
  };
  FERRY_ASSIGN_OR_RETURN(const uint64_t handle, batcher.Submit(std::move(request)));
  std::unique_lock<std::mutex> lock(c->mu);
  if (!c->cv.wait_for(lock, timeout, [&c] { return c->done; })) {
    lock.unlock();
    batcher.Cancel(handle);
    return DeadlineExceeded("the canary did not finish within " + std::to_string(timeout.count()) + " ms");
  }
  if (!c->merged.error.ok()) return c->merged.error;
  if (c->merged.finish_reason == sched::FinishReason::kAbort) return Cancelled("the canary was cancelled");
  return std::move(c->merged);
}

}  // namespace

double TokenAgreement(std::span<const int32_t> reference, std::span<const int32_t> predicted) {
  const size_t n = std::min(reference.size(), predicted.size());
  if (n == 0) return 0.0;
  size_t same = 0;
  for (size_t i = 0; i < n; ++i) same += reference[i] == predicted[i];
  return static_cast<double>(same) / static_cast<double>(n);
}

double CosineSimilarity(std::span<const float> a, std::span<const float> b) {
  if (a.empty() || a.size() != b.size()) return 0.0;
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  if (!(na > 0) || !(nb > 0)) return 0.0;
  return dot / std::sqrt(na * nb);
}

Result<std::vector<int32_t>> GreedyReference(sched::ContinuousBatcher& batcher, const std::vector<int32_t>& prompt,
                                             int tokens, std::chrono::milliseconds timeout) {
  if (prompt.empty()) return InvalidArgument("the canary prompt is empty");
  if (tokens < 1) return InvalidArgument("the canary needs at least one token");
  FERRY_ASSIGN_OR_RETURN(sched::GenerationEvent ev,
                         RunAndWait(batcher, sched::FixedLengthGreedy("qos-canary", prompt, tokens), timeout));
  std::vector<int32_t> out;
  for (const auto& t : ev.tokens) out.push_back(t.token);
  if (static_cast<int>(out.size()) != tokens) {
    return Internal("the canary generated " + std::to_string(out.size()) + " tokens, not " + std::to_string(tokens));
  }
  return out;
}

Result<double> TeacherForcedAgreement(sched::ContinuousBatcher& batcher, const std::vector<int32_t>& prompt,
                                      const std::vector<int32_t>& reference, std::chrono::milliseconds timeout) {
  if (prompt.empty() || reference.empty()) return InvalidArgument("the canary needs a prompt and a reference");
  // prompt + reference minus its last token: row q predicts token q + 1, so the prompt
  // log-probabilities' top-1 at the continuation positions are the variant's predictions of
  // reference[0 .. n-2], and the token it samples is its prediction of reference[n-1].
  std::vector<int32_t> fed = prompt;
  fed.insert(fed.end(), reference.begin(), reference.end() - 1);
  sched::GenerationRequest r = sched::FixedLengthGreedy("qos-canary", fed, 1);
  r.prompt_logprobs = true;
  r.logprobs = 1;
  FERRY_ASSIGN_OR_RETURN(sched::GenerationEvent ev, RunAndWait(batcher, std::move(r), timeout));
  if (ev.prompt_tokens.size() != fed.size() || ev.tokens.size() != 1) {
    return Internal("the canary's scoring pass returned " + std::to_string(ev.prompt_tokens.size()) +
                    " prompt positions for " + std::to_string(fed.size()));
  }
  std::vector<int32_t> predicted;
  for (size_t q = prompt.size(); q < fed.size(); ++q) {
    const auto& top = ev.prompt_tokens[q].top_logprobs;
    predicted.push_back(top.empty() ? -1 : top.front().first);
  }
  predicted.push_back(ev.tokens.front().token);
  return TokenAgreement(reference, predicted);
}

Result<double> ProbeSeconds(sched::ContinuousBatcher& batcher, int vocab, int sequences, int prompt_len, int tokens,
                            std::chrono::milliseconds timeout) {
  if (vocab < 1 || sequences < 1 || prompt_len < 1 || tokens < 1) return InvalidArgument("bad probe size");
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    int remaining = 0;
    Status error;
  };
  auto shared = std::make_shared<Shared>();
  shared->remaining = sequences;
  std::vector<uint64_t> handles;
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < sequences; ++s) {
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    for (int i = 0; i < prompt_len; ++i) prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + s * 104729 + 13) % vocab);
    sched::GenerationRequest r = sched::FixedLengthGreedy("qos-probe", std::move(prompt), tokens);
    r.tier = kCanaryTier;
    r.on_event = [shared](sched::GenerationEvent& ev) {
      if (!ev.finished) return sched::EventAction::kContinue;
      std::lock_guard<std::mutex> lock(shared->mu);
      if (!ev.error.ok() && shared->error.ok()) shared->error = ev.error;
      if (--shared->remaining == 0) shared->cv.notify_all();
      return sched::EventAction::kContinue;
    };
    Result<uint64_t> h = batcher.Submit(std::move(r));
    if (!h.ok()) {
      for (uint64_t done : handles) batcher.Cancel(done);
      return h.status();
    }
    handles.push_back(*h);
  }
  std::unique_lock<std::mutex> lock(shared->mu);
  if (!shared->cv.wait_for(lock, timeout, [&shared] { return shared->remaining == 0; })) {
    lock.unlock();
    for (uint64_t h : handles) batcher.Cancel(h);
    return DeadlineExceeded("the probe did not finish within " + std::to_string(timeout.count()) + " ms");
  }
  if (!shared->error.ok()) return shared->error;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ferry::qos
