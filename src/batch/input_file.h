// A batch input file (JSONL of {custom_id, method, url, body}), validated line by line.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "batch/types.h"

namespace ferry::batch {

// The routes a batch may run (OpenAI's endpoint field).
bool IsBatchEndpoint(std::string_view url);
// "/v1/completions, /v1/chat/completions, /v1/embeddings, /v1/classify"
std::string BatchEndpointList();

struct LineError {
  int64_t line = 0;  // from 1
  std::string code;  // invalid_json, missing_custom_id, duplicate_custom_id, invalid_method, invalid_url, ...
  std::string message;
  std::string param;  // the offending field
  nlohmann::json ToJson() const;
};

struct InputCheck {
  std::vector<Entry> entries;    // in file order; index = the entry's place among requests
  std::vector<LineError> errors; // at most max_errors of them
  bool ok() const { return errors.empty(); }
  // "line 3: ...; line 9: ..." (the first few).
  std::string Summary(size_t max_lines = 5) const;
};

// Every non-blank line must be a JSON object with a custom_id (a non-empty string of at
// most 512 bytes, unique in the file), method POST, a url among the batch endpoints (and
// equal to `endpoint` when one is given), and a body object with a string model and no
// stream: true. At most `max_requests` requests. Blank lines are skipped (their numbers
// still count). `check_model`, when given, says whether a body's model is served
// (false: the line fails with model_not_found).
InputCheck CheckInputFile(std::string_view content, int64_t max_requests, std::string_view endpoint = {},
                          size_t max_errors = 100,
                          const std::function<bool(const std::string&)>& check_model = {});

}  // namespace ferry::batch
