// POST /v1/chat/completions (OpenAI wire format, with vLLM's extras) on a decoder model: the
// conversation rendered by the model's chat template (chat_prompt.h), generated through the
// shared generation job, returned as a message (content and tool calls) or streamed as
// deltas (role, content, tool-call pieces, finish reason), with chat logprobs.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "serve/generation_job.h"
#include "serve/model_repository.h"
#include "serve/request_context.h"

namespace ferry::serve {

// `raw_body` is the request's text: messages and tools are read from it with their keys in
// order. `body` is the same, parsed.
// The chat wire format (exposed for tests): `choices` choices, chat logprobs when
// `logprobs`, tool calls parsed with `parser` (kNone: all content), at most one call unless
// `parallel_tool_calls`, `echo` repeated before the content.
std::unique_ptr<GenerationFormat> MakeChatFormat(int choices, bool logprobs, ToolCallParser parser,
                                                 bool parallel_tool_calls, std::string echo, bool return_token_ids);

void HandleChatCompletion(std::shared_ptr<RequestContext> ctx, ServedModel& model, const std::string& raw_body,
                          const nlohmann::json& body, const RouteEnv& env);

}  // namespace ferry::serve
