#include "batch/types.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "core/json_limits.h"

namespace ferry::batch {

using json = nlohmann::json;

namespace {

json TimeOrNull(int64_t t) { return t > 0 ? json(t) : json(nullptr); }
json IdOrNull(const std::string& id) { return id.empty() ? json(nullptr) : json(id); }

}  // namespace

json FileInfo::ToJson() const {
  return {{"id", id},           {"object", "file"},  {"bytes", bytes},        {"created_at", created_at},
          {"filename", filename}, {"purpose", purpose}, {"status", "processed"}, {"status_details", nullptr},
          {"expires_at", TimeOrNull(expires_at)}};
}

bool IsTerminal(const std::string& status) {
  return status == kFailed || status == kCompleted || status == kExpired || status == kCancelled;
}

json BatchInfo::ToJson() const {
  json j = {{"id", id},
            {"object", "batch"},
            {"endpoint", endpoint},
            {"errors", errors.is_null() ? json(nullptr) : errors},
            {"input_file_id", input_file_id},
            {"completion_window", completion_window},
            {"status", status},
            {"output_file_id", IdOrNull(output_file_id)},
            {"error_file_id", IdOrNull(error_file_id)},
            {"created_at", created_at},
            {"in_progress_at", TimeOrNull(in_progress_at)},
            {"expires_at", TimeOrNull(expires_at)},
            {"finalizing_at", TimeOrNull(finalizing_at)},
            {"completed_at", TimeOrNull(completed_at)},
            {"failed_at", TimeOrNull(failed_at)},
            {"expired_at", TimeOrNull(expired_at)},
            {"cancelling_at", TimeOrNull(cancelling_at)},
            {"cancelled_at", TimeOrNull(cancelled_at)},
            {"request_counts", {{"total", total}, {"completed", completed}, {"failed", failed}}},
            {"metadata", metadata.is_null() ? json(nullptr) : metadata}};
  j["ferry"] = {{"cancelled_requests", cancelled}};
  return j;
}

json BatchInfo::ToRecord() const {
  return {{"id", id},
          {"tenant", tenant},
          {"endpoint", endpoint},
          {"input_file_id", input_file_id},
          {"completion_window", completion_window},
          {"status", status},
          {"metadata", metadata},
          {"errors", errors},
          {"output_file_id", output_file_id},
          {"error_file_id", error_file_id},
          {"t", {created_at, in_progress_at, expires_at, finalizing_at, completed_at, failed_at, expired_at,
                 cancelling_at, cancelled_at}},
          {"n", {total, completed, failed, cancelled}},
          {"output_expires_after_s", output_expires_after_s}};
}

BatchInfo BatchInfo::FromRecord(const json& j) {
  BatchInfo b;
  b.id = j.value("id", "");
  b.tenant = j.value("tenant", "");
  b.endpoint = j.value("endpoint", "");
  b.input_file_id = j.value("input_file_id", "");
  b.completion_window = j.value("completion_window", "24h");
  b.status = j.value("status", "");
  if (j.contains("metadata")) b.metadata = j["metadata"];
  if (j.contains("errors")) b.errors = j["errors"];
  b.output_file_id = j.value("output_file_id", "");
  b.error_file_id = j.value("error_file_id", "");
  const json t = j.value("t", json::array());
  int64_t* times[] = {&b.created_at,   &b.in_progress_at, &b.expires_at,    &b.finalizing_at, &b.completed_at,
                      &b.failed_at,    &b.expired_at,     &b.cancelling_at, &b.cancelled_at};
  for (size_t i = 0; i < std::size(times) && i < t.size(); ++i) *times[i] = t[i].get<int64_t>();
  const json n = j.value("n", json::array());
  int64_t* counts[] = {&b.total, &b.completed, &b.failed, &b.cancelled};
  for (size_t i = 0; i < std::size(counts) && i < n.size(); ++i) *counts[i] = n[i].get<int64_t>();
  b.output_expires_after_s = j.value("output_expires_after_s", int64_t{0});
  return b;
}

json Entry::ToRecord() const {
  return {{"b", batch_id}, {"i", index}, {"c", custom_id}, {"u", url}, {"body", body}};
}

Result<Entry> Entry::FromRecord(const std::string& text) {
  Result<json> parsed = ParseUntrustedJson(text);
  if (!parsed.ok()) return DataLoss("a queued batch entry is not JSON: " + parsed.status().message());
  const json& j = *parsed;
  if (!j.is_object() || !j.contains("b") || !j.contains("i") || !j["i"].is_number_integer()) {
    return DataLoss("a queued batch entry lacks its batch or index");
  }
  Entry e;
  e.batch_id = j["b"].get<std::string>();
  e.index = j["i"].get<int64_t>();
  e.custom_id = j.value("c", "");
  e.url = j.value("u", "");
  e.body = j.value("body", "");
  return e;
}

std::string NewId(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s%016llx%08llx", prefix, static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return buf;
}

int64_t NowUnix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

BatchOutputs AssembleOutputs(const std::vector<std::pair<int64_t, EntryResult>>& results) {
  std::vector<const std::pair<int64_t, EntryResult>*> order;
  order.reserve(results.size());
  for (const auto& r : results) order.push_back(&r);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
  BatchOutputs out;
  for (const auto* r : order) {
    std::string& dst = r->second.outcome == Outcome::kSucceeded ? out.output : out.errors;
    dst += r->second.line;
    dst += '\n';
  }
  return out;
}

std::string FinalStatus(const BatchInfo& b, int64_t now) {
  if (b.status == kCancelling || b.status == kCancelled) return kCancelled;
  if (b.cancelled > 0 && b.expires_at > 0 && now >= b.expires_at) return kExpired;
  return kCompleted;
}

void SetStatus(BatchInfo& b, const std::string& status, int64_t now) {
  b.status = status;
  if (status == kInProgress) b.in_progress_at = now;
  if (status == kFinalizing) b.finalizing_at = now;
  if (status == kCompleted) b.completed_at = now;
  if (status == kFailed) b.failed_at = now;
  if (status == kExpired) b.expired_at = now;
  if (status == kCancelling) b.cancelling_at = now;
  if (status == kCancelled) b.cancelled_at = now;
}

}  // namespace ferry::batch

namespace ferry::batch {
std::string SkippedLine(const Entry& entry, const std::string& why) {
  const bool expired = why == kExpired;
  nlohmann::json j = {{"id", NewId("batch_req_")},
                      {"custom_id", entry.custom_id},
                      {"response", nullptr},
                      {"error",
                       {{"code", expired ? "batch_expired" : "batch_cancelled"},
                        {"message", expired ? "the batch expired before this request ran"
                                            : "the batch was cancelled before this request ran"}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ExhaustedLine(const Entry& entry, int max_attempts) {
  nlohmann::json j = {{"id", NewId("batch_req_")},
                      {"custom_id", entry.custom_id},
                      {"response", nullptr},
                      {"error",
                       {{"code", "max_attempts_exceeded"},
                        {"message", "the request was started " + std::to_string(max_attempts) +
                                        " times and its server stopped each time before it finished (queue.max_attempts)"}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}
}  // namespace ferry::batch
