// The syntax tree of a template: expressions and statements as Jinja's parser builds them.
// Every node knows where it starts in the source, so errors carry a line and column.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace ferry::jinja {

struct Node {
  int line = 1;
  int column = 1;
};

enum class ExprKind {
  kConst,
  kName,
  kList,
  kTuple,
  kDict,
  kGetAttr,
  kGetItem,
  kSlice,
  kCall,
  kFilter,
  kTest,
  kNot,
  kNeg,
  kPos,
  kBinary,
  kAnd,
  kOr,
  kConcat,
  kCompare,
  kCond,
  kNsRef,  // assignment target `ns.attr`
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// Positional and keyword arguments of a call, filter or test, with *args and **kwargs.
struct ArgList {
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args;
  ExprPtr dyn_kwargs;
};

struct Expr : Node {
  explicit Expr(ExprKind k) : kind(k) {}
  ExprKind kind;
  Value value;                   // kConst
  std::string name;              // kName, kGetAttr (attribute), kFilter/kTest (name), kBinary/kCompare op, kNsRef attr
  std::vector<ExprPtr> items;    // kList, kTuple, kConcat; kDict: key, value, key, value, ...
  ExprPtr a;                     // operand / object / left / callee / condition's `then`
  ExprPtr b;                     // right / key / condition's test
  ExprPtr c;                     // slice step / condition's `else`
  ArgList call;                  // kCall, kFilter, kTest
  std::vector<std::pair<std::string, ExprPtr>> ops;  // kCompare: (op, operand) after `a`
};

enum class StmtKind {
  kText,
  kPrint,
  kIf,
  kFor,
  kSet,
  kSetBlock,
  kMacro,
  kCallBlock,
  kFilterBlock,
  kWith,
  kBreak,
  kContinue,
  kScope,  // {% block %} and {% generation %}: the body, in place
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt : Node {
  explicit Stmt(StmtKind k) : kind(k) {}
  StmtKind kind;
  std::string text;           // kText; kMacro name
  ExprPtr expr;               // kPrint, kSet value, kFor iterable, kIf test, kCallBlock call, kFilterBlock/kSetBlock filter
  ExprPtr target;             // kFor, kSet, kSetBlock
  ExprPtr filter;             // kFor `if` condition
  Body body;
  Body else_body;             // kIf (after the elifs), kFor
  std::vector<std::pair<ExprPtr, Body>> elifs;  // kIf
  bool recursive = false;     // kFor
  bool scoped = true;         // kScope: a new scope for assignments
  std::vector<std::string> params;  // kMacro, kCallBlock
  std::vector<ExprPtr> defaults;    // right-aligned with params
  std::vector<ExprPtr> targets;     // kWith
  std::vector<ExprPtr> values;      // kWith
};

}  // namespace ferry::jinja
