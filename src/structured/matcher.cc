#include "structured/matcher.h"

#include <algorithm>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace ferry::structured {

Vocabulary::Vocabulary(std::vector<std::string> tokens, std::vector<char> usable)
    : tokens_(std::move(tokens)), usable_(std::move(usable)) {
  usable_.resize(tokens_.size(), 0);
  std::vector<int32_t> order;
  uint64_t h = 1469598103934665603ull;
  for (size_t id = 0; id < tokens_.size(); ++id) {
    if (tokens_[id].empty()) usable_[id] = 0;
    if (usable_[id]) order.push_back(static_cast<int32_t>(id));
    for (unsigned char c : tokens_[id]) h = (h ^ c) * 1099511628211ull;
    h = (h ^ (usable_[id] ? 0x1FFu : 0x2FFu)) * 1099511628211ull;
  }
  hash_ = h;
  std::stable_sort(order.begin(), order.end(), [this](int32_t a, int32_t b) { return tokens_[a] < tokens_[b]; });
  // Depth-first construction from the sorted tokens: the path is the previous token's nodes.
  Trie& t = trie_;
  std::vector<int32_t> path;
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = tokens_[id];
    size_t common = 0;
    if (prev != nullptr) {
      while (common < s.size() && common < prev->size() && (*prev)[common] == s[common]) ++common;
    }
    common = std::min(common, path.size());
    while (path.size() > common) {
      t.subtree_end[path.back()] = static_cast<int32_t>(t.byte.size());
      path.pop_back();
    }
    for (size_t i = common; i < s.size(); ++i) {
      path.push_back(static_cast<int32_t>(t.byte.size()));
      t.byte.push_back(static_cast<uint8_t>(s[i]));
      t.depth.push_back(static_cast<uint16_t>(std::min<size_t>(i + 1, 0xFFFF)));
      t.subtree_end.push_back(0);
      t.token_begin.push_back(static_cast<int32_t>(t.token_ids.size()));
      t.token_end.push_back(static_cast<int32_t>(t.token_ids.size()));
    }
    t.token_ids.push_back(id);
    t.token_end[path.back()] = static_cast<int32_t>(t.token_ids.size());
    prev = &s;
  }
  while (!path.empty()) {
    t.subtree_end[path.back()] = static_cast<int32_t>(t.byte.size());
    path.pop_back();
  }
}

std::shared_ptr<const Vocabulary> Vocabulary::FromTokenizer(const tokenizer::Tokenizer& tok, int32_t size) {
  std::vector<std::string> tokens(static_cast<size_t>(size));
  std::vector<char> usable(static_cast<size_t>(size), 0);
  const int32_t known = std::min(size, tok.vocab_size());
  for (int32_t id = 0; id < known; ++id) {
    if (tok.IsSpecial(id)) continue;
    tok.AppendTokenBytes(id, /*first=*/false, &tokens[id]);
    usable[id] = tokens[id].empty() ? 0 : 1;
  }
  return std::make_shared<const Vocabulary>(std::move(tokens), std::move(usable));
}

TokenMatcher::TokenMatcher(Grammar grammar, std::shared_ptr<const Vocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  nodes_.push_back({-1, 0});  // the empty stack: the whole output matched
  normalized_.emplace_back(1, 0);
  normalized_done_.push_back(1);
  std::lock_guard<std::mutex> lock(mu_);
  // The root is a rule reference at the bottom of the stack: expand its alternatives.
  std::vector<uint32_t> start;
  for (int32_t a : grammar_.alternatives[grammar_.root]) {
    const std::vector<uint32_t> n = Normalize(Node(a, 0));
    start.insert(start.end(), n.begin(), n.end());
  }
  initial_ = InternSet(start);
}

uint32_t TokenMatcher::Node(int32_t pos, uint32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | parent;
  auto [it, inserted] = node_index_.emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (inserted) {
    nodes_.push_back({pos, parent});
    normalized_.emplace_back();
    normalized_done_.push_back(0);
  }
  return it->second;
}

// The stacks `node` stands for once every rule reference on top is expanded and every
// finished alternative popped: each result has a byte set on top, or is the empty stack.
const std::vector<uint32_t>& TokenMatcher::Normalize(uint32_t node) {
  if (normalized_done_[node]) return normalized_[node];
  std::vector<uint32_t> out;
  std::vector<uint32_t> work{node};
  std::vector<uint32_t> seen;
  while (!work.empty()) {
    const uint32_t x = work.back();
    work.pop_back();
    if (std::find(seen.begin(), seen.end(), x) != seen.end()) continue;
    seen.push_back(x);
    if (x == 0) {
      out.push_back(0);
      continue;
    }
    const auto [pos, parent] = nodes_[x];
    const Element& e = grammar_.elements[static_cast<size_t>(pos)];
    if (e.kind == Element::kBytes) {
      out.push_back(x);
    } else if (e.kind == Element::kEnd) {
      work.push_back(parent);
    } else {
      // What follows the reference; a reference in tail position returns straight to the
      // parent, so repetitions written as r ::= x r keep the stack flat.
      const bool tail = grammar_.elements[static_cast<size_t>(pos) + 1].kind == Element::kEnd;
      const uint32_t cont = tail ? parent : Node(pos + 1, parent);
      for (int32_t a : grammar_.alternatives[static_cast<size_t>(e.value)]) work.push_back(Node(a, cont));
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  normalized_[node] = std::move(out);
  normalized_done_[node] = 1;
  return normalized_[node];
}

TokenMatcher::State TokenMatcher::InternSet(std::vector<uint32_t>& nodes) {
  if (nodes.empty()) return kDead;
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  std::string key(reinterpret_cast<const char*>(nodes.data()), nodes.size() * sizeof(uint32_t));
  auto it = set_index_.find(key);
  if (it != set_index_.end()) return it->second;
  if (sets_.size() >= kMaxStates) return kTooLarge;
  const State s = static_cast<State>(sets_.size());
  sets_.push_back(nodes);
  set_index_.emplace(std::move(key), s);
  return s;
}

TokenMatcher::State TokenMatcher::Step(State state, uint8_t byte) {
  if (state >= transitions_.size()) transitions_.resize(sets_.size());
  State* row = transitions_[state].get();
  if (row == nullptr) {
    transitions_[state] = std::make_unique<State[]>(256);
    row = transitions_[state].get();
    std::fill(row, row + 256, kUnknown);
  } else if (row[byte] != kUnknown) {
    return row[byte];
  }
  std::vector<uint32_t> next;
  const std::vector<uint32_t> stacks = sets_[state];  // a copy: Normalize may add sets' nodes
  for (uint32_t x : stacks) {
    if (x == 0) continue;
    const auto [pos, parent] = nodes_[x];
    const Element& e = grammar_.elements[static_cast<size_t>(pos)];
    if (!grammar_.byte_sets[static_cast<size_t>(e.value)].test(byte)) continue;
    const std::vector<uint32_t> n = Normalize(Node(pos + 1, parent));
    next.insert(next.end(), n.begin(), n.end());
  }
  const State s = InternSet(next);
  if (s != kTooLarge) row[byte] = s;  // the row is the state's own allocation: still valid
  return s;
}

TokenMatcher::State TokenMatcher::AdvanceBytes(State state, std::string_view bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (char c : bytes) {
    if (state == kDead || state == kTooLarge) return state;
    state = Step(state, static_cast<uint8_t>(c));
  }
  return state;
}

TokenMatcher::State TokenMatcher::Advance(State state, int32_t token) {
  if (token < 0 || token >= vocab_->size() || !vocab_->usable(token)) return kDead;
  return AdvanceBytes(state, vocab_->bytes(token));
}

bool TokenMatcher::Accepting(State state) {
  if (state == kDead || state == kTooLarge) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return !sets_[state].empty() && sets_[state].front() == 0;
}

std::shared_ptr<const TokenMask> TokenMatcher::CachedMask(State state) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = masks_.find(state);
  return it == masks_.end() ? nullptr : it->second;
}

bool TokenMatcher::Finished(State state) {
  if (state == kDead || state == kTooLarge) return false;
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<uint32_t>& stacks = sets_[state];
  return stacks.size() == 1 && stacks.front() == 0;
}

std::shared_ptr<const TokenMask> TokenMatcher::Mask(State state) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = masks_.find(state);
  if (it != masks_.end()) return it->second;
  std::shared_ptr<const TokenMask> mask = ComputeMask(state);
  const size_t bytes = mask->words.size() * sizeof(uint64_t);
  if (mask_bytes_ + bytes > kMaskBudgetBytes) {
    masks_.clear();  // in-flight rows keep theirs alive
    mask_bytes_ = 0;
  }
  masks_.emplace(state, mask);
  mask_bytes_ += bytes;
  return mask;
}

std::shared_ptr<const TokenMask> TokenMatcher::ComputeMask(State state) {
  auto mask = std::make_shared<TokenMask>();
  mask->words.assign((static_cast<size_t>(vocab_->size()) + 63) / 64, 0);
  const std::vector<uint32_t>& stacks = sets_[state];
  mask->accepting = !stacks.empty() && stacks.front() == 0;
  mask->finished = mask->accepting && stacks.size() == 1;
  if (mask->finished) return mask;
  const Vocabulary::Trie& t = vocab_->trie();
  walk_.assign(1, state);
  const int32_t n = static_cast<int32_t>(t.byte.size());
  for (int32_t i = 0; i < n;) {
    const size_t d = t.depth[static_cast<size_t>(i)];
    const State s = Step(walk_[d - 1], t.byte[static_cast<size_t>(i)]);
    if (s == kDead || s == kTooLarge) {
      i = t.subtree_end[static_cast<size_t>(i)];
      continue;
    }
    if (walk_.size() <= d) walk_.resize(d + 1);
    walk_[d] = s;
    for (int32_t k = t.token_begin[static_cast<size_t>(i)]; k < t.token_end[static_cast<size_t>(i)]; ++k) {
      const int32_t id = t.token_ids[static_cast<size_t>(k)];
      mask->words[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
      ++mask->allowed;
    }
    ++i;
  }
  return mask;
}

size_t TokenMatcher::num_states() {
  std::lock_guard<std::mutex> lock(mu_);
  return sets_.size();
}

size_t TokenMatcher::num_masks() {
  std::lock_guard<std::mutex> lock(mu_);
  return masks_.size();
}

}  // namespace ferry::structured
