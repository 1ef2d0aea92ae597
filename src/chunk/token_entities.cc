#include "chunk/token_entities.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "tokenizer/utf8.h"

namespace ferry::chunk {
namespace {

size_t Argmax(const float* v, size_t n) {
  size_t best = 0;
  for (size_t k = 1; k < n; ++k) {
    if (v[k] > v[best]) best = k;
  }
  return best;
}

size_t Argmax(const std::vector<double>& v) {
  size_t best = 0;
  for (size_t k = 1; k < v.size(); ++k) {
    if (v[k] > v[best]) best = k;
  }
  return best;
}

size_t CodePoints(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// A token between gathering and grouping (the pipeline's pre-entity).
struct PreEntity {
  std::string word;
  const float* scores;
  uint32_t start, end;
  int index;
  bool is_subword;
};

// A token or word after aggregation (the pipeline's entity before grouping).
struct Labelled {
  std::string entity;
  double score;
  std::string word;
  uint32_t start, end;
  int index;
};

std::string LabelOf(const EntityOptions& o, size_t id) {
  return id < o.labels.size() ? o.labels[id] : "LABEL_" + std::to_string(id);
}

std::vector<PreEntity> Gather(const EntityOptions& o, const CharText& text, const std::vector<TokenScores>& tokens) {
  std::vector<PreEntity> out;
  out.reserve(tokens.size());
  for (const TokenScores& t : tokens) {
    PreEntity p;
    p.word = o.token_string ? o.token_string(t.id) : std::string();
    p.scores = t.probs;
    p.start = t.start;
    p.end = t.end;
    p.index = t.index;
    const std::string_view word_ref = text.Slice(t.start, t.end);
    if (o.word_aware) {
      p.is_subword = CodePoints(p.word) != CodePoints(word_ref);
    } else {
      // The pipeline's fallback for tokenizers that do not mark subwords: a token continues
      // a word unless a space precedes it or begins it.
      const bool space_before = t.start > 0 && text.At(t.start - 1) == U' ';
      const bool space_at = t.start < text.size() && text.At(t.start) == U' ';
      p.is_subword = t.start > 0 && !space_before && !space_at;
    }
    if (o.unk_id && t.id == *o.unk_id) {
      p.word = std::string(word_ref);
      p.is_subword = false;
    }
    out.push_back(std::move(p));
  }
  return out;
}

Labelled AggregateWord(const EntityOptions& o, size_t labels, const std::vector<const PreEntity*>& group) {
  std::vector<std::string> words;
  for (const PreEntity* p : group) words.push_back(p->word);
  Labelled l;
  l.word = o.tokens_to_string ? o.tokens_to_string(words) : std::string();
  l.start = group.front()->start;
  l.end = group.back()->end;
  l.index = -1;
  switch (o.aggregation) {
    case TokenAggregation::kFirst: {
      const size_t k = Argmax(group.front()->scores, labels);
      l.entity = LabelOf(o, k);
      l.score = group.front()->scores[k];
      break;
    }
    case TokenAggregation::kMax: {
      // The token whose best score is highest decides (the first such on a tie).
      const PreEntity* best = group.front();
      float best_max = best->scores[Argmax(best->scores, labels)];
      for (const PreEntity* p : group) {
        const float m = p->scores[Argmax(p->scores, labels)];
        if (m > best_max) {
          best = p;
          best_max = m;
        }
      }
      const size_t k = Argmax(best->scores, labels);
      l.entity = LabelOf(o, k);
      l.score = best->scores[k];
      break;
    }
    default: {  // kAverage
      std::vector<double> mean(labels, 0.0);
      for (const PreEntity* p : group) {
        for (size_t k = 0; k < labels; ++k) mean[k] += p->scores[k];
      }
      for (double& v : mean) v /= static_cast<double>(group.size());
      const size_t k = Argmax(mean);
      l.entity = LabelOf(o, k);
      l.score = mean[k];
      break;
    }
  }
  return l;
}

std::pair<char, std::string> Tag(const std::string& entity) {
  if (entity.rfind("B-", 0) == 0) return {'B', entity.substr(2)};
  if (entity.rfind("I-", 0) == 0) return {'I', entity.substr(2)};
  return {'I', entity};  // not in B-/I- form: a continuation
}

Entity GroupOf(const EntityOptions& o, const std::vector<const Labelled*>& group) {
  Entity e;
  e.label = Tag(group.front()->entity).second;
  double sum = 0.0;
  std::vector<std::string> words;
  for (const Labelled* l : group) {
    sum += l->score;
    words.push_back(l->word);
  }
  e.score = sum / static_cast<double>(group.size());
  e.word = o.tokens_to_string ? o.tokens_to_string(words) : std::string();
  e.start = group.front()->start;
  e.end = group.back()->end;
  return e;
}

bool Ignored(const EntityOptions& o, const std::string& label) {
  return std::find(o.ignore_labels.begin(), o.ignore_labels.end(), label) != o.ignore_labels.end();
}

}  // namespace

CharText::CharText(std::string_view text) : text_(text) {
  char_begin_.reserve(text.size() + 1);
  size_t pos = 0;
  while (pos < text.size()) {
    char_begin_.push_back(static_cast<uint32_t>(pos));
    size_t len = 1;
    while (pos + len < text.size() && (static_cast<unsigned char>(text[pos + len]) & 0xC0) == 0x80) ++len;
    pos += len;
  }
  char_begin_.push_back(static_cast<uint32_t>(text.size()));
}

char32_t CharText::At(size_t i) const {
  size_t pos = char_begin_[i];
  return tokenizer::NextCodePoint(text_, &pos);
}

uint32_t CharText::CharOfByte(uint32_t byte) const {
  auto it = std::upper_bound(char_begin_.begin(), char_begin_.end() - 1, byte);
  return static_cast<uint32_t>(it - char_begin_.begin()) - 1;
}

std::pair<uint32_t, uint32_t> CharText::FromBytes(uint32_t begin, uint32_t end) const {
  if (begin >= text_.size()) return {static_cast<uint32_t>(size()), static_cast<uint32_t>(size())};
  const uint32_t b = CharOfByte(begin);
  if (end <= begin) return {b, b};
  return {b, CharOfByte(std::min<uint32_t>(end, static_cast<uint32_t>(text_.size())) - 1) + 1};
}

std::string_view CharText::Slice(uint32_t begin, uint32_t end) const {
  const size_t n = size();
  begin = static_cast<uint32_t>(std::min<size_t>(begin, n));
  end = static_cast<uint32_t>(std::min<size_t>(std::max(end, begin), n));
  return text_.substr(char_begin_[begin], char_begin_[end] - char_begin_[begin]);
}

std::vector<Entity> AggregateTokens(const EntityOptions& o, const CharText& text,
                                    const std::vector<TokenScores>& tokens) {
  const size_t labels = o.labels.size();
  const std::vector<PreEntity> pre = Gather(o, text, tokens);

  std::vector<Labelled> labelled;
  labelled.reserve(pre.size());
  if (o.aggregation == TokenAggregation::kNone || o.aggregation == TokenAggregation::kSimple) {
    for (const PreEntity& p : pre) {
      const size_t k = Argmax(p.scores, labels);
      labelled.push_back({LabelOf(o, k), p.scores[k], p.word, p.start, p.end, p.index});
    }
  } else {
    std::vector<const PreEntity*> group;
    for (const PreEntity& p : pre) {
      if (!group.empty() && !p.is_subword) {
        labelled.push_back(AggregateWord(o, labels, group));
        group.clear();
      }
      group.push_back(&p);
    }
    if (!group.empty()) labelled.push_back(AggregateWord(o, labels, group));
  }

  std::vector<Entity> out;
  if (o.aggregation == TokenAggregation::kNone) {
    for (Labelled& l : labelled) {
      if (Ignored(o, l.entity)) continue;
      out.push_back({std::move(l.entity), l.score, l.start, l.end, std::move(l.word), l.index});
    }
    return out;
  }
  // group_entities: a token joins the group before it when it has the same tag and is not a B-.
  std::vector<const Labelled*> group;
  auto flush = [&] {
    if (group.empty()) return;
    Entity e = GroupOf(o, group);
    if (!Ignored(o, e.label)) out.push_back(std::move(e));
    group.clear();
  };
  for (const Labelled& l : labelled) {
    if (!group.empty()) {
      const auto [bi, tag] = Tag(l.entity);
      const auto [last_bi, last_tag] = Tag(group.back()->entity);
      (void)last_bi;
      if (!(tag == last_tag && bi != 'B')) flush();
    }
    group.push_back(&l);
  }
  flush();
  return out;
}

std::vector<Entity> ResolveOverlapsHf(std::vector<Entity> entities) {
  if (entities.empty()) return entities;
  std::stable_sort(entities.begin(), entities.end(), [](const Entity& a, const Entity& b) { return a.start < b.start; });
  std::vector<Entity> out;
  Entity previous = entities[0];
  for (Entity& e : entities) {
    if (previous.start <= e.start && e.start < previous.end) {
      const uint32_t length = e.end - e.start, previous_length = previous.end - previous.start;
      if (length > previous_length || (length == previous_length && e.score > previous.score)) previous = e;
    } else {
      out.push_back(std::move(previous));
      previous = e;
    }
  }
  out.push_back(std::move(previous));
  return out;
}

std::vector<Entity> SuppressOverlaps(std::vector<Entity> entities) {
  std::vector<size_t> order(entities.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Entity& x = entities[a];
    const Entity& y = entities[b];
    if (x.score != y.score) return x.score > y.score;
    if (x.end - x.start != y.end - y.start) return x.end - x.start > y.end - y.start;
    return x.start < y.start;
  });
  std::map<uint32_t, uint32_t> kept;  // start -> end of kept spans (disjoint)
  std::vector<bool> keep(entities.size(), false);
  for (size_t i : order) {
    const Entity& e = entities[i];
    bool overlaps = false;
    if (e.end > e.start) {
      auto it = kept.lower_bound(e.end);  // first kept span starting at or after e.end
      if (it != kept.begin()) {
        --it;  // the last kept span starting before e.end
        overlaps = it->second > e.start;
      }
    }
    if (overlaps) continue;
    keep[i] = true;
    if (e.end > e.start) kept.emplace(e.start, e.end);
  }
  std::vector<Entity> out;
  for (size_t i = 0; i < entities.size(); ++i) {
    if (keep[i]) out.push_back(std::move(entities[i]));
  }
  std::stable_sort(out.begin(), out.end(), [](const Entity& a, const Entity& b) { return a.start < b.start; });
  return out;
}

std::vector<Entity> DocumentEntities(const EntityOptions& o, const CharText& text, std::span<const int32_t> ids,
                                     std::span<const std::pair<uint32_t, uint32_t>> offsets,
                                     const std::vector<WindowScores>& windows, TokenMerge merge) {
  const size_t labels = o.labels.size();
  auto token = [&](const WindowScores& w, int t, int index) {
    TokenScores s;
    s.id = ids[static_cast<size_t>(t)];
    s.index = index;
    s.start = offsets[static_cast<size_t>(t)].first;
    s.end = offsets[static_cast<size_t>(t)].second;
    s.probs = w.probs.data() + static_cast<size_t>(t - w.content.begin) * labels;
    return s;
  };
  if (windows.empty()) return {};
  if (merge == TokenMerge::kHf || windows.size() == 1) {
    std::vector<Entity> all;
    for (const WindowScores& w : windows) {
      std::vector<TokenScores> tokens;
      tokens.reserve(static_cast<size_t>(w.content.size()));
      for (int t = w.content.begin; t < w.content.end; ++t) tokens.push_back(token(w, t, w.content_at + t - w.content.begin));
      std::vector<Entity> part = AggregateTokens(o, text, tokens);
      for (Entity& e : part) all.push_back(std::move(e));
    }
    return windows.size() > 1 ? ResolveOverlapsHf(std::move(all)) : all;
  }
  std::vector<Span> spans;
  spans.reserve(windows.size());
  for (const WindowScores& w : windows) spans.push_back(w.content);
  const int n = static_cast<int>(ids.size());
  const std::vector<int> owners = CenterOwners(spans, n);
  std::vector<TokenScores> tokens;
  tokens.reserve(ids.size());
  for (int t = 0; t < n; ++t) {
    const int w = owners[static_cast<size_t>(t)];
    if (w < 0) continue;  // in no window (cannot happen for windows from PlanWindows)
    tokens.push_back(token(windows[static_cast<size_t>(w)], t, windows[0].content_at + t));
  }
  return SuppressOverlaps(AggregateTokens(o, text, tokens));
}

}  // namespace ferry::chunk
