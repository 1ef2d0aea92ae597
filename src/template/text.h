// Python's str methods on UTF-8 text, as the filters and methods of templates need them:
// case mapping (Unicode, through the C.UTF-8 locale), whitespace as str.isspace() sees it,
// strip, split, splitlines and friends. Positions are in code points, as in Python.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::jinja::text {

uint32_t ToLower(uint32_t cp);
uint32_t ToUpper(uint32_t cp);
bool IsAlpha(uint32_t cp);
bool IsDigit(uint32_t cp);
bool IsCased(uint32_t cp);
bool IsLower(uint32_t cp);
bool IsUpper(uint32_t cp);
// \w in Python's re: letters, digits and the underscore.
bool IsWordChar(uint32_t cp);

std::string Lower(std::string_view s);
std::string Upper(std::string_view s);
std::string SwapCase(std::string_view s);
std::string Title(std::string_view s);       // str.title()
std::string Capitalize(std::string_view s);  // str.capitalize()

// str.strip(chars) / lstrip / rstrip; no chars: Unicode whitespace.
std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit) and str.rsplit; no sep: runs of whitespace, no empty items.
std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                               bool from_right);
// str.splitlines(keepends).
std::vector<std::string> SplitLines(std::string_view s, bool keepends);
// str.replace(old, new, count); count < 0: all.
std::string Replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);
// str.center / ljust / rjust with a one-character fill.
std::string Pad(std::string_view s, int64_t width, std::string_view fill, char align);

}  // namespace ferry::jinja::text
