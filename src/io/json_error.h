// Internal to io/: how parse errors from nlohmann::json read in a Status message.
#pragma once

#include <string>

namespace ferry::io {

// A parse error quotes the last token read, which in a corrupt file can be megabytes of
// garbage; messages keep only its head.
inline std::string JsonErrorText(const char* what) {
  constexpr size_t kMaxChars = 240;
  std::string text(what);
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

}  // namespace ferry::io
