#include "template/objects.h"

namespace ferry::jinja {

// ---- NamespaceObject -----------------------------------------------------------------

Value NamespaceObject::GetAttr(const std::string& name) const {
  if (const Value* v = attrs_.Find(std::string_view(name))) return *v;
  return Value::Undefined("'Namespace object' has no attribute '" + name + "'");
}

bool NamespaceObject::SetAttr(const std::string& name, Value value) {
  attrs_.Set(Value(name), std::move(value));
  return true;
}

std::string NamespaceObject::Repr() const { return "<Namespace " + Str(Value::Dict(attrs_)) + ">"; }

// ---- LoopObject ----------------------------------------------------------------------

Value LoopObject::GetAttr(const std::string& name) const {
  const int64_t n = static_cast<int64_t>(items_.size());
  const int64_t i = static_cast<int64_t>(index_);
  if (name == "index") return Value(i + 1);
  if (name == "index0") return Value(i);
  if (name == "revindex") return Value(n - i);
  if (name == "revindex0") return Value(n - i - 1);
  if (name == "first") return Value(i == 0);
  if (name == "last") return Value(i == n - 1);
  if (name == "length") return Value(n);
  if (name == "depth") return Value(static_cast<int64_t>(depth_ + 1));
  if (name == "depth0") return Value(static_cast<int64_t>(depth_));
  if (name == "previtem") return i > 0 ? items_[index_ - 1] : Value::Undefined("there is no previous item");
  if (name == "nextitem") return i + 1 < n ? items_[index_ + 1] : Value::Undefined("there is no next item");
  if (name == "cycle") {
    auto self = std::const_pointer_cast<LoopObject>(shared_from_this());
    return Value::Function(std::make_shared<BuiltinFn>("cycle", [self](Interpreter&, CallArgs& args) -> Value {
      if (args.args.empty()) Raise("TypeError", "no items for cycling given");
      return args.args[self->index_ % args.args.size()];
    }));
  }
  if (name == "changed") {
    auto self = std::const_pointer_cast<LoopObject>(shared_from_this());
    return Value::Function(std::make_shared<BuiltinFn>("changed", [self](Interpreter&, CallArgs& args) -> Value {
      Value now = Value::Tuple(args.args);
      if (self->changed_called_ && Equals(now, self->last_changed_)) return Value(false);
      self->changed_called_ = true;
      self->last_changed_ = std::move(now);
      return Value(true);
    }));
  }
  return Object::GetAttr(name);
}

Value LoopObject::Call(Interpreter& in, CallArgs& args) {
  if (!stmt_->recursive) {
    Raise("TypeError", "Tried to call non recursive loop. Maybe you forgot the 'recursive' modifier.");
  }
  Value iterable = args.Take("iterable");
  args.Done("loop");
  std::shared_ptr<Scope> scope = scope_.lock();
  if (!scope) Raise("TemplateRuntimeError", "the loop has ended; it cannot be called any more");
  return Value(in.RecurseLoop(*stmt_, iterable, depth_ + 1, scope));
}

// ---- MethodFn ------------------------------------------------------------------------

Value MethodFn::Call(Interpreter& in, CallArgs& args) { return CallMethod(in, self_, name_, args); }

// ---- ScanMacroNames ------------------------------------------------------------------

namespace {

void ScanExpr(const Expr* e, std::pair<bool, bool>& uses) {
  if (e == nullptr) return;
  if (e->kind == ExprKind::kName) {
    uses.first = uses.first || e->name == "varargs";
    uses.second = uses.second || e->name == "kwargs";
  }
  for (const ExprPtr& item : e->items) ScanExpr(item.get(), uses);
  ScanExpr(e->a.get(), uses);
  ScanExpr(e->b.get(), uses);
  ScanExpr(e->c.get(), uses);
  for (const ExprPtr& arg : e->call.args) ScanExpr(arg.get(), uses);
  for (const auto& kw : e->call.kwargs) ScanExpr(kw.second.get(), uses);
  ScanExpr(e->call.dyn_args.get(), uses);
  ScanExpr(e->call.dyn_kwargs.get(), uses);
  for (const auto& op : e->ops) ScanExpr(op.second.get(), uses);
}

void ScanBody(const Body& body, std::pair<bool, bool>& uses) {
  for (const StmtPtr& s : body) {
    if (s->kind == StmtKind::kMacro) continue;  // a nested macro has its own varargs
    ScanExpr(s->expr.get(), uses);
    ScanExpr(s->target.get(), uses);
    ScanExpr(s->filter.get(), uses);
    for (const ExprPtr& v : s->values) ScanExpr(v.get(), uses);
    for (const ExprPtr& d : s->defaults) ScanExpr(d.get(), uses);
    ScanBody(s->body, uses);
    ScanBody(s->else_body, uses);
    for (const auto& [test, body2] : s->elifs) {
      ScanExpr(test.get(), uses);
      ScanBody(body2, uses);
    }
  }
}

}  // namespace

std::pair<bool, bool> ScanMacroNames(const Body& body) {
  std::pair<bool, bool> uses{false, false};
  ScanBody(body, uses);
  return uses;
}

}  // namespace ferry::jinja
