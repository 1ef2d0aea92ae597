#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>

#include "tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

// One symbol of the word being merged, linked to its live neighbours.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  bool removed;
  uint32_t begin;  // the bytes of the word it stands for
  uint32_t end;
};

struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
};

// Heap order: lowest rank first, then leftmost position (HF's Merge ordering).
struct CandidateAfter {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

struct Scratch {
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  std::string piece;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::Create(const Json& config) {
  auto model = std::unique_ptr<BpeModel>(new BpeModel());
  FERRY_RETURN_IF_ERROR(ReadVocab(config, &model->vocab_, &model->tokens_));
  BpeOptions& options = model->options_;
  options.unk_token = JsonOptString(config, "unk_token");
  options.continuing_subword_prefix = JsonString(config, "continuing_subword_prefix", "");
  options.end_of_word_suffix = JsonString(config, "end_of_word_suffix", "");
  options.fuse_unk = JsonBool(config, "fuse_unk", false);
  options.byte_fallback = JsonBool(config, "byte_fallback", false);
  options.ignore_merges = JsonBool(config, "ignore_merges", false);
  // "dropout" is ignored: it only matters for training; inference merges deterministically.
  if (options.unk_token) {
    auto it = model->vocab_.find(*options.unk_token);
    if (it == model->vocab_.end()) {
      return InvalidArgument("BPE unk_token '" + *options.unk_token + "' is not in the vocab");
    }
    model->unk_id_ = it->second;
  }

  const Json* merges = JsonField(config, "merges");
  if (merges == nullptr || !merges->is_array()) return InvalidArgument("BPE model has no 'merges' list");
  model->merges_.reserve(merges->size());
  std::string left;
  std::string right;
  int32_t rank = 0;
  for (const Json& merge : *merges) {
    // Two spellings exist: "a b" strings and, in newer files, ["a", "b"] pairs.
    if (merge.is_string()) {
      const std::string& line = merge.get_ref<const std::string&>();
      const size_t space = line.find(' ', 1);
      if (space == std::string::npos) return InvalidArgument("malformed BPE merge '" + line + "'");
      left.assign(line, 0, space);
      right.assign(line, space + 1, std::string::npos);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return InvalidArgument("malformed BPE merge entry #" + std::to_string(rank));
    }
    auto l = model->vocab_.find(left);
    auto r = model->vocab_.find(right);
    auto m = model->vocab_.find(left + right);
    if (l == model->vocab_.end() || r == model->vocab_.end() || m == model->vocab_.end()) {
      return InvalidArgument("BPE merge '" + left + " " + right + "' uses a token outside the vocab");
    }
    // A repeated pair keeps its first (best) rank.
    model->merges_.emplace(PairKey(l->second, r->second), Merge{rank, m->second});
    ++rank;
  }

  if (options.byte_fallback) {
    model->byte_ids_.assign(256, -1);
    char name[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      auto it = model->vocab_.find(std::string_view(name));
      if (it != model->vocab_.end()) model->byte_ids_[static_cast<size_t>(b)] = it->second;
    }
  }
  return model;
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) return nullptr;
  const std::string& token = tokens_[static_cast<size_t>(id)];
  return token.empty() ? nullptr : &token;
}

Status BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids, std::vector<ByteRange>* spans) const {
  if (word.empty()) return Status::Ok();
  const bool plain = options_.continuing_subword_prefix.empty() && options_.end_of_word_suffix.empty();
  if (options_.ignore_merges) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      ids->push_back(it->second);
      if (spans != nullptr) spans->push_back({0, static_cast<uint32_t>(word.size())});
      return Status::Ok();
    }
  }

  Scratch& scratch = ThreadScratch();
  std::vector<Symbol>& symbols = scratch.symbols;
  symbols.clear();
  auto add_symbol = [&symbols](int32_t id, size_t begin, size_t end) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, false, static_cast<uint32_t>(begin), static_cast<uint32_t>(end)});
  };

  // Initial symbols: one per character, with unknown characters falling back to byte tokens
  // or to the unk token (fused into one when fuse_unk).
  int32_t pending_unk = -1;  // a fused run of unknown characters
  size_t unk_begin = 0;      // and where it starts
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t start = pos;
    NextCodePoint(word, &pos);
    std::string_view piece = word.substr(start, pos - start);
    if (!plain) {
      scratch.piece.clear();
      if (start > 0) scratch.piece += options_.continuing_subword_prefix;
      scratch.piece.append(piece);
      if (pos == word.size()) scratch.piece += options_.end_of_word_suffix;
      piece = scratch.piece;
    }
    if (auto it = vocab_.find(piece); it != vocab_.end()) {
      if (pending_unk >= 0) {
        add_symbol(pending_unk, unk_begin, start);
        pending_unk = -1;
      }
      add_symbol(it->second, start, pos);
      continue;
    }
    if (options_.byte_fallback) {
      bool all_bytes = true;
      for (char c : piece) all_bytes = all_bytes && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all_bytes) {
        if (pending_unk >= 0) {
          add_symbol(pending_unk, unk_begin, start);
          pending_unk = -1;
        }
        // One byte each (of the character itself; a prefix or suffix added for lookup
        // has no bytes in the word).
        const size_t char_bytes = pos - start;
        for (size_t i = 0; i < piece.size(); ++i) {
          const size_t b = std::min(start + i, start + char_bytes - 1);
          add_symbol(byte_ids_[static_cast<unsigned char>(piece[i])], b, b + 1);
        }
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !options_.fuse_unk) add_symbol(pending_unk, unk_begin, start);
      if (pending_unk < 0 || !options_.fuse_unk) unk_begin = start;
      pending_unk = *unk_id_;
    }
    // Without an unk token HF drops the character silently.
  }
  if (pending_unk >= 0) add_symbol(pending_unk, unk_begin, word.size());
  if (symbols.empty()) return Status::Ok();
  symbols.back().next = -1;

  std::vector<Candidate>& heap = scratch.heap;
  heap.clear();
  const CandidateAfter after;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* m = FindMerge(symbols[i].id, symbols[i + 1].id)) {
      heap.push_back({m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  std::make_heap(heap.begin(), heap.end(), after);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), after);
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (left.removed || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    // Stale entries: the pair at this position changed since the candidate was queued.
    const Merge* current = FindMerge(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;
    left.id = top.new_id;
    left.end = right.end;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) {
      if (const Merge* m = FindMerge(symbols[static_cast<size_t>(left.prev)].id, left.id)) {
        heap.push_back({m->rank, left.prev, m->new_id});
        std::push_heap(heap.begin(), heap.end(), after);
      }
    }
    if (left.next >= 0) {
      if (const Merge* m = FindMerge(left.id, symbols[static_cast<size_t>(left.next)].id)) {
        heap.push_back({m->rank, top.pos, m->new_id});
        std::push_heap(heap.begin(), heap.end(), after);
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.removed) continue;
    ids->push_back(s.id);
    if (spans != nullptr) spans->push_back({s.begin, s.end});
  }
  return Status::Ok();
}

}  // namespace ferry::tokenizer
