#include "serve/structured_fields.h"

#include <vector>

namespace ferry::serve {
namespace {

using ojson = nlohmann::ordered_json;
using structured::Constraint;
using structured::ConstraintKind;

bool Given(const ojson& body, const char* name) { return body.contains(name) && !body[name].is_null(); }

// A schema given as an object or as JSON text.
MaybeError SchemaText(const ojson& v, const std::string& param, std::string& out) {
  if (v.is_object() || v.is_boolean()) {
    out = v.dump();
    return std::nullopt;
  }
  if (v.is_string()) {
    try {
      out = ojson::parse(v.get<std::string>()).dump();
    } catch (const std::exception&) {
      return BadRequest(param + " is not valid JSON", param);
    }
    return std::nullopt;
  }
  return BadRequest(param + " must be a JSON schema (an object)", param);
}

MaybeError Choices(const ojson& v, const std::string& param, Constraint& c) {
  if (!v.is_array() || v.empty()) return BadRequest(param + " must be a non-empty array of strings", param);
  if (v.size() > 4096) return BadRequest(param + " may list at most 4096 strings", param);
  for (const ojson& s : v) {
    if (!s.is_string()) return BadRequest(param + " must be a non-empty array of strings", param);
    c.choices.push_back(s.get<std::string>());
  }
  c.kind = ConstraintKind::kChoice;
  return std::nullopt;
}

MaybeError Text(const ojson& v, const std::string& param, ConstraintKind kind, Constraint& c) {
  if (!v.is_string() || v.get<std::string>().empty()) return BadRequest(param + " must be a non-empty string", param);
  c.kind = kind;
  c.text = v.get<std::string>();
  return std::nullopt;
}

MaybeError ResponseFormat(const ojson& rf, std::optional<Constraint>& out) {
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) {
    return BadRequest("response_format must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}",
                      "response_format");
  }
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  Constraint c;
  if (type == "json_object") {
    c.kind = ConstraintKind::kJsonObject;
    out = c;
    return std::nullopt;
  }
  if (type != "json_schema") {
    return BadRequest("response_format.type must be text, json_object or json_schema", "response_format.type");
  }
  if (!rf.contains("json_schema") || !rf["json_schema"].is_object()) {
    return BadRequest("response_format json_schema needs a json_schema object", "response_format.json_schema");
  }
  const ojson& js = rf["json_schema"];
  if (!js.contains("name") || !js["name"].is_string() || js["name"].get<std::string>().empty()) {
    return BadRequest("missing required parameter: response_format.json_schema.name", "response_format.json_schema.name");
  }
  for (const auto& [key, v] : js.items()) {
    if (key != "name" && key != "schema" && key != "strict" && key != "description") {
      return BadRequest("unknown field response_format.json_schema." + key, "response_format.json_schema." + key);
    }
  }
  if (!js.contains("schema") || js["schema"].is_null()) {
    c.kind = ConstraintKind::kJsonObject;  // a name without a schema: any JSON object
    out = c;
    return std::nullopt;
  }
  c.kind = ConstraintKind::kJsonSchema;
  if (auto e = SchemaText(js["schema"], "response_format.json_schema.schema", c.text)) return e;
  out = c;
  return std::nullopt;
}

MaybeError StructuredOutputs(const ojson& so, std::optional<Constraint>& out, std::string& param) {
  if (!so.is_object()) return BadRequest("structured_outputs must be an object", "structured_outputs");
  Constraint c;
  int kinds = 0;
  for (const auto& [key, v] : so.items()) {
    const std::string p = "structured_outputs." + key;
    if (v.is_null()) continue;
    if (key == "json") {
      ++kinds;
      c.kind = ConstraintKind::kJsonSchema;
      if (auto e = SchemaText(v, p, c.text)) return e;
    } else if (key == "regex") {
      ++kinds;
      if (auto e = Text(v, p, ConstraintKind::kRegex, c)) return e;
    } else if (key == "choice") {
      ++kinds;
      if (auto e = Choices(v, p, c)) return e;
    } else if (key == "grammar") {
      ++kinds;
      if (auto e = Text(v, p, ConstraintKind::kGrammar, c)) return e;
    } else if (key == "json_object") {
      if (!v.is_boolean()) return BadRequest(p + " must be a boolean", p);
      if (v.get<bool>()) {
        ++kinds;
        c.kind = ConstraintKind::kJsonObject;
      }
    } else if (key == "disable_any_whitespace") {
      if (!v.is_boolean()) return BadRequest(p + " must be a boolean", p);
      c.any_whitespace = !v.get<bool>();
    } else if (key == "disable_fallback" || key == "disable_additional_properties") {
      if (!v.is_boolean()) return BadRequest(p + " must be a boolean", p);
      // ferry has one backend (no fallback), and writes no properties a schema does not name.
    } else if (key == "whitespace_pattern" || key == "structural_tag") {
      return BadRequest(p + " is not supported", p, "unsupported_structured_output");
    } else {
      return BadRequest("unknown field " + p, p);
    }
  }
  if (kinds > 1) {
    return BadRequest("structured_outputs takes one of json, regex, choice, grammar or json_object", "structured_outputs");
  }
  if (kinds == 0) return BadRequest("structured_outputs needs json, regex, choice, grammar or json_object", "structured_outputs");
  param = "structured_outputs";
  out = c;
  return std::nullopt;
}

}  // namespace

MaybeError ReadConstraint(const ojson& body, std::optional<Constraint>& out, std::string& param) {
  out.reset();
  std::vector<std::string> given;
  if (Given(body, "response_format")) {
    std::optional<Constraint> c;
    if (auto e = ResponseFormat(body["response_format"], c)) return e;
    if (c) {
      given.push_back("response_format");
      out = c;
      param = "response_format";
    }
  }
  if (Given(body, "structured_outputs")) {
    given.push_back("structured_outputs");
    if (auto e = StructuredOutputs(body["structured_outputs"], out, param)) return e;
  }
  bool any_whitespace = true;
  if (Given(body, "guided_whitespace_pattern")) {
    return BadRequest("guided_whitespace_pattern is not supported; use structured_outputs.disable_any_whitespace",
                      "guided_whitespace_pattern", "unsupported_structured_output");
  }
  if (Given(body, "guided_decoding_backend") && !body["guided_decoding_backend"].is_string()) {
    return BadRequest("guided_decoding_backend must be a string", "guided_decoding_backend");
  }
  for (const char* name : {"guided_json", "guided_regex", "guided_choice", "guided_grammar"}) {
    if (!Given(body, name)) continue;
    given.push_back(name);
    Constraint c;
    const std::string n = name;
    const ojson& v = body[name];
    if (n == "guided_json") {
      c.kind = ConstraintKind::kJsonSchema;
      if (auto e = SchemaText(v, n, c.text)) return e;
    } else if (n == "guided_regex") {
      if (auto e = Text(v, n, ConstraintKind::kRegex, c)) return e;
    } else if (n == "guided_choice") {
      if (auto e = Choices(v, n, c)) return e;
    } else {
      if (auto e = Text(v, n, ConstraintKind::kGrammar, c)) return e;
    }
    c.any_whitespace = any_whitespace;
    out = c;
    param = n;
  }
  if (given.size() > 1) {
    return BadRequest("only one structured-output constraint may be given; this request has " + given[0] + " and " +
                          given[1],
                      given[1]);
  }
  return std::nullopt;
}

MaybeError CompileFor(ServedModel& model, const Constraint& constraint, const std::string& param,
                      std::shared_ptr<structured::TokenMatcher>& grammar) {
  structured::GrammarCache* cache = model.grammars();
  if (cache == nullptr) {
    return BadRequest("model '" + model.name() + "' has no tokenizer, so its output cannot be constrained", param);
  }
  auto matcher = cache->Get(constraint);
  if (!matcher.ok()) return BadRequest(param + ": " + matcher.status().message(), param, "invalid_structured_output");
  grammar = std::move(matcher).value();
  return std::nullopt;
}

MaybeError ReadStructuredOutputs(const std::string& raw_body, const nlohmann::json& body, ServedModel& model,
                                 std::shared_ptr<structured::TokenMatcher>& grammar) {
  grammar.reset();
  bool any = false;
  for (const char* name : {"response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice",
                           "guided_grammar", "guided_whitespace_pattern", "guided_decoding_backend"}) {
    any = any || (body.contains(name) && !body[name].is_null());
  }
  if (!any) return std::nullopt;
  ojson ordered;
  try {
    ordered = ojson::parse(raw_body);
  } catch (const std::exception&) {
    return BadRequest("the request body is not valid JSON");
  }
  std::optional<Constraint> constraint;
  std::string param;
  if (auto e = ReadConstraint(ordered, constraint, param)) return e;
  if (!constraint) return std::nullopt;
  return CompileFor(model, *constraint, param, grammar);
}

}  // namespace ferry::serve
