// Hugging Face post-processors: add the model's special tokens around one or two encoded
// sequences and assign token type ids.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_util.h"

namespace ferry::tokenizer {

struct EncodedSegment {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;
};

// Thread-safe: immutable after construction.
class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // On input one segment (single) or two (pair) whose type ids are 0 and 1. Processors that
  // add special tokens merge the segments into one; the caller concatenates what is left.
  virtual void Process(std::vector<EncodedSegment>* segments) const = 0;

  // HF's trim_offsets (ByteLevel, RobertaProcessing): offsets of tokens that begin or end
  // with spaces leave the spaces out. Absent when the processor does not trim; otherwise
  // its add_prefix_space, which keeps the one space it may have added to the first token.
  virtual std::optional<bool> TrimsOffsets() const { return std::nullopt; }
};

// Builds from a tokenizer.json "post_processor" object. A null JSON value yields nullptr.
Result<std::unique_ptr<PostProcessor>> MakePostProcessor(const Json& config);

// The template transformers builds from add_bos_token / add_eos_token:
// single "[bos] $A [eos]", pair "[bos] $A [eos] [bos] $B:1 [eos]:1".
std::unique_ptr<PostProcessor> MakeBosEosProcessor(std::optional<int32_t> bos,
                                                   std::optional<int32_t> eos);

}  // namespace ferry::tokenizer
