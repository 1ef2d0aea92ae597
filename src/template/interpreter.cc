#include "template/interpreter.h"

#include <cmath>

#include "template/objects.h"

namespace ferry::jinja {

// ---- CallArgs ------------------------------------------------------------------------

Value CallArgs::Take(const char* name, Value fallback) {
  if (next < args.size()) return args[next++];
  if (auto kw = TakeKw(name)) return *kw;
  return fallback;
}

std::optional<Value> CallArgs::TakeKw(const char* name) {
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    if (it->first == name) {
      Value v = std::move(it->second);
      kwargs.erase(it);
      return v;
    }
  }
  return std::nullopt;
}

void CallArgs::Done(const std::string& fn) {
  if (next < args.size()) {
    Raise("TypeError", fn + "() takes " + std::to_string(next) + " positional argument(s) but " +
                           std::to_string(args.size()) + " were given");
  }
  if (!kwargs.empty()) Raise("TypeError", fn + "() got an unexpected keyword argument '" + kwargs[0].first + "'");
}

// ---- Scope ---------------------------------------------------------------------------

const Value* Scope::Find(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
    for (const auto& [k, v] : s->vars) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Scope::Set(const std::string& name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

// ---- Interpreter ---------------------------------------------------------------------

Interpreter::Interpreter(const RenderLimits& limits, const DictData& variables,
                         const std::map<std::string, GlobalFn>& globals)
    : limits_(limits), variables_(variables), globals_(globals) {}

Interpreter::~Interpreter() {
  // Namespaces are the only mutable containers, so the only way to build a reference cycle
  // (a namespace holding itself, or a macro or loop that closes over its scope): empty them.
  for (const auto& weak : namespaces_) {
    if (auto ns = weak.lock()) ns->Clear();
  }
}

void Interpreter::TrackNamespace(const std::shared_ptr<NamespaceObject>& ns) { namespaces_.push_back(ns); }

std::string Interpreter::Render(const Body& body) {
  const char marker = 0;
  stack_base_ = &marker;
  root_ = std::make_shared<Scope>();
  std::string out;
  ExecBody(body, root_, out);
  return out;
}

void Interpreter::Step(const Node& n) {
  (void)n;
  if (++steps_ > limits_.max_steps) {
    Raise("SecurityError", "the template exceeded its budget of " + std::to_string(limits_.max_steps) +
                               " evaluation steps");
  }
  const char here = 0;
  const size_t used = static_cast<size_t>(stack_base_ > &here ? stack_base_ - &here : &here - stack_base_);
  if (used > limits_.max_stack_bytes) Raise("RecursionError", "maximum recursion depth exceeded");
}

void Interpreter::CountIterations(int64_t n) {
  iterations_ += n;
  if (iterations_ > limits_.max_loop_iterations) {
    Raise("SecurityError", "the template exceeded its limit of " + std::to_string(limits_.max_loop_iterations) +
                               " loop iterations");
  }
}

void Interpreter::CheckSize(size_t n) {
  if (n > limits_.max_output_bytes) {
    Raise("SecurityError", "the template built a value of " + std::to_string(n) + " bytes or items, over its limit of " +
                               std::to_string(limits_.max_output_bytes));
  }
}

Interpreter::Flow Interpreter::ExecBody(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out) {
  for (const StmtPtr& s : body) {
    const Flow f = Exec(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::Exec(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
  try {
    Step(s);
    switch (s.kind) {
      case StmtKind::kText: out += s.text; break;
      case StmtKind::kPrint: out += Str(Eval(*s.expr, scope)); break;
      case StmtKind::kIf: {
        if (Eval(*s.expr, scope).Truthy()) return ExecBody(s.body, scope, out);
        for (const auto& [test, body] : s.elifs) {
          if (Eval(*test, scope).Truthy()) return ExecBody(body, scope, out);
        }
        return ExecBody(s.else_body, scope, out);
      }
      case StmtKind::kFor: ExecFor(s, scope, out); break;
      case StmtKind::kSet: Assign(*s.target, Eval(*s.expr, scope), scope); break;
      case StmtKind::kSetBlock: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        std::string text;
        ExecBody(s.body, inner, text);
        Value v(std::move(text));
        if (s.expr) {
          auto saved = std::make_shared<Scope>();
          saved->parent = scope;
          saved->Set("\x01block", v);
          v = Eval(*s.expr, saved);
        }
        Assign(*s.target, v, scope);
        break;
      }
      case StmtKind::kMacro: scope->Set(s.text, DefineMacro(s, scope)); break;
      case StmtKind::kCallBlock: {
        Value caller = DefineMacro(s, scope);
        const Expr& call = *s.expr;
        Value callee = Eval(*call.a, scope);
        CallArgs args = EvalArgs(call.call, scope);
        args.kwargs.emplace_back("caller", caller);
        out += Str(CallValue(callee, args));
        break;
      }
      case StmtKind::kFilterBlock: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        std::string text;
        ExecBody(s.body, inner, text);
        inner->Set("\x01block", Value(std::move(text)));
        out += Str(Eval(*s.expr, inner));
        break;
      }
      case StmtKind::kWith: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        std::vector<Value> values;
        for (const ExprPtr& v : s.values) values.push_back(Eval(*v, scope));
        for (size_t i = 0; i < s.targets.size(); ++i) Assign(*s.targets[i], values[i], inner);
        return ExecBody(s.body, inner, out);
      }
      case StmtKind::kScope: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        ExecBody(s.body, inner, out);
        break;
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
    }
    CheckSize(out.size());
  } catch (const RenderError&) {
    if (!error_located_) {
      error_located_ = true;
      error_line_ = s.line;
      error_column_ = s.column;
    }
    throw;
  }
  return Flow::kNormal;
}

Value Interpreter::DefineMacro(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  auto it = macro_uses_.find(&s);
  if (it == macro_uses_.end()) it = macro_uses_.emplace(&s, ScanMacroNames(s.body)).first;
  return Value::Function(std::make_shared<MacroFn>(&s, scope, it->second.first, it->second.second));
}

void Interpreter::ExecFor(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
  std::vector<Value> items = Iterate(Eval(*s.expr, scope));
  if (s.filter) {
    std::vector<Value> kept;
    for (Value& item : items) {
      CountIterations(1);
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      Assign(*s.target, item, probe);
      if (Eval(*s.filter, probe).Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    ExecBody(s.else_body, inner, out);
    return;
  }
  RunLoop(s, std::move(items), 0, scope, out);
}

void Interpreter::RunLoop(const Stmt& s, std::vector<Value> items, int depth, const std::shared_ptr<Scope>& scope,
                          std::string& out) {
  auto loop = std::make_shared<LoopObject>(&s, std::move(items), depth, scope);
  const std::vector<Value>& list = loop->items();
  for (size_t i = 0; i < list.size(); ++i) {
    CountIterations(1);
    loop->set_index(i);
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    Assign(*s.target, list[i], inner);
    inner->Set("loop", Value::Object(loop));
    if (ExecBody(s.body, inner, out) == Flow::kBreak) break;
  }
}

std::string Interpreter::RecurseLoop(const Stmt& s, const Value& iterable, int depth,
                                     const std::shared_ptr<Scope>& scope) {
  if (++call_depth_ > limits_.max_call_depth) {
    --call_depth_;
    Raise("RecursionError", "maximum recursion depth exceeded (more than " + std::to_string(limits_.max_call_depth) +
                                " nested calls)");
  }
  std::string out;
  try {
    std::vector<Value> items = Iterate(iterable);
    if (!items.empty()) RunLoop(s, std::move(items), depth, scope, out);
  } catch (...) {
    --call_depth_;
    throw;
  }
  --call_depth_;
  return out;
}

Value Interpreter::CallMacro(const MacroFn& fn, CallArgs& args) {
  const Stmt& s = *fn.stmt();
  if (++call_depth_ > limits_.max_call_depth) {
    --call_depth_;
    Raise("RecursionError", "maximum recursion depth exceeded (more than " + std::to_string(limits_.max_call_depth) +
                                " nested macro calls)");
  }
  struct Leave {
    int& depth;
    ~Leave() { --depth; }
  } leave{call_depth_};
  std::shared_ptr<Scope> closure = fn.closure().lock();
  auto scope = std::make_shared<Scope>();
  scope->parent = closure ? closure : root_;
  const std::string name = s.kind == StmtKind::kMacro ? s.text : "caller";
  std::vector<Value> extra;
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (i < s.params.size()) {
      scope->Set(s.params[i], args.args[i]);
    } else {
      extra.push_back(args.args[i]);
    }
  }
  if (!extra.empty() && !fn.varargs()) {
    Raise("TypeError", "macro '" + name + "' takes not more than " + std::to_string(s.params.size()) +
                           " argument(s)");
  }
  DictData extra_kw;
  for (auto& [k, v] : args.kwargs) {
    bool is_param = false;
    for (size_t i = 0; i < s.params.size(); ++i) {
      if (s.params[i] != k) continue;
      if (i < args.args.size()) Raise("TypeError", "macro '" + name + "' got multiple values for argument '" + k + "'");
      is_param = true;
    }
    if (is_param) {
      scope->Set(k, v);
    } else if (k == "caller") {
      scope->Set("caller", v);
    } else if (fn.kwargs()) {
      extra_kw.Set(Value(k), v);
    } else {
      Raise("TypeError", "macro '" + name + "' takes no keyword argument '" + k + "'");
    }
  }
  const size_t first_default = s.params.size() - s.defaults.size();
  for (size_t i = 0; i < s.params.size(); ++i) {
    bool given = false;
    for (const auto& [k, v] : scope->vars) given = given || k == s.params[i];
    if (given) continue;
    if (i >= first_default) {
      scope->Set(s.params[i], Eval(*s.defaults[i - first_default], scope));
    } else {
      scope->Set(s.params[i], Value::Undefined("parameter '" + s.params[i] + "' was not provided"));
    }
  }
  scope->Set("varargs", Value::Tuple(std::move(extra)));
  scope->Set("kwargs", Value::Dict(std::move(extra_kw)));
  std::string out;
  ExecBody(s.body, scope, out);
  return Value(std::move(out));
}

void Interpreter::Assign(const Expr& target, const Value& value, const std::shared_ptr<Scope>& scope) {
  if (target.kind == ExprKind::kName) {
    scope->Set(target.name, value);
    return;
  }
  if (target.kind == ExprKind::kNsRef) {
    Value ns = Lookup(target.a->name, scope);
    if (!ns.is_object() || !ns.AsObject()->SetAttr(target.name, value)) {
      Raise("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
    }
    return;
  }
  // A tuple of names: unpack any iterable of exactly that many items.
  std::vector<Value> items = Iterate(value);
  if (items.size() < target.items.size()) {
    Raise("ValueError", "not enough values to unpack (expected " + std::to_string(target.items.size()) + ", got " +
                            std::to_string(items.size()) + ")");
  }
  if (items.size() > target.items.size()) {
    Raise("ValueError", "too many values to unpack (expected " + std::to_string(target.items.size()) + ")");
  }
  for (size_t i = 0; i < items.size(); ++i) Assign(*target.items[i], items[i], scope);
}

Value Interpreter::Lookup(const std::string& name, const std::shared_ptr<Scope>& scope) {
  if (const Value* v = scope->Find(name)) return *v;
  if (const Value* v = variables_.Find(std::string_view(name))) return *v;
  auto g = globals_.find(name);
  if (g != globals_.end()) return Value::Function(std::make_shared<BuiltinFn>(name, g->second));
  return Value::Undefined("'" + name + "' is undefined");
}

CallArgs Interpreter::EvalArgs(const ArgList& list, const std::shared_ptr<Scope>& scope) {
  CallArgs out;
  for (const ExprPtr& a : list.args) out.args.push_back(Eval(*a, scope));
  for (const auto& [k, v] : list.kwargs) out.kwargs.emplace_back(k, Eval(*v, scope));
  if (list.dyn_args) {
    for (Value& v : Iterate(Eval(*list.dyn_args, scope))) out.args.push_back(std::move(v));
  }
  if (list.dyn_kwargs) {
    const Value d = Eval(*list.dyn_kwargs, scope);
    if (!d.is_dict()) Raise("TypeError", "argument after ** must be a mapping, not " + d.TypeName());
    for (const auto& [k, v] : d.AsDict().items()) {
      if (!k.is_string()) Raise("TypeError", "keywords must be strings");
      out.kwargs.emplace_back(k.AsString(), v);
    }
  }
  return out;
}

Value Interpreter::Eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  try {
    Step(e);
    return EvalInner(e, scope);
  } catch (const RenderError&) {
    if (!error_located_) {
      error_located_ = true;
      error_line_ = e.line;
      error_column_ = e.column;
    }
    throw;
  }
}

Value Interpreter::EvalInner(const Expr& e, const std::shared_ptr<Scope>& scope) {
  switch (e.kind) {
    case ExprKind::kConst: return e.value;
    case ExprKind::kName: return Lookup(e.name, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const ExprPtr& item : e.items) items.push_back(Eval(*item, scope));
      return e.kind == ExprKind::kList ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
    }
    case ExprKind::kDict: {
      DictData d;
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value k = Eval(*e.items[i], scope);
        if (k.is_dict() || k.is_list() || k.is_undefined()) Raise("TypeError", "unhashable type: '" + k.TypeName() + "'");
        d.Set(std::move(k), Eval(*e.items[i + 1], scope));
      }
      return Value::Dict(std::move(d));
    }
    case ExprKind::kGetAttr: return GetAttr(Eval(*e.a, scope), e.name);
    case ExprKind::kGetItem: {
      Value obj = Eval(*e.a, scope);
      if (e.b->kind == ExprKind::kSlice) return Slice(obj, *e.b, scope);
      return GetItem(obj, Eval(*e.b, scope));
    }
    case ExprKind::kSlice: Raise("TypeError", "a slice outside of a subscript");
    case ExprKind::kCall: {
      Value callee = Eval(*e.a, scope);
      CallArgs args = EvalArgs(e.call, scope);
      return CallValue(callee, args);
    }
    case ExprKind::kFilter: {
      Value input = e.a ? Eval(*e.a, scope) : Lookup("\x01block", scope);
      CallArgs args = EvalArgs(e.call, scope);
      return ApplyFilter(e.name, input, args);
    }
    case ExprKind::kTest: {
      Value input = Eval(*e.a, scope);
      CallArgs args = EvalArgs(e.call, scope);
      return Value(ApplyTest(e.name, input, args));
    }
    case ExprKind::kNot: return Value(!Eval(*e.a, scope).Truthy());
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      Value v = Eval(*e.a, scope);
      if (v.is_undefined()) RaiseUndefined(v);
      if (!v.is_number()) {
        Raise("TypeError", std::string("bad operand type for unary ") + (e.kind == ExprKind::kNeg ? "-" : "+") +
                               ": '" + v.TypeName() + "'");
      }
      if (e.kind == ExprKind::kPos) return v.is_float() ? v : Value(v.AsInt());
      if (v.is_float()) return Value(-v.AsFloat());
      if (v.AsInt() == INT64_MIN) Raise("OverflowError", "integer result too large");
      return Value(-v.AsInt());
    }
    case ExprKind::kBinary: {
      Value a = Eval(*e.a, scope);
      Value b = Eval(*e.b, scope);
      return EvalBinary(e.name, a, b);
    }
    case ExprKind::kAnd: {
      Value a = Eval(*e.a, scope);
      return a.Truthy() ? Eval(*e.b, scope) : a;
    }
    case ExprKind::kOr: {
      Value a = Eval(*e.a, scope);
      return a.Truthy() ? a : Eval(*e.b, scope);
    }
    case ExprKind::kConcat: {
      std::string s;
      for (const ExprPtr& item : e.items) {
        s += Str(Eval(*item, scope));
        CheckSize(s.size());
      }
      return Value(std::move(s));
    }
    case ExprKind::kCompare: {
      Value left = Eval(*e.a, scope);
      for (const auto& [op, operand] : e.ops) {
        Value right = Eval(*operand, scope);
        bool ok;
        if (op == "==") {
          ok = Equals(left, right);
        } else if (op == "!=") {
          ok = !Equals(left, right);
        } else if (op == "in") {
          ok = Contains(right, left);
        } else if (op == "not in") {
          ok = !Contains(right, left);
        } else {
          const int c = Compare(left, right, op);
          ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          if ((left.is_float() && std::isnan(left.AsFloat())) || (right.is_float() && std::isnan(right.AsFloat()))) {
            ok = false;
          }
        }
        if (!ok) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::kCond: {
      if (Eval(*e.b, scope).Truthy()) return Eval(*e.a, scope);
      if (e.c) return Eval(*e.c, scope);
      return Value::Undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
    case ExprKind::kNsRef: Raise("TypeError", "a namespace reference outside of an assignment");
  }
  return Value();
}

Value Interpreter::CallValue(const Value& callee, CallArgs& args) {
  switch (callee.kind()) {
    case Value::Kind::kCallable: return callee.AsCallable()->Call(*this, args);
    case Value::Kind::kObject: return callee.AsObject()->Call(*this, args);
    case Value::Kind::kUndefined: RaiseUndefined(callee);
    default: Raise("TypeError", "'" + callee.TypeName() + "' object is not callable");
  }
}

Value Interpreter::ApplyFilter(const std::string& name, const Value& input, CallArgs& args) {
  FilterFn fn = FindFilter(name);
  if (fn == nullptr) Raise("TemplateAssertionError", "No filter named '" + name + "'.");
  Value v = fn(*this, input, args);
  if (v.is_string()) CheckSize(v.AsString().size());
  return v;
}

bool Interpreter::HasTest(const std::string& name) const { return FindTest(name) != nullptr; }

bool Interpreter::ApplyTest(const std::string& name, const Value& input, CallArgs& args) {
  TestFn fn = FindTest(name);
  if (fn == nullptr) Raise("TemplateAssertionError", "No test named '" + name + "'.");
  return fn(*this, input, args);
}

namespace {

// Jinja's object_type_repr, as undefined-value messages quote it.
std::string TypeRepr(const Value& obj) {
  if (obj.is_none()) return "None";
  return obj.TypeName() + " object";
}

Value MissingAttr(const Value& obj, const std::string& name) {
  return Value::Undefined("'" + TypeRepr(obj) + "' has no attribute '" + name + "'");
}

// A Python index into a sequence of `n` items (negative from the end); nullopt when out of range.
std::optional<size_t> Index(const Value& key, size_t n) {
  int64_t i = key.AsInt();
  if (i < 0) i += static_cast<int64_t>(n);
  if (i < 0 || i >= static_cast<int64_t>(n)) return std::nullopt;
  return static_cast<size_t>(i);
}

}  // namespace

Value Interpreter::GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) RaiseUndefined(obj);
  if (!name.empty() && name[0] == '_') {
    // The sandbox hides every internal attribute.
    return Value::Undefined("access to attribute '" + name + "' of '" + obj.TypeName() + "' object is unsafe.",
                            "SecurityError");
  }
  if (obj.is_object()) return obj.AsObject()->GetAttr(name);
  if (std::optional<Value> method = FindMethod(obj, name)) return *method;
  if (obj.is_dict()) {
    if (const Value* v = obj.AsDict().Find(std::string_view(name))) return *v;
  }
  if (obj.is_tuple() && obj.AsList().size() == 2 && (name == "grouper" || name == "list")) {
    return obj.AsList()[name == "grouper" ? 0 : 1];  // groupby's (grouper, list) named tuples
  }
  if (obj.is_number() && !obj.is_bool()) {
    if (name == "real") return obj;
    if (name == "imag") return obj.is_float() ? Value(0.0) : Value(int64_t{0});
  }
  return MissingAttr(obj, name);
}

Value Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) RaiseUndefined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.AsDict().Find(key)) return *v;
  } else if (obj.is_sequence() && (key.is_int() || key.is_bool())) {
    const auto& items = obj.AsList();
    if (auto i = Index(key, items.size())) return items[*i];
  } else if (obj.is_string() && (key.is_int() || key.is_bool())) {
    const std::vector<uint32_t> cps = DecodeUtf8(obj.AsString());
    if (auto i = Index(key, cps.size())) return Value(EncodeUtf8(cps, *i, *i + 1));
  } else if (obj.is_object() && key.is_string()) {
    return obj.AsObject()->GetAttr(key.AsString());
  }
  if (key.is_string()) {
    const std::string& name = key.AsString();
    if (!name.empty() && name[0] != '_') {
      if (std::optional<Value> method = FindMethod(obj, name)) return *method;
    }
    return MissingAttr(obj, name);
  }
  return Value::Undefined(TypeRepr(obj) + " has no element " + Repr(key));
}

Value Interpreter::Slice(const Value& obj, const Expr& slice, const std::shared_ptr<Scope>& scope) {
  auto bound = [&](const ExprPtr& e) -> std::optional<int64_t> {
    if (!e) return std::nullopt;
    Value v = Eval(*e, scope);
    if (v.is_none()) return std::nullopt;
    if (v.is_undefined()) RaiseUndefined(v);
    if (!v.is_int() && !v.is_bool()) {
      Raise("TypeError", "slice indices must be integers or None or have an __index__ method");
    }
    return v.AsInt();
  };
  const std::optional<int64_t> start = bound(slice.a), stop = bound(slice.b), step_opt = bound(slice.c);
  if (obj.is_undefined()) RaiseUndefined(obj);
  const int64_t step = step_opt.value_or(1);
  if (step == 0) Raise("ValueError", "slice step cannot be zero");
  std::vector<uint32_t> cps;
  size_t n;
  if (obj.is_string()) {
    cps = DecodeUtf8(obj.AsString());
    n = cps.size();
  } else if (obj.is_sequence()) {
    n = obj.AsList().size();
  } else {
    Raise("TypeError", "'" + obj.TypeName() + "' object is not subscriptable");
  }
  const int64_t len = static_cast<int64_t>(n);
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += len;
    if (step > 0) return std::clamp<int64_t>(x, 0, len);
    return std::clamp<int64_t>(x, -1, len - 1);
  };
  const int64_t lo = clamp(start, step > 0 ? 0 : len - 1);
  const int64_t hi = clamp(stop, step > 0 ? len : -1);
  std::vector<size_t> picks;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) picks.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    std::string out;
    for (size_t i : picks) AppendUtf8(cps[i], out);
    return Value(std::move(out));
  }
  std::vector<Value> out;
  for (size_t i : picks) out.push_back(obj.AsList()[i]);
  return obj.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

std::vector<Value> Interpreter::Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList:
    case Value::Kind::kTuple: return v.AsList();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& kv : v.AsDict().items()) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (uint32_t cp : DecodeUtf8(v.AsString())) {
        std::string c;
        AppendUtf8(cp, c);
        chars.emplace_back(std::move(c));
      }
      return chars;
    }
    default: Raise("TypeError", "'" + v.TypeName() + "' object is not iterable");
  }
}

bool Interpreter::Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        if (item.is_undefined()) RaiseUndefined(item);
        Raise("TypeError", "'in <string>' requires string as left operand, not " + item.TypeName());
      }
      return container.AsString().find(item.AsString()) != std::string::npos;
    case Value::Kind::kDict: return container.AsDict().Find(item) != nullptr;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      for (const Value& v : container.AsList()) {
        if (Equals(v, item)) return true;
      }
      return false;
    default: Raise("TypeError", "argument of type '" + container.TypeName() + "' is not iterable");
  }
}

}  // namespace ferry::jinja
