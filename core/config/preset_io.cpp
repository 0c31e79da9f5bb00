#include "config/preset_io.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "common/text.h"

namespace odyssey {
namespace fs = std::filesystem;
namespace {

// Keys accepted for another key's sake (older ms-swift spellings). Saving writes the
// canonical key.
struct Alias {
  std::string_view alias, key;
};
constexpr Alias kAliases[] = {{"train_type", "tuner_type"}};

// ms-swift arguments whose Odyssey spelling differs, for a helpful message.
struct SwiftHint {
  std::string_view swift, hint;
};
constexpr SwiftHint kSwiftHints[] = {
    {"deepspeed", "use zero_stage (0-2) and offload_optimizer instead"},
    {"use_liger_kernel", "use fused_kernels instead"},
    {"gradient_checkpointing", "use activation_checkpointing (auto, all, none, every:K) instead"},
    {"attn_implementation", "use attn_impl instead"},
    {"num_train_epoch", "use num_train_epochs"},
    {"lora_target_modules", "use target_modules"},
};

std::string kind_word(const FieldMember& m) {
  switch (m.index()) {
    case 0: return "true or false";
    case 1: return "an integer";
    case 2: return "a number";
    case 3: return "text";
    case 4: return "a list of text";
    default: return "a list of integers";
  }
}

std::string range_text(const FieldSpec& f) {
  const bool is_int = std::holds_alternative<std::int64_t TrainConfig::*>(f.member) ||
                      std::holds_alternative<std::vector<std::int64_t> TrainConfig::*>(f.member);
  auto num = [&](double v) {
    if (is_int) {
      std::ostringstream o;
      o.precision(15);
      o << v;
      return o.str();
    }
    return text::format_double(v);
  };
  std::string lo = std::isinf(f.min) ? "" : num(f.min);
  std::string hi = std::isinf(f.max) ? "" : num(f.max);
  std::string out;
  if (!lo.empty() && !hi.empty()) out = "from " + lo + " to " + hi;
  else if (!lo.empty()) out = "at least " + lo;
  else if (!hi.empty()) out = "at most " + hi;
  if (!f.special.empty()) {
    std::string_view word = f.special;
    out += (out.empty() ? "" : ", or ") + std::string(word);
  }
  return out;
}

std::string choices_text(const FieldSpec& f) {
  std::vector<std::string> c(f.choices.begin(), f.choices.end());
  return text::join(c, ", ");
}

Diagnostic err(const SourcePos& at, std::string_view key, std::string msg) {
  return diagnostic_at(Severity::Error, at.file, std::string(key), std::move(msg), at.line, at.column);
}

SourcePos pos_of(const YAML::Node& n, const std::string& file) {
  SourcePos p;
  p.file = file;
  const auto m = n.Mark();
  if (!m.is_null()) {
    p.line = m.line + 1;
    p.column = m.column + 1;
  }
  return p;
}

std::string describe_node(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "no value";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return text::quoted(n.Scalar());
}

// Scalars of a list field: a YAML sequence, a single scalar, or (for gpu_ids) "0,1,3".
bool list_items(const YAML::Node& v, std::vector<std::pair<std::string, YAML::Node>>* out, bool split_commas) {
  if (v.IsNull()) return true;
  if (v.IsScalar()) {
    if (split_commas && v.Scalar().find(',') != std::string::npos) {
      std::stringstream ss(v.Scalar());
      std::string part;
      while (std::getline(ss, part, ',')) out->emplace_back(text::trim(part), v);
    } else {
      out->emplace_back(v.Scalar(), v);
    }
    return true;
  }
  if (!v.IsSequence()) return false;
  for (const auto& item : v) {
    if (!item.IsScalar()) return false;
    out->emplace_back(item.Scalar(), item);
  }
  return true;
}

Diagnostics check_number(const FieldSpec& f, double v, const std::string& found, const SourcePos& at) {
  Diagnostics d;
  if (v < f.min || v > f.max)
    d.push_back(err(at, f.key, "found " + found + ", expected " + kind_word(f.member) + " " + range_text(f)));
  return d;
}

// Values as parsed, after YAML's escapes: "\0" and "\ud800" in a double-quoted value
// give a NUL byte and an unpaired surrogate, which no byte check of the text can see.
void check_scalars(const YAML::Node& n, const std::string& key, const std::string& file, Diagnostics& d, int depth = 0,
                   std::size_t* visits = nullptr) {
  // An alias can make a node its own descendant (&a [*a, *a]); the text's nesting is bounded
  // to 32 by precheck, so a deeper walk is such a cycle (assign() refuses it anyway), and a
  // preset's values are never more than a few thousand nodes.
  std::size_t budget = 0;
  if (!visits) visits = &budget;
  if (depth > 40 || ++*visits > 100000 || !d.empty()) return;
  if (n.IsScalar()) {
    std::size_t at = 0;
    std::string why;
    if (!text::clean_utf8(n.Scalar(), &at, &why))
      d.push_back(err(pos_of(n, file), key,
                      "the value holds " + (why == "a NUL byte" ? why : why + " (byte " + std::to_string(at) + ")") +
                          " after its escapes are read; expected UTF-8 text without NUL"));
    return;
  }
  if (n.IsSequence() || n.IsMap())
    for (const auto& item : n) {
      if (n.IsMap()) {
        check_scalars(item.first, key, file, d, depth + 1, visits);
        check_scalars(item.second, key, file, d, depth + 1, visits);
      } else {
        check_scalars(item, key, file, d, depth + 1, visits);
      }
    }
}

Diagnostics assign(TrainConfig& c, const FieldSpec& f, const YAML::Node& v, const std::string& file) {
  Diagnostics d;
  const SourcePos at = pos_of(v, file);
  const std::string found = describe_node(v);
  auto expected = [&](std::string extra = {}) {
    std::string msg = "found " + found + ", expected " + kind_word(f.member);
    const std::string r = range_text(f);
    if (!f.choices.empty() && f.member.index() == 3) msg = "found " + found + ", expected one of: " + choices_text(f);
    else if (!r.empty()) msg += " " + r;
    if (!extra.empty()) msg += "; " + extra;
    d.push_back(err(at, f.key, msg));
  };

  std::visit(
      [&](auto member) {
        using M = std::remove_reference_t<decltype(c.*member)>;
        if constexpr (std::is_same_v<M, bool>) {
          auto b = v.IsScalar() ? text::parse_bool(v.Scalar()) : std::nullopt;
          if (!b) return expected();
          c.*member = *b;
        } else if constexpr (std::is_same_v<M, std::int64_t>) {
          if (!v.IsScalar()) return expected();
          const std::string s = v.Scalar();
          const std::optional<double> special = special_number(f);
          if (special && s == f.special) {
            c.*member = static_cast<std::int64_t>(*special);
            return;
          }
          auto i = text::parse_int(s);
          if (!i) {
            auto dbl = text::parse_double(s);
            return expected(dbl ? "write a whole number" : std::string{});
          }
          // The special word's number is allowed below the range (0 = auto, -1 = none).
          if (!special || static_cast<double>(*i) != *special) {
            auto more = check_number(f, static_cast<double>(*i), found, at);
            if (!more.empty()) return d.insert(d.end(), more.begin(), more.end()), void();
          }
          c.*member = *i;
        } else if constexpr (std::is_same_v<M, double>) {
          const std::optional<double> special = special_number(f);
          if (special && v.IsScalar() && v.Scalar() == f.special) {
            c.*member = *special;
            return;
          }
          auto x = v.IsScalar() ? text::parse_double(v.Scalar()) : std::nullopt;
          if (!x || std::isinf(*x)) return expected();
          // As for whole numbers: the special word's number is allowed below the range.
          if (!special || *x != *special) {
            auto more = check_number(f, *x, found, at);
            if (!more.empty()) return d.insert(d.end(), more.begin(), more.end()), void();
          }
          c.*member = *x;
        } else if constexpr (std::is_same_v<M, std::string>) {
          if (v.IsNull()) {
            // No value: fine for free text (system: ), not for a choice, which has no empty one.
            if (!f.choices.empty() || f.key == "activation_checkpointing") return expected();
            c.*member = "";
          } else if (!v.IsScalar()) {
            return expected();
          } else {
            std::string s = v.Scalar();
            // offload_activations was true/false before auto existed: every boolean spelling stays valid.
            if (f.key == "offload_activations")
              if (auto b = text::parse_bool(s)) s = *b ? "true" : "false";
            if (f.key == "activation_checkpointing") {
              if (auto b = text::parse_bool(s)) s = *b ? "all" : "none";
              if (!parse_checkpoint_policy(s, nullptr))
                return d.push_back(err(at, f.key,
                                       "found " + found +
                                           ", expected auto, all, none or every:K "
                                           "with K a positive integer")),
                       void();
            }
            if (!f.choices.empty()) {
              bool okc = false;
              for (auto ch : f.choices) okc = okc || ch == s;
              if (!okc) {
                std::vector<std::string> cands(f.choices.begin(), f.choices.end());
                auto near = text::closest(s, cands);
                return expected(near ? "did you mean '" + *near + "'?" : std::string{});
              }
            }
            c.*member = s;
          }
        } else if constexpr (std::is_same_v<M, std::vector<std::string>>) {
          std::vector<std::pair<std::string, YAML::Node>> items;
          if (!list_items(v, &items, false)) return expected();
          M out;
          for (auto& [s, node] : items) {
            const SourcePos ip = pos_of(node, file);
            if (f.key == "dataset" || f.key == "val_dataset") {
              std::string why;
              if (!parse_dataset_spec(s, nullptr, &why)) {
                d.push_back(err(ip, f.key, "found " + text::quoted(s) + ": " + why + "; expected 'path' or 'path#N'"));
                continue;
              }
            }
            if (!f.choices.empty()) {
              bool okc = false;
              for (auto ch : f.choices) okc = okc || ch == s;
              if (!okc) {
                std::vector<std::string> cands(f.choices.begin(), f.choices.end());
                auto near = text::closest(s, cands);
                d.push_back(err(ip, f.key,
                                "found " + text::quoted(s) + ", expected items from: " + choices_text(f) +
                                    (near ? "; did you mean '" + *near + "'?" : "")));
                continue;
              }
            }
            out.push_back(s);
          }
          if (has_errors(d)) return;
          c.*member = std::move(out);
        } else {
          std::vector<std::pair<std::string, YAML::Node>> items;
          if (!list_items(v, &items, true)) return expected();
          M out;
          for (auto& [s, node] : items) {
            auto i = text::parse_int(s);
            if (!i || static_cast<double>(*i) < f.min || static_cast<double>(*i) > f.max) {
              d.push_back(
                  err(pos_of(node, file), f.key, "found " + text::quoted(s) + ", expected integers " + range_text(f)));
              continue;
            }
            out.push_back(*i);
          }
          if (has_errors(d)) return;
          c.*member = std::move(out);
        }
      },
      f.member);
  return d;
}

// The top-level key whose value holds byte `at` of the text: the nearest line above (or
// at) it that starts in column 1 with "key:". "" when there is none.
std::string top_key_at(std::string_view y, std::size_t at) {
  std::size_t end = std::min(at, y.size());
  for (;;) {
    const std::size_t begin = end == 0                                           ? 0
                              : y.rfind('\n', end - 1) == std::string_view::npos ? 0
                                                                                 : y.rfind('\n', end - 1) + 1;
    const std::string_view line = y.substr(begin, y.find('\n', begin) - begin);
    const std::size_t colon = line.find(':');
    if (!line.empty() && std::string_view(" \t#-").find(line[0]) == std::string_view::npos &&
        colon != std::string_view::npos) {
      std::string k = text::trim(line.substr(0, colon));
      if (k.size() >= 2 && (k.front() == '"' || k.front() == '\'') && k.back() == k.front())
        k = k.substr(1, k.size() - 2);
      return k.size() <= 64 ? k : std::string();
    }
    if (begin == 0) return {};
    end = begin - 1;
  }
}

// NUL bytes and invalid UTF-8 anywhere, quoted values included (docs/config.md: a preset is
// UTF-8 text); the error names the line, the column and the key whose value holds the byte.
Diagnostics check_bytes(std::string_view y, const std::string& file) {
  std::size_t bad = 0;
  std::string why;
  if (text::clean_utf8(y, &bad, &why)) return {};
  int line = 1;
  std::size_t line_begin = 0;
  for (std::size_t i = 0; i < bad; ++i)
    if (y[i] == '\n') ++line, line_begin = i + 1;
  const std::string what = why == "a NUL byte" ? "a NUL byte: this is not a text file; expected YAML"
                                               : why + " byte sequence; expected UTF-8 text";
  return {err({file, line, static_cast<int>(bad - line_begin) + 1}, top_key_at(y, bad), what)};
}

// Control characters anywhere, quoted values included: YAML allows tab, CR and LF only.
Diagnostics check_controls(std::string_view y, const std::string& file) {
  int line = 1;
  std::size_t line_begin = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const auto ch = static_cast<unsigned char>(y[i]);
    if (ch == '\n') line++, line_begin = i + 1;
    else if (ch < 0x20 && ch != '\t' && ch != '\r')
      return {err({file, line, static_cast<int>(i - line_begin) + 1}, top_key_at(y, i),
                  "a control character (byte " + std::to_string(ch) + "); YAML text may not contain them")};
  }
  return {};
}

// Whether the line `l` (comment excluded) ends with a block scalar header: | or > with
// optional chomping and indentation indicators. Its value's lines follow, more indented.
bool opens_block_scalar(std::string_view l) {
  if (const auto hash = l.find(" #"); hash != std::string_view::npos) l = l.substr(0, hash);
  const std::string t = text::trim(l);
  const auto sp = t.find_last_of(" \t");
  const std::string last = sp == std::string::npos ? t : t.substr(sp + 1);
  if (last.empty() || (last[0] != '|' && last[0] != '>')) return false;
  return last.find_first_not_of("|>-+0123456789") == std::string::npos;
}

std::size_t indent_of(std::string_view y, std::size_t line_begin) {
  std::size_t i = line_begin;
  while (i < y.size() && y[i] == ' ') ++i;
  return i - line_begin;
}

// Refuse what yaml-cpp should never be handed: binary data, invalid UTF-8, nesting deep
// enough to exhaust the parser's stack.
Diagnostics precheck(std::string_view y, const std::string& file) {
  Diagnostics d;
  SourcePos at{file, 0, 0};
  if (static_cast<std::int64_t>(y.size()) > kMaxPresetBytes) {
    d.push_back(err(at, "",
                    "the file is " + std::to_string(y.size()) + " bytes; a preset is at most " +
                        std::to_string(kMaxPresetBytes) + " bytes of YAML settings"));
    return d;
  }
  if (auto bytes = check_bytes(y, file); !bytes.empty()) return bytes;
  if (auto controls = check_controls(y, file); !controls.empty()) return controls;
  int line = 1, col = 0, flow_depth = 0;
  std::size_t line_begin = 0;
  std::optional<std::size_t> block_indent;  // inside a block scalar's value lines
  bool line_start = true;
  int dashes = 0;
  char prev_sig = '\n';   // last non-blank character on this line
  bool in_props = false;  // inside an anchor, alias or tag
  for (std::size_t i = 0; i < y.size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(y[i]);
    ++col;
    if (ch >= 0x80) {  // a UTF-8 sequence (check_bytes has validated it)
      i += (ch & 0xE0) == 0xC0 ? 1 : (ch & 0xF0) == 0xE0 ? 2 : 3;
      continue;
    }
    if (ch == '\n') {
      // A block scalar's value lines are text, not YAML structure: quotes in them open nothing.
      if (opens_block_scalar(y.substr(line_begin, i - line_begin))) block_indent = indent_of(y, line_begin);
      ++line;
      col = 0;
      line_begin = i + 1;
      if (block_indent) {
        for (;;) {  // skip the value lines: blank, or indented beyond the header's line
          const std::size_t nl = y.find('\n', line_begin);
          const std::string_view l =
              y.substr(line_begin, nl == std::string_view::npos ? std::string_view::npos : nl - line_begin);
          if (!text::trim(l).empty() && indent_of(y, line_begin) <= *block_indent) break;
          if (nl == std::string_view::npos) return d;
          line_begin = nl + 1;
          ++line;
        }
        block_indent.reset();
        i = line_begin - 1;
      }
      line_start = true;
      dashes = 0;
      prev_sig = '\n';
      in_props = false;
      continue;
    }
    if (ch == '#' && (i == 0 || y[i - 1] == ' ' || y[i - 1] == '\t' || line_start)) {
      while (i + 1 < y.size() && y[i + 1] != '\n') ++i;
      continue;
    }
    const bool scalar_start = std::string_view("\n:-[{,?").find(prev_sig) != std::string_view::npos;
    // yaml-cpp 0.7 loops forever on a stray flow indicator where a block value starts
    // (",0=" was found by the fuzzer); such text is invalid YAML anyway.
    if (ch < 0x20 && ch != '\t' && ch != '\r') {
      d.push_back(err({file, line, col}, "",
                      "a control character (byte " + std::to_string(ch) + "); YAML text may not contain them"));
      return d;
    }
    if (scalar_start && (ch == '&' || ch == '*' || ch == '!')) in_props = true;
    else if (ch == ' ' || ch == '\t') in_props = false;
    if (flow_depth == 0 && ((scalar_start && (ch == ',' || ch == ']' || ch == '}')) || (in_props && ch == ','))) {
      d.push_back(
          err({file, line, col}, "",
              std::string("a stray '") + static_cast<char>(ch) + "' outside a [ ] or { } list; quote the value"));
      return d;
    }
    if (ch != ' ' && ch != '\t') prev_sig = static_cast<char>(ch);
    if ((ch == '\'' || ch == '"') && scalar_start) {  // skip quoted text
      const char q = static_cast<char>(ch);
      const SourcePos opened{file, line, col};
      const std::size_t open_at = i;
      bool closed = false;
      for (++i; i < y.size(); ++i) {
        if (y[i] == q && q == '\'' && i + 1 < y.size() && y[i + 1] == '\'') ++i;  // '' is a quote
        else if (y[i] == q) {
          closed = true;
          break;
        } else if (q == '"' && y[i] == '\\') ++i;
        if (i < y.size() && y[i] == '\n') ++line, line_begin = i + 1;
      }
      if (!closed) {
        // yaml-cpp reads such a value to the end of the text: every later key would become
        // part of it and silently keep its default.
        d.push_back(err(opened, top_key_at(y, open_at),
                        std::string("unterminated ") + (q == '"' ? "double" : "single") + "-quoted value: no closing " +
                            q + " before the end of the file; close the quote"));
        return d;
      }
      line_start = false;
      continue;
    }
    if (ch == '[' || ch == '{') {
      if (++flow_depth > 32) {
        d.push_back(err({file, line, col}, "",
                        "nesting deeper than 32 levels; a preset holds "
                        "scalars and short lists"));
        return d;
      }
    } else if (ch == ']' || ch == '}') {
      if (flow_depth > 0) --flow_depth;
    }
    if (line_start && (ch == '-' || ch == '?') && i + 1 < y.size() && (y[i + 1] == ' ')) {
      if (++dashes > 32) {
        d.push_back(err({file, line, col}, "",
                        "nesting deeper than 32 levels; a preset holds "
                        "scalars and short lists"));
        return d;
      }
      continue;
    }
    if (ch != ' ' && ch != '\t') line_start = false;
  }
  return d;
}

std::string read_file(const std::string& path, Diagnostics* d) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    d->push_back(err({path, 0, 0}, "", "no such file"));
    return {};
  }
  if (fs::is_directory(path, ec)) {
    d->push_back(err({path, 0, 0}, "", "is a directory; expected a YAML preset file"));
    return {};
  }
  const auto size = fs::file_size(path, ec);
  if (!ec && static_cast<std::int64_t>(size) > kMaxPresetBytes) {
    d->push_back(err({path, 0, 0}, "",
                     "the file is " + std::to_string(size) + " bytes; a preset is at most " +
                         std::to_string(kMaxPresetBytes) + " bytes of YAML settings"));
    return {};
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    d->push_back(err({path, 0, 0}, "", "cannot be opened for reading"));
    return {};
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

namespace {

// Where the first YAML documents of a text start, counted up to 3. Throws YAML::Exception
// on a syntax error.
struct DocumentStarts {
  int count = 0;
  YAML::Mark mark[3];
  // yaml-cpp 0.7 stuck on a token it cannot use: it reports empty documents at one place
  // for ever.
  bool stuck() const { return count == 3 && mark[1].pos == mark[2].pos; }
};

class DocumentCounter final : public YAML::EventHandler {
 public:
  DocumentStarts starts;
  void OnDocumentStart(const YAML::Mark& m) override {
    if (starts.count < 3) starts.mark[starts.count] = m;
    ++starts.count;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

DocumentStarts document_starts(std::string_view yaml) {
  std::istringstream in{std::string(yaml)};
  YAML::Parser parser(in);
  DocumentCounter counter;
  while (counter.starts.count < 3 && parser.HandleNextDocument(counter)) {}
  return counter.starts;
}

}  // namespace

Result<LoadedConfig> load_preset_text(std::string_view yaml, const std::string& file, const std::string& base_dir) {
  Result<LoadedConfig> r;
  r.value.origin.file = file;
  r.value.origin.base_dir = base_dir;
  r.diagnostics = precheck(yaml, file);
  if (!r.ok()) return r;

  if (text::trim(yaml).empty()) {
    r.diagnostics.push_back(err({file, 0, 0}, "",
                                "the preset is empty; expected a mapping of "
                                "settings such as 'model:' and 'dataset:'"));
    return r;
  }
  YAML::Node root;
  try {
    // yaml-cpp 0.7's LoadAll loops forever (allocating) on inputs such as `"",` (upstream
    // issue 1040, fixed after 0.8): documents are counted here with a bound instead, and
    // only the first is built.
    const DocumentStarts starts = document_starts(yaml);
    if (starts.count > 1) {
      const YAML::Mark& m = starts.mark[1];
      if (starts.stuck()) {
        r.diagnostics.push_back(err({file, m.line + 1, m.column + 1}, "",
                                    "invalid YAML: nothing from here on parses (a stray ',' or other flow "
                                    "indicator outside [ ] or { }?)"));
      } else {
        r.diagnostics.push_back(
            err({file, m.line + 1, m.column + 1}, "", "a second YAML document; a preset is exactly one document"));
      }
      return r;
    }
    if (starts.count == 1) root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    SourcePos at{file, e.mark.is_null() ? 0 : e.mark.line + 1, e.mark.is_null() ? 0 : e.mark.column + 1};
    r.diagnostics.push_back(err(at, "", "invalid YAML: " + e.msg));
    return r;
  }
  if (!root.IsDefined() || root.IsNull()) {
    r.diagnostics.push_back(err({file, 0, 0}, "",
                                "the preset has no settings; expected a mapping "
                                "of settings such as 'model:' and 'dataset:'"));
    return r;
  }
  if (!root.IsMap()) {
    r.diagnostics.push_back(err(pos_of(root, file), "",
                                "found " + describe_node(root) +
                                    " at the top level; expected a mapping "
                                    "of settings (key: value lines)"));
    return r;
  }

  const auto keys = field_keys();
  std::set<std::string> seen;
  for (const auto& kv : root) {
    const SourcePos kpos = pos_of(kv.first, file);
    if (!kv.first.IsScalar()) {
      r.diagnostics.push_back(err(kpos, "", "found " + describe_node(kv.first) + " as a key; expected a setting name"));
      continue;
    }
    std::string key = kv.first.Scalar();
    for (const auto& a : kAliases)
      if (key == a.alias) key = std::string(a.key);
    const FieldSpec* f = find_field(key);
    if (!f) {
      std::string msg = "unknown key";
      bool hinted = false;
      for (const auto& h : kSwiftHints)
        if (key == h.swift) {
          msg += " (an ms-swift argument: " + std::string(h.hint) + ")";
          hinted = true;
        }
      if (!hinted) {
        if (auto near = text::closest(key, keys)) msg += "; did you mean '" + *near + "'?";
        else msg += "; see 'odyssey-train show --keys' for the list";
      }
      r.diagnostics.push_back(err(kpos, kv.first.Scalar(), msg));
      continue;
    }
    if (!seen.insert(key).second) {
      const auto& first = r.value.origin.keys[key];
      r.diagnostics.push_back(
          err(kpos, key, "set twice (first on line " + std::to_string(first.line) + "); a key may appear once"));
      continue;
    }
    r.value.origin.keys[key] = pos_of(kv.second.IsNull() ? kv.first : kv.second, file);
    r.value.origin.keys[key].line = kpos.line;
    Diagnostics bytes;
    check_scalars(kv.second, key, file, bytes);
    if (!bytes.empty()) {
      r.diagnostics.insert(r.diagnostics.end(), bytes.begin(), bytes.end());
      continue;
    }
    auto d = assign(r.value.config, *f, kv.second, file);
    r.diagnostics.insert(r.diagnostics.end(), d.begin(), d.end());
  }
  return r;
}

Result<LoadedConfig> load_preset_file(const std::string& path) {
  Result<LoadedConfig> r;
  std::string textv = read_file(path, &r.diagnostics);
  if (!r.ok()) return r;
  std::error_code ec;
  auto base = fs::absolute(fs::path(path), ec).parent_path().string();
  return load_preset_text(textv, path, base);
}

Diagnostics set_field_from_text(TrainConfig& c, std::string_view key, std::string_view yaml_value,
                                const SourcePos& where) {
  std::string k(key);
  for (const auto& a : kAliases)
    if (k == a.alias) k = std::string(a.key);
  const FieldSpec* f = find_field(k);
  if (!f) {
    std::string msg = "unknown key";
    if (auto near = text::closest(k, field_keys())) msg += "; did you mean '" + *near + "'?";
    return {err(where, key, msg)};
  }
  // The same guards as for a preset file (size, NUL, UTF-8, nesting depth): an override
  // value reaches the same parser.
  if (auto pre = precheck(yaml_value, where.file); has_errors(pre)) {
    for (auto& x : pre) {
      x.key = k;
      x.line = where.line;
      x.column = where.column;
    }
    return pre;
  }
  YAML::Node v;
  try {
    v = YAML::Load(std::string(yaml_value));
  } catch (const YAML::Exception& e) {
    return {err(where, k, "value " + text::quoted(yaml_value) + " is not valid YAML: " + e.msg)};
  }
  TrainConfig tmp = c;
  Diagnostics d;
  check_scalars(v, k, where.file, d);
  if (d.empty()) d = assign(tmp, *f, v, where.file);
  for (auto& x : d) {  // positions inside the value text mean nothing to the user
    x.line = where.line;
    x.column = where.column;
  }
  if (!has_errors(d)) c = std::move(tmp);
  return d;
}

Diagnostics apply_overrides(LoadedConfig& cfg, const std::vector<std::string>& assignments) {
  Diagnostics all;
  for (const auto& a : assignments) {
    const auto eq = a.find('=');
    SourcePos where{"--set", 0, 0};
    if (eq == std::string::npos || eq == 0) {
      all.push_back(err(where, "", "found " + text::quoted(a) + ", expected key=value"));
      continue;
    }
    const std::string key = text::trim(std::string_view(a).substr(0, eq));
    auto d = set_field_from_text(cfg.config, key, std::string_view(a).substr(eq + 1), where);
    if (!has_errors(d)) {
      std::string k = key;
      for (const auto& al : kAliases)
        if (k == al.alias) k = std::string(al.key);
      cfg.origin.keys[k] = where;
    }
    all.insert(all.end(), d.begin(), d.end());
  }
  return all;
}

std::string data_dir() {
  if (const char* env = std::getenv("ODYSSEY_DATA_DIR"); env && *env) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path share = exe.parent_path().parent_path() / "share" / "odyssey";
    if (fs::exists(share / "presets" / "quickstart.yaml", ec)) return share.string();
  }
#ifdef ODYSSEY_SOURCE_DIR
  return ODYSSEY_SOURCE_DIR;
#else
  return ".";
#endif
}

Result<LoadedConfig> load_embedded_quickstart() {
  const std::string base = (fs::path(data_dir()) / "presets").string();
  return load_preset_text(embedded_quickstart_yaml(), "<embedded quickstart>", base);
}

}  // namespace odyssey
