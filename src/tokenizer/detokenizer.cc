#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special,
                                               bool sequence_start)
    : tokenizer_(&tok), skip_special_(skip_special), first_(sequence_start) {}

std::string IncrementalDetokenizer::Add(int32_t id) {
  std::string out;
  Add(id, &out);
  return out;
}

void IncrementalDetokenizer::Add(int32_t id, std::string* out) {
  // Skipped special tokens are filtered before decoding, as HF does, so they neither emit
  // text nor count as the first token.
  if (skip_special_ && tokenizer_->IsSpecial(id)) return;
  tokenizer_->AppendTokenBytes(id, first_, &pending_);
  first_ = false;
  if (pending_.empty()) return;
  const size_t kept = AppendValidUtf8(pending_, /*keep_truncated_tail=*/true, out);
  pending_.erase(0, pending_.size() - kept);
}

std::string IncrementalDetokenizer::Flush() {
  std::string out;
  AppendValidUtf8(pending_, /*keep_truncated_tail=*/false, &out);
  pending_.clear();
  return out;
}

}  // namespace ferry::tokenizer
