// The load generator's rate schedules and tiers (see load_generator.h): parsing, arrival
// offsets per phase, tier assignment, and the per-tier, per-phase and per-variant report.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <random>

#include "tools/load_generator.h"

namespace ferry::tools {

namespace {

Result<double> ParseNumber(std::string_view text, std::string_view what) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || !std::isfinite(v)) {
    return InvalidArgument(fmt::format("{}: expected a number, got '{}'", what, text));
  }
  return v;
}

std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t at = text.find(sep, start);
    out.push_back(text.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

}  // namespace

Result<std::vector<RatePhase>> ParseRateSchedule(std::string_view text) {
  std::vector<RatePhase> phases;
  for (std::string_view part : Split(text, ',')) {
    const std::vector<std::string_view> fields = Split(part, ':');
    if (fields.size() != 2) {
      return InvalidArgument(fmt::format("--rate-schedule: '{}' is not SECONDS:RATE (e.g. 60:8,60:24,60:8)", part));
    }
    FERRY_ASSIGN_OR_RETURN(const double seconds, ParseNumber(fields[0], "--rate-schedule seconds"));
    FERRY_ASSIGN_OR_RETURN(const double rate, ParseNumber(fields[1], "--rate-schedule rate"));
    if (!(seconds > 0)) return InvalidArgument(fmt::format("--rate-schedule: phase '{}' must last > 0 s", part));
    if (rate < 0) return InvalidArgument(fmt::format("--rate-schedule: phase '{}' has a negative rate", part));
    phases.push_back(RatePhase{seconds, rate});
  }
  return phases;
}

Result<LoadTier> ParseLoadTier(std::string_view text) {
  // The key may itself hold ':' characters: only the first two separate fields.
  const size_t a = text.find(':');
  if (a == std::string_view::npos || a == 0) {
    return InvalidArgument(fmt::format("--tier: '{}' is not NAME:SHARE[:API_KEY]", text));
  }
  LoadTier t;
  t.name = std::string(text.substr(0, a));
  const size_t b = text.find(':', a + 1);
  const std::string_view share = text.substr(a + 1, b == std::string_view::npos ? std::string_view::npos : b - a - 1);
  FERRY_ASSIGN_OR_RETURN(t.share, ParseNumber(share, "--tier share"));
  if (!(t.share > 0)) return InvalidArgument(fmt::format("--tier {}: the share must be > 0", t.name));
  if (b != std::string_view::npos) t.api_key = std::string(text.substr(b + 1));
  return t;
}

Status ApplyTierSlo(std::vector<LoadTier>& tiers, std::string_view text) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    return InvalidArgument(fmt::format("--tier-slo: '{}' is not NAME:ttft=MS,tpot=MS,e2e=MS", text));
  }
  const std::string_view name = text.substr(0, colon);
  auto it = std::find_if(tiers.begin(), tiers.end(), [&](const LoadTier& t) { return t.name == name; });
  if (it == tiers.end()) return InvalidArgument(fmt::format("--tier-slo: no --tier named '{}'", name));
  for (std::string_view kv : Split(text.substr(colon + 1), ',')) {
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) return InvalidArgument(fmt::format("--tier-slo: '{}' is not KEY=MS", kv));
    const std::string_view key = kv.substr(0, eq);
    FERRY_ASSIGN_OR_RETURN(const double ms, ParseNumber(kv.substr(eq + 1), "--tier-slo"));
    if (!(ms > 0)) return InvalidArgument(fmt::format("--tier-slo: {} must be > 0", key));
    if (key == "ttft") {
      it->slo.ttft_ms = ms;
    } else if (key == "tpot") {
      it->slo.tpot_ms = ms;
    } else if (key == "e2e") {
      it->slo.e2e_ms = ms;
    } else {
      return InvalidArgument(fmt::format("--tier-slo: unknown target '{}' (ttft, tpot, e2e)", key));
    }
  }
  return Status::Ok();
}

std::vector<double> ScheduleOffsets(const std::vector<RatePhase>& schedule, double burstiness, uint64_t seed,
                                    std::vector<int>* phases) {
  std::vector<double> offsets;
  if (phases != nullptr) phases->clear();
  std::mt19937_64 rng(seed);
  double start = 0;
  for (size_t p = 0; p < schedule.size(); ++p) {
    const RatePhase& ph = schedule[p];
    const double end = start + ph.duration_s;
    if (ph.rate > 0 && std::isfinite(ph.rate)) {
      std::gamma_distribution<double> gap(burstiness, 1.0 / (ph.rate * burstiness));
      // The first arrival of a phase comes one gap after its start, as a Poisson process
      // observed from the boundary would (memoryless for burstiness 1).
      for (double t = start + gap(rng); t < end; t += gap(rng)) {
        offsets.push_back(t);
        if (phases != nullptr) phases->push_back(static_cast<int>(p));
      }
    }
    start = end;
  }
  return offsets;
}

std::vector<int> AssignTiers(int n, const std::vector<LoadTier>& tiers, uint64_t seed) {
  std::vector<int> out(static_cast<size_t>(std::max(n, 0)), 0);
  if (tiers.size() <= 1) return out;
  std::vector<double> weights;
  for (const LoadTier& t : tiers) weights.push_back(t.share);
  std::mt19937_64 rng(seed ^ 0x7469657273ull);
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  for (int& t : out) t = pick(rng);
  return out;
}

std::vector<TierReport> SummarizeTiers(const LoadOptions& o, const std::vector<RequestRecord>& records,
                                       double duration_s) {
  std::vector<LoadTier> tiers = o.tiers;
  if (tiers.empty()) tiers.push_back(LoadTier{"", 1.0, "", {}});
  std::vector<double> phase_start;
  double t = 0;
  for (const RatePhase& p : o.rate_schedule) {
    phase_start.push_back(t);
    t += p.duration_s;
  }
  std::vector<TierReport> out;
  for (const LoadTier& lt : tiers) {
    TierReport tr;
    tr.tier = lt.name;
    tr.slo.ttft_ms = lt.slo.ttft_ms ? lt.slo.ttft_ms : o.slo.ttft_ms;
    tr.slo.tpot_ms = lt.slo.tpot_ms ? lt.slo.tpot_ms : o.slo.tpot_ms;
    tr.slo.e2e_ms = lt.slo.e2e_ms ? lt.slo.e2e_ms : o.slo.e2e_ms;
    std::vector<RequestRecord> mine;
    for (const RequestRecord& r : records) {
      if (o.tiers.empty() || r.tier == lt.name) mine.push_back(r);
    }
    tr.summary = SummarizeRun(mine, duration_s, tr.slo);
    const int good = static_cast<int>(std::count_if(mine.begin(), mine.end(),
                                                    [&](const RequestRecord& r) { return MeetsSlo(r, tr.slo); }));
    tr.summary.good_requests = good;
    tr.slo_attainment = mine.empty() ? 0.0 : static_cast<double>(good) / static_cast<double>(mine.size());
    int64_t tokens = 0;
    for (const RequestRecord& r : mine) {
      if (!r.success) continue;
      TierReport::VariantShare& v = tr.variants[r.variant];
      v.requests += 1;
      v.output_tokens += r.output_tokens;
      tokens += r.output_tokens;
    }
    for (auto& [name, v] : tr.variants) {
      v.token_share = tokens > 0 ? static_cast<double>(v.output_tokens) / static_cast<double>(tokens) : 0.0;
    }
    for (size_t p = 0; p < o.rate_schedule.size(); ++p) {
      TierReport::Phase ph;
      ph.index = static_cast<int>(p);
      ph.start_s = phase_start[p];
      ph.duration_s = o.rate_schedule[p].duration_s;
      ph.rate = o.rate_schedule[p].rate;
      std::vector<double> ttft;
      for (const RequestRecord& r : mine) {
        if (r.phase != static_cast<int>(p)) continue;
        ++ph.requests;
        if (r.success) {
          ++ph.completed;
          if (r.ttft_ms) ttft.push_back(*r.ttft_ms);
        }
        if (MeetsSlo(r, tr.slo)) ++ph.good;
      }
      ph.slo_attainment = ph.requests > 0 ? static_cast<double>(ph.good) / ph.requests : 0.0;
      ph.goodput = ph.duration_s > 0 ? ph.good / ph.duration_s : 0.0;
      ph.ttft_ms = Summarize(std::move(ttft));
      tr.phases.push_back(ph);
    }
    out.push_back(std::move(tr));
  }
  return out;
}

}  // namespace ferry::tools
