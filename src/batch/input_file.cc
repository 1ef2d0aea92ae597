#include "batch/input_file.h"

#include <unordered_set>

#include "core/json_limits.h"

namespace ferry::batch {

using json = nlohmann::json;

namespace {

constexpr const char* kEndpoints[] = {"/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/classify"};
constexpr size_t kMaxCustomIdBytes = 512;

bool Blank(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t' && c != '\r') return false;
  }
  return true;
}

}  // namespace

bool IsBatchEndpoint(std::string_view url) {
  for (const char* e : kEndpoints) {
    if (url == e) return true;
  }
  return false;
}

std::string BatchEndpointList() {
  std::string out;
  for (const char* e : kEndpoints) out += (out.empty() ? "" : ", ") + std::string(e);
  return out;
}

json LineError::ToJson() const {
  return {{"code", code}, {"message", message}, {"param", param.empty() ? json(nullptr) : json(param)}, {"line", line}};
}

std::string InputCheck::Summary(size_t max_lines) const {
  std::string out;
  for (size_t i = 0; i < errors.size() && i < max_lines; ++i) {
    out += (i ? "; " : "") + std::string("line ") + std::to_string(errors[i].line) + ": " + errors[i].message;
  }
  if (errors.size() > max_lines) out += "; and " + std::to_string(errors.size() - max_lines) + " more";
  return out;
}

InputCheck CheckInputFile(std::string_view content, int64_t max_requests, std::string_view endpoint,
                          size_t max_errors, const std::function<bool(const std::string&)>& check_model) {
  InputCheck out;
  std::unordered_set<std::string> ids;
  int64_t line_no = 0;
  size_t pos = 0;
  auto fail = [&](std::string code, std::string message, std::string param) {
    if (out.errors.size() < max_errors) out.errors.push_back({line_no, std::move(code), std::move(message), std::move(param)});
  };
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    const std::string_view line = content.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (Blank(line)) continue;
    if (static_cast<int64_t>(out.entries.size()) >= max_requests) {
      fail("too_many_requests", "the file has more than " + std::to_string(max_requests) + " requests, the limit", "");
      break;
    }
    Result<json> parsed = ParseUntrustedJson(line);
    if (!parsed.ok() || !parsed->is_object()) {
      fail("invalid_json", parsed.ok() ? "not a JSON object" : "not valid JSON: " + parsed.status().message(), "");
      continue;
    }
    const json& j = *parsed;
    const auto str = [&](const char* key) -> const json* {
      auto it = j.find(key);
      return it != j.end() && it->is_string() ? &*it : nullptr;
    };
    const json* custom_id = str("custom_id");
    if (custom_id == nullptr || custom_id->get_ref<const std::string&>().empty()) {
      fail("missing_custom_id", "custom_id: a non-empty string is required", "custom_id");
      continue;
    }
    const std::string& cid = custom_id->get_ref<const std::string&>();
    if (cid.size() > kMaxCustomIdBytes) {
      fail("invalid_custom_id", "custom_id: at most 512 bytes", "custom_id");
      continue;
    }
    const json* method = str("method");
    if (method == nullptr || *method != "POST") {
      fail("invalid_method", "method: must be \"POST\"", "method");
      continue;
    }
    const json* url = str("url");
    if (url == nullptr || !IsBatchEndpoint(url->get_ref<const std::string&>())) {
      fail("invalid_url", "url: must be one of " + BatchEndpointList(), "url");
      continue;
    }
    if (!endpoint.empty() && url->get_ref<const std::string&>() != endpoint) {
      fail("mismatched_endpoint", "url: " + url->get<std::string>() + " differs from the batch's endpoint " + std::string(endpoint), "url");
      continue;
    }
    auto body = j.find("body");
    if (body == j.end() || !body->is_object()) {
      fail("invalid_body", "body: a JSON object is required", "body");
      continue;
    }
    auto model = body->find("model");
    if (model == body->end() || !model->is_string()) {
      fail("missing_model", "body.model: a string is required", "body.model");
      continue;
    }
    if (check_model && !check_model(model->get_ref<const std::string&>())) {
      fail("model_not_found", "body.model: " + JsonSnippet(*model) + " is not served here", "body.model");
      continue;
    }
    auto stream = body->find("stream");
    if (stream != body->end() && stream->is_boolean() && stream->get<bool>()) {
      fail("invalid_body", "body.stream: batch requests cannot stream", "body.stream");
      continue;
    }
    if (!ids.insert(cid).second) {
      fail("duplicate_custom_id", "custom_id " + JsonSnippet(json(cid)) + " appears more than once", "custom_id");
      continue;
    }
    Entry e;
    e.index = static_cast<int64_t>(out.entries.size());
    e.custom_id = cid;
    e.url = url->get<std::string>();
    e.body = body->dump(-1, ' ', false, json::error_handler_t::replace);
    out.entries.push_back(std::move(e));
  }
  if (out.entries.empty() && out.errors.empty()) {
    line_no = 0;
    fail("empty_file", "the file has no requests", "");
  }
  return out;
}

}  // namespace ferry::batch
