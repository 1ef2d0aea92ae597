// Runs a parsed template: Jinja's scoping (a `for` iteration, a macro call, `with` and
// block `set` bodies get their own scope; `if` does not; namespaces carry values out of
// loops), Python's operators on template values, the sandbox's attribute rules (no
// internals, no mutating methods) and its limits (loop iterations, nested calls, stack,
// evaluation steps, output size).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "template/ast.h"
#include "template/value.h"

namespace ferry::jinja {

// What one render may use. A template that goes past a limit fails with a SecurityError.
struct RenderLimits {
  size_t max_output_bytes = 16 << 20;       // the rendered text, and any string or list built on the way
  int64_t max_loop_iterations = 1000000;    // all loops of the render together
  int max_call_depth = 64;                  // nested macro calls and recursive loops
  int64_t max_steps = 20000000;             // statements and expressions evaluated
  size_t max_stack_bytes = 1 << 20;         // C++ stack the render may use (deep expressions)
};

// Arguments of a call, filter or test. Builtins take them with Take/TakeKw and finish with
// Done(), which rejects what is left over, as Python does.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
  size_t next = 0;  // positional arguments consumed

  // The next positional argument, else the keyword `name`, else `fallback`.
  Value Take(const char* name, Value fallback = Value());
  std::optional<Value> TakeKw(const char* name);
  // TypeError for unused arguments; `fn` names the callee in the message.
  void Done(const std::string& fn);
};

class Interpreter;
class MacroFn;
class NamespaceObject;
using FilterFn = Value (*)(Interpreter& in, const Value& input, CallArgs& args);
using TestFn = bool (*)(Interpreter& in, const Value& input, CallArgs& args);
using GlobalFn = std::function<Value(Interpreter& in, CallArgs& args)>;

// Scopes chain to their parent; lookups fall back to the render's variables, then globals.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* Find(const std::string& name) const;
  void Set(const std::string& name, Value value);
};

// Thread-compatible: one render at a time.
class Interpreter {
 public:
  Interpreter(const RenderLimits& limits, const DictData& variables, const std::map<std::string, GlobalFn>& globals);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders `body`; errors are thrown as RenderError (with Where() telling the place).
  std::string Render(const Body& body);
  // Where the last error happened (line, column of the innermost node being evaluated).
  int error_line() const { return error_line_; }
  int error_column() const { return error_column_; }

  // For builtins.
  Value CallValue(const Value& callee, CallArgs& args);
  Value ApplyFilter(const std::string& name, const Value& input, CallArgs& args);
  bool ApplyTest(const std::string& name, const Value& input, CallArgs& args);
  bool HasTest(const std::string& name) const;
  Value GetAttr(const Value& obj, const std::string& name);
  Value GetItem(const Value& obj, const Value& key);
  // Python's binary operator `op` ("+", "-", "*", "/", "//", "%", "**").
  Value BinaryOp(const std::string& op, const Value& a, const Value& b) { return EvalBinary(op, a, b); }
  // Python's iter(): list items, dict keys, string characters; a TypeError otherwise.
  std::vector<Value> Iterate(const Value& v);
  // Counts `n` more iterations (loops, and builtins that walk sequences) against the limit.
  void CountIterations(int64_t n);
  // Fails when a string or list built by the template would exceed the output limit.
  void CheckSize(size_t bytes_or_items);
  const RenderLimits& limits() const { return limits_; }
  // Namespaces created by this render; emptied when it ends, so no reference cycle outlives it.
  void TrackNamespace(const std::shared_ptr<NamespaceObject>& ns);
  // A macro (or a call block's caller) called with `args`: its output.
  Value CallMacro(const MacroFn& fn, CallArgs& args);
  // `loop(items)` inside a recursive loop: the loop body over `iterable`, one level deeper.
  std::string RecurseLoop(const Stmt& s, const Value& iterable, int depth, const std::shared_ptr<Scope>& scope);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow ExecBody(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow Exec(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  void ExecFor(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  // One pass of a for loop over `items` (also a recursive loop's inner call).
  void RunLoop(const Stmt& s, std::vector<Value> items, int depth, const std::shared_ptr<Scope>& scope,
               std::string& out);
  void Assign(const Expr& target, const Value& value, const std::shared_ptr<Scope>& scope);
  Value Eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value EvalInner(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value Lookup(const std::string& name, const std::shared_ptr<Scope>& scope);
  CallArgs EvalArgs(const ArgList& list, const std::shared_ptr<Scope>& scope);
  Value EvalBinary(const std::string& op, const Value& a, const Value& b);
  Value Slice(const Value& obj, const Expr& slice, const std::shared_ptr<Scope>& scope);
  bool Contains(const Value& container, const Value& item);
  void Step(const Node& n);
  Value DefineMacro(const Stmt& s, const std::shared_ptr<Scope>& scope);

  const RenderLimits limits_;
  const DictData& variables_;
  const std::map<std::string, GlobalFn>& globals_;
  std::unordered_map<const Stmt*, std::pair<bool, bool>> macro_uses_;  // varargs, kwargs
  std::shared_ptr<Scope> root_;
  std::vector<std::weak_ptr<NamespaceObject>> namespaces_;
  int64_t steps_ = 0;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  const char* stack_base_ = nullptr;
  int error_line_ = 0;
  int error_column_ = 0;
  bool error_located_ = false;
};

// The builtin filters and tests (filters.cc, tests.cc) and the Python methods of str, dict
// and list values (methods.cc).
FilterFn FindFilter(const std::string& name);
TestFn FindTest(const std::string& name);
// A bound method when `name` is a method of `self`'s type, else nullopt.
std::optional<Value> FindMethod(const Value& self, const std::string& name);

// Python's `str % args` (printf-style): %s %r %d %i %f %e %g %x %o %c %% with flags, width
// and precision, and `%(name)s` with a dict.
std::string PercentFormat(const std::string& format, const Value& args);

}  // namespace ferry::jinja
