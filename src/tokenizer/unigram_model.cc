#include "tokenizer/unigram_model.h"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace ferry::tokenizer {
namespace {

// Length in bytes of the UTF-8 character starting with byte c (1 for stray continuation bytes).
size_t CharLen(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

// transformers' K_UNK_PENALTY: an unknown character scores this much below the worst piece.
constexpr double kUnkPenalty = 10.0;

}  // namespace

Result<std::unique_ptr<UnigramModel>> UnigramModel::Create(const Json& config) {
  auto model = std::unique_ptr<UnigramModel>(new UnigramModel());
  const Json* vocab = JsonField(config, "vocab");
  if (vocab == nullptr || !vocab->is_array()) return InvalidArgument("Unigram model has no 'vocab' list");
  if (vocab->size() >= (size_t{1} << 30)) return InvalidArgument("Unigram vocab is too large");
  double min_score = std::numeric_limits<double>::infinity();
  for (const Json& entry : *vocab) {
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number()) {
      return InvalidArgument("Unigram vocab entries must be [piece, score] pairs");
    }
    const std::string& piece = entry[0].get_ref<const std::string&>();
    const double score = entry[1].get<double>();
    const int32_t id = static_cast<int32_t>(model->tokens_.size());
    model->tokens_.push_back(piece);
    model->scores_.push_back(score);
    // A duplicated piece keeps its first id, as the lattice's trie does.
    model->vocab_.emplace(piece, id);
    model->max_piece_bytes_ = std::max(model->max_piece_bytes_, piece.size());
    min_score = std::min(min_score, score);
  }
  if (model->tokens_.empty()) return InvalidArgument("Unigram vocab is empty");
  const int64_t unk = JsonInt(config, "unk_id", -1);
  if (unk >= static_cast<int64_t>(model->tokens_.size())) {
    return InvalidArgument("Unigram unk_id " + std::to_string(unk) + " is outside the vocab");
  }
  model->unk_id_ = unk < 0 ? -1 : static_cast<int32_t>(unk);
  model->unk_score_ = min_score - kUnkPenalty;
  model->byte_fallback_ = JsonBool(config, "byte_fallback", false);
  std::fill(std::begin(model->byte_ids_), std::end(model->byte_ids_), -1);
  if (model->byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      if (auto it = model->vocab_.find(std::string_view(name)); it != model->vocab_.end()) {
        model->byte_ids_[b] = it->second;
      }
    }
  }
  return model;
}

Status UnigramModel::Tokenize(std::string_view word, std::vector<int32_t>* ids,
                              std::vector<ByteRange>* spans) const {
  const size_t n = word.size();
  // best[i]: the best score of a split of word[0, i); from[i]: where its last piece starts;
  // piece[i]: that piece's id (-1: an unknown character).
  thread_local std::vector<double> best;
  thread_local std::vector<int64_t> from;
  thread_local std::vector<int32_t> piece;
  thread_local std::vector<char> reached;
  best.assign(n + 1, 0.0);
  from.assign(n + 1, -1);
  piece.assign(n + 1, -1);
  reached.assign(n + 1, 0);
  reached[0] = 1;
  // Forward over start positions in increasing order: for a fixed end, candidates arrive
  // ordered by their start, and only a strictly better score replaces the one kept, which
  // is the tie rule of the reference lattice.
  auto offer = [&](size_t b, size_t e, int32_t id, double score) {
    const double s = best[b] + score;
    if (!reached[e] || s > best[e]) {
      reached[e] = 1;
      best[e] = s;
      from[e] = static_cast<int64_t>(b);
      piece[e] = id;
    }
  };
  for (size_t b = 0; b < n;) {
    const size_t first = CharLen(static_cast<unsigned char>(word[b]));
    const size_t step = std::min(first, n - b);
    if (!reached[b]) {
      b += step;
      continue;
    }
    bool single = false;
    for (size_t e = b + step; e <= n && e - b <= max_piece_bytes_;) {
      if (auto it = vocab_.find(word.substr(b, e - b)); it != vocab_.end()) {
        offer(b, e, it->second, scores_[static_cast<size_t>(it->second)]);
        if (e == b + step) single = true;
      }
      if (e == n) break;
      e += std::min(CharLen(static_cast<unsigned char>(word[e])), n - e);
    }
    if (!single) {
      if (unk_id_ < 0) {
        return InvalidArgument("Unigram model has no piece for a character and no unk_id");
      }
      offer(b, b + step, -1, unk_score_);
    }
    b += step;
  }
  // Back-track, then emit left to right.
  thread_local std::vector<std::pair<size_t, int32_t>> path;  // (start, id), reversed
  path.clear();
  for (size_t e = n; e > 0;) {
    const int64_t b = from[e];
    if (b < 0) return Internal("Unigram lattice has no path");
    path.emplace_back(static_cast<size_t>(b), piece[e]);
    e = static_cast<size_t>(b);
  }
  std::reverse(path.begin(), path.end());
  for (size_t i = 0; i < path.size(); ++i) {
    const size_t b = path[i].first;
    size_t e = i + 1 < path.size() ? path[i + 1].first : n;
    const int32_t id = path[i].second;
    if (id >= 0) {
      ids->push_back(id);
      if (spans != nullptr) spans->push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(e)});
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (size_t k = b; k < e; ++k) all = all && byte_ids_[static_cast<unsigned char>(word[k])] >= 0;
      if (all) {
        for (size_t k = b; k < e; ++k) {
          ids->push_back(byte_ids_[static_cast<unsigned char>(word[k])]);
          if (spans != nullptr) spans->push_back({static_cast<uint32_t>(k), static_cast<uint32_t>(k + 1)});
        }
        continue;
      }
    }
    // Consecutive unknown characters become one unk token.
    while (i + 1 < path.size() && path[i + 1].second < 0) {
      ++i;
      e = i + 1 < path.size() ? path[i + 1].first : n;
    }
    ids->push_back(unk_id_);
    if (spans != nullptr) spans->push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(e)});
  }
  return Status::Ok();
}

std::optional<int32_t> UnigramModel::TokenToId(std::string_view token) const {
  if (auto it = vocab_.find(token); it != vocab_.end()) return it->second;
  return std::nullopt;
}

const std::string* UnigramModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) return nullptr;
  return &tokens_[static_cast<size_t>(id)];
}

}  // namespace ferry::tokenizer
