// The Jinja interpreter: statements, expressions, filters, tests, Python str/dict/list methods
// and the globals transformers' chat-template environment has.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <optional>
#include <cstring>
#include <set>

#include "tokenizer/jinja_internal.h"

namespace odyssey::jinja {

Error::Error(ErrorKind kind, std::string template_name, int line, int column, std::string message)
    : std::runtime_error([&] {
        std::string s = template_name.empty() ? std::string("<template>") : template_name;
        if (line > 0) s += ":" + std::to_string(line);
        if (line > 0 && column > 0) s += ":" + std::to_string(column);
        s += ": ";
        s += kind == ErrorKind::Syntax ? "syntax error: " : kind == ErrorKind::Raised ? "the template raised: " : "";
        return s + message;
      }()),
      kind_(kind),
      name_(std::move(template_name)),
      line_(line),
      column_(column),
      message_(std::move(message)) {}

Diagnostic Error::diagnostic() const {
  Diagnostic d;
  d.file = name_;
  d.line = line_;
  d.column = column_;
  d.message = kind_ == ErrorKind::Syntax   ? "chat template syntax error: " + message_
              : kind_ == ErrorKind::Raised ? "the chat template raised an exception: " + message_
                                           : "chat template error: " + message_;
  return d;
}

namespace detail {
namespace {

using K = Value::K;

// A failure without a position yet: the expression or statement that catches it adds its own.
struct RtError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void rt(const std::string& m) { throw RtError(m); }
[[noreturn]] void type_error(const std::string& m) { rt("TypeError: " + m); }
[[noreturn]] void undefined_error(const Value& u) {
  if (u.unsafe) rt("SecurityError: " + u.s);
  rt("UndefinedError: " + u.s);
}

std::string quote(const std::string& s) { return py_repr(Value::string(s)); }

struct Scope {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Scope> parent;
  Value* find(std::string_view n) {
    for (auto& kv : vars)
      if (kv.first == n) return &kv.second;
    return nullptr;
  }
  void set(const std::string& n, Value v) {
    if (Value* p = find(n)) {
      *p = std::move(v);
      return;
    }
    vars.emplace_back(n, std::move(v));
  }
};
using ScopeP = std::shared_ptr<Scope>;

enum class Flow { Normal, Break, Continue };

// Binds call arguments to a signature: positional first, then keywords by name.
struct Bound {
  std::vector<const Value*> v;
  const Value* get(std::size_t i) const { return v[i]; }
  bool has(std::size_t i) const { return v[i] != nullptr; }
};
Bound bind(const CallArgs& a, std::initializer_list<const char*> names, const std::string& fname,
           std::size_t required = 0) {
  Bound b;
  b.v.assign(names.size(), nullptr);
  if (a.pos.size() > names.size())
    type_error(fname + "() takes at most " + std::to_string(names.size()) + " arguments (" +
               std::to_string(a.pos.size()) + " given)");
  for (std::size_t i = 0; i < a.pos.size(); ++i) b.v[i] = &a.pos[i];
  for (const auto& kv : a.kw) {
    std::size_t i = 0;
    for (const char* n : names) {
      if (kv.first == n) break;
      ++i;
    }
    if (i == names.size()) type_error(fname + "() got an unexpected keyword argument '" + kv.first + "'");
    if (b.v[i]) type_error(fname + "() got multiple values for argument '" + kv.first + "'");
    b.v[i] = &kv.second;
  }
  for (std::size_t i = 0; i < required; ++i)
    if (!b.v[i]) type_error(fname + "() missing required argument '" + std::string(names.begin()[i]) + "'");
  return b;
}

std::int64_t as_int_arg(const Value& v, const std::string& what) {
  if (v.k == K::Int) return v.i;
  if (v.k == K::Bool) return v.b;
  type_error(what + " must be an integer, not '" + type_name(v) + "'");
}

const std::string& as_str_arg(const Value& v, const std::string& what) {
  if (v.k != K::String) type_error(what + " must be str, not " + type_name(v));
  return v.s;
}

// Iteration, as Python's iter(): lists, tuples, views, dicts (keys), strings (characters);
// Undefined iterates as empty.
std::vector<Value> iterate(const Value& v) {
  switch (v.k) {
    case K::Undefined:
      if (v.unsafe) undefined_error(v);
      return {};
    case K::List: return v.list->items;
    case K::Dict: {
      std::vector<Value> out;
      out.reserve(v.dict->items.size());
      for (const auto& kv : v.dict->items) out.push_back(Value::string(kv.first));
      return out;
    }
    case K::String: {
      std::vector<Value> out;
      for (char32_t c : to_u32(v.s)) {
        std::string s;
        append_utf8(s, c);
        out.push_back(Value::string(std::move(s)));
      }
      return out;
    }
    default: type_error("'" + type_name(v) + "' object is not iterable");
  }
}

std::int64_t py_len(const Value& v) {
  switch (v.k) {
    case K::Undefined: return 0;
    case K::String: return static_cast<std::int64_t>(utf8_length(v.s));
    case K::List:
      if (v.list->kind == SeqKind::Generator || v.list->kind == SeqKind::ReverseIter)
        type_error("object of type '" + type_name(v) + "' has no len()");
      return static_cast<std::int64_t>(v.list->items.size());
    case K::Dict: return static_cast<std::int64_t>(v.dict->items.size());
    default: type_error("object of type '" + type_name(v) + "' has no len()");
  }
}

double as_double(const Value& v) {
  return v.k == K::Float ? v.f : v.k == K::Bool ? (v.b ? 1.0 : 0.0) : static_cast<double>(v.i);
}
std::int64_t as_i64(const Value& v) { return v.k == K::Bool ? (v.b ? 1 : 0) : v.i; }

// Python ordering (<) for numbers, strings and sequences; anything else is a TypeError.
int py_compare(const Value& a, const Value& b, const char* op) {
  if (a.is_number() && b.is_number()) {
    if (a.k == K::Float || b.k == K::Float) {
      const double x = as_double(a), y = as_double(b);
      if (std::isnan(x) || std::isnan(y)) return 2;  // unordered
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const auto x = as_i64(a), y = as_i64(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.k == K::String && b.k == K::String) {
    const int c = a.s.compare(b.s);  // UTF-8 byte order is code-point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.k == K::List && b.k == K::List && a.list->kind == b.list->kind &&
      (a.list->kind == SeqKind::List || a.list->kind == SeqKind::Tuple)) {
    const auto& x = a.list->items;
    const auto& y = b.list->items;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (py_equal(x[i], y[i])) continue;
      return py_compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  type_error(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" +
             type_name(b) + "'");
}

// Python's hash(): lists, dicts and dict views are unhashable, a tuple is when an item is.
bool unhashable(const Value& v) {
  if (v.k == K::Dict) return true;
  if (v.k != K::List) return false;
  switch (v.list->kind) {
    case SeqKind::List:
    case SeqKind::DictItems:
    case SeqKind::DictKeys:
    case SeqKind::DictValues: return true;
    case SeqKind::Tuple: return std::any_of(v.list->items.begin(), v.list->items.end(), unhashable);
    default: return false;
  }
}

bool py_contains(const Value& container, const Value& item) {
  switch (container.k) {
    case K::String:
      if (item.k != K::String) type_error("'in <string>' requires string as left operand, not " + type_name(item));
      return container.s.find(item.s) != std::string::npos;
    case K::List:
      for (const auto& x : container.list->items)
        if (py_equal(x, item)) return true;
      return false;
    case K::Dict:
      if (unhashable(item)) type_error("unhashable type: '" + type_name(item) + "'");
      if (item.k != K::String) return false;
      return container.dict->find(item.s) != nullptr;
    case K::Undefined:
      if (container.unsafe) undefined_error(container);
      return false;
    default: type_error("argument of type '" + type_name(container) + "' is not iterable");
  }
}

std::int64_t checked(long double r, std::int64_t v) {
  if (r > static_cast<long double>(INT64_MAX) || r < static_cast<long double>(INT64_MIN))
    rt("OverflowError: integer result out of range (the engine's integers are 64-bit)");
  return v;
}

// ---- JSON (transformers' tojson: json.dumps) ---------------------------------------------
struct JsonOpts {
  bool ensure_ascii = false;
  bool indent_set = false;
  std::string indent;
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};

void json_string(std::string& out, const std::string& s, bool ascii) {
  out += '"';
  for (char32_t c : to_u32(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ascii && c > 0x7E)) {
          char b[16];
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            std::snprintf(b, sizeof b, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                          static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
          } else {
            std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
          }
          out += b;
        } else {
          append_utf8(out, c);
        }
    }
  }
  out += '"';
}

void json_dump(std::string& out, const Value& v, const JsonOpts& o, int level) {
  auto newline = [&](int lvl) {
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += o.indent;
  };
  switch (v.k) {
    case K::None: out += "null"; return;
    case K::Bool: out += v.b ? "true" : "false"; return;
    case K::Int: out += std::to_string(v.i); return;
    case K::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += float_repr(v.f);
      return;
    case K::String: json_string(out, v.s, o.ensure_ascii); return;
    case K::List: {
      if (v.list->kind != SeqKind::List && v.list->kind != SeqKind::Tuple)
        type_error("Object of type " + type_name(v) + " is not JSON serializable");
      const auto& items = v.list->items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        if (o.indent_set) newline(level + 1);
        json_dump(out, items[i], o, level + 1);
      }
      if (o.indent_set) newline(level);
      out += ']';
      return;
    }
    case K::Dict: {
      const auto& items = v.dict->items;
      if (items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> order;
      for (const auto& kv : items) order.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      bool first = true;
      for (const auto* kv : order) {
        if (!first) out += o.item_sep;
        first = false;
        if (o.indent_set) newline(level + 1);
        json_string(out, kv->first, o.ensure_ascii);
        out += o.key_sep;
        json_dump(out, kv->second, o, level + 1);
      }
      if (o.indent_set) newline(level);
      out += '}';
      return;
    }
    case K::Undefined: type_error("Object of type Undefined is not JSON serializable");
    default: type_error("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

// ---- strftime ----------------------------------------------------------------------------
std::tm clock_now(const std::string& iso) {
  std::tm tm{};
  if (iso.empty()) {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
    return tm;
  }
  int Y, M, D, h = 0, m = 0, s = 0;
  if (std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &Y, &M, &D, &h, &m, &s) < 3)
    throw std::runtime_error("RenderOptions::now is not YYYY-MM-DDTHH:MM:SS: " + iso);
  tm.tm_year = Y - 1900;
  tm.tm_mon = M - 1;
  tm.tm_mday = D;
  tm.tm_hour = h;
  tm.tm_min = m;
  tm.tm_sec = s;
  std::tm n = tm;
  const std::time_t t = timegm(&n);  // normalizes and fills the weekday and day of the year
  gmtime_r(&t, &tm);
  return tm;
}

}  // namespace

// ---- the interpreter ---------------------------------------------------------------------
struct Interp {
  const Program& prog;
  const RenderOptions& opt;
  std::tm now{};
  ScopeP globals;
  ScopeP scope;
  std::uint64_t steps = 0;
  int call_depth = 0;
  int nesting = 0;
  std::string* root = nullptr;
  int capture_depth = 0;  // > 0 while rendering into a buffer (macro, block set, filter block)
  std::vector<std::pair<std::size_t, std::size_t>> gen;

  Interp(const Program& p, const RenderOptions& o) : prog(p), opt(o) {}

  [[noreturn]] void fail_at(int line, int col, const std::string& m) const {
    throw Error(ErrorKind::Runtime, prog.name, line, col, m);
  }

  // Inside a catch block: the exception in flight as an Error located at (line, col); an
  // Error already located passes through unchanged.
  [[noreturn]] void rethrow_at(int line, int col) const {
    try {
      throw;
    } catch (const Error&) {
      throw;
    } catch (const RtError& x) {
      fail_at(line, col, x.what());
    } catch (const std::bad_alloc&) {
      fail_at(line, col, "out of memory");
    } catch (const std::length_error&) {
      fail_at(line, col, "a value is too large");
    } catch (const std::runtime_error& x) {
      fail_at(line, col, x.what());
    } catch (...) {
      throw;
    }
  }

  void step() {
    if (++steps > opt.max_steps)
      rt("the template exceeds the engine's work limit (" + std::to_string(opt.max_steps) + " steps)");
  }

  std::uintptr_t stack_base = 0;

  struct Nest {
    Interp* in;
    explicit Nest(Interp* i) : in(i) {
      char probe = 0;
      const auto here = reinterpret_cast<std::uintptr_t>(&probe);
      const std::uintptr_t used = here > in->stack_base ? here - in->stack_base : in->stack_base - here;
      if (++in->nesting > 1500 || used > in->opt.max_stack_bytes) {
        --in->nesting;
        rt("the template nests too deeply (macro recursion?)");
      }
    }
    ~Nest() { --in->nesting; }
  };

  void check_size(std::size_t n) const {
    if (n > opt.max_output_bytes)
      rt("the rendered text exceeds the engine's limit of " + std::to_string(opt.max_output_bytes) + " bytes");
  }

  Value lookup(const std::string& n) {
    for (Scope* s = scope.get(); s; s = s->parent.get())
      if (Value* v = s->find(n)) return *v;
    return Value::undefined(quote(n) + " is undefined");
  }

  // ---- attribute and item access (jinja2's sandboxed getattr / getitem) ----
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value slice(const Value& obj, const Value& a, const Value& b, const Value& c, bool const_fold);
  Value call_method(const Value& self, const std::string& name, CallArgs& a);
  Value call(const Value& f, CallArgs& a);

  // ---- expressions ----
  Value eval(const Expr& e);
  Value eval_inner(const Expr& e);
  Value binary(const std::string& op, const Value& a, const Value& b);
  CallArgs eval_args(const Expr& e, std::size_t first);
  Value filter(const std::string& name, const Value& v, CallArgs& a, bool soft);
  bool test(const std::string& name, const Value& v, CallArgs& a);
  Value apply_chain(const Expr& chain, const Value& v) {
    if (chain.k != EK::Filter) return v;
    const Value inner = apply_chain(*chain.args[0], v);
    CallArgs a = eval_args(chain, 1);
    return filter(chain.name, inner, a, chain.soft);
  }

  // ---- statements ----
  Flow exec(const Body& body, std::string& out);
  Flow exec_stmt(const Stmt& s, std::string& out);
  void assign(const Expr& target, const Value& v);
  Value make_macro(const Stmt& s);
  std::string capture(const Body& body);

  void emit(std::string& out, std::string_view s) {
    out.append(s);
    check_size(out.size());
  }
};

namespace {
const std::set<std::string> kStrMethods = {
    "strip",      "lstrip",     "rstrip",     "split",      "rsplit",       "startswith",   "endswith",
    "title",      "upper",      "lower",      "replace",    "capitalize",   "format",       "join",
    "find",       "rfind",      "count",      "index",      "isdigit",      "isalpha",      "isalnum",
    "isspace",    "islower",    "isupper",    "splitlines", "removeprefix", "removesuffix", "zfill",
    "swapcase",   "partition",  "rpartition", "center",     "ljust",        "rjust",        "casefold",
    "expandtabs", "isnumeric",  "isdecimal",  "istitle",    "isidentifier", "isprintable",  "isascii",
    "encode",     "format_map", "maketrans",  "translate",  "rindex"};
const std::set<std::string> kDictMethods = {"items", "keys", "values", "get", "copy"};
const std::set<std::string> kDictUnsafe = {"update", "pop", "popitem", "setdefault", "clear"};
const std::set<std::string> kListMethods = {"index", "count", "copy"};
const std::set<std::string> kListUnsafe = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
}  // namespace

Value Interp::getattr(const Value& obj, const std::string& name) {
  auto missing = [&]() { return Value::undefined(quote(object_type_repr(obj)) + " has no attribute " + quote(name)); };
  auto bound = [&]() {
    Value self = obj;
    return Value::make_callable(type_name(obj) + "." + name,
                                [self, name](Interp& in, CallArgs& a) { return in.call_method(self, name, a); });
  };
  auto unsafe = [&]() {
    Value u =
        Value::undefined("access to attribute " + quote(name) + " of " + quote(type_name(obj)) + " object is unsafe.");
    u.unsafe = true;
    return u;
  };
  switch (obj.k) {
    case K::Undefined: undefined_error(obj);
    case K::Dict:
      if (kDictMethods.count(name)) return bound();
      if (kDictUnsafe.count(name)) return unsafe();
      if (const Value* v = obj.dict->find(name)) return *v;
      return missing();
    case K::String:
      if (kStrMethods.count(name)) return bound();
      return missing();
    case K::List:
      if (obj.list->kind == SeqKind::List || obj.list->kind == SeqKind::Tuple) {
        if (kListMethods.count(name) && !(obj.list->kind == SeqKind::Tuple && name == "copy")) return bound();
        if (obj.list->kind == SeqKind::List && kListUnsafe.count(name)) return unsafe();
      }
      return missing();
    case K::Namespace:
      if (const Value* v = obj.ns->find(name)) return *v;
      return missing();
    case K::Loop: {
      const LoopData& L = *obj.loop;
      const auto n = static_cast<std::int64_t>(L.items.size());
      const auto i = static_cast<std::int64_t>(L.index0);
      if (name == "index") return Value::integer(i + 1);
      if (name == "index0") return Value::integer(i);
      if (name == "revindex") return Value::integer(n - i);
      if (name == "revindex0") return Value::integer(n - i - 1);
      if (name == "first") return Value::boolean(i == 0);
      if (name == "last") return Value::boolean(i == n - 1);
      if (name == "length") return Value::integer(n);
      if (name == "depth") return Value::integer(1);
      if (name == "depth0") return Value::integer(0);
      if (name == "previtem")
        return i > 0 ? L.items[static_cast<std::size_t>(i - 1)] : Value::undefined("there is no previous item");
      if (name == "nextitem")
        return i + 1 < n ? L.items[static_cast<std::size_t>(i + 1)] : Value::undefined("there is no next item");
      if (name == "cycle") {
        std::shared_ptr<LoopData> lp = obj.loop;
        return Value::make_callable("loop.cycle", [lp](Interp&, CallArgs& a) {
          if (a.pos.empty()) type_error("no items for cycling given");
          return a.pos[lp->index0 % a.pos.size()];
        });
      }
      if (name == "changed") rt("loop.changed() is not supported by Odyssey's Jinja engine");
      return missing();
    }
    default: return missing();
  }
}

Value Interp::getitem(const Value& obj, const Value& key) {
  switch (obj.k) {
    case K::Undefined: undefined_error(obj);
    case K::Dict:
      if (key.k == K::String) {
        if (const Value* v = obj.dict->find(key.s)) return *v;
        return getattr(obj, key.s);
      }
      break;
    case K::Namespace:
      if (key.k == K::String) return getattr(obj, key.s);
      break;
    case K::List:
      if ((key.k == K::Int || key.k == K::Bool) &&
          (obj.list->kind == SeqKind::List || obj.list->kind == SeqKind::Tuple || obj.list->kind == SeqKind::Range)) {
        const auto n = static_cast<std::int64_t>(obj.list->items.size());
        std::int64_t i = as_i64(key);
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.list->items[static_cast<std::size_t>(i)];
      } else if (key.k == K::String) {
        return getattr(obj, key.s);
      }
      break;
    case K::String:
      if (key.k == K::Int || key.k == K::Bool) {
        const std::u32string u = to_u32(obj.s);
        const auto n = static_cast<std::int64_t>(u.size());
        std::int64_t i = as_i64(key);
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          std::string s;
          append_utf8(s, u[static_cast<std::size_t>(i)]);
          return Value::string(std::move(s));
        }
      } else if (key.k == K::String) {
        return getattr(obj, key.s);
      }
      break;
    case K::Loop:
      if (key.k == K::String) return getattr(obj, key.s);
      break;
    default:
      if (key.k == K::String) return getattr(obj, key.s);
      break;
  }
  if (key.k == K::String) return Value::undefined(quote(object_type_repr(obj)) + " has no attribute " + quote(key.s));
  return Value::undefined(object_type_repr(obj) + " has no element " + py_repr(key));
}

Value Interp::slice(const Value& obj, const Value& a, const Value& b, const Value& c, bool const_fold) {
  if (obj.is_undefined()) undefined_error(obj);
  auto idx = [](const Value& v, const char* what) -> std::optional<std::int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (v.k == K::Int || v.k == K::Bool) return as_i64(v);
    type_error(std::string("slice ") + what + " must be an integer or None");
  };
  const auto start = idx(a, "indices"), stop = idx(b, "indices"), stp = idx(c, "indices");
  const std::int64_t step = stp.value_or(1);
  if (step == 0) rt("ValueError: slice step cannot be zero");
  auto take = [&](std::int64_t n, auto&& fn) {
    auto norm = [&](std::optional<std::int64_t> v, std::int64_t dflt) {
      if (!v) return dflt;
      std::int64_t x = *v;
      if (x < 0) x += n;
      if (step > 0) return std::clamp<std::int64_t>(x, 0, n);
      return std::clamp<std::int64_t>(x, -1, n - 1);
    };
    const std::int64_t s = norm(start, step > 0 ? 0 : n - 1);
    const std::int64_t e = norm(stop, step > 0 ? n : -1);
    for (std::int64_t i = s; step > 0 ? i < e : i > e; i += step) fn(static_cast<std::size_t>(i));
  };
  if (obj.k == K::String) {
    const std::u32string u = to_u32(obj.s);
    std::u32string r;
    take(static_cast<std::int64_t>(u.size()), [&](std::size_t i) { r.push_back(u[i]); });
    return Value::string(from_u32(r));
  }
  if (obj.k == K::List &&
      (obj.list->kind == SeqKind::List || obj.list->kind == SeqKind::Tuple || obj.list->kind == SeqKind::Range)) {
    std::vector<Value> r;
    std::int64_t first = -1, count = 0;
    take(static_cast<std::int64_t>(obj.list->items.size()), [&](std::size_t i) {
      if (first < 0) first = static_cast<std::int64_t>(i);
      ++count;
      r.push_back(obj.list->items[i]);
    });
    Value out = Value::make_list(std::move(r), obj.list->kind);
    if (obj.list->kind == SeqKind::Range) {
      // range(...)[a:b:c] is range(start + a*step, start + b*step, step*c) with a, b normalized
      const auto& L = *obj.list;
      const auto n = static_cast<std::int64_t>(L.items.size());
      auto norm = [&](const std::optional<std::int64_t>& v, std::int64_t dflt) {
        if (!v) return dflt;
        std::int64_t x = *v;
        if (x < 0) x += n;
        return step > 0 ? std::clamp<std::int64_t>(x, 0, n) : std::clamp<std::int64_t>(x, -1, n - 1);
      };
      const std::int64_t s0 = norm(start, step > 0 ? 0 : n - 1), e0 = norm(stop, step > 0 ? n : -1);
      auto* d = const_cast<ListData*>(out.list.get());
      d->range_start = L.range_start + s0 * L.range_step;
      d->range_stop = L.range_start + e0 * L.range_step;
      d->range_step = L.range_step * step;
    }
    return out;
  }
  // jinja2 compiles slices to a plain Python subscript: anything else is a TypeError, except
  // where the compiler folded a constant subscript (the sandbox's getitem: Undefined)
  if (const_fold) return Value::undefined(object_type_repr(obj) + " has no element slice");
  if (obj.k == K::Dict) type_error("unhashable type: 'slice'");
  type_error("'" + type_name(obj) + "' object is not subscriptable");
}

// ---- Python methods ----------------------------------------------------------------------
namespace {
std::vector<std::string> py_split(const std::string& s, const Value* sep, std::int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (!sep || sep->is_none()) {
    const std::u32string u = to_u32(s);
    std::vector<std::pair<std::size_t, std::size_t>> words;
    std::size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && py_isspace(u[i])) ++i;
      if (i >= u.size()) break;
      std::size_t j = i;
      while (j < u.size() && !py_isspace(u[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit < 0 || static_cast<std::size_t>(maxsplit) >= words.size()) {
      for (auto [b, e] : words) out.push_back(from_u32(std::u32string_view(u).substr(b, e - b)));
      return out;
    }
    const auto m = static_cast<std::size_t>(maxsplit);
    if (!from_right) {
      for (std::size_t k = 0; k < m; ++k)
        out.push_back(from_u32(std::u32string_view(u).substr(words[k].first, words[k].second - words[k].first)));
      std::size_t rest = words[m].first;
      std::size_t end = u.size();
      while (end > rest && py_isspace(u[end - 1])) --end;
      out.push_back(from_u32(std::u32string_view(u).substr(rest, end - rest)));
    } else {
      const std::size_t first = words.size() - m;
      std::size_t b = 0;
      while (b < u.size() && py_isspace(u[b])) ++b;
      out.push_back(from_u32(std::u32string_view(u).substr(b, words[first - 1].second - b)));
      for (std::size_t k = first; k < words.size(); ++k)
        out.push_back(from_u32(std::u32string_view(u).substr(words[k].first, words[k].second - words[k].first)));
    }
    return out;
  }
  const std::string& d = as_str_arg(*sep, "separator");
  if (d.empty()) rt("ValueError: empty separator");
  if (!from_right) {
    std::size_t start = 0;
    std::int64_t n = 0;
    while (maxsplit < 0 || n < maxsplit) {
      const std::size_t p = s.find(d, start);
      if (p == std::string::npos) break;
      out.push_back(s.substr(start, p - start));
      start = p + d.size();
      ++n;
    }
    out.push_back(s.substr(start));
    return out;
  }
  std::size_t end = s.size();
  std::int64_t n = 0;
  std::vector<std::string> rev;
  while (maxsplit < 0 || n < maxsplit) {
    if (end < d.size()) break;
    const std::size_t p = s.rfind(d, end - d.size());
    if (p == std::string::npos) break;
    rev.push_back(s.substr(p + d.size(), end - p - d.size()));
    end = p;
    ++n;
  }
  rev.push_back(s.substr(0, end));
  return {rev.rbegin(), rev.rend()};
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& nw, std::int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `nw` between every code point (and at both ends)
    const std::u32string u = to_u32(s);
    std::int64_t n = 0;
    for (std::size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || n < count) {
        out += nw;
        ++n;
      }
      if (i < u.size()) append_utf8(out, u[i]);
    }
    return out;
  }
  std::size_t start = 0;
  std::int64_t n = 0;
  while (count < 0 || n < count) {
    const std::size_t p = s.find(old, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += nw;
    start = p + old.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  return out;
}

bool is_alpha_cp(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return !py_isspace(c) && !(c >= 0x2000 && c <= 0x2BFF) && !(c >= 0x3000 && c <= 0x303F) &&
         !(c >= 0xFF00 && c <= 0xFF20) && !(c >= 0x80 && c <= 0xBF) && c != 0xD7 && c != 0xF7 &&
         !(c >= 0x1F000 && c <= 0x1FAFF);
}

// str.title(): a cased character after an uncased one starts a word.
std::string py_title_method(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : to_u32(s)) {
    std::string one;
    append_utf8(one, c);
    const std::string lo = py_lower(one), up = py_upper(one);
    const bool cased = lo != up;  // has a case (digits, CJK and punctuation do not)
    out += cased ? (prev_cased ? lo : up) : one;
    prev_cased = cased;
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  const std::u32string u = to_u32(s);
  if (u.empty()) return s;
  std::string first;
  append_utf8(first, u[0]);
  return py_upper(first) + py_lower(from_u32(std::u32string_view(u).substr(1)));
}

bool match_prefix(const std::string& s, const Value& arg, bool suffix, const char* fname) {
  auto one = [&](const Value& p) {
    const std::string& x =
        p.k == K::String
            ? p.s
            : (type_error(std::string(fname) + " first arg must be str or a tuple of str, not " + type_name(p)), p.s);
    if (x.size() > s.size()) return false;
    return suffix ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0;
  };
  if (arg.k == K::List && arg.list->kind == SeqKind::Tuple) {
    for (const auto& p : arg.list->items)
      if (one(p)) return true;
    return false;
  }
  return one(arg);
}
}  // namespace

Value Interp::call_method(const Value& self, const std::string& name, CallArgs& a) {
  const std::string fname = type_name(self) + "." + name;
  if (self.k == K::String) {
    const std::string& s = self.s;
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      auto b = bind(a, {"chars"}, fname);
      std::u32string chars;
      const bool custom = b.has(0) && !b.get(0)->is_none();
      if (custom) chars = to_u32(as_str_arg(*b.get(0), fname + " arg"));
      return Value::string(py_strip(s, name != "rstrip", name != "lstrip", custom ? &chars : nullptr));
    }
    if (name == "split" || name == "rsplit") {
      auto b = bind(a, {"sep", "maxsplit"}, fname);
      const std::int64_t m = b.has(1) ? as_int_arg(*b.get(1), "maxsplit") : -1;
      std::vector<Value> parts;
      for (auto& p : py_split(s, b.get(0), m, name == "rsplit")) parts.push_back(Value::string(std::move(p)));
      return Value::make_list(std::move(parts));
    }
    if (name == "startswith" || name == "endswith") {
      auto b = bind(a, {"prefix"}, fname, 1);
      return Value::boolean(match_prefix(s, *b.get(0), name == "endswith", fname.c_str()));
    }
    if (name == "upper") return bind(a, {}, fname), Value::string(py_upper(s));
    if (name == "lower") return bind(a, {}, fname), Value::string(py_lower(s));
    if (name == "title") return bind(a, {}, fname), Value::string(py_title_method(s));
    if (name == "capitalize") return bind(a, {}, fname), Value::string(py_capitalize(s));
    if (name == "replace") {
      auto b = bind(a, {"old", "new", "count"}, fname, 2);
      const std::int64_t c = b.has(2) ? as_int_arg(*b.get(2), "count") : -1;
      std::string r =
          py_replace(s, as_str_arg(*b.get(0), "replace() arg 1"), as_str_arg(*b.get(1), "replace() arg 2"), c);
      check_size(r.size());
      return Value::string(std::move(r));
    }
    if (name == "join") {
      auto b = bind(a, {"iterable"}, fname, 1);
      std::string r;
      bool first = true;
      for (const auto& x : iterate(*b.get(0))) {
        if (x.k != K::String) type_error("sequence item: expected str instance, " + type_name(x) + " found");
        if (!first) r += s;
        first = false;
        r += x.s;
        check_size(r.size());
      }
      return Value::string(std::move(r));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
      auto b = bind(a, {"sub"}, fname, 1);
      const std::string& sub = as_str_arg(*b.get(0), fname + " arg");
      if (name == "count") {
        if (sub.empty()) return Value::integer(static_cast<std::int64_t>(utf8_length(s)) + 1);
        std::int64_t n = 0;
        for (std::size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return Value::integer(n);
      }
      const std::size_t p = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
      if (p == std::string::npos) {
        if (name == "index" || name == "rindex") rt("ValueError: substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<std::int64_t>(utf8_length(std::string_view(s).substr(0, p))));
    }
    if (name == "removeprefix" || name == "removesuffix") {
      auto b = bind(a, {"affix"}, fname, 1);
      const std::string& x = as_str_arg(*b.get(0), fname + " arg");
      if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value::string(s.substr(x.size()));
      if (name == "removesuffix" && x.size() <= s.size() && !x.empty() &&
          s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value::string(s.substr(0, s.size() - x.size()));
      return self;
    }
    if (name == "splitlines") {
      bind(a, {}, fname);
      std::vector<Value> parts;
      for (auto& p : py_splitlines(s)) parts.push_back(Value::string(std::move(p)));
      return Value::make_list(std::move(parts));
    }
    if (name == "isspace" || name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "islower" ||
        name == "isupper") {
      bind(a, {}, fname);
      const std::u32string u = to_u32(s);
      if (u.empty()) return Value::boolean(false);
      if (name == "islower" || name == "isupper") {
        bool cased = false;
        for (char32_t c : u) {
          std::string one;
          append_utf8(one, c);
          const std::string lo = py_lower(one), up = py_upper(one);
          if (lo == up) continue;
          cased = true;
          if (name == "islower" ? one != lo : one != up) return Value::boolean(false);
        }
        return Value::boolean(cased);
      }
      for (char32_t c : u) {
        bool ok;
        if (name == "isspace") ok = py_isspace(c);
        else if (name == "isdigit") ok = c >= '0' && c <= '9';
        else if (name == "isalpha")
          ok = c < 0x80
                   ? is_alpha_cp(c)
                   : (rt("str." + name + "() on non-ASCII text is not supported by Odyssey's Jinja engine"), false);
        else
          ok = c < 0x80
                   ? (is_alpha_cp(c) || (c >= '0' && c <= '9'))
                   : (rt("str." + name + "() on non-ASCII text is not supported by Odyssey's Jinja engine"), false);
        if (c >= 0x80 && name == "isdigit")
          rt("str.isdigit() on non-ASCII text is not supported by Odyssey's Jinja engine");
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(true);
    }
    if (name == "format") {
      // "{}" / "{0}" / "{name}" without format specs.
      std::string r;
      std::size_t auto_i = 0;
      for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (c == '{' && i + 1 < s.size() && s[i + 1] == '{') {
          r += '{';
          ++i;
        } else if (c == '}' && i + 1 < s.size() && s[i + 1] == '}') {
          r += '}';
          ++i;
        } else if (c == '{') {
          const std::size_t e = s.find('}', i);
          if (e == std::string::npos) rt("ValueError: Single '{' encountered in format string");
          const std::string field = s.substr(i + 1, e - i - 1);
          if (field.find_first_of(":!.[") != std::string::npos)
            rt("str.format() with conversions or format specs is not supported by Odyssey's Jinja engine");
          const Value* v = nullptr;
          if (field.empty()) {
            if (auto_i >= a.pos.size()) rt("IndexError: Replacement index out of range for positional args tuple");
            v = &a.pos[auto_i++];
          } else if (std::all_of(field.begin(), field.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
            const std::size_t k = std::stoul(field);
            if (k >= a.pos.size()) rt("IndexError: Replacement index out of range for positional args tuple");
            v = &a.pos[k];
          } else {
            for (const auto& kv : a.kw)
              if (kv.first == field) v = &kv.second;
            if (!v) rt("KeyError: " + quote(field));
          }
          r += py_str(*v);
          i = e;
        } else if (c == '}') {
          rt("ValueError: Single '}' encountered in format string");
        } else {
          r += c;
        }
      }
      return Value::string(std::move(r));
    }
    rt("str." + name + "() is not supported by Odyssey's Jinja engine");
  }
  if (self.k == K::Dict) {
    const auto& d = *self.dict;
    if (name == "items" || name == "keys" || name == "values") {
      bind(a, {}, fname);
      std::vector<Value> out;
      out.reserve(d.items.size());
      for (const auto& kv : d.items) {
        if (name == "items") out.push_back(Value::make_list({Value::string(kv.first), kv.second}, SeqKind::Tuple));
        else if (name == "keys") out.push_back(Value::string(kv.first));
        else out.push_back(kv.second);
      }
      return Value::make_list(std::move(out), name == "items"  ? SeqKind::DictItems
                                              : name == "keys" ? SeqKind::DictKeys
                                                               : SeqKind::DictValues);
    }
    if (name == "get") {
      auto b = bind(a, {"key", "default"}, fname, 1);
      if (b.get(0)->k == K::String)
        if (const Value* v = d.find(b.get(0)->s)) return *v;
      return b.has(1) ? *b.get(1) : Value::none();
    }
    if (name == "copy") return bind(a, {}, fname), self;
  }
  if (self.k == K::List) {
    const auto& items = self.list->items;
    if (name == "index" || name == "count") {
      auto b = bind(a, {"value"}, fname, 1);
      std::int64_t n = 0;
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (!py_equal(items[i], *b.get(0))) continue;
        if (name == "index") return Value::integer(static_cast<std::int64_t>(i));
        ++n;
      }
      if (name == "index") rt("ValueError: " + py_repr(*b.get(0)) + " is not in list");
      return Value::integer(n);
    }
    if (name == "copy") return bind(a, {}, fname), Value::make_list(items);
  }
  rt(fname + "() is not supported by Odyssey's Jinja engine");
}

// ---- calls ------------------------------------------------------------------------------
Value Interp::call(const Value& f, CallArgs& a) {
  if (f.k == K::Undefined) undefined_error(f);
  if (f.k != K::Callable) type_error("'" + type_name(f) + "' object is not callable");
  return f.call->fn(*this, a);
}

std::string Interp::capture(const Body& body) {
  std::string buf;
  ++capture_depth;
  struct Dec {
    int* p;
    ~Dec() { --*p; }
  } dec{&capture_depth};
  exec(body, buf);
  return buf;
}

Value Interp::make_macro(const Stmt& s) {
  std::weak_ptr<Scope> defining = scope;
  const Stmt* def = &s;
  return Value::make_callable("macro '" + s.name + "'", [defining, def](Interp& in, CallArgs& a) -> Value {
    ScopeP parent = defining.lock();
    if (!parent) rt("the macro '" + def->name + "' is called after the block that defined it ended");
    if (++in.call_depth > in.opt.max_call_depth) {
      --in.call_depth;
      rt("macro calls nest deeper than " + std::to_string(in.opt.max_call_depth) + " (recursion?)");
    }
    struct Dec {
      int* p;
      ~Dec() { --*p; }
    } dec{&in.call_depth};
    auto frame = std::make_shared<Scope>();
    frame->parent = parent;
    const std::size_t np = def->params.size();
    const std::size_t nd = def->defaults.size();
    std::vector<bool> given(np, false);
    std::vector<Value> extra_pos;
    for (std::size_t i = 0; i < a.pos.size(); ++i) {
      if (i < np) {
        frame->set(def->params[i], a.pos[i]);
        given[i] = true;
      } else {
        extra_pos.push_back(a.pos[i]);
      }
    }
    DictData extra_kw;
    Value caller;
    bool has_caller = false;
    for (const auto& kv : a.kw) {
      auto it = std::find(def->params.begin(), def->params.end(), kv.first);
      if (it != def->params.end()) {
        const auto i = static_cast<std::size_t>(it - def->params.begin());
        if (given[i]) type_error("macro '" + def->name + "' got multiple values for argument '" + kv.first + "'");
        frame->set(kv.first, kv.second);
        given[i] = true;
      } else if (kv.first == "caller" && def->uses_caller) {
        caller = kv.second;
        has_caller = true;
      } else {
        extra_kw.set(kv.first, kv.second);
      }
    }
    if (!extra_pos.empty() && !def->uses_varargs)
      type_error("macro '" + def->name + "' takes not more than " + std::to_string(np) + " argument(s)");
    if (!extra_kw.items.empty() && !def->uses_kwargs)
      type_error("macro '" + def->name + "' takes no keyword argument '" + extra_kw.items[0].first + "'");
    ScopeP saved = in.scope;
    in.scope = frame;
    struct Restore {
      Interp* in;
      ScopeP s;
      ~Restore() { in->scope = std::move(s); }
    } restore{&in, saved};
    for (std::size_t i = 0; i < np; ++i) {
      if (given[i]) continue;
      if (i >= np - nd) {
        frame->set(def->params[i], in.eval(*def->defaults[i - (np - nd)]));
      } else {
        frame->set(def->params[i], Value::undefined("parameter " + quote(def->params[i]) + " was not provided"));
      }
    }
    if (def->uses_varargs) frame->set("varargs", Value::make_list(std::move(extra_pos), SeqKind::Tuple));
    if (def->uses_kwargs) frame->set("kwargs", Value::make_dict(std::move(extra_kw)));
    if (def->uses_caller) frame->set("caller", has_caller ? caller : Value::undefined("No caller defined"));
    return Value::string(in.capture(def->body));
  });
}

// ---- expressions ------------------------------------------------------------------------
CallArgs Interp::eval_args(const Expr& e, std::size_t first) {
  CallArgs a;
  a.line = e.line;
  a.col = e.col;
  for (std::size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i]));
  for (const auto& kv : e.kwargs) a.kw.emplace_back(kv.first, eval(*kv.second));
  return a;
}

Value Interp::eval(const Expr& e) {
  Nest n(this);
  step();
  try {
    return eval_inner(e);
  } catch (const std::exception&) {
    rethrow_at(e.line, e.col);
  }
}

Value Interp::binary(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  const char c0 = op[0];
  auto unsupported = [&]() -> Value {
    type_error("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  };
  if (op == "+") {
    if (a.k == K::String && b.k == K::String) {
      check_size(a.s.size() + b.s.size());
      return Value::string(a.s + b.s);
    }
    if (a.k == K::String) type_error("can only concatenate str (not \"" + type_name(b) + "\") to str");
    if (a.k == K::List && b.k == K::List && a.list->kind == b.list->kind &&
        (a.list->kind == SeqKind::List || a.list->kind == SeqKind::Tuple)) {
      std::vector<Value> r = a.list->items;
      r.insert(r.end(), b.list->items.begin(), b.list->items.end());
      check_size(r.size() * 16);
      return Value::make_list(std::move(r), a.list->kind);
    }
    if (a.k == K::List && a.list->kind == SeqKind::List)
      type_error("can only concatenate list (not \"" + type_name(b) + "\") to list");
  }
  if (op == "*") {
    const Value* seq = nullptr;
    const Value* cnt = nullptr;
    if ((a.k == K::String || a.k == K::List) && (b.k == K::Int || b.k == K::Bool)) seq = &a, cnt = &b;
    if ((b.k == K::String || b.k == K::List) && (a.k == K::Int || a.k == K::Bool)) seq = &b, cnt = &a;
    if (seq) {
      const std::int64_t n = std::max<std::int64_t>(0, as_i64(*cnt));
      if (seq->k == K::String) {
        check_size(static_cast<std::size_t>(std::min<std::int64_t>(n, INT32_MAX)) * seq->s.size());
        std::string r;
        for (std::int64_t i = 0; i < n; ++i) r += seq->s;
        return Value::string(std::move(r));
      }
      if (seq->list->kind == SeqKind::List || seq->list->kind == SeqKind::Tuple) {
        check_size(static_cast<std::size_t>(std::min<std::int64_t>(n, INT32_MAX)) * seq->list->items.size() * 16);
        std::vector<Value> r;
        for (std::int64_t i = 0; i < n; ++i) r.insert(r.end(), seq->list->items.begin(), seq->list->items.end());
        return Value::make_list(std::move(r), seq->list->kind);
      }
    }
  }
  if (op == "%" && a.k == K::String)
    rt("printf-style string formatting ('%') is not supported by Odyssey's Jinja engine");
  if (!a.is_number() || !b.is_number()) return unsupported();
  const bool fl = a.k == K::Float || b.k == K::Float;
  if (op == "/") {
    const double y = as_double(b);
    if (y == 0) rt("ZeroDivisionError: division by zero");
    return Value::number(as_double(a) / y);
  }
  if (fl) {
    const double x = as_double(a), y = as_double(b);
    switch (c0) {
      case '+': return Value::number(x + y);
      case '-': return Value::number(x - y);
      case '*':
        if (op == "**") return Value::number(std::pow(x, y));
        return Value::number(x * y);
      case '/':
      case '%': {
        // CPython's float divmod
        if (y == 0)
          rt(op == "%" ? "ZeroDivisionError: float modulo" : "ZeroDivisionError: float floor division by zero");
        double m = std::fmod(x, y);
        double div = (x - m) / y;
        if (m != 0) {
          if ((y < 0) != (m < 0)) {
            m += y;
            div -= 1.0;
          }
        } else {
          m = std::copysign(0.0, y);
        }
        if (op == "%") return Value::number(m);
        double fd;
        if (div != 0) {
          fd = std::floor(div);
          if (div - fd > 0.5) fd += 1.0;
        } else {
          fd = std::copysign(0.0, x / y);
        }
        return Value::number(fd);
      }
    }
    return unsupported();
  }
  const std::int64_t x = as_i64(a), y = as_i64(b);
  switch (c0) {
    case '+': return Value::integer(checked(static_cast<long double>(x) + y, x + y));
    case '-': return Value::integer(checked(static_cast<long double>(x) - y, x - y));
    case '*': {
      if (op == "**") {
        if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
        long double r = 1;
        std::int64_t v = 1;
        for (std::int64_t i = 0; i < y; ++i) {
          r *= x;
          if (r > static_cast<long double>(INT64_MAX) || r < static_cast<long double>(INT64_MIN))
            rt("OverflowError: integer result out of range (the engine's integers are 64-bit)");
          v *= x;
          if (x == 0 || x == 1) break;
        }
        if (x == 0) return Value::integer(y == 0 ? 1 : 0);
        return Value::integer(v);
      }
      return Value::integer(
          checked(static_cast<long double>(x) * y,
                  static_cast<std::int64_t>(static_cast<std::uint64_t>(x) * static_cast<std::uint64_t>(y))));
    }
    case '/': {
      if (y == 0) rt("ZeroDivisionError: integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) rt("OverflowError: integer result out of range");
      std::int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return Value::integer(q);
    }
    case '%': {
      if (y == 0) rt("ZeroDivisionError: integer division or modulo by zero");
      if (y == -1) return Value::integer(0);
      std::int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::integer(m);
    }
  }
  return unsupported();
}

Value Interp::eval_inner(const Expr& e) {
  switch (e.k) {
    case EK::Literal: return e.lit;
    case EK::Name: return lookup(e.name);
    case EK::List:
    case EK::Tuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& x : e.args) items.push_back(eval(*x));
      return Value::make_list(std::move(items), e.k == EK::Tuple ? SeqKind::Tuple : SeqKind::List);
    }
    case EK::Dict: {
      DictData d;
      for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i]);
        if (k.k != K::String)
          rt("dict keys other than strings are not supported by Odyssey's Jinja engine (got " + type_name(k) + ")");
        d.set(k.s, eval(*e.args[i + 1]));
      }
      return Value::make_dict(std::move(d));
    }
    case EK::Attr: return getattr(eval(*e.args[0]), e.name);
    case EK::Item: {
      Value obj = eval(*e.args[0]);
      return getitem(obj, eval(*e.args[1]));
    }
    case EK::Slice: {
      Value obj = eval(*e.args[0]);
      Value a = e.args[1] ? eval(*e.args[1]) : Value::none();
      Value b = e.args[2] ? eval(*e.args[2]) : Value::none();
      Value c = e.args[3] ? eval(*e.args[3]) : Value::none();
      return slice(obj, a, b, c, e.constant);
    }
    case EK::Call: {
      Value f = eval(*e.args[0]);
      CallArgs a = eval_args(e, 1);
      return call(f, a);
    }
    case EK::Filter: {
      Value v = e.name == "default" || e.name == "d" ? eval(*e.args[0]) : eval(*e.args[0]);
      CallArgs a = eval_args(e, 1);
      return filter(e.name, v, a, e.soft);
    }
    case EK::Test: {
      Value v = eval(*e.args[0]);
      CallArgs a = eval_args(e, 1);
      const bool r = test(e.name, v, a);
      return Value::boolean(e.negated ? !r : r);
    }
    case EK::Neg:
    case EK::Pos: {
      Value v = eval(*e.args[0]);
      if (v.is_undefined()) undefined_error(v);
      if (v.k == K::Float) return Value::number(e.k == EK::Neg ? -v.f : v.f);
      if (v.k == K::Int || v.k == K::Bool) {
        const std::int64_t x = as_i64(v);
        if (e.k == EK::Neg && x == INT64_MIN) rt("OverflowError: integer result out of range");
        return Value::integer(e.k == EK::Neg ? -x : x);
      }
      type_error(std::string("bad operand type for unary ") + (e.k == EK::Neg ? "-" : "+") + ": '" + type_name(v) +
                 "'");
    }
    case EK::Not: return Value::boolean(!truthy(eval(*e.args[0])));
    case EK::And: {
      Value a = eval(*e.args[0]);
      if (!truthy(a)) return a;
      return eval(*e.args[1]);
    }
    case EK::Or: {
      Value a = eval(*e.args[0]);
      if (truthy(a)) return a;
      return eval(*e.args[1]);
    }
    case EK::Cond: {
      if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
      if (e.args.size() > 2) return eval(*e.args[2]);
      return Value::undefined("the inline if expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
    case EK::Concat: {
      std::string r;
      for (const auto& x : e.args) {
        r += py_str(eval(*x));
        check_size(r.size());
      }
      return Value::string(std::move(r));
    }
    case EK::Binary: {
      Value a = eval(*e.args[0]);
      Value b = eval(*e.args[1]);
      return binary(e.name, a, b);
    }
    case EK::Compare: {
      Value left = eval(*e.args[0]);
      for (std::size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1]);
        const std::string& op = e.ops[i];
        bool r;
        if (op == "==") r = py_equal(left, right);
        else if (op == "!=") r = !py_equal(left, right);
        else if (op == "in") r = py_contains(right, left);
        else if (op == "not in") r = !py_contains(right, left);
        else {
          const int c = py_compare(left, right, op.c_str());
          if (c == 2) r = false;
          else if (op == "<") r = c < 0;
          else if (op == "<=") r = c <= 0;
          else if (op == ">") r = c > 0;
          else r = c >= 0;
        }
        if (!r) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
  }
  rt("unknown expression");
}

// ---- filters ----------------------------------------------------------------------------
namespace {
std::string soft_str(const Value& v) { return py_str(v); }

Value make_generator(std::vector<Value> items) { return Value::make_list(std::move(items), SeqKind::Generator); }

// jinja2's make_attrgetter: "a.b" / "0" path through getitem.
Value attr_path(Interp& in, const Value& item, const Value& attr) {
  if (attr.k == K::Int) return in.getitem(item, attr);
  const std::string& path = as_str_arg(attr, "attribute");
  Value cur = item;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Value key = Value::string(part);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
      key = Value::integer(std::stoll(part));
    cur = in.getitem(cur, key);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

int sort_compare(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.k == K::String && b.k == K::String) {
    const std::string x = py_lower(a.s), y = py_lower(b.s);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  const int c = py_compare(a, b, "<");
  return c == 2 ? 0 : c;
}

std::string do_indent(const std::string& s0, const Value* width, bool first, bool blank) {
  std::string ind = "    ";
  if (width) {
    if (width->k == K::String) ind = width->s;
    else {
      const std::int64_t w = as_int_arg(*width, "indent width");
      ind = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(w, 0, 4096)), ' ');
    }
  }
  const std::string s = s0 + "\n";
  std::vector<std::string> lines = py_splitlines(s);
  std::string rv;
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (std::size_t i = 1; i < lines.size(); ++i) {
        if (i > 1) rv += "\n";
        if (!lines[i].empty()) rv += ind;
        rv += lines[i];
      }
    }
  }
  if (first) rv = ind + rv;
  return rv;
}

// jinja2's do_title: words start after -, whitespace, (, {, [ or <.
std::string do_title(const std::string& s) {
  std::string out;
  const std::u32string u = to_u32(s);
  bool at_start = true;
  for (char32_t c : u) {
    const bool sep = c == '-' || py_isspace(c) || c == '(' || c == '{' || c == '[' || c == '<';
    std::string one;
    append_utf8(one, c);
    if (sep) {
      out += one;
      at_start = true;
    } else {
      out += at_start ? py_upper(one) : py_lower(one);
      at_start = false;
    }
  }
  return out;
}

double py_round(double x, std::int64_t nd) {
  if (!std::isfinite(x)) return x;
  if (nd == 0) return std::nearbyint(x);
  if (nd > 300) return x;
  if (nd < -300) return 0.0 * x;
  char buf[512];
  if (nd > 0) {
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(nd), x);
    return std::strtod(buf, nullptr);
  }
  const double p = std::pow(10.0, static_cast<double>(-nd));
  return std::nearbyint(x / p) * p;
}
}  // namespace

Value Interp::filter(const std::string& name, const Value& v, CallArgs& a, bool soft) {
  const std::string fname = name;
  auto str_arg = [&](const Value* x, const char* what) { return x ? as_str_arg(*x, what) : std::string(); };
  if (name == "trim") {
    auto b = bind(a, {"chars"}, fname);
    std::u32string chars;
    const bool custom = b.has(0) && !b.get(0)->is_none();
    if (custom) chars = to_u32(str_arg(b.get(0), "trim chars"));
    return Value::string(py_strip(soft_str(v), true, true, custom ? &chars : nullptr));
  }
  if (name == "tojson") {
    auto b = bind(a, {"ensure_ascii", "indent", "separators", "sort_keys"}, fname);
    JsonOpts o;
    if (b.has(0)) o.ensure_ascii = truthy(*b.get(0));
    if (b.has(1) && !b.get(1)->is_none()) {
      const Value& ind = *b.get(1);
      o.indent_set = true;
      if (ind.k == K::String) o.indent = ind.s;
      else
        o.indent =
            std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(as_int_arg(ind, "indent"), 0, 4096)), ' ');
      o.item_sep = ",";
    }
    if (b.has(2) && !b.get(2)->is_none()) {
      const Value& sp = *b.get(2);
      if (sp.k != K::List || sp.list->items.size() != 2) rt("ValueError: separators must be a (item, key) pair");
      o.item_sep = as_str_arg(sp.list->items[0], "separator");
      o.key_sep = as_str_arg(sp.list->items[1], "separator");
    }
    if (b.has(3)) o.sort_keys = truthy(*b.get(3));
    std::string out;
    json_dump(out, v, o, 0);
    check_size(out.size());
    return Value::string(std::move(out));
  }
  if (name == "length" || name == "count") {
    bind(a, {}, fname);
    return Value::integer(py_len(v));
  }
  if (name == "upper") return bind(a, {}, fname), Value::string(py_upper(soft_str(v)));
  if (name == "lower") return bind(a, {}, fname), Value::string(py_lower(soft_str(v)));
  if (name == "capitalize") return bind(a, {}, fname), Value::string(py_capitalize(soft_str(v)));
  if (name == "title") return bind(a, {}, fname), Value::string(do_title(soft_str(v)));
  if (name == "string") return bind(a, {}, fname), Value::string(soft_str(v));
  if (name == "safe") return bind(a, {}, fname), v.k == K::String ? v : Value::string(soft_str(v));
  if (name == "replace") {
    auto b = bind(a, {"old", "new", "count"}, fname, 2);
    const std::int64_t c = b.has(2) && !b.get(2)->is_none() ? as_int_arg(*b.get(2), "count") : -1;
    std::string r = py_replace(soft_str(v), soft_str(*b.get(0)), soft_str(*b.get(1)), c);
    check_size(r.size());
    return Value::string(std::move(r));
  }
  if (name == "join") {
    auto b = bind(a, {"d", "attribute"}, fname);
    const std::string d = b.has(0) ? soft_str(*b.get(0)) : std::string();
    std::string r;
    bool first = true;
    for (const auto& x : iterate(v)) {
      if (!first) r += d;
      first = false;
      r += soft_str(b.has(1) && !b.get(1)->is_none() ? attr_path(*this, x, *b.get(1)) : x);
      check_size(r.size());
    }
    return Value::string(std::move(r));
  }
  if (name == "first") {
    bind(a, {}, fname);
    auto items = iterate(v);
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return items.front();
  }
  if (name == "last") {
    bind(a, {}, fname);
    if (v.k == K::List && (v.list->kind == SeqKind::Generator || v.list->kind == SeqKind::ReverseIter))
      type_error("'" + type_name(v) + "' object is not reversible");
    auto items = iterate(v);
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
  }
  if (name == "default" || name == "d") {
    auto b = bind(a, {"default_value", "boolean"}, fname);
    const bool boolean = b.has(1) && truthy(*b.get(1));
    if (v.is_undefined() || (boolean && !truthy(v))) return b.has(0) ? *b.get(0) : Value::string("");
    return v;
  }
  if (name == "items") {
    bind(a, {}, fname);
    if (v.is_undefined()) return make_generator({});
    if (v.k != K::Dict) type_error("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& kv : v.dict->items)
      out.push_back(Value::make_list({Value::string(kv.first), kv.second}, SeqKind::Tuple));
    return make_generator(std::move(out));
  }
  if (name == "dictsort") {
    auto b = bind(a, {"case_sensitive", "by", "reverse"}, fname);
    if (v.k != K::Dict) type_error("dictsort needs a mapping");
    const bool cs = b.has(0) && truthy(*b.get(0));
    const std::string by = b.has(1) ? as_str_arg(*b.get(1), "by") : "key";
    if (by != "key" && by != "value") rt("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
    const bool rev = b.has(2) && truthy(*b.get(2));
    std::vector<Value> out;
    for (const auto& kv : v.dict->items)
      out.push_back(Value::make_list({Value::string(kv.first), kv.second}, SeqKind::Tuple));
    const std::size_t pos = by == "key" ? 0 : 1;
    std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
      const int c = sort_compare(x.list->items[pos], y.list->items[pos], cs);
      return rev ? c > 0 : c < 0;
    });
    return Value::make_list(std::move(out));
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool want = name == "selectattr" || name == "select";
    const std::size_t skip = by_attr ? 1 : 0;
    if (by_attr && a.pos.empty()) type_error(name + "() needs an attribute name");
    std::string tname;
    CallArgs targs;
    const bool has_test = a.pos.size() > skip;
    if (has_test) {
      tname = as_str_arg(a.pos[skip], "test name");
      targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(skip) + 1, a.pos.end());
      targs.kw = a.kw;
    }
    std::vector<Value> out;
    for (const auto& x : iterate(v)) {
      Value subject = by_attr ? attr_path(*this, x, a.pos[0]) : x;
      CallArgs t = targs;
      const bool ok = has_test ? test(tname, subject, t) : truthy(subject);
      if (ok == want) out.push_back(x);
    }
    return make_generator(std::move(out));
  }
  if (name == "map") {
    std::vector<Value> out;
    const Value* attribute = nullptr;
    const Value* dflt = nullptr;
    for (const auto& kv : a.kw) {
      if (kv.first == "attribute") attribute = &kv.second;
      else if (kv.first == "default") dflt = &kv.second;
    }
    if (attribute) {
      if (!a.pos.empty()) type_error("map() with attribute= takes no positional arguments");
      for (const auto& x : iterate(v)) {
        Value r = attr_path(*this, x, *attribute);
        if (r.is_undefined() && dflt) r = *dflt;
        out.push_back(std::move(r));
      }
      return make_generator(std::move(out));
    }
    if (a.pos.empty()) type_error("map requires a filter argument");
    const std::string f = as_str_arg(a.pos[0], "filter name");
    CallArgs fa;
    fa.pos.assign(a.pos.begin() + 1, a.pos.end());
    fa.kw = a.kw;
    for (const auto& x : iterate(v)) {
      CallArgs c = fa;
      out.push_back(filter(f, x, c, false));
    }
    return make_generator(std::move(out));
  }
  if (name == "list") {
    bind(a, {}, fname);
    return Value::make_list(iterate(v));
  }
  if (name == "unique") {
    auto b = bind(a, {"case_sensitive", "attribute"}, fname);
    const bool cs = b.has(0) && truthy(*b.get(0));
    std::vector<Value> out, keys;
    for (const auto& x : iterate(v)) {
      Value key = b.has(1) && !b.get(1)->is_none() ? attr_path(*this, x, *b.get(1)) : x;
      if (unhashable(key)) type_error("unhashable type: '" + type_name(key) + "'");
      if (!cs && key.k == K::String) key = Value::string(py_lower(key.s));
      bool seen = false;
      for (const auto& k : keys)
        if (py_equal(k, key)) seen = true;
      if (seen) continue;
      keys.push_back(key);
      out.push_back(x);
    }
    return make_generator(std::move(out));
  }
  if (name == "reverse") {
    bind(a, {}, fname);
    if (v.k == K::String) {
      std::u32string u = to_u32(v.s);
      std::reverse(u.begin(), u.end());
      return Value::string(from_u32(u));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    // reversed(): an iterator, except for a generator, which jinja2 turns into a list
    return Value::make_list(
        std::move(items), v.k == K::List && v.list->kind == SeqKind::Generator ? SeqKind::List : SeqKind::ReverseIter);
  }
  if (name == "sort") {
    auto b = bind(a, {"reverse", "case_sensitive", "attribute"}, fname);
    const bool rev = b.has(0) && truthy(*b.get(0));
    const bool cs = b.has(1) && truthy(*b.get(1));
    std::vector<Value> items = iterate(v);
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      const Value kx = b.has(2) && !b.get(2)->is_none() ? attr_path(*this, x, *b.get(2)) : x;
      const Value ky = b.has(2) && !b.get(2)->is_none() ? attr_path(*this, y, *b.get(2)) : y;
      const int c = sort_compare(kx, ky, cs);
      return rev ? c > 0 : c < 0;
    });
    return Value::make_list(std::move(items));
  }
  if ((name == "int" || name == "float" || name == "indent") && v.is_undefined()) undefined_error(v);
  // jinja2's indent appends "\n" to its argument itself: only strings get through
  if (name == "indent" && v.k != K::String)
    type_error(v.k == K::List && v.list->kind == SeqKind::List
                   ? "'list' object has no attribute 'splitlines'"
                   : "unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
  if (name == "int") {
    auto b = bind(a, {"default", "base"}, fname);
    const Value dflt = b.has(0) ? *b.get(0) : Value::integer(0);
    if (v.k == K::Int) return v;
    if (v.k == K::Bool) return Value::integer(v.b);
    if (v.k == K::Float) {
      if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return dflt;
      return Value::integer(static_cast<std::int64_t>(v.f));
    }
    if (v.k == K::String) {
      const std::string t = py_strip(v.s, true, true);
      const std::int64_t base = b.has(1) ? as_int_arg(*b.get(1), "base") : 10;
      if (!t.empty() && base == 10) {
        char* end = nullptr;
        errno = 0;
        const long long x = std::strtoll(t.c_str(), &end, 10);
        if (end && *end == '\0' && errno == 0 && t.find_first_of(" \t") == std::string::npos) return Value::integer(x);
        errno = 0;
        const double d = std::strtod(t.c_str(), &end);
        if (end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18 &&
            t.find_first_of("xXpP") == std::string::npos)
          return Value::integer(static_cast<std::int64_t>(d));
      } else if (!t.empty()) {
        rt("the int filter with a base other than 10 is not supported by Odyssey's Jinja engine");
      }
      return dflt;
    }
    return dflt;
  }
  if (name == "float") {
    auto b = bind(a, {"default"}, fname);
    const Value dflt = b.has(0) ? *b.get(0) : Value::number(0.0);
    if (v.k == K::Float) return v;
    if (v.k == K::Int || v.k == K::Bool) return Value::number(as_double(v));
    if (v.k == K::String) {
      const std::string t = py_strip(v.s, true, true);
      char* end = nullptr;
      const double d = std::strtod(t.c_str(), &end);
      if (!t.empty() && end && *end == '\0' && t.find_first_of("xXpP") == std::string::npos) return Value::number(d);
    }
    return dflt;
  }
  if (name == "round") {
    auto b = bind(a, {"precision", "method"}, fname);
    const std::int64_t p = b.has(0) ? as_int_arg(*b.get(0), "precision") : 0;
    const std::string method = b.has(1) ? as_str_arg(*b.get(1), "method") : "common";
    if (method != "common" && method != "ceil" && method != "floor")
      rt("FilterArgumentError: method must be common, ceil or floor");
    if (v.k == K::Int || v.k == K::Bool) {
      if (method == "common") {
        if (p < 0) rt("round() of an integer with a negative precision is not supported by Odyssey's Jinja engine");
        return Value::integer(as_i64(v));
      }
      return Value::number(as_double(v));
    }
    if (v.k != K::Float) type_error("type " + type_name(v) + " doesn't define __round__ method");
    if (method == "common") return Value::number(py_round(v.f, p));
    const double m = std::pow(10.0, static_cast<double>(p));
    return Value::number((method == "ceil" ? std::ceil(v.f * m) : std::floor(v.f * m)) / m);
  }
  if (name == "abs") {
    bind(a, {}, fname);
    if (v.k == K::Float) return Value::number(std::fabs(v.f));
    if (v.k == K::Int || v.k == K::Bool) {
      if (as_i64(v) == INT64_MIN) rt("OverflowError: integer result out of range");
      return Value::integer(std::llabs(as_i64(v)));
    }
    type_error("bad operand type for abs(): '" + type_name(v) + "'");
  }
  if (name == "indent") {
    auto b = bind(a, {"width", "first", "blank"}, fname);
    std::string r = do_indent(soft_str(v), b.get(0), b.has(1) && truthy(*b.get(1)), b.has(2) && truthy(*b.get(2)));
    check_size(r.size());
    return Value::string(std::move(r));
  }
  if (name == "wordcount") {
    bind(a, {}, fname);
    std::int64_t n = 0;
    bool in_word = false;
    for (char32_t c : to_u32(soft_str(v))) {
      // Python's \w: letters, digits and underscore (Unicode); unknown scripts are refused
      bool w;
      if (c < 0x80) {
        w = std::isalnum(static_cast<int>(c)) || c == '_';
      } else if (py_isspace(c) ||
                 (c >= 0x80 && c <= 0xBF && c != 0xAA && c != 0xB2 && c != 0xB3 && c != 0xB5 && c != 0xB9 &&
                  c != 0xBA && c != 0xBC && c != 0xBD && c != 0xBE) ||
                 c == 0xD7 || c == 0xF7 || (c >= 0x2000 && c <= 0x206F) || (c >= 0x3000 && c <= 0x303F) ||
                 (c >= 0xFF00 && c <= 0xFF0F) || (c >= 0x1F000 && c <= 0x1FAFF) || (c >= 0x2190 && c <= 0x2BFF)) {
        w = false;
      } else if ((c >= 0xAA && c <= 0x24F) || (c >= 0x370 && c <= 0x3FF && c != 0x37E && c != 0x387) ||
                 (c >= 0x400 && c <= 0x481) || (c >= 0x48A && c <= 0x52F) ||
                 (c >= 0x3040 && c <= 0x30FF && c != 0x30FB) || (c >= 0x4E00 && c <= 0x9FFF) ||
                 (c >= 0xAC00 && c <= 0xD7A3)) {
        w = true;
      } else {
        rt("wordcount on this text is not supported by Odyssey's Jinja engine (Unicode word characters)");
      }
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::integer(n);
  }
  if (name == "attr") {
    auto b = bind(a, {"name"}, fname, 1);
    return getattr(v, as_str_arg(*b.get(0), "attribute name"));
  }
  if (name == "sum") {
    auto b = bind(a, {"attribute", "start"}, fname);
    Value acc = b.has(1) ? *b.get(1) : Value::integer(0);
    for (const auto& x : iterate(v))
      acc = binary("+", acc, b.has(0) && !b.get(0)->is_none() ? attr_path(*this, x, *b.get(0)) : x);
    return acc;
  }
  if (name == "min" || name == "max") {
    auto b = bind(a, {"case_sensitive", "attribute"}, fname);
    const bool cs = b.has(0) && truthy(*b.get(0));
    auto items = iterate(v);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    std::size_t best = 0;
    for (std::size_t i = 1; i < items.size(); ++i) {
      const Value x = b.has(1) && !b.get(1)->is_none() ? attr_path(*this, items[i], *b.get(1)) : items[i];
      const Value y = b.has(1) && !b.get(1)->is_none() ? attr_path(*this, items[best], *b.get(1)) : items[best];
      const int c = sort_compare(x, y, cs);
      if (name == "min" ? c < 0 : c > 0) best = i;
    }
    return items[best];
  }
  if (name == "center") {
    auto b = bind(a, {"width"}, fname);
    const std::string s = soft_str(v);
    const std::int64_t w = std::min<std::int64_t>(b.has(0) ? as_int_arg(*b.get(0), "width") : 80, 1 << 20);
    const auto n = static_cast<std::int64_t>(utf8_length(s));
    if (w <= n) return Value::string(s);
    const std::int64_t pad = w - n;
    const std::int64_t left = pad / 2 + (pad & w & 1);
    return Value::string(std::string(static_cast<std::size_t>(left), ' ') + s +
                         std::string(static_cast<std::size_t>(pad - left), ' '));
  }
  // A jinja2 filter the engine does not implement, or (inside an if) one jinja2 lacks too.
  static const std::set<std::string> known = {
      "batch",  "e",     "escape",    "filesizeformat", "forceescape", "format", "groupby",  "pprint",
      "random", "slice", "striptags", "truncate",       "urlencode",   "urlize", "wordwrap", "xmlattr"};
  if (known.count(name)) rt("the filter '" + name + "' is not supported by Odyssey's Jinja engine");
  (void)soft;
  rt("No filter named '" + name + "' found.");
}

bool Interp::test(const std::string& name, const Value& v, CallArgs& a) {
  auto arg = [&](const char* n) -> const Value& {
    auto b = bind(a, {n}, name, 1);
    return *b.get(0);
  };
  auto noargs = [&]() { bind(a, {}, name); };
  if (name == "defined") return noargs(), !v.is_undefined();
  if (name == "undefined") return noargs(), v.is_undefined();
  if (name == "none") return noargs(), v.is_none();
  if (name == "string") return noargs(), v.k == K::String;
  if (name == "mapping") return noargs(), v.k == K::Dict;
  if (name == "number") return noargs(), v.is_number();
  if (name == "integer") return noargs(), v.k == K::Int;
  if (name == "float") return noargs(), v.k == K::Float;
  if (name == "boolean") return noargs(), v.k == K::Bool;
  if (name == "true") return noargs(), v.k == K::Bool && v.b;
  if (name == "false") return noargs(), v.k == K::Bool && !v.b;
  if (name == "callable") return noargs(), v.k == K::Callable || v.is_undefined();  // Undefined has __call__
  if (name == "sequence") {
    noargs();
    return v.k == K::String || v.k == K::Dict || v.is_undefined() ||
           (v.k == K::List && v.list->kind != SeqKind::Generator && v.list->kind != SeqKind::ReverseIter &&
            v.list->kind != SeqKind::DictItems && v.list->kind != SeqKind::DictKeys &&
            v.list->kind != SeqKind::DictValues);
  }
  if (name == "iterable") return noargs(), v.k == K::String || v.k == K::List || v.k == K::Dict || v.is_undefined();
  if (name == "escaped") return noargs(), false;
  if (name == "odd" || name == "even") {
    noargs();
    if (v.k == K::String) type_error("not all arguments converted during string formatting");
    const Value r = binary("%", v, Value::integer(2));
    return py_equal(r, Value::integer(name == "odd" ? 1 : 0));
  }
  if (name == "divisibleby") {
    const Value& n = arg("num");
    const Value r = binary("%", v, n);
    return r.is_number() && as_double(r) == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return py_equal(v, arg("other"));
  if (name == "ne" || name == "!=") return !py_equal(v, arg("other"));
  auto cmp = [&](const char* op) {
    const int c = py_compare(v, arg("other"), op);
    return c;
  };
  if (name == "lt" || name == "lessthan" || name == "<") {
    const int c = cmp("<");
    return c != 2 && c < 0;
  }
  if (name == "le" || name == "<=") {
    const int c = cmp("<=");
    return c != 2 && c <= 0;
  }
  if (name == "gt" || name == "greaterthan" || name == ">") {
    const int c = cmp(">");
    return c != 2 && c > 0;
  }
  if (name == "ge" || name == ">=") {
    const int c = cmp(">=");
    return c != 2 && c >= 0;
  }
  if (name == "in") return py_contains(arg("seq"), v);
  if (name == "sameas") {
    const Value& o = arg("other");
    if (v.k != o.k) return false;
    switch (v.k) {
      case K::None:
      case K::Undefined: return v.k == K::None;
      case K::Bool: return v.b == o.b;
      case K::Int: return v.i == o.i && v.i >= -5 && v.i <= 256;
      case K::List: return v.list == o.list;
      case K::Dict: return v.dict == o.dict;
      case K::Namespace: return v.ns == o.ns;
      default: rt("the 'sameas' test on " + type_name(v) + " values is not supported by Odyssey's Jinja engine");
    }
  }
  if (name == "lower" || name == "upper") {
    noargs();
    const std::string s = py_str(v);
    bool cased = false;
    for (char32_t c : to_u32(s)) {
      std::string one;
      append_utf8(one, c);
      const std::string lo = py_lower(one), up = py_upper(one);
      if (lo == up) continue;
      cased = true;
      if (name == "lower" ? one != lo : one != up) return false;
    }
    return cased;
  }
  if (name == "filter" || name == "test") rt("the '" + name + "' test is not supported by Odyssey's Jinja engine");
  rt("No test named '" + name + "' found.");
}

// ---- statements -------------------------------------------------------------------------
void Interp::assign(const Expr& target, const Value& v) {
  if (target.k == EK::Name) {
    scope->set(target.name, v);
    return;
  }
  if (target.k == EK::Tuple) {
    std::vector<Value> items = iterate(v);
    if (items.size() != target.args.size())
      rt(std::string("ValueError: ") +
         (items.size() > target.args.size() ? "too many values to unpack (expected "
                                            : "not enough values to unpack (expected ") +
         std::to_string(target.args.size()) + ", got " + std::to_string(items.size()) + ")");
    for (std::size_t i = 0; i < items.size(); ++i) assign(*target.args[i], items[i]);
    return;
  }
  if (target.k == EK::Attr) {
    Value obj = lookup(target.args[0]->name);
    if (obj.k != K::Namespace) rt("TemplateRuntimeError: cannot assign attribute on non-namespace object");
    // A namespace inside a namespace could form a cycle the engine cannot free.
    std::function<bool(const Value&)> has_ns = [&](const Value& x) {
      if (x.k == K::Namespace || x.k == K::Callable || x.k == K::Loop) return true;
      if (x.k == K::List) return std::any_of(x.list->items.begin(), x.list->items.end(), has_ns);
      if (x.k == K::Dict)
        return std::any_of(x.dict->items.begin(), x.dict->items.end(),
                           [&](const auto& kv) { return has_ns(kv.second); });
      return false;
    };
    if (has_ns(v))
      rt("storing a namespace, function or loop in a namespace is not supported by Odyssey's Jinja engine");
    obj.ns->set(target.name, v);
    return;
  }
  rt("can't assign to this target");
}

Flow Interp::exec(const Body& body, std::string& out) {
  for (const auto& s : body) {
    const Flow f = exec_stmt(*s, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Flow Interp::exec_stmt(const Stmt& s, std::string& out) {
  Nest n(this);
  try {
    switch (s.k) {
      case SK::Text: emit(out, s.text); return Flow::Normal;
      case SK::Output: {
        const Value v = eval(*s.expr);
        if (v.k == K::String) emit(out, v.s);
        else emit(out, py_str(v));
        return Flow::Normal;
      }
      case SK::If:
        for (const auto& [cond, body] : s.branches)
          if (!cond || truthy(eval(*cond))) return exec(body, out);
        return Flow::Normal;
      case SK::For: {
        const Value seq = eval(*s.expr);
        if (seq.k == K::None) type_error("'NoneType' object is not iterable");
        auto loop = std::make_shared<LoopData>();
        std::vector<Value> all = iterate(seq);
        auto frame = std::make_shared<Scope>();
        frame->parent = scope;
        ScopeP saved = scope;
        struct Restore {
          Interp* in;
          ScopeP s;
          ~Restore() { in->scope = std::move(s); }
        } restore{this, saved};
        scope = frame;
        if (s.cond) {
          for (auto& x : all) {
            step();
            assign(*s.target, x);
            if (truthy(eval(*s.cond))) loop->items.push_back(std::move(x));
          }
        } else {
          loop->items = std::move(all);
        }
        Value lv;
        lv.k = K::Loop;
        lv.loop = loop;
        // jinja2 runs the else block unless an iteration reached the end of the body: a loop
        // whose iterations all ended in break or continue runs it too.
        bool completed = false;
        for (std::size_t i = 0; i < loop->items.size(); ++i) {
          step();
          loop->index0 = i;
          frame->vars.clear();
          frame->set("loop", lv);
          assign(*s.target, loop->items[i]);
          const Flow f = exec(s.body, out);
          if (f == Flow::Break) break;
          if (f == Flow::Normal) completed = true;
        }
        frame->vars.clear();
        scope = saved;
        if (!completed && !s.else_body.empty()) return exec(s.else_body, out);
        return Flow::Normal;
      }
      case SK::Set: assign(*s.target, eval(*s.expr)); return Flow::Normal;
      case SK::SetBlock: {
        Value v = Value::string(capture(s.body));
        if (s.expr) v = apply_chain(*s.expr, v);
        assign(*s.target, v);
        return Flow::Normal;
      }
      case SK::Macro: scope->set(s.name, make_macro(s)); return Flow::Normal;
      case SK::CallBlock: {
        const Expr& c = *s.expr;
        Value f = eval(*c.args[0]);
        CallArgs a = eval_args(c, 1);
        std::weak_ptr<Scope> where = scope;
        const Stmt* blk = &s;
        a.kw.emplace_back("caller", Value::make_callable("caller", [where, blk](Interp& in, CallArgs& ca) -> Value {
                            ScopeP parent = where.lock();
                            if (!parent) rt("caller() outlived its block");
                            if (!ca.pos.empty() || !ca.kw.empty())
                              rt("caller() with arguments is not supported by Odyssey's Jinja engine");
                            auto frame = std::make_shared<Scope>();
                            frame->parent = parent;
                            ScopeP saved = in.scope;
                            in.scope = frame;
                            struct Restore {
                              Interp* in;
                              ScopeP s;
                              ~Restore() { in->scope = std::move(s); }
                            } restore{&in, saved};
                            return Value::string(in.capture(blk->body));
                          }));
        const Value r = call(f, a);
        emit(out, py_str(r));
        return Flow::Normal;
      }
      case SK::FilterBlock: {
        const Value v = apply_chain(*s.expr, Value::string(capture(s.body)));
        emit(out, py_str(v));
        return Flow::Normal;
      }
      case SK::Generation: {
        // transformers' AssistantTracker: the span starts at the length of the text rendered at
        // the top level so far and is as long as the block's own text, in code points (inside a
        // macro or block set that is not where the text ends up; transformers records it anyway).
        const std::size_t start_cp = utf8_length(*root);
        const std::size_t begin = out.size();
        const Flow f = exec(s.body, out);
        gen.emplace_back(start_cp, start_cp + utf8_length(std::string_view(out).substr(begin)));
        return f;
      }
      case SK::Break: return Flow::Break;
      case SK::Continue: return Flow::Continue;
      case SK::With: {
        std::vector<Value> vals;
        for (const auto& [t, e] : s.assigns) vals.push_back(eval(*e));
        auto frame = std::make_shared<Scope>();
        frame->parent = scope;
        ScopeP saved = scope;
        struct Restore {
          Interp* in;
          ScopeP s;
          ~Restore() { in->scope = std::move(s); }
        } restore{this, saved};
        scope = frame;
        for (std::size_t i = 0; i < vals.size(); ++i) assign(*s.assigns[i].first, vals[i]);
        return exec(s.body, out);
      }
    }
  } catch (const std::exception&) {
    rethrow_at(s.line, s.col);
  }
  return Flow::Normal;
}

// ---- entry points -----------------------------------------------------------------------
namespace {
void add_globals(Scope& g) {
  g.set("range", Value::make_callable("range", [](Interp&, CallArgs& a) -> Value {
          if (!a.kw.empty()) type_error("range() takes no keyword arguments");
          if (a.pos.empty() || a.pos.size() > 3) type_error("range expected 1 to 3 arguments");
          std::int64_t start = 0, stop, step = 1;
          if (a.pos.size() == 1) {
            stop = as_int_arg(a.pos[0], "range() argument");
          } else {
            start = as_int_arg(a.pos[0], "range() argument");
            stop = as_int_arg(a.pos[1], "range() argument");
            if (a.pos.size() == 3) step = as_int_arg(a.pos[2], "range() argument");
          }
          if (step == 0) rt("ValueError: range() arg 3 must not be zero");
          const long double count = step > 0 ? (static_cast<long double>(stop) - start + step - 1) / step
                                             : (static_cast<long double>(start) - stop - step - 1) / -step;
          if (count > 100000)
            rt("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
          std::vector<Value> items;
          for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.push_back(Value::integer(i));
          Value r = Value::make_list(std::move(items), SeqKind::Range);
          auto* d = const_cast<ListData*>(r.list.get());
          d->range_start = start;
          d->range_stop = stop;
          d->range_step = step;
          return r;
        }));
  g.set("namespace", Value::make_callable("namespace", [](Interp&, CallArgs& a) -> Value {
          Value v;
          v.k = K::Namespace;
          v.ns = std::make_shared<DictData>();
          for (const auto& p : a.pos) {
            if (p.k != K::Dict) type_error("namespace() positional arguments must be mappings");
            for (const auto& kv : p.dict->items) v.ns->set(kv.first, kv.second);
          }
          for (const auto& kv : a.kw) {
            if (kv.second.k == K::Namespace || kv.second.k == K::Callable || kv.second.k == K::Loop)
              rt("storing a namespace, function or loop in a namespace is not supported by Odyssey's Jinja engine");
            v.ns->set(kv.first, kv.second);
          }
          return v;
        }));
  g.set("dict", Value::make_callable("dict", [](Interp&, CallArgs& a) -> Value {
          DictData d;
          for (const auto& p : a.pos) {
            if (p.k != K::Dict)
              rt("dict() with a non-mapping positional argument is not supported by Odyssey's Jinja engine");
            for (const auto& kv : p.dict->items) d.set(kv.first, kv.second);
          }
          for (const auto& kv : a.kw) d.set(kv.first, kv.second);
          return Value::make_dict(std::move(d));
        }));
  g.set("raise_exception", Value::make_callable("raise_exception", [](Interp& in, CallArgs& a) -> Value {
          std::string msg = a.pos.empty() ? std::string() : py_str(a.pos[0]);
          throw Error(ErrorKind::Raised, in.prog.name, a.line, a.col, msg);
        }));
  g.set("strftime_now", Value::make_callable("strftime_now", [](Interp& in, CallArgs& a) -> Value {
          auto b = bind(a, {"format"}, "strftime_now", 1);
          const std::string& fmt = as_str_arg(*b.get(0), "strftime_now() format");
          if (fmt.size() > 256) rt("strftime_now(): format too long");
          for (std::size_t i = 0; i + 1 < fmt.size(); ++i) {
            if (fmt[i] != '%') continue;
            const char c = fmt[++i];
            if (!std::strchr("aAbBcdHIjmMpSUwWxXyYZz%eFTDRnt", c) || c == '\0')
              rt(std::string("strftime_now(): the directive %") + c + " is not supported by Odyssey's Jinja engine");
          }
          char buf[2048];
          const std::size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &in.now);
          if (n == 0 && !fmt.empty()) rt("strftime_now(): the result is empty or too long");
          return Value::string(std::string(buf, n));
        }));
  for (const char* n : {"lipsum", "cycler", "joiner"}) {
    const std::string name = n;
    g.set(name, Value::make_callable(name, [name](Interp&, CallArgs&) -> Value {
            rt("the global '" + name + "' is not supported by Odyssey's Jinja engine");
          }));
  }
}
}  // namespace

}  // namespace detail

Template::Template(std::string_view source, std::string name) {
  auto tokens = detail::lex(source, name);
  program_ = detail::parse(std::move(tokens), name);
}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

const std::string& Template::name() const { return program_->name; }
bool Template::has_generation_blocks() const { return program_->has_generation; }

RenderResult Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  using namespace detail;
  Interp in(*program_, options);
  try {
    in.now = clock_now(options.now);
    in.globals = std::make_shared<Scope>();
    add_globals(*in.globals);
    auto top = std::make_shared<Scope>();
    top->parent = in.globals;
    if (!context.is_null() && !context.is_object())
      throw Error(ErrorKind::Runtime, program_->name, 0, 0, "the render context must be a JSON object");
    for (auto it = context.begin(); context.is_object() && it != context.end(); ++it)
      top->set(it.key(), from_json(it.value()));
    in.scope = top;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Runtime, program_->name, 0, 0, e.what());
  }
  RenderResult r;
  in.root = &r.text;
  char base = 0;
  in.stack_base = reinterpret_cast<std::uintptr_t>(&base);
  in.exec(program_->body, r.text);
  // code-point spans to UTF-8 byte offsets (as len(text[:i].encode()), clamped like a slice)
  if (!in.gen.empty()) {
    std::vector<std::size_t> byte_at;  // byte offset of each code point, plus the end
    for (std::size_t i = 0; i < r.text.size(); ++i)
      if ((static_cast<unsigned char>(r.text[i]) & 0xC0) != 0x80) byte_at.push_back(i);
    byte_at.push_back(r.text.size());
    auto conv = [&](std::size_t cp) { return byte_at[std::min(cp, byte_at.size() - 1)]; };
    for (const auto& [b, e] : in.gen) r.generation_ranges.emplace_back(conv(b), conv(e));
  }
  // Break scope cycles (macros hold weak references only; scopes drop here).
  in.scope.reset();
  in.globals.reset();
  return r;
}

Result<RenderResult> render_template(std::string_view source, const std::string& name,
                                     const nlohmann::ordered_json& context, const RenderOptions& options) {
  Result<RenderResult> out;
  try {
    Template t(source, name);
    out.value = t.render(context, options);
  } catch (const Error& e) {
    out.diagnostics.push_back(e.diagnostic());
  }
  return out;
}

}  // namespace odyssey::jinja
