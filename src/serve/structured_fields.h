// The structured-output fields of the generation routes: OpenAI's response_format
// (json_object, json_schema), vLLM's structured_outputs {json, regex, choice, grammar,
// json_object, disable_any_whitespace} and its older guided_json / guided_regex /
// guided_choice / guided_grammar. At most one constraint per request; it is compiled (or
// found in the model's grammar cache) here, on the request worker, and a schema or grammar
// ferry cannot enforce is a 400 that names the field and what is unsupported.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

#include "serve/model_repository.h"
#include "serve/request_fields.h"
#include "structured/constraint.h"

namespace ferry::serve {

// The constraint the body asks for, if any (`ordered`: the body with its keys in order, so
// that JSON properties are written in the schema's order). `param` names the field it came
// from, for errors.
MaybeError ReadConstraint(const nlohmann::ordered_json& ordered, std::optional<structured::Constraint>& out,
                          std::string& param);

// ReadConstraint, then the model's compiled matcher into `grammar` (unset without a
// constraint). `raw_body` is parsed again (keys in order) only when a constraint is given.
MaybeError ReadStructuredOutputs(const std::string& raw_body, const nlohmann::json& body, ServedModel& model,
                                 std::shared_ptr<structured::TokenMatcher>& grammar);

// Compiles `constraint` for `model`: a 400 naming `param` when it is refused.
MaybeError CompileFor(ServedModel& model, const structured::Constraint& constraint, const std::string& param,
                      std::shared_ptr<structured::TokenMatcher>& grammar);

}  // namespace ferry::serve
