// multipart/form-data bodies (RFC 7578), as POST /v1/files receives them, and URL query
// strings.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ferry::serve {

struct FormPart {
  std::string name;          // Content-Disposition's name
  std::string filename;      // its filename ("" when absent)
  bool has_filename = false;
  std::string content_type;  // the part's Content-Type ("" when absent)
  std::string data;
};

// The boundary of a Content-Type "multipart/form-data; boundary=..." (quoted or not);
// InvalidArgument when the type is another or the boundary is missing or malformed.
Result<std::string> MultipartBoundary(std::string_view content_type);

// Splits a body into its parts. Every part needs a Content-Disposition of form-data with a
// name; part headers are bounded (8 KiB per part) and the closing boundary must be there.
// InvalidArgument names what is wrong.
Result<std::vector<FormPart>> ParseMultipart(std::string_view body, std::string_view boundary);

// "a=1&b=x%20y" → {a: 1, b: "x y"} (+ is a space; a repeated key keeps the last value).
std::map<std::string, std::string> ParseQuery(std::string_view target);

}  // namespace ferry::serve
