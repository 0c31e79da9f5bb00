// Values of the Jinja engine with Python's semantics: str(), repr(), truthiness, equality, and
// the str helpers (code points, Python's whitespace, case mapping, splitlines).
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "tokenizer/jinja_internal.h"

namespace odyssey::jinja::detail {

const Value* DictData::find(std::string_view key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
Value* DictData::find(std::string_view key) {
  for (auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
void DictData::set(const std::string& key, Value v) {
  if (Value* p = find(key)) {
    *p = std::move(v);
    return;
  }
  items.emplace_back(key, std::move(v));
}

// ---- UTF-8 ------------------------------------------------------------------------------
std::u32string to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    char32_t cp = n == 1 ? c : c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (std::size_t k = 1; k < n && i + k < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string from_u32(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

std::size_t utf8_length(std::string_view s) {
  std::size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

// str.isspace(): the Unicode whitespace Python's str methods and `\s` use.
bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string py_strip(std::string_view s, bool left, bool right, const std::u32string* chars) {
  const std::u32string u = to_u32(s);
  auto strip_it = [&](char32_t c) {
    if (!chars) return py_isspace(c);
    return chars->find(c) != std::u32string::npos;
  };
  std::size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return from_u32(std::u32string_view(u).substr(b, e - b));
}

namespace {
// Simple case mappings: ASCII, Latin-1, Latin Extended-A pairs, Greek and Cyrillic basics.
char32_t lower_cp(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    const bool even_upper = (c < 0x138) || (c >= 0x14A && c < 0x178);
    if (even_upper) return (c % 2 == 0) ? c + 1 : c;
    if (c == 0x178) return 0xFF;
    return (c % 2 == 1) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}
char32_t upper_cp(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0x178) return c;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    const bool even_upper = (c < 0x138) || (c >= 0x14A && c < 0x178);
    if (even_upper) return (c % 2 == 1) ? c - 1 : c;
    return (c % 2 == 0) ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}
// Characters whose Python case mapping is not one-to-one or not covered above: refused rather
// than mapped wrongly.
bool case_unsupported(char32_t c) {
  if (c < 0x80) return false;
  if (c <= 0x17F) return c == 0xDF || c == 0x130 || c == 0x131 || c == 0x149 || c == 0x17F || c == 0xB5;
  if (c >= 0x370 && c <= 0x3FF) return !((c >= 0x391 && c <= 0x3AB) || (c >= 0x3B1 && c <= 0x3CB));
  if (c >= 0x400 && c <= 0x45F) return false;
  // Scripts without case (CJK, Arabic, Hebrew, Thai, Hangul, ...), punctuation and symbols.
  if ((c >= 0x2000 && c <= 0x2BFF) || (c >= 0x3000 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7AF) ||
      (c >= 0x0590 && c <= 0x08FF) || (c >= 0x0E00 && c <= 0x0E7F) || (c >= 0xF900 && c <= 0xFAFF) ||
      (c >= 0xFE30 && c <= 0xFE4F) || (c >= 0xFF01 && c <= 0xFF20) || (c >= 0xFF3B && c <= 0xFF40) ||
      (c >= 0xFF5B && c <= 0xFFEF) || (c >= 0x1F000 && c <= 0x1FAFF) || (c >= 0x0900 && c <= 0x0DFF))
    return c >= 0x2160 && c <= 0x24FF && ((c >= 0x2160 && c <= 0x217F) || (c >= 0x24B6 && c <= 0x24E9));
  return true;
}
std::string map_case(std::string_view s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : to_u32(s)) {
    if (case_unsupported(c))
      throw std::runtime_error("changing the case of U+" + [&] {
        char b[16];
        std::snprintf(b, sizeof b, "%04X", static_cast<unsigned>(c));
        return std::string(b);
      }() + " is not supported by Odyssey's Jinja engine");
    append_utf8(out, upper ? upper_cp(c) : lower_cp(c));
  }
  return out;
}
}  // namespace

std::string py_lower(std::string_view s) { return map_case(s, false); }
std::string py_upper(std::string_view s) { return map_case(s, true); }

std::vector<std::string> py_splitlines(std::string_view s) {
  std::vector<std::string> out;
  const std::u32string u = to_u32(s);
  std::size_t start = 0;
  for (std::size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    out.push_back(from_u32(std::u32string_view(u).substr(start, i - start)));
    if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < u.size()) out.push_back(from_u32(std::u32string_view(u).substr(start)));
  return out;
}

// ---- Python semantics --------------------------------------------------------------------
bool truthy(const Value& v) {
  switch (v.k) {
    case Value::K::Undefined: return false;
    case Value::K::None: return false;
    case Value::K::Bool: return v.b;
    case Value::K::Int: return v.i != 0;
    case Value::K::Float: return v.f != 0.0;
    case Value::K::String: return !v.s.empty();
    case Value::K::List:
      if (v.list->kind == SeqKind::Generator || v.list->kind == SeqKind::ReverseIter) return true;
      return !v.list->items.empty();
    case Value::K::Dict: return !v.dict->items.empty();
    default: return true;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  // Shortest round-trip digits, then Python's layout: fixed for 1e-4 <= |d| < 1e16.
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const std::size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
  } else {
    const auto ip = static_cast<std::size_t>(exp + 1);
    if (digits.size() <= ip) {
      out = digits + std::string(ip - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, ip) + "." + digits.substr(ip);
    }
  }
  return neg ? "-" + out : out;
}

namespace {
bool py_printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c >= 0x80 && c <= 0xA0) return false;
  if (c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x2064) ||
      c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || c == 0x061C || (c >= 0x2066 && c <= 0x206F))
    return false;
  if (c >= 0xE000 && c <= 0xF8FF) return false;  // private use
  return true;
}

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : to_u32(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!py_printable(c)) {
      char b[16];
      if (c < 0x100) std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000) std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(b, sizeof b, "\\U%08x", static_cast<unsigned>(c));
      out += b;
    } else {
      append_utf8(out, c);
    }
  }
  out += q;
  return out;
}

void repr_into(std::string& out, const Value& v, int depth) {
  if (depth > 100) throw std::runtime_error("a value nested too deeply to print");
  switch (v.k) {
    case Value::K::String: out += repr_string(v.s); return;
    case Value::K::List: {
      const auto& L = *v.list;
      const char* open = "[";
      const char* close = "]";
      switch (L.kind) {
        case SeqKind::Tuple:
          open = "(";
          close = ")";
          break;
        case SeqKind::DictItems:
          open = "dict_items([";
          close = "])";
          break;
        case SeqKind::DictKeys:
          open = "dict_keys([";
          close = "])";
          break;
        case SeqKind::DictValues:
          open = "dict_values([";
          close = "])";
          break;
        case SeqKind::Range:
          out += "range(" + std::to_string(L.range_start) + ", " + std::to_string(L.range_stop) +
                 (L.range_step != 1 ? ", " + std::to_string(L.range_step) : std::string()) + ")";
          return;
        case SeqKind::Generator:
        case SeqKind::ReverseIter:
          throw std::runtime_error("printing a generator is not supported (Python prints its memory address)");
        default: break;
      }
      out += open;
      for (std::size_t i = 0; i < L.items.size(); ++i) {
        if (i) out += ", ";
        repr_into(out, L.items[i], depth + 1);
      }
      if (L.kind == SeqKind::Tuple && L.items.size() == 1) out += ",";
      out += close;
      return;
    }
    case Value::K::Dict: {
      out += "{";
      bool first = true;
      for (const auto& kv : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(kv.first);
        out += ": ";
        repr_into(out, kv.second, depth + 1);
      }
      out += "}";
      return;
    }
    case Value::K::Undefined: out += "Undefined"; return;
    default: out += py_str(v); return;
  }
}
}  // namespace

std::string py_repr(const Value& v) {
  std::string out;
  repr_into(out, v, 0);
  return out;
}

std::string py_str(const Value& v) {
  switch (v.k) {
    case Value::K::Undefined: return "";
    case Value::K::None: return "None";
    case Value::K::Bool: return v.b ? "True" : "False";
    case Value::K::Int: return std::to_string(v.i);
    case Value::K::Float: return float_repr(v.f);
    case Value::K::String: return v.s;
    case Value::K::List:
    case Value::K::Dict: return py_repr(v);
    case Value::K::Namespace: throw std::runtime_error("printing a namespace object is not supported");
    case Value::K::Callable: throw std::runtime_error("printing a function (" + v.call->name + ") is not supported");
    case Value::K::Loop: throw std::runtime_error("printing the loop object is not supported");
  }
  return "";
}

std::string type_name(const Value& v) {
  switch (v.k) {
    case Value::K::Undefined: return "Undefined";
    case Value::K::None: return "NoneType";
    case Value::K::Bool: return "bool";
    case Value::K::Int: return "int";
    case Value::K::Float: return "float";
    case Value::K::String: return "str";
    case Value::K::List:
      switch (v.list->kind) {
        case SeqKind::Tuple: return "tuple";
        case SeqKind::Generator: return "generator";
        case SeqKind::DictItems: return "dict_items";
        case SeqKind::DictKeys: return "dict_keys";
        case SeqKind::DictValues: return "dict_values";
        case SeqKind::ReverseIter: return "list_reverseiterator";
        case SeqKind::Range: return "range";
        default: return "list";
      }
    case Value::K::Dict: return "dict";
    case Value::K::Namespace: return "Namespace";
    case Value::K::Callable: return "function";
    case Value::K::Loop: return "LoopContext";
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

bool py_equal(const Value& a, const Value& b) {
  using K = Value::K;
  if (a.is_number() && b.is_number()) {
    if (a.k == K::Float || b.k == K::Float) {
      const double x = a.k == K::Float ? a.f : static_cast<double>(a.k == K::Bool ? a.b : a.i);
      const double y = b.k == K::Float ? b.f : static_cast<double>(b.k == K::Bool ? b.b : b.i);
      return x == y;
    }
    const std::int64_t x = a.k == K::Bool ? a.b : a.i;
    const std::int64_t y = b.k == K::Bool ? b.b : b.i;
    return x == y;
  }
  if (a.k != b.k) return false;
  switch (a.k) {
    case K::Undefined: return true;
    case K::None: return true;
    case K::String: return a.s == b.s;
    case K::List: {
      if (a.list == b.list) return true;
      const bool at = a.list->kind == SeqKind::Tuple, bt = b.list->kind == SeqKind::Tuple;
      if (a.list->kind != SeqKind::List && !at) return false;
      if (b.list->kind != SeqKind::List && !bt) return false;
      if (at != bt) return false;
      if (a.list->items.size() != b.list->items.size()) return false;
      for (std::size_t i = 0; i < a.list->items.size(); ++i)
        if (!py_equal(a.list->items[i], b.list->items[i])) return false;
      return true;
    }
    case K::Dict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& kv : a.dict->items) {
        const Value* o = b.dict->find(kv.first);
        if (!o || !py_equal(kv.second, *o)) return false;
      }
      return true;
    }
    case K::Namespace: return a.ns == b.ns;
    case K::Callable: return a.call == b.call;
    case K::Loop: return a.loop == b.loop;
    default: return false;
  }
}

Value from_json(const nlohmann::ordered_json& j, int depth) {
  using J = nlohmann::ordered_json::value_t;
  if (depth > Value::kMaxNesting) throw std::runtime_error("a context value nested more than 256 levels deep");
  switch (j.type()) {
    case J::null: return Value::none();
    case J::boolean: return Value::boolean(j.get<bool>());
    case J::number_integer: return Value::integer(j.get<std::int64_t>());
    case J::number_unsigned: {
      const auto u = j.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX))
        throw std::runtime_error("integer " + std::to_string(u) +
                                 " is out of range (the engine's integers are 64-bit)");
      return Value::integer(static_cast<std::int64_t>(u));
    }
    case J::number_float: return Value::number(j.get<double>());
    case J::string: return Value::string(j.get<std::string>());
    case J::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return Value::make_list(std::move(items));
    }
    case J::object: {
      DictData d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), from_json(it.value(), depth + 1));
      return Value::make_dict(std::move(d));
    }
    default: throw std::runtime_error("a binary JSON value cannot be a template variable");
  }
}

}  // namespace odyssey::jinja::detail
