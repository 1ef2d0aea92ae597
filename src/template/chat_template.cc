#include "template/chat_template.h"

#include <cctype>
#include <cstdio>
#include <ctime>

#include "template/value_json.h"

namespace ferry::jinja {

namespace {

struct LocalTime {
  std::tm tm{};
  int microsecond = 0;
};

Result<LocalTime> ParseIso(const std::string& s) {
  LocalTime t;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  int consumed = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2d%n", &year, &month, &day, &consumed) != 3) {
    return InvalidArgument("now: expected an ISO 8601 time like 2024-07-26T12:00:00, got '" + s + "'");
  }
  size_t pos = static_cast<size_t>(consumed);
  if (pos < s.size() && (s[pos] == 'T' || s[pos] == ' ')) {
    int more = 0;
    if (std::sscanf(s.c_str() + pos + 1, "%2d:%2d%n", &hour, &minute, &more) != 2) {
      return InvalidArgument("now: malformed time of day in '" + s + "'");
    }
    pos += 1 + static_cast<size_t>(more);
    if (pos < s.size() && s[pos] == ':') {
      if (std::sscanf(s.c_str() + pos + 1, "%2d%n", &second, &more) != 1) {
        return InvalidArgument("now: malformed seconds in '" + s + "'");
      }
      pos += 1 + static_cast<size_t>(more);
      if (pos < s.size() && s[pos] == '.') {
        std::string frac;
        for (++pos; pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos])); ++pos) frac += s[pos];
        frac.resize(6, '0');
        t.microsecond = std::stoi(frac);
      }
    }
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return InvalidArgument("now: out-of-range field in '" + s + "'");
  }
  t.tm.tm_year = year - 1900;
  t.tm.tm_mon = month - 1;
  t.tm.tm_mday = day;
  t.tm.tm_hour = hour;
  t.tm.tm_min = minute;
  t.tm.tm_sec = second;
  t.tm.tm_isdst = -1;
  std::tm copy = t.tm;
  timegm(&copy);  // fills the weekday and the day of the year
  t.tm.tm_wday = copy.tm_wday;
  t.tm.tm_yday = copy.tm_yday;
  return t;
}

LocalTime Now() {
  LocalTime t;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  localtime_r(&ts.tv_sec, &t.tm);
  t.microsecond = static_cast<int>(ts.tv_nsec / 1000);
  return t;
}

std::string Strftime(const LocalTime& t, const std::string& format) {
  // Python handles %f itself, and a naive datetime prints %z and %Z as nothing.
  std::string fmt;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size()) {
      const char c = format[i + 1];
      if (c == 'f') {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "%06d", t.microsecond);
        fmt += buf;
        ++i;
        continue;
      }
      if (c == 'z' || c == 'Z') {
        ++i;
        continue;
      }
      fmt += format[i];
      fmt += c;
      ++i;
      continue;
    }
    fmt += format[i];
  }
  if (fmt.empty()) return "";
  std::string out(256 + fmt.size() * 8, '\0');
  const size_t n = std::strftime(out.data(), out.size(), fmt.c_str(), &t.tm);
  out.resize(n);
  return out;
}

}  // namespace

Result<std::string> StrftimeAt(const std::string& iso_time, const std::string& format) {
  FERRY_ASSIGN_OR_RETURN(LocalTime t, ParseIso(iso_time));
  return Strftime(t, format);
}

Result<ChatTemplate> ChatTemplate::Parse(std::string source) {
  FERRY_ASSIGN_OR_RETURN(Template t, Template::Parse(source));
  ChatTemplate c;
  c.template_ = std::move(t);
  c.source_ = std::move(source);
  return c;
}

Result<std::string> ChatTemplate::Render(const ChatRenderInput& input, const RenderLimits& limits) const {
  if (!input.messages.is_array()) return InvalidArgument("messages must be an array");
  if (input.continue_final_message && input.add_generation_prompt) {
    return InvalidArgument("continue_final_message and add_generation_prompt are not compatible: the first continues "
                           "the final message, the second starts a new assistant message");
  }
  LocalTime now;
  if (input.now) {
    FERRY_ASSIGN_OR_RETURN(now, ParseIso(*input.now));
  } else {
    now = Now();
  }
  DictData vars;
  for (const auto& [name, token] : input.special_tokens) vars.Set(Value(name), Value(token));
  if (input.extra.is_object()) {
    for (auto it = input.extra.begin(); it != input.extra.end(); ++it) vars.Set(Value(it.key()), FromJson(it.value()));
  }
  vars.Set(Value("messages"), FromJson(input.messages));
  if (input.tools) vars.Set(Value("tools"), FromJson(*input.tools));
  if (input.documents) vars.Set(Value("documents"), FromJson(*input.documents));
  vars.Set(Value("add_generation_prompt"), Value(input.add_generation_prompt));

  std::map<std::string, GlobalFn> globals;
  globals["raise_exception"] = [](Interpreter&, CallArgs& a) -> Value {
    const Value message = a.Take("message");
    Raise("TemplateError", Str(message));
  };
  globals["strftime_now"] = [now](Interpreter&, CallArgs& a) -> Value {
    const Value format = a.Take("format");
    a.Done("strftime_now");
    if (!format.is_string()) Raise("TypeError", "strftime() argument 1 must be str, not " + format.TypeName());
    return Value(Strftime(now, format.AsString()));
  };
  FERRY_ASSIGN_OR_RETURN(std::string rendered, template_.Render(vars, globals, limits));
  if (!input.continue_final_message) return rendered;

  // transformers: cut after the final message's content, so the model continues it.
  if (input.messages.empty()) return InvalidArgument("continue_final_message needs at least one message");
  const nlohmann::ordered_json& last = input.messages.back();
  std::string final_text;
  const auto content = last.find("content");
  if (content != last.end() && content->is_string()) {
    final_text = content->get<std::string>();
  } else if (content != last.end() && content->is_array()) {
    bool found = false;
    for (auto it = content->rbegin(); it != content->rend() && !found; ++it) {
      if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
        final_text = (*it)["text"].get<std::string>();
        found = true;
      }
    }
    if (!found) return InvalidArgument("continue_final_message: the final message has no text to continue");
  } else {
    return InvalidArgument("continue_final_message: the final message has no text to continue");
  }
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  size_t b = 0, e = final_text.size();
  while (b < e && is_space(final_text[b])) ++b;
  while (e > b && is_space(final_text[e - 1])) --e;
  const std::string stripped = final_text.substr(b, e - b);
  const size_t at = rendered.rfind(stripped);
  if (at == std::string::npos) {
    return InvalidArgument("continue_final_message: the final message does not appear in the rendered chat; the "
                           "template changes it");
  }
  const size_t lstripped = final_text.size() - b;
  if (rendered.compare(at, lstripped, final_text) == 0) return rendered.substr(0, at + lstripped);
  return rendered.substr(0, at + stripped.size());
}

}  // namespace ferry::jinja
