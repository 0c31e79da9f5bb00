// The Jinja lexer: jinja2's tokenizer rules with trim_blocks=True, lstrip_blocks=True and
// keep_trailing_newline=False, on UTF-8 bytes (columns are counted in code points).
#include <algorithm>
#include <cstring>

#include "tokenizer/jinja_internal.h"

namespace odyssey::jinja::detail {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Decodes the code point at s[i] (valid UTF-8 assumed); returns its byte length.
std::size_t decode_at(std::string_view s, std::size_t i, char32_t* out) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    *out = c;
    return 1;
  }
  std::size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  char32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (std::size_t k = 1; k < n && i + k < s.size(); ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *out = cp;
  return n;
}

// Python's `\s` (and str.isspace) at s[i]: the byte length of the whitespace, 0 if none.
std::size_t space_at(std::string_view s, std::size_t i) {
  char32_t c;
  const std::size_t n = decode_at(s, i, &c);
  return py_isspace(c) ? n : 0;
}

// Position of the last whitespace-only tail of text (Python's str.rstrip()).
std::size_t rstrip_pos(std::string_view text) {
  std::size_t end = text.size();
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (space_at(text, start) != end - start) break;
    end = start;
  }
  return end;
}

bool all_space(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = space_at(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// Offset of the first byte that is not valid UTF-8, npos when all are.
std::size_t invalid_utf8_at(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n;
    char32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + n > s.size()) return i;
    for (std::size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += n;
  }
  return std::string_view::npos;
}

class Lexer {
 public:
  Lexer(std::string src, const std::string& name) : src_(std::move(src)), name_(name) {
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    std::size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      // The earliest tag start.
      std::size_t tag = std::string::npos;
      for (std::size_t p = src_.find('{', pos); p != std::string::npos; p = src_.find('{', p + 1)) {
        if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
          tag = p;
          break;
        }
      }
      if (tag == std::string::npos) {
        emit_data(pos, src_.substr(pos));
        break;
      }
      const char kind = src_[tag + 1];
      char sign = 0;
      if (tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')) sign = src_[tag + 2];
      std::string text = src_.substr(pos, tag - pos);
      // {% raw %}: its own rule, tried first.
      std::size_t raw_end = 0;
      bool raw = kind == '%' && match_raw_begin(tag, &raw_end);
      text = strip_text(std::move(text), sign, kind != '{', line_starting);
      emit_data(pos, text);
      if (raw) {
        pos = lex_raw(raw_end, &line_starting);
        continue;
      }
      const std::size_t body = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(tag, body, &line_starting);
      } else {
        pos = lex_tag(tag, body, kind == '%', &line_starting);
      }
    }
    Token eof{Tok::Eof, "", 0, 0};
    where(src_.size(), &eof.line, &eof.col);
    out_.push_back(std::move(eof));
    return std::move(out_);
  }

 private:
  std::string src_;
  const std::string& name_;
  std::vector<std::size_t> line_starts_;
  std::vector<Token> out_;

  void where(std::size_t off, int* line, int* col) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
    const std::size_t ls = *(it - 1);
    *line = static_cast<int>(it - line_starts_.begin());
    int c = 1;
    for (std::size_t i = ls; i < off && i < src_.size(); ++i)
      if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) ++c;
    *col = c;
  }

  [[noreturn]] void fail(std::size_t off, const std::string& msg) const {
    int l, c;
    where(off, &l, &c);
    throw Error(ErrorKind::Syntax, name_, l, c, msg);
  }

  void push(Tok t, std::size_t off, std::string v = {}) {
    Token k{t, std::move(v), 0, 0};
    where(off, &k.line, &k.col);
    out_.push_back(std::move(k));
  }

  void emit_data(std::size_t off, const std::string& text) {
    if (!text.empty()) push(Tok::Data, off, text);
  }

  // jinja2's OptionalLStrip: `-` strips all whitespace before the tag; otherwise (not `+`,
  // not a variable tag) lstrip_blocks strips the whitespace between the line's start and the tag.
  static std::string strip_text(std::string text, char sign, bool lstrip_kind, bool line_starting) {
    if (sign == '-') {
      text.resize(rstrip_pos(text));
    } else if (sign != '+' && lstrip_kind) {
      const std::size_t nl = text.rfind('\n');
      const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_space(std::string_view(text).substr(l_pos)))
        text.resize(l_pos);
    }
    return text;
  }

  std::size_t skip_space(std::size_t p) const {
    while (p < src_.size()) {
      const std::size_t n = space_at(src_, p);
      if (n == 0) break;
      p += n;
    }
    return p;
  }

  bool match_word(std::size_t p, const char* w) const { return src_.compare(p, std::strlen(w), w) == 0; }

  // `{%(-|+|)\s*raw\s*(?:-%}\s*|%})`
  bool match_raw_begin(std::size_t tag, std::size_t* end) const {
    std::size_t p = tag + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_space(p);
    if (!match_word(p, "raw")) return false;
    p = skip_space(p + 3);
    if (match_word(p, "-%}")) {
      *end = skip_space(p + 3);
      return true;
    }
    if (match_word(p, "%}")) {
      *end = p + 2;
      return true;
    }
    return false;
  }

  std::size_t lex_raw(std::size_t start, bool* line_starting) {
    // The raw-begin match ends with `%}` or `-%}\s*`.
    *line_starting = start > 0 && src_[start - 1] == '\n';
    for (std::size_t p = src_.find("{%", start); p != std::string::npos; p = src_.find("{%", p + 1)) {
      std::size_t q = p + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      q = skip_space(q);
      if (!match_word(q, "endraw")) continue;
      q = skip_space(q + 6);
      std::size_t end;
      if (match_word(q, "+%}")) {
        end = q + 3;
      } else if (match_word(q, "-%}")) {
        end = skip_space(q + 3);
      } else if (match_word(q, "%}")) {
        end = q + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      emit_data(start, strip_text(src_.substr(start, p - start), sign, true, *line_starting));
      *line_starting = src_[end - 1] == '\n';
      return end;
    }
    fail(start, "Missing end of raw directive");
  }

  std::size_t lex_comment(std::size_t tag, std::size_t body, bool* line_starting) {
    const std::size_t p = src_.find("#}", body);
    if (p == std::string::npos) fail(tag, "Missing end of comment tag");
    std::size_t end = p + 2;
    if (p > body && src_[p - 1] == '-') {
      end = skip_space(end);
    } else if (p > body && src_[p - 1] == '+') {
    } else if (end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    *line_starting = src_[end - 1] == '\n';
    return end;
  }

  std::size_t lex_tag(std::size_t tag, std::size_t p, bool block, bool* line_starting) {
    push(block ? Tok::BlockBegin : Tok::VarBegin, tag);
    std::vector<char> balance;
    for (;;) {
      if (p >= src_.size())
        fail(tag, std::string("unexpected end of template: the ") + (block ? "{%" : "{{") + " tag is not closed");
      if (balance.empty()) {
        std::size_t end = 0;
        if (block) {
          if (match_word(p, "+%}")) {
            end = p + 3;
          } else if (match_word(p, "-%}")) {
            end = skip_space(p + 3);
          } else if (match_word(p, "%}")) {
            end = p + 2;
            if (end < src_.size() && src_[end] == '\n') ++end;
          }
        } else {
          if (match_word(p, "-}}")) {
            end = skip_space(p + 3);
          } else if (match_word(p, "}}")) {
            end = p + 2;
          }
        }
        if (end) {
          push(block ? Tok::BlockEnd : Tok::VarEnd, p);
          *line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      const std::size_t ws = space_at(src_, p);
      if (ws) {
        p = skip_space(p);
        continue;
      }
      const char c = src_[p];
      if (is_digit(c)) {
        p = lex_number(p);
        continue;
      }
      if (is_name_start(c)) {
        std::size_t q = p;
        while (q < src_.size() && is_name_char(src_[q])) ++q;
        push(Tok::Name, p, src_.substr(p, q - p));
        p = q;
        continue;
      }
      if (c == '\'' || c == '"') {
        p = lex_string(p);
        continue;
      }
      static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
      bool matched = false;
      for (const char* op : two) {
        if (match_word(p, op)) {
          push(Tok::Op, p, op);
          p += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (std::strchr("+-/*%~[](){}><=.:|,;", c) && c != '\0') {
        if (c == '(' || c == '[' || c == '{') {
          balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
          if (balance.size() > 500) fail(p, "brackets nested too deeply");
        } else if (c == ')' || c == ']' || c == '}') {
          if (balance.empty()) fail(p, std::string("unexpected '") + c + "'");
          if (balance.back() != c) fail(p, std::string("unexpected '") + c + "', expected '" + balance.back() + "'");
          balance.pop_back();
        }
        push(Tok::Op, p, std::string(1, c));
        ++p;
        continue;
      }
      char32_t cp;
      const std::size_t n = decode_at(src_, p, &cp);
      fail(p, "unexpected char '" + src_.substr(p, n) + "'");
    }
  }

  std::size_t digits_(std::size_t p, bool (*ok)(char)) const {
    // (_?d)* after a first digit: underscores between digits
    while (p < src_.size()) {
      if (ok(src_[p])) {
        ++p;
      } else if (src_[p] == '_' && p + 1 < src_.size() && ok(src_[p + 1])) {
        p += 2;
      } else {
        break;
      }
    }
    return p;
  }

  std::size_t lex_number(std::size_t p) {
    auto dec = [](char c) { return c >= '0' && c <= '9'; };
    // float: (\d+_)*\d+ ( (\.(\d+_)*\d+)? e[+-]?(\d+_)*\d+ | \.(\d+_)*\d+ ), not after '.'
    const bool after_dot = p > 0 && src_[p - 1] == '.';
    if (!after_dot) {
      std::size_t q = digits_(p, dec);
      std::size_t r = q;
      bool frac = false, ex = false;
      if (r + 1 < src_.size() && src_[r] == '.' && dec(src_[r + 1])) {
        r = digits_(r + 1, dec);
        frac = true;
      }
      if (r < src_.size() && (src_[r] == 'e' || src_[r] == 'E')) {
        std::size_t e = r + 1;
        if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
        if (e < src_.size() && dec(src_[e])) {
          r = digits_(e, dec);
          ex = true;
        }
      }
      if (frac || ex) {
        if (!frac || ex || true) {
          std::string t;
          for (std::size_t k = p; k < r; ++k)
            if (src_[k] != '_') t += src_[k];
          Token k{Tok::Float, src_.substr(p, r - p), 0, 0};
          where(p, &k.line, &k.col);
          k.fval = std::strtod(t.c_str(), nullptr);
          out_.push_back(std::move(k));
          return r;
        }
      }
    }
    // integer
    std::size_t q = p;
    int base = 10;
    if (src_[p] == '0' && p + 1 < src_.size() && std::strchr("bBoOxX", src_[p + 1]) && src_[p + 1] != '\0') {
      const char b = static_cast<char>(src_[p + 1] | 0x20);
      base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
      std::size_t r = p + 2;
      auto ok = [&](char c) {
        if (base == 2) return c == '0' || c == '1';
        if (base == 8) return c >= '0' && c <= '7';
        return dec(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
      };
      std::size_t s = r;
      while (r < src_.size() && (ok(src_[r]) || (src_[r] == '_' && r + 1 < src_.size() && ok(src_[r + 1])))) ++r;
      if (r > s) {
        q = r;
      } else {
        base = 10;
        q = p + 1;  // just "0"
      }
    } else if (src_[p] == '0') {
      q = p + 1;
      while (q < src_.size() && (src_[q] == '0' || (src_[q] == '_' && q + 1 < src_.size() && src_[q + 1] == '0'))) ++q;
    } else {
      q = digits_(p, dec);
    }
    std::string t;
    for (std::size_t k = (base == 10 ? p : p + 2); k < q; ++k)
      if (src_[k] != '_') t += src_[k];
    Token k{Tok::Int, src_.substr(p, q - p), 0, 0};
    where(p, &k.line, &k.col);
    errno = 0;
    const unsigned long long v = std::strtoull(t.c_str(), nullptr, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      fail(p, "integer literal " + k.v + " is out of range (the engine's integers are 64-bit)");
    k.ival = static_cast<std::int64_t>(v);
    out_.push_back(std::move(k));
    return q;
  }

  std::size_t lex_string(std::size_t p) {
    const char quote = src_[p];
    std::size_t q = p + 1;
    std::string v;
    while (true) {
      if (q >= src_.size()) fail(p, "unexpected char '" + std::string(1, quote) + "': the string is not closed");
      const char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        v += c;
        ++q;
        continue;
      }
      if (q + 1 >= src_.size()) fail(p, "the string is not closed");
      const char e = src_[q + 1];
      q += 2;
      auto hex = [&](int n) -> char32_t {
        char32_t cp = 0;
        for (int k = 0; k < n; ++k) {
          if (q >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[q])))
            fail(q, "truncated \\x/\\u/\\U escape in a string literal");
          const char h = src_[q++];
          cp = cp * 16 + static_cast<char32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        return cp;
      };
      switch (e) {
        case '\n': break;
        case '\\': v += '\\'; break;
        case '\'': v += '\''; break;
        case '"': v += '"'; break;
        case 'a': v += '\a'; break;
        case 'b': v += '\b'; break;
        case 'f': v += '\f'; break;
        case 'n': v += '\n'; break;
        case 'r': v += '\r'; break;
        case 't': v += '\t'; break;
        case 'v': v += '\v'; break;
        case 'x': append_utf8(v, hex(2)); break;
        case 'u': {
          const char32_t cp = hex(4);
          if (cp >= 0xD800 && cp <= 0xDFFF) fail(q, "a surrogate \\u escape is not supported");
          append_utf8(v, cp);
          break;
        }
        case 'U': {
          const char32_t cp = hex(8);
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail(q, "illegal \\U escape");
          append_utf8(v, cp);
          break;
        }
        case 'N': fail(q, "\\N{...} escapes are not supported by Odyssey's Jinja engine");
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && q < src_.size() && src_[q] >= '0' && src_[q] <= '7'; ++k)
              cp = cp * 8 + static_cast<char32_t>(src_[q++] - '0');
            append_utf8(v, cp);
          } else {
            v += '\\';
            v += e;
          }
      }
    }
    Token k{Tok::String, std::move(v), 0, 0};
    where(p, &k.line, &k.col);
    out_.push_back(std::move(k));
    return q + 1;
  }
};

}  // namespace

std::vector<Token> lex(std::string_view source, const std::string& name) {
  if (const std::size_t bad = invalid_utf8_at(source); bad != std::string_view::npos) {
    int line = 1, col = 1;
    for (std::size_t i = 0; i < bad; ++i) {
      if (source[i] == '\n') {
        ++line;
        col = 1;
      } else if ((static_cast<unsigned char>(source[i]) & 0xC0) != 0x80) {
        ++col;
      }
    }
    throw Error(ErrorKind::Syntax, name, line, col,
                "the template is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
  }
  // Newlines normalized to \n, one trailing newline dropped (keep_trailing_newline=False).
  std::string src;
  src.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  Lexer lx(std::move(src), name);
  return lx.run();
}

}  // namespace odyssey::jinja::detail
