#include "structured/grammar.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace ferry::structured {

uint64_t Grammar::Hash() const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 1099511628211ull;
  };
  for (const Element& e : elements) mix((static_cast<uint64_t>(e.kind) << 32) ^ static_cast<uint32_t>(e.value));
  for (const auto& alts : alternatives) {
    mix(alts.size());
    for (int32_t a : alts) mix(static_cast<uint64_t>(a));
  }
  for (const ByteSet& s : byte_sets) mix(std::hash<ByteSet>()(s));
  mix(static_cast<uint64_t>(root));
  return h;
}

int32_t GrammarBuilder::AddRule(std::string_view name) {
  std::string n(name);
  const int count = name_counts_[n]++;
  if (count > 0) n += "_" + std::to_string(count);
  names_.push_back(std::move(n));
  alternatives_.emplace_back();
  return static_cast<int32_t>(alternatives_.size() - 1);
}

void GrammarBuilder::AddAlternative(int32_t rule, Sequence seq) {
  elements_ += seq.size() + 1;
  alternatives_[rule].push_back(std::move(seq));
}

Element GrammarBuilder::Bytes(const ByteSet& set) {
  std::string key = set.to_string();
  auto [it, inserted] = byte_set_index_.emplace(std::move(key), static_cast<int32_t>(byte_sets_.size()));
  if (inserted) byte_sets_.push_back(set);
  return Element{Element::kBytes, it->second};
}

Element GrammarBuilder::Byte(uint8_t b) {
  ByteSet s;
  s.set(b);
  return Bytes(s);
}

Sequence GrammarBuilder::Literal(std::string_view text) {
  Sequence seq;
  seq.reserve(text.size());
  for (char c : text) seq.push_back(Byte(static_cast<uint8_t>(c)));
  return seq;
}

int32_t GrammarBuilder::Choice(std::string_view name, std::vector<Sequence> alternatives) {
  const int32_t r = AddRule(name);
  for (Sequence& s : alternatives) AddAlternative(r, std::move(s));
  return r;
}

int32_t GrammarBuilder::Optional(std::string_view name, Sequence seq) {
  const int32_t r = AddRule(name);
  AddAlternative(r, std::move(seq));
  AddAlternative(r, {});
  return r;
}

int32_t GrammarBuilder::Star(std::string_view name, Sequence seq) {
  // r ::= seq r | (empty): the matcher pops a finished rule before it expands a reference in
  // tail position, so a long repetition does not grow the parse stack.
  const int32_t r = AddRule(name);
  seq.push_back(Ref(r));
  AddAlternative(r, std::move(seq));
  AddAlternative(r, {});
  return r;
}

int32_t GrammarBuilder::Plus(std::string_view name, Sequence seq) {
  const int32_t star = Star(std::string(name) + "_rest", seq);
  seq.push_back(Ref(star));
  const int32_t r = AddRule(name);
  AddAlternative(r, std::move(seq));
  return r;
}

Result<int32_t> GrammarBuilder::Repeat(std::string_view name, const Sequence& seq, int64_t min, int64_t max) {
  if (min < 0 || (max >= 0 && max < min)) return InvalidArgument("bad repetition bounds {" + std::to_string(min) + "," + std::to_string(max) + "}");
  if (min > kMaxRepeat || max > kMaxRepeat) {
    return InvalidArgument("repetition bound " + std::to_string(std::max(min, max)) + " is above the limit of " +
                           std::to_string(kMaxRepeat));
  }
  const size_t copies = static_cast<size_t>(std::max(min, max)) + 1;
  if (elements_ + copies * (seq.size() + 2) > kMaxElements) {
    return InvalidArgument("the constraint is too large (more than " + std::to_string(kMaxElements) +
                           " grammar elements once repetitions are expanded)");
  }
  Sequence tail;
  if (max < 0) {
    tail.push_back(Ref(Star(std::string(name) + "_more", seq)));
  } else if (max > min) {
    // opt_k ::= seq opt_{k-1} | (empty), nested max - min times.
    int32_t inner = -1;
    for (int64_t k = 0; k < max - min; ++k) {
      Sequence s = seq;
      if (inner >= 0) s.push_back(Ref(inner));
      inner = Optional(std::string(name) + "_opt", std::move(s));
    }
    tail.push_back(Ref(inner));
  }
  Sequence body;
  for (int64_t i = 0; i < min; ++i) body.insert(body.end(), seq.begin(), seq.end());
  body.insert(body.end(), tail.begin(), tail.end());
  const int32_t r = AddRule(name);
  AddAlternative(r, std::move(body));
  return r;
}

Result<Grammar> GrammarBuilder::Build(int32_t root) const {
  const int32_t n = num_rules();
  if (root < 0 || root >= n) return InvalidArgument("the grammar has no root rule");
  if (elements_ > kMaxElements) {
    return InvalidArgument("the constraint is too large (more than " + std::to_string(kMaxElements) +
                           " grammar elements)");
  }
  // Reachable rules must be defined.
  std::vector<char> reachable(static_cast<size_t>(n), 0);
  std::vector<int32_t> work{root};
  reachable[root] = 1;
  while (!work.empty()) {
    const int32_t r = work.back();
    work.pop_back();
    if (alternatives_[r].empty()) return InvalidArgument("rule '" + names_[r] + "' is used but has no definition");
    for (const Sequence& s : alternatives_[r]) {
      for (const Element& e : s) {
        if (e.kind == Element::kRule && !reachable[e.value]) {
          reachable[e.value] = 1;
          work.push_back(e.value);
        }
      }
    }
  }
  // Nullable rules (can match the empty string), to a fixed point.
  std::vector<char> nullable(static_cast<size_t>(n), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < n; ++r) {
      if (nullable[r] || !reachable[r]) continue;
      for (const Sequence& s : alternatives_[r]) {
        bool all = true;
        for (const Element& e : s) all = all && e.kind == Element::kRule && nullable[e.value];
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  // Left recursion: a cycle in "r may begin with rule x".
  std::vector<std::vector<int32_t>> leftmost(static_cast<size_t>(n));
  for (int32_t r = 0; r < n; ++r) {
    if (!reachable[r]) continue;
    for (const Sequence& s : alternatives_[r]) {
      for (const Element& e : s) {
        if (e.kind != Element::kRule) break;
        leftmost[r].push_back(e.value);
        if (!nullable[e.value]) break;
      }
    }
  }
  // Depth-first search with an explicit stack (a long chain of rules must not exhaust the
  // thread's stack): (rule, next edge to follow).
  std::vector<char> color(static_cast<size_t>(n), 0);  // 0 new, 1 on the path, 2 done
  auto cycle = [&](int32_t start) -> int32_t {
    std::vector<std::pair<int32_t, size_t>> path{{start, 0}};
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, edge] = path.back();
      if (edge == leftmost[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const int32_t x = leftmost[r][edge++];
      if (color[x] == 1) return x;
      if (color[x] == 0) {
        color[x] = 1;
        path.emplace_back(x, 0);
      }
    }
    return -1;
  };
  for (int32_t r = 0; r < n; ++r) {
    if (reachable[r] && color[r] == 0) {
      const int32_t found = cycle(r);
      if (found >= 0) {
        return InvalidArgument("rule '" + names_[found] +
                               "' is left-recursive (it can reach itself without consuming output); rewrite it with "
                               "repetition, e.g. x ::= y (\",\" y)*");
      }
    }
  }
  Grammar g;
  g.byte_sets = byte_sets_;
  g.rule_names = names_;
  g.root = root;
  g.alternatives.resize(static_cast<size_t>(n));
  for (int32_t r = 0; r < n; ++r) {
    for (const Sequence& s : alternatives_[r]) {
      g.alternatives[r].push_back(static_cast<int32_t>(g.elements.size()));
      g.elements.insert(g.elements.end(), s.begin(), s.end());
      g.elements.push_back(Element{Element::kEnd, r});
    }
  }
  return g;
}

int32_t AnyUtf8Char(GrammarBuilder& b, const ByteSet& excluded_ascii, std::string_view name) {
  ByteSet ascii;
  for (int c = 0; c < 128; ++c) {
    if (!excluded_ascii.test(static_cast<size_t>(c))) ascii.set(static_cast<size_t>(c));
  }
  auto range = [](int lo, int hi) {
    ByteSet s;
    for (int c = lo; c <= hi; ++c) s.set(static_cast<size_t>(c));
    return s;
  };
  const Element cont = b.Bytes(range(0x80, 0xBF));
  std::vector<Sequence> alts;
  if (ascii.any()) alts.push_back({b.Bytes(ascii)});
  alts.push_back({b.Bytes(range(0xC2, 0xDF)), cont});
  // Three bytes: no overlong forms (E0 A0..BF) and no surrogates (ED 80..9F).
  alts.push_back({b.Byte(0xE0), b.Bytes(range(0xA0, 0xBF)), cont});
  alts.push_back({b.Bytes(range(0xE1, 0xEC)), cont, cont});
  alts.push_back({b.Byte(0xED), b.Bytes(range(0x80, 0x9F)), cont});
  alts.push_back({b.Bytes(range(0xEE, 0xEF)), cont, cont});
  alts.push_back({b.Byte(0xF0), b.Bytes(range(0x90, 0xBF)), cont, cont});
  alts.push_back({b.Bytes(range(0xF1, 0xF3)), cont, cont, cont});
  alts.push_back({b.Byte(0xF4), b.Bytes(range(0x80, 0x8F)), cont, cont});
  return b.Choice(name, std::move(alts));
}

}  // namespace ferry::structured
