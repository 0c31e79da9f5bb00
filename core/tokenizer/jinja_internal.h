// Internals of the Jinja engine (jinja.h): values, tokens, the syntax tree. Not a public API.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja.h"

namespace odyssey::jinja::detail {

struct Value;
struct Interp;
struct Expr;
struct Stmt;
using ExprP = std::unique_ptr<Expr>;
using StmtP = std::unique_ptr<Stmt>;
using Body = std::vector<StmtP>;

// Python sequences: what a list-like value is, for repr, len and subscripting.
enum class SeqKind : std::uint8_t { List, Tuple, Generator, DictItems, DictKeys, DictValues, ReverseIter, Range };

struct ListData {
  std::vector<Value> items;
  SeqKind kind = SeqKind::List;
  int depth = 1;  // nesting depth (bounded: deep values would overflow the stack when freed)
  std::int64_t range_start = 0, range_stop = 0, range_step = 1;  // Range: for repr
};
struct DictData {
  std::vector<std::pair<std::string, Value>> items;  // insertion order, unique keys
  int depth = 1;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value v);
};

struct CallArgs;
struct Callable {
  std::string name;  // for messages: "namespace", "macro 'x'", "str.strip"
  std::function<Value(Interp&, CallArgs&)> fn;
};

struct LoopData;

struct Value {
  enum class K : std::uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable, Loop };
  K k = K::Undefined;
  bool b = false;
  std::int64_t i = 0;
  double f = 0;
  std::string s;  // String; for Undefined: the message it raises with when used
  std::shared_ptr<const ListData> list;
  std::shared_ptr<const DictData> dict;
  std::shared_ptr<DictData> ns;  // Namespace (mutable, shared)
  std::shared_ptr<const Callable> call;
  std::shared_ptr<LoopData> loop;
  bool unsafe = false;  // Undefined from a sandbox-refused attribute (SecurityError when used)

  static Value undefined(std::string msg) {
    Value v;
    v.s = std::move(msg);
    return v;
  }
  static Value none() {
    Value v;
    v.k = K::None;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.k = K::Bool;
    v.b = x;
    return v;
  }
  static Value integer(std::int64_t x) {
    Value v;
    v.k = K::Int;
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v;
    v.k = K::Float;
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v;
    v.k = K::String;
    v.s = std::move(x);
    return v;
  }
  static Value make_list(std::vector<Value> items, SeqKind kind = SeqKind::List) {
    Value v;
    v.k = K::List;
    auto d = std::make_shared<ListData>();
    d->items = std::move(items);
    d->kind = kind;
    d->depth = 1 + max_depth(d->items);
    v.list = std::move(d);
    return v;
  }
  static Value make_dict(DictData d) {
    Value v;
    v.k = K::Dict;
    int m = 0;
    for (const auto& kv : d.items) m = std::max(m, kv.second.depth());
    d.depth = 1 + m;
    if (d.depth > kMaxNesting) throw std::runtime_error("a value nested more than 256 levels deep");
    v.dict = std::make_shared<const DictData>(std::move(d));
    return v;
  }
  static Value make_callable(std::string name, std::function<Value(Interp&, CallArgs&)> fn) {
    Value v;
    v.k = K::Callable;
    v.call = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
    return v;
  }

  int depth() const { return k == K::List ? list->depth : k == K::Dict ? dict->depth : 0; }
  static int max_depth(const std::vector<Value>& items) {
    int m = 0;
    for (const auto& x : items) m = std::max(m, x.depth());
    if (m + 1 > kMaxNesting) throw std::runtime_error("a value nested more than 256 levels deep");
    return m;
  }
  static constexpr int kMaxNesting = 256;

  bool is_undefined() const { return k == K::Undefined; }
  bool is_none() const { return k == K::None; }
  bool is_string() const { return k == K::String; }
  bool is_list() const { return k == K::List; }
  bool is_dict() const { return k == K::Dict; }
  bool is_number() const { return k == K::Int || k == K::Float || k == K::Bool; }
};

struct LoopData {
  std::vector<Value> items;
  std::size_t index0 = 0;
  Value cycle_fn;
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  int line = 0, col = 0;
};

// ---- tokens -------------------------------------------------------------------------------
enum class Tok : std::uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok t;
  std::string v;  // text (Data, Name, Op, String: the unescaped value)
  int line = 1, col = 1;
  std::int64_t ival = 0;
  double fval = 0;
};

// Splits a template into tokens the way jinja2's lexer does with trim_blocks, lstrip_blocks and
// keep_trailing_newline=False. Throws Error(Syntax).
std::vector<Token> lex(std::string_view source, const std::string& name);

// ---- syntax tree --------------------------------------------------------------------------
enum class EK : std::uint8_t {
  Literal,
  Name,
  List,
  Tuple,
  Dict,
  Attr,
  Item,
  Slice,
  Call,
  Filter,
  Test,
  Neg,
  Pos,
  Not,
  Binary,
  Compare,
  And,
  Or,
  Cond,
  Concat
};

struct Expr {
  EK k;
  int line = 0, col = 0;
  Value lit;                // Literal
  std::string name;         // Name, Attr (attribute), Filter/Test name, Binary op
  std::vector<ExprP> args;  // children / positional arguments (Filter/Test: args[0] is the subject)
  std::vector<std::pair<std::string, ExprP>> kwargs;
  std::vector<std::string> ops;  // Compare: one op per operand after the first
  bool negated = false;          // Test: `is not`
  bool soft = false;             // Filter/Test inside an if (jinja2: unknown name fails at run time)
  bool constant = false;         // built from literals only (jinja2 folds it at compile time)
};

enum class SK : std::uint8_t {
  Text,
  Output,
  If,
  For,
  Set,
  SetBlock,
  Macro,
  CallBlock,
  FilterBlock,
  Generation,
  Break,
  Continue,
  With
};

struct Stmt {
  SK k;
  int line = 0, col = 0;
  std::string text;  // Text
  ExprP expr;        // Output, Set value, For iterable, FilterBlock filter chain (subject is a Name "")
  ExprP target;      // Set/For/SetBlock target (Name, Tuple of Names or Attr on a Name)
  ExprP cond;        // For filter
  std::vector<std::pair<ExprP, Body>> branches;  // If: (condition, body); else has a null condition
  Body body;                                     // For, SetBlock, Macro, FilterBlock, Generation, With
  Body else_body;                                // For
  // Macro
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprP> defaults;  // aligned to the last params
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
  // With: assignments
  std::vector<std::pair<ExprP, ExprP>> assigns;
};

struct Program {
  std::string name;
  Body body;
  bool has_generation = false;
};

// Parses tokens into a Program. Throws Error(Syntax).
std::unique_ptr<Program> parse(std::vector<Token> tokens, const std::string& name);

// ---- values (jinja_value.cpp) ------------------------------------------------------------
bool truthy(const Value& v);
std::string py_str(const Value& v);  // str(); throws std::runtime_error for unprintable values
std::string py_repr(const Value& v);
std::string float_repr(double d);
std::string type_name(const Value& v);         // Python's type name: 'str', 'NoneType', 'dict'...
std::string object_type_repr(const Value& v);  // jinja2's: "None", "dict object"
bool py_equal(const Value& a, const Value& b);
Value from_json(const nlohmann::ordered_json& j, int depth = 0);

// UTF-8 / Python str helpers
std::u32string to_u32(std::string_view s);
std::string from_u32(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
bool py_isspace(char32_t c);
std::size_t utf8_length(std::string_view s);
std::string py_strip(std::string_view s, bool left, bool right, const std::u32string* chars = nullptr);
std::string py_lower(std::string_view s);
std::string py_upper(std::string_view s);
std::vector<std::string> py_splitlines(std::string_view s);

}  // namespace odyssey::jinja::detail
