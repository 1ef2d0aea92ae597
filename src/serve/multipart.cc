#include "serve/multipart.h"

#include <cctype>

namespace ferry::serve {

namespace {

constexpr size_t kMaxPartHeaderBytes = 8 * 1024;
constexpr size_t kMaxParts = 64;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// `; key=value; key="quoted \" value"` parameters after a header's first token.
Result<std::map<std::string, std::string>> HeaderParams(std::string_view rest) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < rest.size()) {
    while (i < rest.size() && (rest[i] == ';' || rest[i] == ' ' || rest[i] == '\t')) ++i;
    if (i >= rest.size()) break;
    const size_t eq = rest.find('=', i);
    if (eq == std::string_view::npos) return InvalidArgument("malformed header parameter");
    const std::string key = Lower(Trim(rest.substr(i, eq - i)));
    i = eq + 1;
    std::string value;
    if (i < rest.size() && rest[i] == '"') {
      ++i;
      bool closed = false;
      while (i < rest.size()) {
        const char c = rest[i++];
        if (c == '\\' && i < rest.size()) {
          value += rest[i++];
        } else if (c == '"') {
          closed = true;
          break;
        } else {
          value += c;
        }
      }
      if (!closed) return InvalidArgument("unterminated quoted header parameter");
    } else {
      const size_t end = rest.find(';', i);
      value = std::string(Trim(rest.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i)));
      i = end == std::string_view::npos ? rest.size() : end;
    }
    out[key] = value;
  }
  return out;
}

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string Decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && Hex(s[i + 1]) >= 0 && Hex(s[i + 2]) >= 0) {
      out += static_cast<char>(Hex(s[i + 1]) * 16 + Hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

Result<std::string> MultipartBoundary(std::string_view content_type) {
  const size_t semi = content_type.find(';');
  const std::string type = Lower(Trim(content_type.substr(0, semi)));
  if (type != "multipart/form-data") {
    return InvalidArgument("Content-Type must be multipart/form-data, got '" + std::string(Trim(content_type.substr(0, semi)).substr(0, 64)) + "'");
  }
  if (semi == std::string_view::npos) return InvalidArgument("Content-Type: multipart/form-data without a boundary");
  Result<std::map<std::string, std::string>> params = HeaderParams(content_type.substr(semi + 1));
  if (!params.ok()) return InvalidArgument("Content-Type: " + params.status().message());
  auto it = params->find("boundary");
  if (it == params->end() || it->second.empty() || it->second.size() > 70) {
    return InvalidArgument("Content-Type: a boundary of 1 to 70 characters is required");
  }
  return it->second;
}

Result<std::vector<FormPart>> ParseMultipart(std::string_view body, std::string_view boundary) {
  const std::string delim = "--" + std::string(boundary);
  // The first boundary: at the very start, or after a preamble ending in CRLF.
  size_t pos;
  if (body.substr(0, delim.size()) == delim) {
    pos = delim.size();
  } else {
    const size_t at = body.find("\r\n" + delim);
    if (at == std::string_view::npos) return InvalidArgument("multipart body: the boundary never appears");
    pos = at + 2 + delim.size();
  }
  const std::string next = "\r\n" + delim;
  std::vector<FormPart> parts;
  for (;;) {
    // After a boundary: "--" ends the body; otherwise optional whitespace and CRLF.
    if (body.substr(pos, 2) == "--") return parts;
    while (pos < body.size() && (body[pos] == ' ' || body[pos] == '\t')) ++pos;
    if (body.substr(pos, 2) != "\r\n") return InvalidArgument("multipart body: malformed boundary line");
    pos += 2;
    if (parts.size() >= kMaxParts) return InvalidArgument("multipart body: more than 64 parts");
    const size_t header_end = body.find("\r\n\r\n", pos);
    const bool no_headers = body.substr(pos, 2) == "\r\n";
    if (!no_headers && (header_end == std::string_view::npos || header_end - pos > kMaxPartHeaderBytes)) {
      return InvalidArgument("multipart body: a part's headers are missing, unterminated or over 8 KiB");
    }
    FormPart part;
    bool disposition = false;
    const std::string_view headers = no_headers ? std::string_view() : body.substr(pos, header_end - pos);
    pos = no_headers ? pos + 2 : header_end + 4;
    size_t h = 0;
    while (h < headers.size()) {
      size_t eol = headers.find("\r\n", h);
      if (eol == std::string_view::npos) eol = headers.size();
      const std::string_view line = headers.substr(h, eol - h);
      h = eol + 2;
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) return InvalidArgument("multipart body: malformed part header");
      const std::string name = Lower(Trim(line.substr(0, colon)));
      const std::string_view value = Trim(line.substr(colon + 1));
      if (name == "content-disposition") {
        const size_t semi = value.find(';');
        if (Lower(Trim(value.substr(0, semi))) != "form-data") {
          return InvalidArgument("multipart body: Content-Disposition must be form-data");
        }
        if (semi == std::string_view::npos) return InvalidArgument("multipart body: Content-Disposition without a name");
        Result<std::map<std::string, std::string>> params = HeaderParams(value.substr(semi + 1));
        if (!params.ok()) return InvalidArgument("multipart body: Content-Disposition: " + params.status().message());
        auto n = params->find("name");
        if (n == params->end()) return InvalidArgument("multipart body: Content-Disposition without a name");
        part.name = n->second;
        auto f = params->find("filename");
        if (f != params->end()) {
          part.filename = f->second;
          part.has_filename = true;
        }
        disposition = true;
      } else if (name == "content-type") {
        part.content_type = std::string(value);
      }
    }
    if (!disposition) return InvalidArgument("multipart body: a part has no Content-Disposition");
    const size_t end = body.find(next, pos);
    if (end == std::string_view::npos) return InvalidArgument("multipart body: the closing boundary is missing");
    part.data = std::string(body.substr(pos, end - pos));
    parts.push_back(std::move(part));
    pos = end + next.size();
  }
}

std::map<std::string, std::string> ParseQuery(std::string_view target) {
  std::map<std::string, std::string> out;
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return out;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view kv = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    out[Decode(kv.substr(0, eq))] = eq == std::string_view::npos ? "" : Decode(kv.substr(eq + 1));
  }
  return out;
}

}  // namespace ferry::serve
