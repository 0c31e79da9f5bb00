#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>

#include "tokenizer/utf8.h"

namespace odyssey::tok {

namespace {

// Oniguruma's \s: the Unicode White_Space characters.
constexpr std::string_view kSpaceClass =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
// Oniguruma's \w: Alphabetic, marks, decimal digits, connector punctuation, joiners.
constexpr std::string_view kWordClass = "\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}";
constexpr std::string_view kHexClass = "0-9a-fA-F";

constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// PCRE2 state one thread needs to match: a JIT stack that grows instead of failing on long
// whitespace runs, and its match context.
struct ThreadMatchState {
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchState() {
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
  }
  ThreadMatchState(const ThreadMatchState&) = delete;
  ThreadMatchState& operator=(const ThreadMatchState&) = delete;
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState s;
  return s;
}

}  // namespace

std::string translate_oniguruma(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      std::string_view cls;
      bool negated = false;
      switch (e) {
        case 's': cls = kSpaceClass; break;
        case 'S':
          cls = kSpaceClass;
          negated = true;
          break;
        case 'w': cls = kWordClass; break;
        case 'W':
          cls = kWordClass;
          negated = true;
          break;
        case 'h': cls = kHexClass; break;
        case 'H':
          cls = kHexClass;
          negated = true;
          break;
        default: break;
      }
      if (e == 'u' && i + 6 <= p.size() &&
          std::all_of(p.begin() + static_cast<std::ptrdiff_t>(i + 2), p.begin() + static_cast<std::ptrdiff_t>(i + 6),
                      [](char h) { return std::isxdigit(static_cast<unsigned char>(h)) != 0; })) {
        out += "\\x{";
        out.append(p.substr(i + 2, 4));
        out += "}";
        i += 5;
        continue;
      }
      if (!cls.empty() && !(in_class && negated)) {
        if (in_class) {
          out.append(cls);
        } else {
          out += negated ? "[^" : "[";
          out.append(cls);
          out += "]";
        }
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a literal ] first
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      const auto end = p.find(":]", i + 2);
      if (end != std::string_view::npos) {
        out.append(p.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct Regex::Code {
  pcre2_code* code = nullptr;
};

std::unique_ptr<Regex> Regex::compile(std::string_view pattern, bool literal, std::string* error) {
  const std::string source = literal ? std::string(pattern) : translate_oniguruma(pattern);
  int code = 0;
  PCRE2_SIZE offset = 0;
  const std::uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0u);
  pcre2_code* re =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options, &code, &offset, nullptr);
  if (!re) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof buf);
    *error = std::string(reinterpret_cast<const char*>(buf)) + " at offset " + std::to_string(offset);
    return nullptr;
  }
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is missing
  std::unique_ptr<Regex> r(new Regex());
  r->code_ = new Code{re};
  return r;
}

Regex::~Regex() {
  if (code_) pcre2_code_free(code_->code);
  delete code_;
}

bool Regex::for_each_match(std::string_view s, const std::function<bool(std::size_t, std::size_t)>& on_match,
                           std::string* error) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  if (!md) {
    *error = "out of memory for regex match data";
    return false;
  }
  const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  ThreadMatchState& ts = thread_state();
  std::size_t pos = 0;
  bool have_last = false;
  std::size_t last_end = 0;
  bool ok = true;
  while (pos <= s.size()) {
    const int rc = pcre2_match(code_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md, ts.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof buf);
      *error = "regex matching failed at byte " + std::to_string(pos) + ": " + reinterpret_cast<const char*>(buf);
      ok = false;
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const std::size_t start = ov[0], end = ov[1];
    if (start == end && have_last && last_end == end) {  // no empty match right after a match
      if (pos >= s.size()) break;
      pos += utf8::sequence_length(static_cast<unsigned char>(s[pos]));
      continue;
    }
    if (!on_match(start, end)) {
      ok = false;
      break;
    }
    pos = end;
    have_last = true;
    last_end = end;
  }
  pcre2_match_data_free(md);
  return ok;
}

bool PreTokenizer::has_byte_level() const {
  for (const auto& s : steps)
    if (s.kind == PreTokenizerStep::ByteLevel) return true;
  return false;
}

std::shared_ptr<const Regex> PreTokenizer::gpt2_regex() {
  static const std::shared_ptr<const Regex> re = [] {
    std::string err;
    return std::shared_ptr<const Regex>(Regex::compile(kGpt2Pattern, false, &err));
  }();
  return re;
}

bool PreTokenizer::run(std::string_view segment, std::deque<std::string>* arena,
                       const std::function<void(const Piece&)>& emit, std::string* error) const {
  if (segment.empty()) return true;
  return run_from(0, Piece{segment, 0, false}, arena, emit, error);
}

namespace {

// (begin, end) splits of a piece from its regex matches for the merging behaviors, as
// NormalizedString::split makes them; empty splits are dropped by the caller.
std::vector<std::pair<std::size_t, std::size_t>> merge_splits(
    std::size_t n, const std::vector<std::pair<std::size_t, std::size_t>>& found, bool invert, SplitBehavior behavior) {
  struct M {
    std::size_t b, e;
    bool match;
  };
  std::vector<M> all;
  std::size_t prev = 0;
  for (const auto& [b, e] : found) {
    if (prev != b) all.push_back({prev, b, invert});
    all.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != n) all.push_back({prev, n, invert});
  std::vector<std::pair<std::size_t, std::size_t>> out;
  bool previous = false;
  if (behavior == SplitBehavior::MergedWithNext) {
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if (it->match && !previous && !out.empty()) {
        out.back().first = it->b;
      } else {
        out.emplace_back(it->b, it->e);
      }
      previous = it->match;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  for (const M& m : all) {
    const bool merge = behavior == SplitBehavior::Contiguous ? m.match == previous : (m.match && !previous);
    if (merge && !out.empty()) {
      out.back().second = m.e;
    } else {
      out.emplace_back(m.b, m.e);
    }
    previous = m.match;
  }
  return out;
}

}  // namespace

bool PreTokenizer::run_from(std::size_t step, const Piece& p, std::deque<std::string>* arena,
                            const std::function<void(const Piece&)>& emit, std::string* error) const {
  if (p.text.empty()) return true;
  if (step == steps.size()) {
    emit(p);
    return true;
  }
  const PreTokenizerStep& s = steps[step];
  Piece piece = p;
  if (s.kind == PreTokenizerStep::ByteLevel) {
    if (s.add_prefix_space && piece.text.front() != ' ') {
      arena->push_back(" " + std::string(piece.text));
      piece = Piece{arena->back(), p.begin, true};
    }
    if (!s.regex) return run_from(step + 1, piece, arena, emit, error);
  }
  const SplitBehavior behavior = s.kind == PreTokenizerStep::ByteLevel ? SplitBehavior::Isolated : s.behavior;
  const std::size_t n = piece.text.size();
  bool inner_ok = true;
  auto next = [&](std::size_t b, std::size_t e) {
    if (b != e && !run_from(step + 1, piece.sub(b, e), arena, emit, error)) inner_ok = false;
    return inner_ok;
  };
  if (behavior == SplitBehavior::Isolated || behavior == SplitBehavior::Removed) {
    // Streamed: a long document is one piece with millions of matches.
    const bool keep_matches = behavior == SplitBehavior::Isolated || s.invert;
    const bool keep_gaps = behavior == SplitBehavior::Isolated || !s.invert;
    std::size_t prev = 0;
    const bool ok = s.regex->for_each_match(
        piece.text,
        [&](std::size_t b, std::size_t e) {
          if (keep_gaps && prev != b && !next(prev, b)) return false;
          prev = e;
          return keep_matches ? next(b, e) : true;
        },
        error);
    if (!ok || !inner_ok) return false;
    return keep_gaps && prev != n ? next(prev, n) : true;
  }
  std::vector<std::pair<std::size_t, std::size_t>> found;
  if (!s.regex->for_each_match(
          piece.text,
          [&](std::size_t b, std::size_t e) {
            found.emplace_back(b, e);
            return true;
          },
          error))
    return false;
  for (const auto& [b, e] : merge_splits(n, found, s.invert, behavior))
    if (!next(b, e)) return false;
  return true;
}

}  // namespace odyssey::tok
