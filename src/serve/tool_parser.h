// Turns a model's output into OpenAI tool calls, incrementally, for the three formats
// models use: Llama 3.x JSON ({"name": ..., "parameters": {...}}, optionally after
// <|python_tag|>, several separated by ';'), Hermes / Qwen 2.5 (<tool_call>{"name": ...,
// "arguments": {...}}</tool_call>, repeated) and Mistral ([TOOL_CALLS][{"name": ...,
// "arguments": {...}}, ...]). Text around the calls is content. While streaming, a call's
// name is released as soon as it is complete and its arguments as their characters arrive,
// which is how OpenAI streams tool-call deltas; text that could still turn out to start a
// call is held back until it cannot.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "serve/config.h"

namespace ferry::serve {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text, as the model wrote it
};

// What became final since the last call.
struct ToolParseDelta {
  std::string content;
  struct Call {
    int index = 0;
    bool first = false;     // the call's first delta: carries id and name
    std::string id;
    std::string name;
    std::string arguments;  // more characters of the arguments
  };
  std::vector<Call> calls;
};

// Thread-compatible: one output stream.
class ToolCallStream {
 public:
  virtual ~ToolCallStream() = default;
  // Consumes the next piece of output text.
  virtual ToolParseDelta Feed(std::string_view text) = 0;
  // The output has ended: releases what was held back. A call cut off before its name is
  // content; one cut off in its arguments keeps what it has.
  virtual ToolParseDelta Finish() = 0;
  // Every call parsed so far, complete.
  const std::vector<ToolCall>& calls() const { return calls_; }

 protected:
  std::vector<ToolCall> calls_;
};

// kNone and kAuto give a stream that passes everything through as content.
std::unique_ptr<ToolCallStream> MakeToolCallStream(ToolCallParser kind);

// kAuto resolved from a chat template's text (kNone when it shows no tool-call format).
ToolCallParser DetectToolCallParser(std::string_view chat_template);

// "hermes", "llama3_json", "mistral", "none", "auto".
std::string_view ToolCallParserName(ToolCallParser kind);

}  // namespace ferry::serve
