// The shell-script reader of the ms-swift bridge: words, quotes, backslash continuations,
// comments, env assignments and the script's own variables, down to one `swift sft`
// command whose arguments go to the Importer.
#include "config/swift_bridge.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/text.h"
#include "config/swift_bridge_internal.h"

namespace odyssey {
namespace {

using SV = std::string_view;
using swift_detail::Arg;
using swift_detail::Importer;

// Splits shell text into commands of words with their line numbers. A script's own plain
// assignments are substituted; other expansions become markers (\x01N\x02) that flag the
// word as needing a shell, and show as the original text in messages.
class ScriptReader {
 public:
  ScriptReader(Importer& im, std::string script_file) : im_(im), script_file_(std::move(script_file)) {}
  bool read(std::string_view text);  // false when an error was reported

 private:
  struct Word {
    std::string text;
    int line = 0;
  };
  struct Env {
    std::string name, value;
    int line;
  };
  struct Scan {
    std::string out;
    bool cont = false, open = false;
  };

  Scan scan(SV s);
  std::size_t expand(SV s, std::size_t i, bool in_dq, std::string& out);
  std::string restore(const std::string& s) const;
  std::optional<long long> arithmetic(const std::string& body) const;
  void command(std::vector<Word> words);
  void simple(std::vector<Word> w);
  bool swift_args(const std::vector<Word>& w);
  bool config_file(const Word& w);
  void apply_env(const Env& e) {
    im_.env(e.name, e.value, restore(e.value), e.line, e.value.find('\x01') != std::string::npos);
  }

  Importer& im_;
  std::string script_file_;  // where the script was read from (its folder resolves config files); may be empty
  std::map<std::string, std::string> vars_;
  std::vector<std::string> marks_;
  std::vector<Env> exported_, prefix_;
  std::vector<Word> sft_;
  int sft_line_ = 0;
  std::vector<std::string> other_swift_, ignored_;
  bool failed_ = false;
};

bool is_name(SV s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char ch) { return std::isalnum(ch) || ch == '_'; });
}

std::size_t assignment_eq(SV w) {  // position of '=' in NAME=VALUE, or npos
  const auto eq = w.find('=');
  return eq != SV::npos && is_name(w.substr(0, eq)) ? eq : SV::npos;
}

std::size_t ScriptReader::expand(SV s, std::size_t i, bool in_dq, std::string& out) {
  auto mark = [&](std::size_t end) {  // [i, end] needs a shell
    marks_.emplace_back(s.substr(i, end - i + 1));
    out += '\x01' + std::to_string(marks_.size() - 1) + '\x02';
    return end;
  };
  auto insert = [&](const std::string& v, std::size_t end) {
    if (in_dq) {
      for (char ch : v) out += (std::string("\"\\$`").find(ch) != std::string::npos ? "\\" : "") + std::string(1, ch);
    } else {  // unquoted: word splitting, nothing else
      std::vector<std::string> parts;
      for (std::size_t b = v.find_first_not_of(" \t\n"); b != std::string::npos; b = v.find_first_not_of(" \t\n", b)) {
        const auto e = std::min(v.find_first_of(" \t\n", b), v.size());
        parts.push_back(text::shell_quote(v.substr(b, e - b)));
        b = e;
      }
      out += text::join(parts, " ");
    }
    return end;
  };
  const std::size_t n = s.size();
  if (s[i] == '`') return mark(std::min(s.find('`', i + 1), n - 1));
  if (i + 1 >= n) {
    out += '$';
    return i;
  }
  const char c = s[i + 1];
  if (c == '(') {
    std::size_t j = i + 1;
    for (int depth = 0; j < n; ++j) {
      depth += s[j] == '(' ? 1 : s[j] == ')' ? -1 : 0;
      if (depth == 0) break;
    }
    if (j < n) {
      // Integer arithmetic the examples use for per-GPU settings, `$(expr 16 / $nproc)` and
      // `$(( 16 / nproc ))`, over numbers and the script's own variables; anything else
      // (other commands, unknown variables, division by zero) needs a shell.
      const std::string inner(s.substr(i + 2, j - i - 2));
      const std::string t(text::trim(inner));
      std::optional<long long> v;
      if (t.size() >= 2 && t.front() == '(' && t.back() == ')') v = arithmetic(t.substr(1, t.size() - 2));
      else if (t.starts_with("expr ")) v = arithmetic(t.substr(5));
      if (v) return insert(std::to_string(*v), j);
    }
    return mark(std::min(j, n - 1));
  }
  std::size_t end = i + 1;
  std::string name;
  if (c == '{') {
    end = std::min(s.find('}', i), n - 1);
    name = std::string(s.substr(i + 2, end - i - 2));
  } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
    while (end + 1 < n && (std::isalnum(static_cast<unsigned char>(s[end + 1])) || s[end + 1] == '_')) ++end;
    name = std::string(s.substr(i + 1, end - i));
  } else if (!std::isdigit(static_cast<unsigned char>(c)) && std::string("@*#?$!-").find(c) == std::string::npos) {
    out += '$';
    return i;
  }
  auto it = vars_.find(name);
  if (it != vars_.end() && is_name(name)) return insert(it->second, end);
  return mark(end);
}

std::optional<long long> ScriptReader::arithmetic(const std::string& body) const {
  // Tokens: integers, $name / ${name} / name (the script's integer variables), + - * / %
  // (expr's \* too); * / % bind tighter than + -; integer division truncates, as in bash.
  std::vector<std::string> tok;
  for (std::size_t k = 0; k < body.size();) {
    const char ch = body[k];
    if (std::isspace(static_cast<unsigned char>(ch))) {
      ++k;
      continue;
    }
    if (ch == '\\' && k + 1 < body.size() && body[k + 1] == '*') {
      tok.push_back("*");
      k += 2;
      continue;
    }
    if (std::string("+-*/%").find(ch) != std::string::npos) {
      tok.push_back(std::string(1, ch));
      ++k;
      continue;
    }
    std::size_t e = k;
    while (e < body.size() && (std::isalnum(static_cast<unsigned char>(body[e])) ||
                               std::string("_${}").find(body[e]) != std::string::npos))
      ++e;
    if (e == k) return std::nullopt;
    tok.push_back(body.substr(k, e - k));
    k = e;
  }
  auto value = [&](std::string t) -> std::optional<long long> {
    if (t.starts_with("${") && t.ends_with("}")) t = t.substr(2, t.size() - 3);
    else if (t.starts_with("$")) t = t.substr(1);
    if (!t.empty() && std::all_of(t.begin(), t.end(), [](unsigned char d) { return std::isdigit(d); }))
      return t.size() > 15 ? std::nullopt : std::optional<long long>(std::stoll(t));
    if (!is_name(t)) return std::nullopt;
    const auto it = vars_.find(t);
    if (it == vars_.end()) return std::nullopt;
    const std::string& x = it->second;
    if (x.empty() || x.size() > 15 || !std::all_of(x.begin(), x.end(), [](unsigned char d) { return std::isdigit(d); }))
      return std::nullopt;
    return std::stoll(x);
  };
  if (tok.empty() || tok.size() % 2 == 0) return std::nullopt;
  long long sum = 0, term = 0;
  char add = '+';
  for (std::size_t k = 0; k < tok.size(); k += 2) {
    auto x = value(tok[k]);
    if (!x) return std::nullopt;
    long long f = *x;
    while (k + 2 < tok.size() && (tok[k + 1] == "*" || tok[k + 1] == "/" || tok[k + 1] == "%")) {
      auto y = value(tok[k + 2]);
      if (!y || ((tok[k + 1] != "*") && *y == 0)) return std::nullopt;
      f = tok[k + 1] == "*" ? f * *y : tok[k + 1] == "/" ? f / *y : f % *y;
      if (f > 1'000'000'000'000'000LL || f < -1'000'000'000'000'000LL) return std::nullopt;
      k += 2;
    }
    term = f;
    sum = add == '+' ? sum + term : sum - term;
    if (k + 1 < tok.size()) {
      if (tok[k + 1] != "+" && tok[k + 1] != "-") return std::nullopt;
      add = tok[k + 1][0];
    }
  }
  return sum;
}

ScriptReader::Scan ScriptReader::scan(SV s) {
  Scan r;
  enum { None, Single, Double } q = None;
  bool word_start = true;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    if (q == Single) {
      r.out += ch;
      if (ch == '\'') q = None;
      continue;
    }
    if (ch == '\\') {
      if (i + 1 == s.size() && q == None) r.cont = true;
      else r.out += s.substr(i, 2), ++i;
      word_start = false;
      continue;
    }
    if (ch == '$' || ch == '`') {
      i = expand(s, i, q == Double, r.out);
      word_start = false;
      continue;
    }
    if (q == Double) {
      if (ch == '"') q = None;
      r.out += ch;
      continue;
    }
    if (ch == '#' && word_start) break;  // a comment, to the end of the line
    if (ch == '\'') q = Single;
    if (ch == '"') q = Double;
    r.out += ch;
    word_start = std::string(" \t\r\n;&|").find(ch) != std::string::npos;
  }
  r.open = q != None;
  return r;
}

std::string ScriptReader::restore(const std::string& s) const {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto close = s[i] == '\x01' ? s.find('\x02', i) : std::string::npos;
    if (close == std::string::npos) {
      out += s[i];
      continue;
    }
    out += marks_[static_cast<std::size_t>(std::stoul(s.substr(i + 1, close - i - 1)))];
    i = close;
  }
  return out;
}

bool ScriptReader::read(std::string_view text) {
  std::vector<SV> lines;
  for (std::size_t b = 0; b <= text.size();) {
    auto e = std::min(text.find('\n', b), text.size());
    SV l = text.substr(b, e - b);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    lines.push_back(l);
    b = e + 1;
  }
  std::string pending;
  int pending_line = 0;
  std::vector<Word> cur;
  for (std::size_t i = 0; i < lines.size() && !failed_; ++i) {
    const std::string seg = pending.empty() ? std::string(lines[i]) : pending + "\n" + std::string(lines[i]);
    Scan sc = scan(seg);
    if (sc.open) {
      if (pending.empty()) pending_line = static_cast<int>(i) + 1;
      pending = seg;
      continue;
    }
    const int line = pending.empty() ? static_cast<int>(i) + 1 : pending_line;
    pending.clear();
    std::string why;
    auto words = text::shell_split(sc.out, &why);
    if (!words) {
      im_.error(line, "", why + "; expected balanced quotes");
      return false;
    }
    for (auto& w : *words) cur.push_back({w, line});
    if (!sc.cont) command(std::exchange(cur, {}));
  }
  if (!pending.empty() && !failed_) {
    std::string why;
    text::shell_split(pending, &why);
    im_.error(pending_line, "", why + "; expected a closing quote");
    return false;
  }
  if (!cur.empty()) command(std::move(cur));  // a continuation on the last line
  if (failed_) return false;
  if (sft_line_ == 0) {
    im_.error(0, "",
              other_swift_.empty() ? "no 'swift sft' command found; expected a line such as "
                                     "'swift sft --model M --dataset D'"
                                   : other_swift_.front());
    return false;
  }
  if (!other_swift_.empty()) im_.note("other swift commands ignored: " + text::join(other_swift_, "; "));
  if (!ignored_.empty()) im_.note("other shell commands ignored: " + text::join(ignored_, "; "));
  for (const auto& e : exported_) apply_env(e);
  for (const auto& e : prefix_) apply_env(e);
  return swift_args(sft_);
}

void ScriptReader::command(std::vector<Word> words) {
  std::vector<Word> part;
  for (auto& w : words) {
    const bool trailing = w.text.size() > 1 && w.text.back() == ';';
    if (trailing) w.text.pop_back();
    if (w.text == "&&" || w.text == "||" || w.text == ";" || w.text == "|" || w.text == "&") {
      simple(std::exchange(part, {}));
      continue;
    }
    part.push_back(w);
    if (trailing) simple(std::exchange(part, {}));
  }
  simple(std::move(part));
}

void ScriptReader::simple(std::vector<Word> w) {
  if (w.empty() || failed_) return;
  std::vector<Env> assigns;
  std::size_t i = 0;
  for (; i < w.size(); ++i) {
    const auto eq = assignment_eq(w[i].text);
    if (eq != SV::npos) assigns.push_back({w[i].text.substr(0, eq), w[i].text.substr(eq + 1), w[i].line});
    else if (w[i].text != "nohup" && w[i].text != "env" && w[i].text != "time" && w[i].text != "exec") break;
  }
  static const std::set<std::string> launcher{"NPROC_PER_NODE",      "CUDA_VISIBLE_DEVICES", "NNODES",
                                              "NODE_RANK",           "MASTER_ADDR",          "MASTER_PORT",
                                              "CELOSS_PARALLEL_SIZE"};
  if (i == w.size()) {  // NAME=VALUE ... alone: shell variables (launcher ones taken as exported)
    for (auto& a : assigns) {
      vars_[a.name] = a.value;
      if (launcher.count(a.name)) exported_.push_back(a);
    }
    return;
  }
  std::string cmd = w[i].text.substr(w[i].text.rfind('/') + 1);
  const std::string where = "line " + std::to_string(w[0].line) + ": " + restore(w[i].text) + " …";
  if (cmd == "export") {
    for (++i; i < w.size(); ++i)
      if (auto eq = assignment_eq(w[i].text); eq != SV::npos) {
        Env e{w[i].text.substr(0, eq), w[i].text.substr(eq + 1), w[i].line};
        vars_[e.name] = e.value;
        exported_.push_back(e);
      }
  } else if (cmd == "megatron") {
    im_.error(w[0].line, "",
              "Megatron-SWIFT ('megatron " + (i + 1 < w.size() ? w[i + 1].text : "") +
                  "') is not supported; Odyssey imports 'swift sft' commands");
    failed_ = true;
  } else if (cmd != "swift") {
    ignored_.push_back(where);
  } else if (i + 1 < w.size() && w[i + 1].text == "sft") {
    if (sft_line_ != 0) {
      im_.error(w[0].line, "",
                "a second 'swift sft' command (the first is on line " + std::to_string(sft_line_) +
                    "); import one command at a time");
      failed_ = true;
      return;
    }
    sft_line_ = w[0].line;
    prefix_ = assigns;
    sft_.assign(w.begin() + static_cast<std::ptrdiff_t>(i) + 2, w.end());
  } else {
    const std::string sub = i + 1 < w.size() ? w[i + 1].text : "";
    const std::string why =
        sub == "pt"     ? "pre-training (no chat template, loss on every token), which Odyssey does not do; "
                          "change it to 'swift sft' to import it as fine-tuning"
        : sub == "rlhf" ? "preference or RL training (DPO, GRPO, …), which Odyssey does not do; Odyssey imports "
                          "'swift sft' commands"
                        : "not a training command; Odyssey imports 'swift sft' commands";
    other_swift_.push_back("'swift " + sub + "' on line " + std::to_string(w[0].line) + " is " + why);
  }
}

// The config file a `swift sft` command names: found as ms-swift would (relative to the
// directory the script runs in, taken as the current one), else beside the script; its keys
// are read under its own name, before the command line's arguments.
bool ScriptReader::config_file(const Word& w) {
  namespace fs = std::filesystem;
  const std::string name = restore(w.text);
  if (w.text.find('\x01') != std::string::npos) {
    im_.error(w.line, "", "the config file " + text::quoted(name) + " needs a shell to name; write its path");
    return false;
  }
  std::vector<fs::path> tried{fs::path(w.text)};
  if (fs::path(w.text).is_relative() && !script_file_.empty())
    tried.push_back(fs::path(script_file_).parent_path() / w.text);
  std::error_code ec;
  for (const auto& p : tried) {
    if (!fs::is_regular_file(p, ec)) continue;
    const auto size = fs::file_size(p, ec);
    if (ec || static_cast<std::int64_t>(size) > kMaxPresetBytes) {
      im_.error(
          w.line, "",
          p.string() + ": " + (ec ? "cannot be read" : "larger than " + std::to_string(kMaxPresetBytes) + " bytes"));
      return false;
    }
    std::ifstream in(p, std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    if (!in) {
      im_.error(w.line, "", p.string() + ": cannot be read");
      return false;
    }
    auto before = im_.source(p.string(), true);
    im_.env_defers(true);
    const bool ok = swift_detail::feed_swift_yaml(im_, buf.str());
    im_.env_defers(false);
    im_.source(std::move(before.first), before.second);
    if (ok)
      im_.note("arguments read from " + p.string() + " (line " + std::to_string(w.line) + "), then the command line's");
    return ok;
  }
  std::string where;
  for (const auto& p : tried) where += (where.empty() ? "" : " or ") + fs::absolute(p, ec).string();
  im_.error(w.line, "",
            "the command reads its arguments from " + text::quoted(name) + ", which is not a file (looked for " +
                where + ")");
  return false;
}

bool ScriptReader::swift_args(const std::vector<Word>& w) {
  std::vector<Arg> args;
  std::vector<std::string> redirects;
  bool config_seen = false;
  for (std::size_t k = 0; k < w.size(); ++k) {
    const std::string& t = w[k].text;
    const auto digits = t.find_first_not_of("0123456789");
    if (digits != std::string::npos && (t[digits] == '>' || t[digits] == '<' || text::starts_with(t, "&>"))) {
      redirects.push_back(t);
      const bool bare = t.find_first_not_of("0123456789<>&") == std::string::npos && t.back() != '&' &&
                        t.find(">&") == std::string::npos;
      if (bare && k + 1 < w.size()) redirects.push_back(w[++k].text);
      continue;
    }
    if ((t == "--config" || text::starts_with(t, "--config=")) && args.empty() && !config_seen) {
      // ms-swift's --config FILE: the file's arguments first, the command line's over them.
      Word file = w[k];
      if (t == "--config") {
        if (k + 1 == w.size()) {
          im_.error(w[k].line, "", "--config needs a file name");
          return false;
        }
        file = w[++k];
      } else {
        file.text = t.substr(9);
      }
      if (!config_file(file)) return false;
      config_seen = true;
      continue;
    }
    if (text::starts_with(t, "--") && t.size() > 2) {
      Arg a;
      const auto eq = t.find('=');
      a.name = t.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      std::replace(a.name.begin(), a.name.end(), '-', '_');
      if (eq != std::string::npos) a.values.push_back(t.substr(eq + 1));
      a.line = w[k].line;
      args.push_back(std::move(a));
    } else if (!args.empty()) {
      args.back().values.push_back(t);
    } else {
      const bool config = t.ends_with(".yaml") || t.ends_with(".yml") || t.ends_with(".json");
      if (config && !config_seen) {  // `swift sft x.yaml [--more args]`, as ms-swift reads it
        if (!config_file(w[k])) return false;
        config_seen = true;
        continue;
      }
      im_.error(w[k].line, "", "unexpected word " + text::quoted(restore(t)) + "; expected --argument value");
      return false;
    }
  }
  if (!redirects.empty()) im_.note("shell redirections ignored: " + text::join(redirects, " "));
  for (auto& a : args) {
    for (const auto& v : a.values) {
      a.shown.push_back(restore(v));
      a.needs_shell = a.needs_shell || v.find('\x01') != std::string::npos;
    }
    im_.arg(a);
  }
  return true;
}

}  // namespace

Result<LoadedConfig> import_swift_command(std::string_view text, const std::string& script_file) {
  int lines = 0;
  for (std::size_t b = 0; b < text.size();) {
    const auto e = std::min(text.find('\n', b), text.size());
    lines += text::trim(text.substr(b, e - b)).empty() ? 0 : 1;
    b = e + 1;
  }
  Importer im(script_file.empty() ? std::string(kSwiftCommandFile) : script_file, lines > 1);
  if (static_cast<std::int64_t>(text.size()) > kMaxPresetBytes) {
    im.error(0, "",
             "the text is " + std::to_string(text.size()) + " bytes; a command is at most " +
                 std::to_string(kMaxPresetBytes));
  } else if (text.find_first_of(std::string_view("\0\x01\x02", 3)) != std::string_view::npos) {
    im.error(0, "", "a control character (\\x00-\\x02): this is not a shell command; expected text");
  } else if (lines == 0) {
    im.error(0, "", "the command is empty; expected 'swift sft --model M --dataset D …'");
  } else if (ScriptReader(im, script_file).read(text)) {
    return im.finish();
  }
  return im.abort();
}

}  // namespace odyssey
