// Jinja's builtin tests (`x is defined`, `x is string`, `x is equalto y`, ...).
#include <cmath>
#include <map>

#include "template/interpreter.h"
#include "template/text.h"

namespace ferry::jinja {

namespace {

bool TDefined(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("defined");
  return !v.is_undefined();
}
bool TUndefined(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("undefined");
  return v.is_undefined();
}
bool TNone(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("none");
  return v.is_none();
}
bool TBoolean(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("boolean");
  return v.is_bool();
}
bool TTrue(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("true");
  return v.is_bool() && v.AsBool();
}
bool TFalse(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("false");
  return v.is_bool() && !v.AsBool();
}
bool TInteger(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("integer");
  return v.is_int();
}
bool TFloat(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("float");
  return v.is_float();
}
bool TNumber(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("number");
  return v.is_number();
}
bool TString(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("string");
  return v.is_string();
}
bool TMapping(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("mapping");
  return v.is_dict();
}
// Python's iter() accepts strings, lists, tuples, dicts, and Jinja's Undefined.
bool TIterable(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("iterable");
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
// len() and __getitem__: strings, lists, tuples, dicts, and Undefined.
bool TSequence(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("sequence");
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
bool TCallable(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("callable");
  return v.is_callable() || v.is_undefined() || (v.is_object() && v.AsObject()->TypeName() == "LoopContext");
}
bool TEscaped(Interpreter&, const Value&, CallArgs& a) {
  a.Done("escaped");
  return false;
}
bool TOdd(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("odd");
  if (!v.is_int() && !v.is_bool()) Raise("TypeError", "odd expects an integer, got " + v.TypeName());
  return (v.AsInt() % 2) != 0;
}
bool TEven(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("even");
  if (!v.is_int() && !v.is_bool()) Raise("TypeError", "even expects an integer, got " + v.TypeName());
  return (v.AsInt() % 2) == 0;
}
bool TDivisibleBy(Interpreter&, const Value& v, CallArgs& a) {
  Value n = a.Take("num");
  a.Done("divisibleby");
  if (!v.is_number() || !n.is_number()) Raise("TypeError", "divisibleby expects numbers");
  if (n.AsFloat() == 0) Raise("ZeroDivisionError", "integer division or modulo by zero");
  if (!v.is_float() && !n.is_float()) return v.AsInt() % n.AsInt() == 0;
  return std::fmod(v.AsFloat(), n.AsFloat()) == 0.0;
}
bool TSameAs(Interpreter&, const Value& v, CallArgs& a) {
  Value other = a.Take("other");
  a.Done("sameas");
  return v.kind() == other.kind() && Equals(v, other);
}
bool TIn(Interpreter& in, const Value& v, CallArgs& a) {
  Value seq = a.Take("seq");
  a.Done("in");
  for (const Value& item : seq.is_string() ? std::vector<Value>{} : in.Iterate(seq)) {
    if (Equals(item, v)) return true;
  }
  if (seq.is_string()) {
    if (!v.is_string()) Raise("TypeError", "'in <string>' requires string as left operand, not " + v.TypeName());
    return seq.AsString().find(v.AsString()) != std::string::npos;
  }
  return false;
}
bool TFilter(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("filter");
  return v.is_string() && FindFilter(v.AsString()) != nullptr;
}
bool TTest(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("test");
  return v.is_string() && FindTest(v.AsString()) != nullptr;
}
bool TLower(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("lower");
  const std::string s = Str(v);
  return text::Lower(s) == s && text::Upper(s) != s;
}
bool TUpper(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("upper");
  const std::string s = Str(v);
  return text::Upper(s) == s && text::Lower(s) != s;
}

template <int kOp>
bool TCompare(Interpreter&, const Value& v, CallArgs& a) {
  Value other = a.Take("other");
  a.Done("compare");
  switch (kOp) {
    case 0: return Equals(v, other);
    case 1: return !Equals(v, other);
    case 2: return Compare(v, other, "<") < 0;
    case 3: return Compare(v, other, "<=") <= 0;
    case 4: return Compare(v, other, ">") > 0;
    default: return Compare(v, other, ">=") >= 0;
  }
}

const std::map<std::string, TestFn>& Tests() {
  static const std::map<std::string, TestFn> kTests = {
      {"boolean", TBoolean},     {"callable", TCallable},   {"defined", TDefined},
      {"divisibleby", TDivisibleBy}, {"escaped", TEscaped}, {"even", TEven},
      {"false", TFalse},         {"filter", TFilter},       {"float", TFloat},
      {"in", TIn},               {"integer", TInteger},     {"iterable", TIterable},
      {"lower", TLower},         {"mapping", TMapping},     {"none", TNone},
      {"number", TNumber},       {"odd", TOdd},             {"sameas", TSameAs},
      {"sequence", TSequence},   {"string", TString},       {"test", TTest},
      {"true", TTrue},           {"undefined", TUndefined}, {"upper", TUpper},
      {"eq", TCompare<0>},       {"equalto", TCompare<0>},  {"==", TCompare<0>},
      {"ne", TCompare<1>},       {"!=", TCompare<1>},       {"lt", TCompare<2>},
      {"lessthan", TCompare<2>}, {"<", TCompare<2>},        {"le", TCompare<3>},
      {"<=", TCompare<3>},       {"gt", TCompare<4>},       {"greaterthan", TCompare<4>},
      {">", TCompare<4>},        {"ge", TCompare<5>},       {">=", TCompare<5>},
  };
  return kTests;
}

}  // namespace

TestFn FindTest(const std::string& name) {
  auto it = Tests().find(name);
  return it == Tests().end() ? nullptr : it->second;
}

}  // namespace ferry::jinja
