#include "template/parser.h"

#include <initializer_list>

namespace ferry::jinja {

namespace {

struct ParseError {
  std::string message;
  int line;
  int column;
};

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body Template() {
    Body body = Subparse({});
    if (!Cur().IsEof()) Fail("unexpected tag");
    return body;
  }

 private:
  struct Cursor {
    const Token* tok;
    bool IsEof() const { return tok->type == TokenType::kEof; }
  };

  Cursor Cur() const { return Cursor{&t_[pos_]}; }
  const Token& Tok() const { return t_[pos_]; }
  const Token& Look() const { return t_[pos_ + 1 < t_.size() ? pos_ + 1 : pos_]; }
  const Token& Next() {
    const Token& tok = t_[pos_];
    if (pos_ + 1 < t_.size()) ++pos_;
    return tok;
  }

  bool IsOp(const Token& tok, std::string_view op) const { return tok.type == TokenType::kOperator && tok.value == op; }
  bool IsName(const Token& tok, std::string_view name) const { return tok.type == TokenType::kName && tok.value == name; }
  bool Op(std::string_view op) const { return IsOp(Tok(), op); }
  bool Name(std::string_view name) const { return IsName(Tok(), name); }
  bool SkipOp(std::string_view op) {
    if (!Op(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!Name(name)) return false;
    Next();
    return true;
  }

  static std::string Describe(const Token& tok) {
    switch (tok.type) {
      case TokenType::kData: return "template data";
      case TokenType::kVariableBegin: return "begin of print statement";
      case TokenType::kVariableEnd: return "end of print statement";
      case TokenType::kBlockBegin: return "begin of statement block";
      case TokenType::kBlockEnd: return "end of statement block";
      case TokenType::kEof: return "end of template";
      default: return tok.value;
    }
  }

  [[noreturn]] void Fail(const std::string& message) const { FailAt(message, Tok()); }
  [[noreturn]] void FailAt(const std::string& message, const Token& tok) const {
    throw ParseError{message, tok.line, tok.column};
  }

  void ExpectOp(std::string_view op) {
    if (!SkipOp(op)) Fail("expected token '" + std::string(op) + "', got '" + Describe(Tok()) + "'");
  }
  const Token& ExpectName() {
    if (Tok().type != TokenType::kName) Fail("expected a name, got '" + Describe(Tok()) + "'");
    return Next();
  }
  void Expect(TokenType type, const char* what) {
    if (Tok().type != type) Fail(std::string("expected ") + what + ", got '" + Describe(Tok()) + "'");
    Next();
  }

  template <typename N>
  static void At(N& node, const Token& tok) {
    node.line = tok.line;
    node.column = tok.column;
  }
  ExprPtr NewExpr(ExprKind kind, const Token& tok) {
    auto e = std::make_unique<Expr>(kind);
    At(*e, tok);
    return e;
  }
  StmtPtr NewStmt(StmtKind kind, const Token& tok) {
    auto s = std::make_unique<Stmt>(kind);
    At(*s, tok);
    return s;
  }

  // Nesting guard: templates are untrusted, recursion must not overflow the stack.
  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth) p_.Fail("the template nests too deeply (more than " +
                                                std::to_string(kMaxParseDepth) + " levels)");
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  // ---- statements ----------------------------------------------------------------------

  // Parses until a `{% name %}` with name in `ends` (left unconsumed, after the `{%`) or EOF.
  Body Subparse(std::initializer_list<std::string_view> ends) {
    Depth depth(*this);
    Body body;
    while (!Cur().IsEof()) {
      const Token& tok = Tok();
      if (tok.type == TokenType::kData) {
        StmtPtr s = NewStmt(StmtKind::kText, tok);
        s->text = tok.value;
        body.push_back(std::move(s));
        Next();
      } else if (tok.type == TokenType::kVariableBegin) {
        Next();
        StmtPtr s = NewStmt(StmtKind::kPrint, tok);
        s->expr = ParseTuple(false, true, {}, false);
        Expect(TokenType::kVariableEnd, "end of print statement");
        body.push_back(std::move(s));
      } else if (tok.type == TokenType::kBlockBegin) {
        Next();
        for (std::string_view end : ends) {
          if (Name(end)) return body;
        }
        body.push_back(Statement());
        Expect(TokenType::kBlockEnd, "end of statement block");
      } else {
        Fail("unexpected '" + Describe(tok) + "'");
      }
    }
    return body;
  }

  // `%}` then the body up to one of `ends`; drops the end name when `drop`.
  Body Statements(std::initializer_list<std::string_view> ends, bool drop) {
    SkipOp(":");
    Expect(TokenType::kBlockEnd, "end of statement block");
    Body body = Subparse(ends);
    if (Cur().IsEof()) {
      std::string names;
      for (std::string_view e : ends) names += (names.empty() ? "'" : " or '") + std::string(e) + "'";
      Fail("unexpected end of template; Jinja was looking for " + names);
    }
    if (drop) Next();
    return body;
  }

  StmtPtr Statement() {
    const Token& tok = Tok();
    if (tok.type != TokenType::kName) Fail("tag name expected");
    const std::string& n = tok.value;
    if (n == "if") return If();
    if (n == "for") return For();
    if (n == "set") return Set();
    if (n == "macro") return Macro();
    if (n == "call") return CallBlock();
    if (n == "filter") return FilterBlock();
    if (n == "with") return With();
    if (n == "block") return Block();
    if (n == "generation") {
      Next();
      StmtPtr s = NewStmt(StmtKind::kScope, tok);
      s->scoped = false;
      s->body = Statements({"endgeneration"}, true);
      return s;
    }
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) Fail("'" + n + "' outside of a for loop");
      Next();
      return NewStmt(n == "break" ? StmtKind::kBreak : StmtKind::kContinue, tok);
    }
    if (n == "include" || n == "import" || n == "from" || n == "extends") {
      Fail("'" + n + "' is not available: a chat template cannot load other templates");
    }
    Fail("Encountered unknown tag '" + n + "'.");
  }

  StmtPtr If() {
    StmtPtr s = NewStmt(StmtKind::kIf, Next());
    s->expr = ParseTuple(false, false, {}, false);
    s->body = Statements({"elif", "else", "endif"}, false);
    while (true) {
      if (SkipName("elif")) {
        ExprPtr test = ParseTuple(false, false, {}, false);
        Body body = Statements({"elif", "else", "endif"}, false);
        s->elifs.emplace_back(std::move(test), std::move(body));
      } else if (SkipName("else")) {
        s->else_body = Statements({"endif"}, true);
        break;
      } else {
        Next();  // endif
        break;
      }
    }
    return s;
  }

  StmtPtr For() {
    StmtPtr s = NewStmt(StmtKind::kFor, Next());
    s->target = AssignTarget(true, false, {"in"});
    if (!SkipName("in")) Fail("expected 'in' in a for loop");
    s->expr = ParseTuple(false, false, {"recursive"}, false);
    if (SkipName("if")) s->filter = Expression(true);
    s->recursive = SkipName("recursive");
    ++loop_depth_;
    s->body = Statements({"endfor", "else"}, false);
    --loop_depth_;
    if (SkipName("else")) {
      s->else_body = Statements({"endfor"}, true);
    } else {
      Next();
    }
    return s;
  }

  StmtPtr Set() {
    const Token& tok = Next();
    ExprPtr target = AssignTarget(true, true, {});
    if (SkipOp("=")) {
      StmtPtr s = NewStmt(StmtKind::kSet, tok);
      s->target = std::move(target);
      s->expr = ParseTuple(false, true, {}, false);
      return s;
    }
    StmtPtr s = NewStmt(StmtKind::kSetBlock, tok);
    s->target = std::move(target);
    if (Op("|")) s->expr = Filters(nullptr, false);
    s->body = Statements({"endset"}, true);
    return s;
  }

  void Signature(Stmt& s) {
    ExpectOp("(");
    while (!Op(")")) {
      if (!s.params.empty()) ExpectOp(",");
      const Token& name = ExpectName();
      if (SkipOp("=")) {
        s.defaults.push_back(Expression(true));
      } else if (!s.defaults.empty()) {
        FailAt("non-default argument follows default argument", name);
      }
      s.params.push_back(name.value);
    }
    ExpectOp(")");
  }

  StmtPtr Macro() {
    StmtPtr s = NewStmt(StmtKind::kMacro, Next());
    s->text = ExpectName().value;
    Signature(*s);
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = Statements({"endmacro"}, true);
    loop_depth_ = saved;
    return s;
  }

  StmtPtr CallBlock() {
    StmtPtr s = NewStmt(StmtKind::kCallBlock, Next());
    if (Op("(")) Signature(*s);
    s->expr = Expression(true);
    if (s->expr->kind != ExprKind::kCall) Fail("expected a call after 'call'");
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = Statements({"endcall"}, true);
    loop_depth_ = saved;
    return s;
  }

  StmtPtr FilterBlock() {
    StmtPtr s = NewStmt(StmtKind::kFilterBlock, Next());
    s->expr = Filters(nullptr, true);
    s->body = Statements({"endfilter"}, true);
    return s;
  }

  StmtPtr With() {
    StmtPtr s = NewStmt(StmtKind::kWith, Next());
    while (Tok().type != TokenType::kBlockEnd) {
      if (!s->targets.empty()) ExpectOp(",");
      s->targets.push_back(AssignTarget(true, false, {}));
      ExpectOp("=");
      s->values.push_back(Expression(true));
    }
    s->body = Statements({"endwith"}, true);
    return s;
  }

  StmtPtr Block() {
    StmtPtr s = NewStmt(StmtKind::kScope, Next());
    s->text = ExpectName().value;
    s->scoped = false;
    while (Tok().type == TokenType::kName) {
      if (SkipName("scoped")) {
        s->scoped = true;
      } else if (SkipName("required")) {
      } else {
        break;
      }
    }
    s->body = Statements({"endblock"}, true);
    if (Tok().type == TokenType::kName) {
      if (Tok().value != s->text) Fail("mismatching name with endblock tag: '" + Tok().value + "'");
      Next();
    }
    return s;
  }

  // A name, a tuple of names, or (with_namespace) `ns.attr`.
  ExprPtr AssignTarget(bool with_tuple, bool with_namespace, std::initializer_list<std::string_view> extra_end) {
    if (with_namespace && Tok().type == TokenType::kName && IsOp(Look(), ".")) {
      const Token& name = Next();
      Next();
      ExprPtr e = NewExpr(ExprKind::kNsRef, name);
      e->a = NewExpr(ExprKind::kName, name);
      e->a->name = name.value;
      e->name = ExpectName().value;
      return e;
    }
    ExprPtr target = with_tuple ? ParseTuple(true, true, extra_end, false) : Primary();
    auto assignable = [](const Expr& e) {
      return e.kind == ExprKind::kName && e.name != "true" && e.name != "false" && e.name != "none" &&
             e.name != "True" && e.name != "False" && e.name != "None";
    };
    if (target->kind == ExprKind::kTuple) {
      for (const ExprPtr& item : target->items) {
        if (!assignable(*item)) FailAt("cannot assign to this expression", Tok());
      }
    } else if (!assignable(*target)) {
      Fail("cannot assign to this expression");
    }
    return target;
  }

  // ---- expressions ---------------------------------------------------------------------

  bool TupleEnd(std::initializer_list<std::string_view> extra) const {
    const Token& tok = Tok();
    if (tok.type == TokenType::kVariableEnd || tok.type == TokenType::kBlockEnd || IsOp(tok, ")")) return true;
    for (std::string_view e : extra) {
      if (IsName(tok, e)) return true;
    }
    return false;
  }

  ExprPtr ParseTuple(bool simplified, bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                     bool explicit_parens) {
    const Token& start = Tok();
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) ExpectOp(",");
      if (TupleEnd(extra_end)) break;
      args.push_back(simplified ? Primary() : Expression(with_condexpr));
      if (Op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) Fail("expected an expression, got '" + Describe(Tok()) + "'");
    }
    ExprPtr t = NewExpr(ExprKind::kTuple, start);
    t->items = std::move(args);
    return t;
  }

  ExprPtr Expression(bool with_condexpr) {
    Depth depth(*this);
    return with_condexpr ? CondExpr() : Or();
  }

  ExprPtr CondExpr() {
    const Token& start = Tok();
    ExprPtr expr = Or();
    while (SkipName("if")) {
      ExprPtr cond = NewExpr(ExprKind::kCond, start);
      cond->b = Or();
      cond->a = std::move(expr);
      if (SkipName("else")) cond->c = CondExpr();
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr Or() {
    ExprPtr left = And();
    while (Name("or")) {
      ExprPtr e = NewExpr(ExprKind::kOr, Next());
      e->a = std::move(left);
      e->b = And();
      left = std::move(e);
    }
    return left;
  }

  ExprPtr And() {
    ExprPtr left = Not();
    while (Name("and")) {
      ExprPtr e = NewExpr(ExprKind::kAnd, Next());
      e->a = std::move(left);
      e->b = Not();
      left = std::move(e);
    }
    return left;
  }

  ExprPtr Not() {
    if (Name("not")) {
      Depth depth(*this);
      ExprPtr e = NewExpr(ExprKind::kNot, Next());
      e->a = Not();
      return e;
    }
    return Compare();
  }

  ExprPtr Compare() {
    const Token& start = Tok();
    ExprPtr expr = Math1();
    std::vector<std::pair<std::string, ExprPtr>> ops;
    while (true) {
      const Token& tok = Tok();
      if (tok.type == TokenType::kOperator &&
          (tok.value == "==" || tok.value == "!=" || tok.value == "<" || tok.value == "<=" || tok.value == ">" ||
           tok.value == ">=")) {
        Next();
        ops.emplace_back(tok.value, Math1());
      } else if (SkipName("in")) {
        ops.emplace_back("in", Math1());
      } else if (Name("not") && IsName(Look(), "in")) {
        Next();
        Next();
        ops.emplace_back("not in", Math1());
      } else {
        break;
      }
    }
    if (ops.empty()) return expr;
    ExprPtr e = NewExpr(ExprKind::kCompare, start);
    e->a = std::move(expr);
    e->ops = std::move(ops);
    return e;
  }

  ExprPtr Binary(ExprPtr left, const Token& op, ExprPtr right) {
    ExprPtr e = NewExpr(ExprKind::kBinary, op);
    e->name = op.value;
    e->a = std::move(left);
    e->b = std::move(right);
    return e;
  }

  ExprPtr Math1() {
    ExprPtr left = Concat();
    while (Op("+") || Op("-")) {
      const Token& op = Next();
      left = Binary(std::move(left), op, Concat());
    }
    return left;
  }

  ExprPtr Concat() {
    const Token& start = Tok();
    ExprPtr first = Math2();
    if (!Op("~")) return first;
    ExprPtr e = NewExpr(ExprKind::kConcat, start);
    e->items.push_back(std::move(first));
    while (SkipOp("~")) e->items.push_back(Math2());
    return e;
  }

  ExprPtr Math2() {
    ExprPtr left = Pow();
    while (Op("*") || Op("/") || Op("//") || Op("%")) {
      const Token& op = Next();
      left = Binary(std::move(left), op, Pow());
    }
    return left;
  }

  ExprPtr Pow() {
    ExprPtr left = Unary(true);
    while (Op("**")) {
      const Token& op = Next();
      left = Binary(std::move(left), op, Unary(true));
    }
    return left;
  }

  ExprPtr Unary(bool with_filter) {
    Depth depth(*this);
    ExprPtr node;
    if (Op("-") || Op("+")) {
      const Token& op = Next();
      node = NewExpr(op.value == "-" ? ExprKind::kNeg : ExprKind::kPos, op);
      node->a = Unary(false);
    } else {
      node = Primary();
    }
    node = Postfix(std::move(node));
    if (with_filter) node = FilterExpr(std::move(node));
    return node;
  }

  ExprPtr Primary() {
    Depth depth(*this);
    const Token& tok = Tok();
    if (tok.type == TokenType::kName) {
      Next();
      if (tok.value == "true" || tok.value == "false" || tok.value == "True" || tok.value == "False") {
        ExprPtr e = NewExpr(ExprKind::kConst, tok);
        e->value = Value(tok.value == "true" || tok.value == "True");
        return e;
      }
      if (tok.value == "none" || tok.value == "None") {
        ExprPtr e = NewExpr(ExprKind::kConst, tok);
        e->value = Value::None();
        return e;
      }
      ExprPtr e = NewExpr(ExprKind::kName, tok);
      e->name = tok.value;
      return e;
    }
    if (tok.type == TokenType::kString) {
      std::string s;
      while (Tok().type == TokenType::kString) s += Next().value;
      ExprPtr e = NewExpr(ExprKind::kConst, tok);
      e->value = Value(std::move(s));
      return e;
    }
    if (tok.type == TokenType::kInteger || tok.type == TokenType::kFloat) {
      Next();
      ExprPtr e = NewExpr(ExprKind::kConst, tok);
      e->value = tok.type == TokenType::kInteger ? Value(tok.int_value) : Value(tok.float_value);
      return e;
    }
    if (SkipOp("(")) {
      ExprPtr e = ParseTuple(false, true, {}, true);
      ExpectOp(")");
      return e;
    }
    if (Op("[")) {
      ExprPtr e = NewExpr(ExprKind::kList, Next());
      while (!Op("]")) {
        if (!e->items.empty()) ExpectOp(",");
        if (Op("]")) break;
        e->items.push_back(Expression(true));
      }
      ExpectOp("]");
      return e;
    }
    if (Op("{")) {
      ExprPtr e = NewExpr(ExprKind::kDict, Next());
      while (!Op("}")) {
        if (!e->items.empty()) ExpectOp(",");
        if (Op("}")) break;
        e->items.push_back(Expression(true));
        ExpectOp(":");
        e->items.push_back(Expression(true));
      }
      ExpectOp("}");
      return e;
    }
    Fail("unexpected '" + Describe(tok) + "'");
  }

  ExprPtr Postfix(ExprPtr node) {
    while (true) {
      if (Op(".") || Op("[")) {
        node = Subscript(std::move(node));
      } else if (Op("(")) {
        node = Call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr FilterExpr(ExprPtr node) {
    while (true) {
      if (Op("|")) {
        node = Filters(std::move(node), false);
      } else if (Name("is")) {
        node = Test(std::move(node));
      } else if (Op("(")) {
        node = Call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr Subscript(ExprPtr node) {
    const Token& tok = Next();
    if (tok.value == ".") {
      const Token& attr = Next();
      if (attr.type == TokenType::kName) {
        ExprPtr e = NewExpr(ExprKind::kGetAttr, tok);
        e->a = std::move(node);
        e->name = attr.value;
        return e;
      }
      if (attr.type != TokenType::kInteger) FailAt("expected name or number", attr);
      ExprPtr e = NewExpr(ExprKind::kGetItem, tok);
      e->a = std::move(node);
      e->b = NewExpr(ExprKind::kConst, attr);
      e->b->value = Value(attr.int_value);
      return e;
    }
    std::vector<ExprPtr> args;
    while (!Op("]")) {
      if (!args.empty()) ExpectOp(",");
      args.push_back(Subscribed());
    }
    ExpectOp("]");
    ExprPtr e = NewExpr(ExprKind::kGetItem, tok);
    e->a = std::move(node);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      e->b = NewExpr(ExprKind::kTuple, tok);
      e->b->items = std::move(args);
    }
    return e;
  }

  ExprPtr Subscribed() {
    const Token& start = Tok();
    ExprPtr first;
    if (!Op(":")) {
      ExprPtr node = Expression(true);
      if (!Op(":")) return node;
      first = std::move(node);
    }
    Next();  // ':'
    ExprPtr slice = NewExpr(ExprKind::kSlice, start);
    slice->a = std::move(first);
    if (!Op(":") && !Op("]") && !Op(",")) slice->b = Expression(true);
    if (SkipOp(":")) {
      if (!Op("]") && !Op(",")) slice->c = Expression(true);
    }
    return slice;
  }

  ArgList CallArgs() {
    const Token& open = Tok();
    ExpectOp("(");
    ArgList out;
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) FailAt("invalid syntax for function call expression", open);
    };
    while (!Op(")")) {
      if (require_comma) {
        ExpectOp(",");
        if (Op(")")) break;
      }
      if (SkipOp("*")) {
        ensure(out.dyn_args == nullptr && out.dyn_kwargs == nullptr);
        out.dyn_args = Expression(true);
      } else if (SkipOp("**")) {
        ensure(out.dyn_kwargs == nullptr);
        out.dyn_kwargs = Expression(true);
      } else if (Tok().type == TokenType::kName && IsOp(Look(), "=")) {
        ensure(out.dyn_kwargs == nullptr);
        std::string key = Next().value;
        Next();
        out.kwargs.emplace_back(std::move(key), Expression(true));
      } else {
        ensure(out.dyn_args == nullptr && out.dyn_kwargs == nullptr && out.kwargs.empty());
        out.args.push_back(Expression(true));
      }
      require_comma = true;
    }
    ExpectOp(")");
    return out;
  }

  ExprPtr Call(ExprPtr node) {
    ExprPtr e = NewExpr(ExprKind::kCall, Tok());
    e->line = node->line;  // errors point at the callee, not at its parenthesis
    e->column = node->column;
    e->a = std::move(node);
    e->call = CallArgs();
    return e;
  }

  // `|name(args)` repeated; `start_inline`: the first filter has no leading `|` (filter blocks).
  ExprPtr Filters(ExprPtr node, bool start_inline) {
    while (Op("|") || start_inline) {
      if (!start_inline) Next();
      start_inline = false;
      const Token& name = ExpectName();
      ExprPtr e = NewExpr(ExprKind::kFilter, name);
      e->name = name.value;
      while (SkipOp(".")) e->name += "." + ExpectName().value;
      if (Op("(")) e->call = CallArgs();
      e->a = std::move(node);
      node = std::move(e);
    }
    return node;
  }

  ExprPtr Test(ExprPtr node) {
    const Token& is = Next();
    const bool negated = SkipName("not");
    const Token& name = ExpectName();
    ExprPtr e = NewExpr(ExprKind::kTest, name);
    e->name = name.value;
    while (SkipOp(".")) e->name += "." + ExpectName().value;
    const Token& cur = Tok();
    const bool arg_start = cur.type == TokenType::kName || cur.type == TokenType::kString ||
                           cur.type == TokenType::kInteger || cur.type == TokenType::kFloat || IsOp(cur, "(") ||
                           IsOp(cur, "[") || IsOp(cur, "{");
    if (IsOp(cur, "(")) {
      e->call = CallArgs();
    } else if (arg_start && !IsName(cur, "else") && !IsName(cur, "or") && !IsName(cur, "and")) {
      if (IsName(cur, "is")) Fail("You cannot chain multiple tests with is");
      e->call.args.push_back(Postfix(Primary()));
    }
    e->a = std::move(node);
    if (!negated) return e;
    ExprPtr n = NewExpr(ExprKind::kNot, is);
    n->a = std::move(e);
    return n;
  }

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<Body> Parse(const std::vector<Token>& tokens) {
  if (tokens.empty()) return Body{};
  Parser parser(tokens);
  try {
    return parser.Template();
  } catch (const ParseError& e) {
    return InvalidArgument("TemplateSyntaxError: " + e.message + " (" + Where(e.line, e.column) + ")");
  }
}

}  // namespace ferry::jinja
