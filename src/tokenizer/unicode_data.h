// Layout of the generated Unicode tables in unicode_data.cc (see gen_unicode_data.py).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::tokenizer::unicode_data {

// A run of code points sharing one general category; it lasts until the next run starts.
// `category` indexes the list in gen_unicode_data.py (same order as unicode::Category).
struct CategoryRun {
  uint32_t first;
  uint8_t category;
};

// Maps one code point to `length` code points stored at kPool[offset].
struct MappingEntry {
  uint32_t code_point;
  uint32_t offset;
  uint32_t length;
};

struct CombiningClassRun {
  uint32_t first;
  uint32_t last;
  uint8_t combining_class;
};

struct CompositionPair {
  uint32_t first;
  uint32_t second;
  uint32_t composite;
};

extern const CategoryRun kCategoryRuns[];
extern const size_t kCategoryRunCount;
extern const uint32_t kPool[];
// Full canonical decompositions (NFD of one code point), sorted by code point.
extern const MappingEntry kCanonicalDecomposition[];
extern const size_t kCanonicalDecompositionCount;
// Full compatibility decompositions, only where they differ from the canonical one.
extern const MappingEntry kCompatibilityDecomposition[];
extern const size_t kCompatibilityDecompositionCount;
// Full lowercase mappings of single code points (no context-dependent rules).
extern const MappingEntry kLowercase[];
extern const size_t kLowercaseCount;
extern const CombiningClassRun kCombiningClass[];
extern const size_t kCombiningClassCount;
// Primary composites, sorted by (first, second).
extern const CompositionPair kCompositions[];
extern const size_t kCompositionCount;

}  // namespace ferry::tokenizer::unicode_data
