// The Jinja parser: jinja2's grammar (statements, expression precedence, filters and tests)
// for the subset documented in docs/tokenizer.md; everything else is a syntax error.
#include <algorithm>
#include <cstdint>
#include <set>

#include "tokenizer/jinja_internal.h"

namespace odyssey::jinja::detail {
namespace {

// jinja2's built-in filters and tests, and the ones transformers adds: a name outside these is
// an error at parse time (outside if-blocks, as jinja2 does), a known one the engine lacks is an
// error when it runs.
const std::set<std::string> kJinjaFilters = {
    "abs",    "attr",       "batch",       "capitalize", "center",   "count",
    "d",      "default",    "dictsort",    "e",          "escape",   "filesizeformat",
    "first",  "float",      "forceescape", "format",     "groupby",  "indent",
    "int",    "items",      "join",        "last",       "length",   "list",
    "lower",  "map",        "max",         "min",        "pprint",   "random",
    "reject", "rejectattr", "replace",     "reverse",    "round",    "safe",
    "select", "selectattr", "slice",       "sort",       "string",   "striptags",
    "sum",    "title",      "tojson",      "trim",       "truncate", "unique",
    "upper",  "urlencode",  "urlize",      "wordcount",  "wordwrap", "xmlattr"};
const std::set<std::string> kJinjaTests = {
    "boolean",  "callable", "defined", "divisibleby", "eq",   "equalto",   "==",     "escaped",
    "even",     "false",    "filter",  "float",       "ge",   ">=",        "gt",     "greaterthan",
    ">",        "in",       "integer", "iterable",    "le",   "<=",        "lower",  "lt",
    "lessthan", "<",        "mapping", "ne",          "!=",   "none",      "number", "odd",
    "sameas",   "sequence", "string",  "test",        "true", "undefined", "upper"};

constexpr int kMaxDepth = 200;

// What jinja2's optimizer can fold at compile time: literals and operations on them.
// A `{{ }}` whose expression is constant is evaluated by jinja2's code generator
// (Node.as_const), where subscripts and slices go through the sandbox's getitem: a slice of a
// non-sequence gives Undefined there instead of raising. Marks those slices.
void mark_const_slices(Expr& e) {
  if (e.k == EK::Slice) e.constant = true;
  for (auto& a : e.args)
    if (a) mark_const_slices(*a);
  for (auto& kv : e.kwargs) mark_const_slices(*kv.second);
}

bool is_const(const Expr& e) {
  switch (e.k) {
    case EK::Literal: return true;
    case EK::Name:
    case EK::Call: return false;
    case EK::Filter:
    case EK::Test:
      if (!e.kwargs.empty()) return false;
      [[fallthrough]];
    default:
      for (const auto& a : e.args)
        if (a && !is_const(*a)) return false;
      for (const auto& kv : e.kwargs)
        if (!is_const(*kv.second)) return false;
      return true;
  }
}

class Parser {
 public:
  Parser(std::vector<Token> toks, const std::string& name) : t_(std::move(toks)), name_(name) {}

  std::unique_ptr<Program> run() {
    char base = 0;
    stack_base_ = reinterpret_cast<std::uintptr_t>(&base);
    auto prog = std::make_unique<Program>();
    prog->name = name_;
    prog->body = subparse({});
    if (cur().t != Tok::Eof) fail(cur(), "unexpected token");
    prog->has_generation = has_generation_;
    return prog;
  }

 private:
  std::vector<Token> t_;
  std::size_t i_ = 0;
  const std::string& name_;
  int depth_ = 0;
  bool soft_ = false;
  bool has_generation_ = false;
  std::vector<Stmt*> macros_;  // open macro definitions (varargs/kwargs/caller use)
  int loop_depth_ = 0;

  std::uintptr_t stack_base_ = 0;

  struct Depth {
    Parser* p;
    explicit Depth(Parser* pp, const Token& at) : p(pp) {
      char probe = 0;
      const auto here = reinterpret_cast<std::uintptr_t>(&probe);
      const std::uintptr_t used = here > p->stack_base_ ? here - p->stack_base_ : p->stack_base_ - here;
      if (++p->depth_ > kMaxDepth || used > (std::uintptr_t{2} << 20)) {
        --p->depth_;
        p->fail(at, "the template is nested too deeply");
      }
    }
    ~Depth() { --p->depth_; }
  };

  const Token& cur() const { return t_[i_]; }
  const Token& look(std::size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  const Token& next() {
    const Token& k = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return k;
  }

  [[noreturn]] void fail(const Token& at, const std::string& msg) const {
    throw Error(ErrorKind::Syntax, name_, at.line, at.col, msg);
  }

  static std::string describe(const Token& k) {
    switch (k.t) {
      case Tok::Eof: return "end of template";
      case Tok::Data: return "template data";
      case Tok::VarBegin: return "'{{'";
      case Tok::VarEnd: return "end of print statement";
      case Tok::BlockBegin: return "'{%'";
      case Tok::BlockEnd: return "end of statement block";
      case Tok::String: return "string";
      case Tok::Int: return "integer";
      case Tok::Float: return "float";
      default: return "'" + k.v + "'";
    }
  }

  bool is_op(const char* op) const { return cur().t == Tok::Op && cur().v == op; }
  bool is_name(const char* n) const { return cur().t == Tok::Name && cur().v == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(cur(), std::string("expected '") + op + "', got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().t != Tok::Name) fail(cur(), "expected a name, got " + describe(cur()));
    return next().v;
  }
  void expect_block_end() {
    if (cur().t != Tok::BlockEnd) fail(cur(), "expected the end of the statement block, got " + describe(cur()));
    next();
  }

  ExprP node(EK k, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->k = k;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  StmtP stmt(SK k, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->k = k;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  // ---- statements ----------------------------------------------------------------------
  // Parses until a block tag whose name is in `ends` (the tag's name is left current).
  Body subparse(const std::set<std::string>& ends) {
    Body body;
    while (true) {
      const Token& k = cur();
      if (k.t == Tok::Eof) {
        if (!ends.empty()) {
          std::string want;
          for (const auto& e : ends) want += (want.empty() ? "'" : " or '") + e + "'";
          fail(k, "unexpected end of template: expected " + want);
        }
        return body;
      }
      if (k.t == Tok::Data) {
        auto s = stmt(SK::Text, k);
        s->text = k.v;
        next();
        body.push_back(std::move(s));
      } else if (k.t == Tok::VarBegin) {
        auto s = stmt(SK::Output, k);
        next();
        s->expr = parse_tuple(true, {});
        if (is_const(*s->expr)) mark_const_slices(*s->expr);
        if (cur().t != Tok::VarEnd) fail(cur(), "expected the end of the print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (k.t == Tok::BlockBegin) {
        const Token& nm = look();
        if (nm.t == Tok::Name && ends.count(nm.v)) {
          next();
          return body;
        }
        next();
        body.push_back(parse_statement(ends));
      } else {
        fail(k, "unexpected " + describe(k));
      }
    }
  }

  StmtP parse_statement(const std::set<std::string>& ends) {
    const Token& k = cur();
    Depth d(this, k);
    if (k.t != Tok::Name) fail(k, "tag name expected");
    const std::string n = k.v;
    if (n == "if") return parse_if();
    if (n == "for") return parse_for();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "call") return parse_call_block();
    if (n == "filter") return parse_filter_block();
    if (n == "generation") return parse_generation();
    if (n == "with") return parse_with();
    if (n == "print") {
      auto s = stmt(SK::Output, k);
      next();
      s->expr = parse_tuple(true, {});
      expect_block_end();
      return s;
    }
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail(k, "'" + n + "' outside of a loop");
      auto s = stmt(n == "break" ? SK::Break : SK::Continue, k);
      next();
      expect_block_end();
      return s;
    }
    if (n == "block" || n == "extends" || n == "include" || n == "import" || n == "from" || n == "autoescape")
      fail(k, "the '" + n + "' tag is not supported by Odyssey's Jinja engine (chat templates are one file)");
    std::string msg = "Encountered unknown tag '" + n + "'.";
    if (!ends.empty()) {
      std::string want;
      for (const auto& e : ends) want += (want.empty() ? "'" : " or '") + e + "'";
      msg += " Jinja was looking for the following tags: " + want + ".";
    }
    fail(k, msg);
  }

  Body body_until(const std::set<std::string>& ends, bool soft) {
    const bool saved = soft_;
    soft_ = soft;
    Body b = subparse(ends);
    soft_ = saved;
    return b;
  }

  StmtP parse_if() {
    auto s = stmt(SK::If, cur());
    next();
    while (true) {
      ExprP c = parse_tuple(false, {});
      expect_block_end();
      Body b = body_until({"elif", "else", "endif"}, true);
      s->branches.emplace_back(std::move(c), std::move(b));
      const std::string tag = next().v;
      if (tag == "elif") continue;
      if (tag == "else") {
        expect_block_end();
        Body e = body_until({"endif"}, true);
        s->branches.emplace_back(nullptr, std::move(e));
        next();
      }
      expect_block_end();
      return s;
    }
  }

  ExprP parse_assign_target(bool allow_tuple, bool name_only, const std::set<std::string>& extra_end) {
    const Token& at = cur();
    auto one = [&]() -> ExprP {
      const Token& k = cur();
      if (k.t != Tok::Name) fail(k, "can't assign to " + describe(k));
      if (!name_only && look().t == Tok::Op && look().v == ".") {
        auto base = node(EK::Name, k);
        base->name = next().v;
        next();
        auto a = node(EK::Attr, k);
        a->name = expect_name();
        a->args.push_back(std::move(base));
        return a;
      }
      if (k.v == "true" || k.v == "false" || k.v == "none" || k.v == "True" || k.v == "False" || k.v == "None")
        fail(k, "can't assign to '" + k.v + "'");
      auto e = node(EK::Name, k);
      e->name = next().v;
      return e;
    };
    if (!allow_tuple) return one();
    // A tuple of names, with or without parentheses.
    if (is_op("(")) {
      next();
      auto t = node(EK::Tuple, at);
      while (!is_op(")")) {
        t->args.push_back(one());
        if (!skip_op(",")) break;
      }
      expect_op(")");
      return t;
    }
    auto first = one();
    if (!is_op(",")) return first;
    auto t = node(EK::Tuple, at);
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().t != Tok::Name || extra_end.count(cur().v)) break;
      t->args.push_back(one());
    }
    return t;
  }

  StmtP parse_for() {
    auto s = stmt(SK::For, cur());
    next();
    s->target = parse_assign_target(true, true, {"in"});
    if (!skip_name("in")) fail(cur(), "expected 'in', got " + describe(cur()));
    s->expr = parse_tuple(false, {"recursive"});
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) fail(cur(), "recursive for loops are not supported by Odyssey's Jinja engine");
    expect_block_end();
    ++loop_depth_;
    s->body = body_until({"endfor", "else"}, false);
    --loop_depth_;
    if (next().v == "else") {
      expect_block_end();
      s->else_body = body_until({"endfor"}, false);
      next();
    }
    expect_block_end();
    return s;
  }

  StmtP parse_set() {
    const Token& at = cur();
    next();
    auto target = parse_assign_target(true, false, {});
    if (skip_op("=")) {
      auto s = stmt(SK::Set, at);
      s->target = std::move(target);
      s->expr = parse_tuple(true, {});
      expect_block_end();
      return s;
    }
    auto s = stmt(SK::SetBlock, at);
    if (target->k != EK::Name) fail(at, "a block set assigns one name");
    s->target = std::move(target);
    if (is_op("|")) s->expr = parse_filter_chain();
    expect_block_end();
    s->body = body_until({"endset"}, false);
    next();
    expect_block_end();
    return s;
  }

  // `|f1(args)|f2` applied to a placeholder subject (a Name with an empty name).
  ExprP parse_filter_chain() {
    auto subject = node(EK::Name, cur());
    ExprP e = std::move(subject);
    while (is_op("|")) e = parse_filter(std::move(e), true);
    return e;
  }

  void parse_signature(Stmt* s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      const Token& k = cur();
      std::string p = expect_name();
      for (const auto& q : s->params)
        if (q == p) fail(k, "duplicate argument '" + p + "'");
      s->params.push_back(p);
      if (skip_op("=")) {
        s->defaults.push_back(parse_expression(true));
      } else if (!s->defaults.empty()) {
        fail(k, "non-default argument follows default argument");
      }
    }
    next();
  }

  StmtP parse_macro() {
    auto s = stmt(SK::Macro, cur());
    next();
    s->name = expect_name();
    parse_signature(s.get());
    expect_block_end();
    macros_.push_back(s.get());
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    s->body = body_until({"endmacro"}, false);
    loop_depth_ = saved_loops;
    macros_.pop_back();
    next();
    if (cur().t == Tok::Name) next();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  StmtP parse_call_block() {
    auto s = stmt(SK::CallBlock, cur());
    next();
    if (is_op("(")) {
      s->params.clear();
      parse_signature(s.get());
    }
    s->expr = parse_expression(true);
    if (s->expr->k != EK::Call) fail(cur(), "expected a call after 'call'");
    expect_block_end();
    macros_.push_back(s.get());
    s->body = body_until({"endcall"}, false);
    macros_.pop_back();
    next();
    expect_block_end();
    return s;
  }

  StmtP parse_filter_block() {
    auto s = stmt(SK::FilterBlock, cur());
    next();
    // `{% filter trim %}`: the chain starts without a leading pipe.
    auto subject = node(EK::Name, cur());
    ExprP e = parse_filter(std::move(subject), false);
    while (is_op("|")) e = parse_filter(std::move(e), true);
    s->expr = std::move(e);
    expect_block_end();
    s->body = body_until({"endfilter"}, false);
    next();
    expect_block_end();
    return s;
  }

  StmtP parse_generation() {
    auto s = stmt(SK::Generation, cur());
    next();
    expect_block_end();
    has_generation_ = true;
    s->body = body_until({"endgeneration"}, soft_);
    next();
    expect_block_end();
    return s;
  }

  StmtP parse_with() {
    auto s = stmt(SK::With, cur());
    next();
    while (cur().t != Tok::BlockEnd) {
      if (!s->assigns.empty()) expect_op(",");
      auto target = parse_assign_target(false, true, {});
      expect_op("=");
      s->assigns.emplace_back(std::move(target), parse_expression(true));
    }
    expect_block_end();
    s->body = body_until({"endwith"}, false);
    next();
    expect_block_end();
    return s;
  }

  // ---- expressions ---------------------------------------------------------------------
  ExprP parse_tuple(bool with_condexpr, const std::set<std::string>& extra_end) {
    const Token& at = cur();
    std::vector<ExprP> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      // tuple end?
      if (cur().t == Tok::VarEnd || cur().t == Tok::BlockEnd || is_op(")") ||
          (cur().t == Tok::Name && extra_end.count(cur().v)))
        break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (items.empty()) fail(at, "Expected an expression, got " + describe(cur()));
      return std::move(items[0]);
    }
    auto t = node(EK::Tuple, at);
    t->args = std::move(items);
    return t;
  }

  ExprP parse_expression(bool with_condexpr) {
    Depth d(this, cur());
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprP parse_condexpr() {
    ExprP e = parse_or();
    while (is_name("if")) {
      const Token& at = next();
      const bool saved = soft_;
      soft_ = true;
      auto c = node(EK::Cond, at);
      ExprP test = parse_or();
      ExprP other;
      if (skip_name("else")) other = parse_condexpr();
      soft_ = saved;
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(e));
      if (other) c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprP parse_or() {
    ExprP e = parse_and();
    while (is_name("or")) {
      auto o = node(EK::Or, next());
      o->args.push_back(std::move(e));
      o->args.push_back(parse_and());
      e = std::move(o);
    }
    return e;
  }
  ExprP parse_and() {
    ExprP e = parse_not();
    while (is_name("and")) {
      auto o = node(EK::And, next());
      o->args.push_back(std::move(e));
      o->args.push_back(parse_not());
      e = std::move(o);
    }
    return e;
  }
  ExprP parse_not() {
    if (is_name("not")) {
      Depth d(this, cur());
      auto n = node(EK::Not, next());
      n->args.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }
  ExprP parse_compare() {
    const Token& at = cur();
    ExprP e = parse_math1();
    ExprP cmp;
    while (true) {
      std::string op;
      if (cur().t == Tok::Op && (cur().v == "==" || cur().v == "!=" || cur().v == "<" || cur().v == "<=" ||
                                 cur().v == ">" || cur().v == ">=")) {
        op = next().v;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && look().t == Tok::Name && look().v == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(EK::Compare, at);
        cmp->args.push_back(std::move(e));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }
  ExprP binary(const char* op, ExprP l, ExprP r, const Token& at) {
    auto b = node(EK::Binary, at);
    b->name = op;
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return b;
  }
  ExprP parse_math1() {
    ExprP e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = cur();
      const std::string op = next().v;
      e = binary(op.c_str(), std::move(e), parse_concat(), at);
    }
    return e;
  }
  ExprP parse_concat() {
    const Token& at = cur();
    ExprP e = parse_math2();
    if (!is_op("~")) return e;
    auto c = node(EK::Concat, at);
    c->args.push_back(std::move(e));
    while (skip_op("~")) c->args.push_back(parse_math2());
    return c;
  }
  ExprP parse_math2() {
    ExprP e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = cur();
      const std::string op = next().v;
      e = binary(op.c_str(), std::move(e), parse_pow(), at);
    }
    return e;
  }
  ExprP parse_pow() {
    ExprP e = parse_unary(true);
    while (is_op("**")) {
      const Token& at = next();
      e = binary("**", std::move(e), parse_unary(true), at);
    }
    return e;
  }
  ExprP parse_unary(bool with_filter) {
    Depth d(this, cur());
    ExprP e;
    if (is_op("-") || is_op("+")) {
      const Token& at = cur();
      const bool neg = next().v == "-";
      e = node(neg ? EK::Neg : EK::Pos, at);
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprP parse_primary() {
    const Token& k = cur();
    if (k.t == Tok::Name) {
      next();
      if (k.v == "true" || k.v == "True") return literal(Value::boolean(true), k);
      if (k.v == "false" || k.v == "False") return literal(Value::boolean(false), k);
      if (k.v == "none" || k.v == "None") return literal(Value::none(), k);
      auto e = node(EK::Name, k);
      e->name = k.v;
      if (k.v == "varargs" || k.v == "kwargs" || k.v == "caller")
        for (Stmt* m : macros_) {
          if (k.v == "varargs") m->uses_varargs = true;
          if (k.v == "kwargs") m->uses_kwargs = true;
          if (k.v == "caller") m->uses_caller = true;
        }
      return e;
    }
    if (k.t == Tok::String) {
      std::string s = next().v;
      while (cur().t == Tok::String) s += next().v;
      return literal(Value::string(std::move(s)), k);
    }
    if (k.t == Tok::Int) {
      next();
      return literal(Value::integer(k.ival), k);
    }
    if (k.t == Tok::Float) {
      next();
      return literal(Value::number(k.fval), k);
    }
    if (is_op("(") && look().t == Tok::Op && look().v == ")") {
      auto e = node(EK::Tuple, next());
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprP e = parse_tuple(true, {});
      if (!is_op(")")) fail(cur(), "expected ')', got " + describe(cur()));
      // `()` is an empty tuple
      next();
      return e;
    }
    if (is_op("[")) {
      auto e = node(EK::List, next());
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression(true));
      }
      next();
      return e;
    }
    if (is_op("{")) {
      auto e = node(EK::Dict, next());
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression(true));
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
      next();
      return e;
    }
    fail(k, "unexpected " + describe(k));
  }

  ExprP literal(Value v, const Token& at) {
    auto e = node(EK::Literal, at);
    e->lit = std::move(v);
    return e;
  }

  ExprP parse_postfix(ExprP e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprP parse_filter_expr(ExprP e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter(std::move(e), true);
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprP parse_subscript(ExprP e) {
    Depth d(this, cur());
    // Accesses and calls are reported at their subject's start.
    Token at = next();
    at.line = e->line;
    at.col = e->col;
    if (at.v == ".") {
      const Token& k = cur();
      if (k.t == Tok::Name) {
        auto a = node(EK::Attr, at);
        a->name = next().v;
        a->args.push_back(std::move(e));
        return a;
      }
      if (k.t == Tok::Int) {
        auto it = node(EK::Item, at);
        it->args.push_back(std::move(e));
        it->args.push_back(literal(Value::integer(k.ival), k));
        next();
        return it;
      }
      fail(k, "expected a name or number after '.', got " + describe(k));
    }
    // [ ... ]
    std::vector<ExprP> subs;
    while (!is_op("]")) {
      if (!subs.empty()) {
        expect_op(",");
        if (is_op("]")) break;
      }
      subs.push_back(parse_subscribed());
    }
    next();
    ExprP index;
    if (subs.size() == 1) {
      index = std::move(subs[0]);
    } else {
      index = node(EK::Tuple, at);
      index->args = std::move(subs);
    }
    if (index->k == EK::Slice) {
      index->args.insert(index->args.begin(), std::move(e));
      return index;
    }
    auto it = node(EK::Item, at);
    it->args.push_back(std::move(e));
    it->args.push_back(std::move(index));
    return it;
  }

  // `a`, or a slice `a:b:c` (Slice with args [start, stop, step], null where left out).
  ExprP parse_subscribed() {
    const Token& at = cur();
    ExprP start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();  // ':'
    auto s = node(EK::Slice, at);
    ExprP stop, step;
    if (!is_op("]") && !is_op(",") && !is_op(":")) stop = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) step = parse_expression(true);
    }
    s->args.push_back(std::move(start));
    s->args.push_back(std::move(stop));
    s->args.push_back(std::move(step));
    return s;
  }

  void parse_call_args(Expr* c) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**"))
        fail(cur(), "*args and **kwargs in calls are not supported by Odyssey's Jinja engine");
      if (cur().t == Tok::Name && look().t == Tok::Op && look().v == "=") {
        std::string key = next().v;
        next();
        for (const auto& kv : c->kwargs)
          if (kv.first == key) fail(cur(), "keyword argument repeated: " + key);
        c->kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!c->kwargs.empty()) fail(cur(), "positional argument follows keyword argument");
        c->args.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprP parse_call(ExprP e) {
    auto c = node(EK::Call, cur());
    c->line = e->line;
    c->col = e->col;
    c->args.push_back(std::move(e));
    parse_call_args(c.get());
    return c;
  }

  ExprP parse_filter(ExprP subject, bool leading_pipe) {
    Depth d(this, cur());
    if (leading_pipe) expect_op("|");
    const Token& at = cur();
    std::string name = expect_name();
    while (is_op(".")) {
      next();
      name += "." + expect_name();
    }
    if (!kJinjaFilters.count(name) && !soft_) fail(at, "No filter named '" + name + "'.");
    auto f = node(EK::Filter, at);
    f->name = name;
    f->soft = soft_;
    f->args.push_back(std::move(subject));
    if (is_op("(")) parse_call_args(f.get());
    return f;
  }

  ExprP parse_test(ExprP subject) {
    Depth d(this, cur());
    next();  // is
    const bool negated = skip_name("not");
    const Token& at = cur();
    std::string name;
    if (cur().t == Tok::Name) {
      name = next().v;
      while (is_op(".")) {
        next();
        name += "." + expect_name();
      }
    } else {
      fail(at, "expected a test name after 'is', got " + describe(at));
    }
    if (!kJinjaTests.count(name) && !soft_) fail(at, "No test named '" + name + "'.");
    auto t = node(EK::Test, at);
    t->name = name;
    t->negated = negated;
    t->soft = soft_;
    t->args.push_back(std::move(subject));
    const Token& k = cur();
    if (is_op("(")) {
      parse_call_args(t.get());
    } else if ((k.t == Tok::Name || k.t == Tok::String || k.t == Tok::Int || k.t == Tok::Float || is_op("[") ||
                is_op("{")) &&
               !(k.t == Tok::Name && (k.v == "else" || k.v == "or" || k.v == "and"))) {
      if (k.t == Tok::Name && k.v == "is") fail(k, "You cannot chain multiple tests with is");
      ExprP arg = parse_primary();
      arg = parse_postfix(std::move(arg));
      t->args.push_back(std::move(arg));
    }
    return t;
  }
};

}  // namespace

std::unique_ptr<Program> parse(std::vector<Token> tokens, const std::string& name) {
  Parser p(std::move(tokens), name);
  return p.run();
}

}  // namespace odyssey::jinja::detail
