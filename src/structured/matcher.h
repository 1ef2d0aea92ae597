// Grammar → token-level matching. A TokenMatcher runs a Grammar as a pushdown automaton over
// the bytes of the vocabulary's tokens. A matcher state is the set of parse stacks alive
// after the output so far; stacks and sets are interned (so a state is one integer), byte
// transitions between sets are cached, and the mask of allowed tokens for a state is found
// once, by one walk of the vocabulary's token trie that prunes every subtree whose prefix
// the grammar rejects, then kept: every row and every request on the same grammar and
// vocabulary shares it. Requests with the same constraint thus pay for each distinct state
// of the grammar once (JSON inside a string, after a key, in a number, ...).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "structured/grammar.h"

namespace ferry::tokenizer {
class Tokenizer;
}

namespace ferry::structured {

// The bytes of every token id and a trie over them. Immutable; share one per model.
class Vocabulary {
 public:
  // `tokens[id]`: the bytes the token adds to the output; `usable[id]` false for ids the
  // grammar never allows (special tokens, ids beyond the tokenizer, empty tokens).
  Vocabulary(std::vector<std::string> tokens, std::vector<char> usable);
  // Ids [0, size): the model's vocabulary (it may be larger than the tokenizer's).
  static std::shared_ptr<const Vocabulary> FromTokenizer(const tokenizer::Tokenizer& tok, int32_t size);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& bytes(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  bool usable(int32_t id) const { return usable_[static_cast<size_t>(id)] != 0; }
  uint64_t hash() const { return hash_; }

  // The trie, nodes in depth-first order: node i's subtree is [i, subtree_end[i]).
  struct Trie {
    std::vector<uint8_t> byte;
    std::vector<uint16_t> depth;  // 1 for the first byte of a token
    std::vector<int32_t> subtree_end;
    std::vector<int32_t> token_begin, token_end;  // into token_ids: the tokens ending here
    std::vector<int32_t> token_ids;
  };
  const Trie& trie() const { return trie_; }

 private:
  std::vector<std::string> tokens_;
  std::vector<char> usable_;
  Trie trie_;
  uint64_t hash_ = 0;
};

// The tokens allowed in one state, as a bitset over the vocabulary (bit id % 64 of word
// id / 64). End-of-sequence ids are not in it: `accepting` says whether they may end here.
struct TokenMask {
  std::vector<uint64_t> words;
  int64_t allowed = 0;     // tokens set
  bool accepting = false;  // the output so far is a complete match
  bool finished = false;   // accepting, and nothing may follow
};

// Thread-safe (one lock around its tables).
class TokenMatcher {
 public:
  using State = uint32_t;
  static constexpr State kDead = 0xFFFFFFFFu;      // the grammar rejects the output
  static constexpr State kTooLarge = 0xFFFFFFFEu;  // the state tables reached their limit

  TokenMatcher(Grammar grammar, std::shared_ptr<const Vocabulary> vocab);

  State initial() const { return initial_; }
  // The state after `token` (kDead when the grammar does not allow it).
  State Advance(State state, int32_t token);
  State AdvanceBytes(State state, std::string_view bytes);
  bool Accepting(State state);
  // The allowed tokens in `state` (a live state).
  std::shared_ptr<const TokenMask> Mask(State state);
  // The mask of `state` when it is already known, else null: never walks the vocabulary.
  std::shared_ptr<const TokenMask> CachedMask(State state);
  // TokenMask::finished of `state` (accepting, and nothing may follow), without its mask.
  bool Finished(State state);

  const Grammar& grammar() const { return grammar_; }
  const Vocabulary& vocab() const { return *vocab_; }
  // Distinct states and cached masks so far (reports, tests).
  size_t num_states();
  size_t num_masks();

  // Bounds on the tables: a grammar that needs more states fails its request rather than
  // growing without limit; masks beyond the budget are dropped and found again when needed.
  static constexpr size_t kMaxStates = 1u << 20;
  static constexpr size_t kMaskBudgetBytes = size_t{256} << 20;

 private:
  uint32_t Node(int32_t pos, uint32_t parent);
  const std::vector<uint32_t>& Normalize(uint32_t node);
  State InternSet(std::vector<uint32_t>& nodes);
  State Step(State state, uint8_t byte);  // lock held
  std::shared_ptr<const TokenMask> ComputeMask(State state);

  const Grammar grammar_;
  const std::shared_ptr<const Vocabulary> vocab_;
  std::mutex mu_;
  // Stack nodes: (position of the next element, parent node); node 0 is the empty stack.
  std::vector<std::pair<int32_t, uint32_t>> nodes_;
  std::unordered_map<uint64_t, uint32_t> node_index_;
  std::vector<std::vector<uint32_t>> normalized_;
  std::vector<char> normalized_done_;
  // Sets of normalized stacks, sorted; a state is an index into sets_.
  std::vector<std::vector<uint32_t>> sets_;
  std::unordered_map<std::string, State> set_index_;
  // Transitions found so far: per source state, 256 next states (kUnknown where not yet
  // found), so that a mask's walk over the vocabulary trie costs an array read per node.
  static constexpr State kUnknown = 0xFFFFFFFDu;
  std::vector<std::unique_ptr<State[]>> transitions_;
  std::unordered_map<State, std::shared_ptr<const TokenMask>> masks_;
  size_t mask_bytes_ = 0;
  State initial_ = kDead;
  std::vector<State> walk_;  // the trie walk's states by depth
};

}  // namespace ferry::structured
