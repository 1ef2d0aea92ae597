// The non-data values of a render: namespaces, the `loop` variable, macros (and call-block
// callers), builtin functions and bound methods.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/ast.h"
#include "template/interpreter.h"
#include "template/value.h"

namespace ferry::jinja {

// `namespace(...)`: the one mutable object, so that values can leave a loop's scope.
class NamespaceObject : public Object {
 public:
  std::string TypeName() const override { return "Namespace"; }
  Value GetAttr(const std::string& name) const override;
  bool SetAttr(const std::string& name, Value value) override;
  std::string Repr() const override;
  void Clear() { attrs_ = DictData(); }

 private:
  DictData attrs_;
};

// The `loop` variable of one pass of a for loop.
class LoopObject : public Object, public std::enable_shared_from_this<LoopObject> {
 public:
  LoopObject(const Stmt* stmt, std::vector<Value> items, int depth, std::weak_ptr<Scope> scope)
      : stmt_(stmt), items_(std::move(items)), depth_(depth), scope_(std::move(scope)) {}
  std::string TypeName() const override { return "LoopContext"; }
  Value GetAttr(const std::string& name) const override;
  Value Call(Interpreter& in, CallArgs& args) override;
  const std::vector<Value>& items() const { return items_; }
  void set_index(size_t i) { index_ = i; }

 private:
  const Stmt* stmt_;
  std::vector<Value> items_;
  size_t index_ = 0;
  int depth_;
  std::weak_ptr<Scope> scope_;
  Value last_changed_;
  bool changed_called_ = false;
};

// A macro, or a call block's body as `caller`. Its closure is held weakly (the scope it was
// defined in may hold the macro itself); a dead closure falls back to the template's root.
class MacroFn : public Callable {
 public:
  MacroFn(const Stmt* stmt, std::weak_ptr<Scope> closure, bool varargs, bool kwargs)
      : stmt_(stmt), closure_(std::move(closure)), varargs_(varargs), kwargs_(kwargs) {}
  Value Call(Interpreter& in, CallArgs& args) override { return in.CallMacro(*this, args); }
  std::string Name() const override { return stmt_->kind == StmtKind::kMacro ? stmt_->text : "caller"; }
  const Stmt* stmt() const { return stmt_; }
  const std::weak_ptr<Scope>& closure() const { return closure_; }
  bool varargs() const { return varargs_; }
  bool kwargs() const { return kwargs_; }

 private:
  const Stmt* stmt_;
  std::weak_ptr<Scope> closure_;
  bool varargs_;
  bool kwargs_;
};

class BuiltinFn : public Callable {
 public:
  BuiltinFn(std::string name, GlobalFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  Value Call(Interpreter& in, CallArgs& args) override { return fn_(in, args); }
  std::string Name() const override { return name_; }

 private:
  std::string name_;
  GlobalFn fn_;
};

// `"abc".upper`, `d.items`: a Python method bound to its value.
class MethodFn : public Callable {
 public:
  MethodFn(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  Value Call(Interpreter& in, CallArgs& args) override;
  std::string Name() const override { return self_.TypeName() + "." + name_; }

 private:
  Value self_;
  std::string name_;
};

// Whether a macro body uses `varargs` and `kwargs` (only then may it take extra arguments).
std::pair<bool, bool> ScanMacroNames(const Body& body);

// Calls method `name` of `self` (methods.cc).
Value CallMethod(Interpreter& in, const Value& self, const std::string& name, CallArgs& args);

}  // namespace ferry::jinja
