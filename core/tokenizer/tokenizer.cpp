// Encoding as HF tokenizers' pipeline runs it: added tokens that are not normalized are cut
// out of the raw text; each remaining piece is normalized (NFC) and cut again at normalized
// added tokens; the rest is pre-tokenized (Split / ByteLevel) and each pre-token is BPE-merged;
// the post-processor adds template tokens when add_special_tokens is set.
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "common/regular_file.h"
#include "common/text.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode_nfc.h"
#include "tokenizer/utf8.h"

namespace odyssey {

namespace fs = std::filesystem;

// ---- added tokens ------------------------------------------------------------------------

void TokenTrie::add(std::string_view s, std::int32_t value) {
  std::int32_t node = 0;
  for (const char ch : s) {
    const auto b = static_cast<unsigned char>(ch);
    const std::uint64_t key = (static_cast<std::uint64_t>(node) << 8) | b;
    auto it = edges_.find(key);
    if (it == edges_.end()) {
      it = edges_.emplace(key, static_cast<std::int32_t>(terminal_.size())).first;
      terminal_.push_back(-1);
    }
    node = it->second;
  }
  if (!s.empty()) first_[static_cast<unsigned char>(s[0])] = true;
  terminal_[static_cast<std::size_t>(node)] = value;
}

bool TokenTrie::find(std::string_view text, std::size_t from, std::size_t* begin, std::size_t* end,
                     std::int32_t* value) const {
  for (std::size_t i = from; i < text.size(); ++i) {
    if (!first_[static_cast<unsigned char>(text[i])]) continue;
    std::int32_t node = 0;
    std::size_t best = 0;
    for (std::size_t j = i; j < text.size(); ++j) {
      const auto it = edges_.find((static_cast<std::uint64_t>(node) << 8) | static_cast<unsigned char>(text[j]));
      if (it == edges_.end()) break;
      node = it->second;
      if (terminal_[static_cast<std::size_t>(node)] >= 0) {
        best = j + 1;
        *value = terminal_[static_cast<std::size_t>(node)];
      }
    }
    if (best > 0) {
      *begin = i;
      *end = best;
      return true;
    }
  }
  return false;
}

namespace {

struct Split {
  std::size_t b, e;
  std::int32_t id;  // -1: text
};

// Rust regex's \w (what HF's single_word test uses) for the character `ch`.
bool is_word_char(std::string_view ch) {
  static const std::unique_ptr<tok::Regex> re = [] {
    std::string err;
    return tok::Regex::compile("^\\w$", false, &err);
  }();
  bool found = false;
  std::string err;
  re->for_each_match(
      ch,
      [&](std::size_t, std::size_t) {
        found = true;
        return false;
      },
      &err);
  return found;
}

std::string_view last_char(std::string_view s) {
  std::size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  return s.substr(i > 0 ? i - 1 : 0);
}

std::string_view first_char(std::string_view s) {
  return s.substr(0, utf8::sequence_length(static_cast<unsigned char>(s[0])));
}

// HF's AddedVocabulary::find_matches.
void find_added(const TokenizerImpl& t, const TokenTrie& trie, std::string_view s, std::vector<Split>* out) {
  out->clear();
  if (trie.empty()) {
    out->push_back({0, s.size(), -1});
    return;
  }
  std::size_t start_offset = 0, pos = 0, mb = 0, me = 0;
  std::int32_t index = 0;
  while (trie.find(s, pos, &mb, &me, &index)) {
    pos = me;
    const AddedToken& tk = t.added[static_cast<std::size_t>(index)];
    std::size_t start = mb, stop = me;
    if (tk.single_word) {
      const bool start_space = start == 0 || !is_word_char(last_char(s.substr(0, start)));
      const bool stop_space = stop == s.size() || !is_word_char(first_char(s.substr(stop)));
      if (!start_space || !stop_space) continue;
    }
    if (tk.lstrip) {
      std::size_t k = start;
      while (k > 0) {
        const std::string_view c = last_char(s.substr(0, k));
        std::size_t i = 0;
        if (!utf8::is_white_space(utf8::decode(c, i))) break;
        k -= c.size();
      }
      start = std::max(k, start_offset);
    }
    if (tk.rstrip) {
      while (stop < s.size()) {
        std::size_t i = stop;
        if (!utf8::is_white_space(utf8::decode(s, i))) break;
        stop = i;
      }
    }
    if (start_offset < start) out->push_back({start_offset, start, -1});
    out->push_back({start, stop, tk.id});
    start_offset = stop;
  }
  if (start_offset != s.size()) out->push_back({start_offset, s.size(), -1});
}

Diagnostic invalid_utf8(std::string_view text, std::size_t at) {
  Diagnostic d;
  d.key = "text";
  d.line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < at; ++i)
    if (text[i] == '\n') {
      ++d.line;
      line_start = i + 1;
    }
  d.column = static_cast<int>(at - line_start) + 1;
  static const char* hex = "0123456789ABCDEF";
  const auto b = static_cast<unsigned char>(text[at]);
  d.message = std::string("invalid UTF-8 at byte offset ") + std::to_string(at) + " (byte 0x" + hex[b >> 4] +
              hex[b & 15] + "): the text must be UTF-8";
  return d;
}

}  // namespace

// ---- encode --------------------------------------------------------------------------------

Diagnostics TokenizerImpl::encode(std::string_view text, bool add_special, Encoding* out, bool offsets) const {
  Diagnostics diags;
  out->ids.clear();
  out->offsets.clear();
  if (const std::size_t bad = utf8::find_invalid(text); bad != utf8::npos) {
    diags.push_back(invalid_utf8(text, bad));
    return diags;
  }
  std::vector<std::int32_t>& ids = out->ids;
  auto* offs = offsets ? &out->offsets : nullptr;
  std::vector<std::uint32_t> lens;
  std::deque<std::string> arena;
  std::string normalized, error;
  std::vector<std::uint32_t> origin;
  std::vector<Split> raw, inner;
  find_added(*this, raw_trie, text, &raw);
  for (const Split& r : raw) {
    if (r.b >= r.e) continue;
    if (r.id >= 0) {
      ids.push_back(r.id);
      if (offs) offs->emplace_back(r.b, r.e);
      continue;
    }
    const std::string_view seg = text.substr(r.b, r.e - r.b);
    const bool changed = nfc && unicode::nfc(seg, &normalized, offs ? &origin : nullptr);
    const std::string_view ntext = changed ? std::string_view(normalized) : seg;
    // Offsets in the normalized segment back to the input (see unicode::nfc on `origin`).
    auto map_begin = [&](std::size_t p) { return r.b + (changed ? origin[p] : p); };
    auto map_end = [&](std::size_t p) {
      if (!changed) return r.b + p;
      if (p > 0 && p + 1 < origin.size() && origin[p] == origin[p - 1])
        while (p + 1 < origin.size() && origin[p] == origin[p - 1]) ++p;
      return r.b + origin[p];
    };
    find_added(*this, normalized_trie, ntext, &inner);
    for (const Split& s : inner) {
      if (s.b >= s.e) continue;
      if (s.id >= 0) {
        ids.push_back(s.id);
        if (offs) offs->emplace_back(map_begin(s.b), map_end(s.e));
        continue;
      }
      const bool ok = pre.run(
          ntext.substr(s.b, s.e - s.b), &arena,
          [&](const tok::Piece& piece) {
            lens.clear();
            bpe.encode(piece.text, &ids, offs ? &lens : nullptr);
            if (!offs) return;
            std::size_t x = 0;
            for (const std::uint32_t len : lens) {
              offs->emplace_back(map_begin(s.b + piece.segment_offset(x)),
                                 map_end(s.b + piece.segment_offset(x + len)));
              x += len;
            }
          },
          &error);
      arena.clear();
      if (!ok) {
        Diagnostic d;
        d.key = "text";
        d.message = "pre-tokenizing the text at byte offset " + std::to_string(r.b + s.b) + " failed: " + error;
        diags.push_back(std::move(d));
        return diags;
      }
    }
  }
  if (add_special) {
    for (const PostTemplate& tpl : post) {
      Encoding next;
      for (const std::int32_t item : tpl.items) {
        if (item == PostTemplate::kSequence) {
          next.ids.insert(next.ids.end(), ids.begin(), ids.end());
          if (offs) next.offsets.insert(next.offsets.end(), offs->begin(), offs->end());
        } else {
          next.ids.push_back(item);
          if (offs) next.offsets.emplace_back(0, 0);
        }
      }
      out->ids = std::move(next.ids);
      if (offs) out->offsets = std::move(next.offsets);
    }
  }
  return diags;
}

std::string TokenizerImpl::token_text(std::int32_t id) const {
  if (const auto it = added_by_id.find(id); it != added_by_id.end()) return added[it->second].pattern;
  if (id >= 0 && static_cast<std::size_t>(id) < bpe.tokens.size()) return bpe.tokens[static_cast<std::size_t>(id)];
  return {};
}

void TokenizerImpl::finish() {
  std::unordered_set<std::string> specials;
  for (std::size_t i = 0; i < added.size(); ++i) {
    const AddedToken& a = added[i];
    added_by_id[a.id] = i;
    added_by_content[a.content] = a.id;
    (a.normalized ? normalized_trie : raw_trie).add(a.pattern, static_cast<std::int32_t>(i));
    if (a.special) specials.insert(a.content);
  }
  vocab_size = static_cast<std::int32_t>(bpe.tokens.size());
  for (const AddedToken& a : added) vocab_size = std::max(vocab_size, a.id + 1);
  const auto n = static_cast<std::size_t>(vocab_size);
  decode_bytes.assign(n, {});
  known.assign(n, 0);
  special_text.assign(n, 0);
  for (std::size_t id = 0; id < n; ++id) {
    const auto i = static_cast<std::int32_t>(id);
    const bool is_added = added_by_id.count(i) != 0;
    if (!is_added && (id >= bpe.tokens.size() || (bpe.tokens[id].empty() && !model_vocab.count("")))) continue;
    known[id] = 1;
    const std::string tokstr = token_text(i);
    special_text[id] = specials.count(tokstr) ? 1 : 0;
    if (!byte_level_decoder) {
      decode_bytes[id] = tokstr;
      continue;
    }
    std::string bytes;  // HF's ByteLevel decoder: mapped bytes, or the token itself if it can't be
    bool all = true;
    for (std::size_t k = 0; k < tokstr.size() && all;) {
      const int b = tok::char_byte(utf8::decode(tokstr, k));
      if (b < 0) all = false;
      bytes.push_back(static_cast<char>(b));
    }
    decode_bytes[id] = all ? bytes : tokstr;
  }
}

Tokenizer TokenizerImpl::wrap(TokenizerImpl&& impl) {
  impl.finish();
  return Tokenizer(std::make_shared<const TokenizerImpl>(std::move(impl)));
}

// ---- the API -------------------------------------------------------------------------------

Result<Tokenizer> Tokenizer::from_json(std::string_view json_text, const std::string& file) {
  Result<Tokenizer> r;
  auto parsed = TokenizerImpl::parse(json_text, file);
  r.diagnostics = std::move(parsed.diagnostics);
  if (!has_errors(r.diagnostics)) r.value = TokenizerImpl::wrap(std::move(parsed.value));
  return r;
}

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  Result<Tokenizer> r;
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  if (!is_dir && !fs::exists(path, ec)) {
    Diagnostic d;
    d.file = path;
    d.message = "does not exist (expected a model directory with tokenizer.json, or a tokenizer.json file)";
    r.diagnostics.push_back(std::move(d));
    return r;
  }
  const fs::path file = is_dir ? fs::path(path) / "tokenizer.json" : fs::path(path);
  std::string text, why;
  // A regular file only: a FIFO named tokenizer.json is refused, not waited on.
  if (!read_regular_file(file.string(), std::uint64_t{512} << 20, &text, &why)) {
    Diagnostic d;
    d.file = file.string();
    d.message = is_dir && !fs::exists(file, ec)
                    ? "no tokenizer.json in the model directory (Odyssey needs the fast-tokenizer file)"
                    : "cannot be read: " + why;
    r.diagnostics.push_back(std::move(d));
    return r;
  }
  auto parsed = TokenizerImpl::parse(text, file.string());
  r.diagnostics = std::move(parsed.diagnostics);
  if (has_errors(r.diagnostics)) return r;
  parsed.value.read_config(file.parent_path().string(), &r.diagnostics);
  r.value = TokenizerImpl::wrap(std::move(parsed.value));
  return r;
}

namespace {
Diagnostics no_tokenizer() {
  Diagnostic d;
  d.message = "no tokenizer loaded";
  return {d};
}
}  // namespace

Result<Encoding> Tokenizer::encode_with_offsets(std::string_view text, bool add_special_tokens) const {
  Result<Encoding> r;
  r.diagnostics = impl_ ? impl_->encode(text, add_special_tokens, &r.value, true) : no_tokenizer();
  return r;
}

Result<std::vector<std::int32_t>> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  Result<std::vector<std::int32_t>> r;
  Encoding e;
  r.diagnostics = impl_ ? impl_->encode(text, add_special_tokens, &e, false) : no_tokenizer();
  r.value = std::move(e.ids);
  return r;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const {
  if (!impl_) return {};
  const TokenizerImpl& t = *impl_;
  std::string bytes;
  bool first = true;
  for (const std::int32_t id : ids) {
    if (id < 0 || id >= t.vocab_size || !t.known[static_cast<std::size_t>(id)]) continue;
    if (skip_special_tokens && t.special_text[static_cast<std::size_t>(id)]) continue;
    if (!t.byte_level_decoder && !first) bytes.push_back(' ');
    bytes += t.decode_bytes[static_cast<std::size_t>(id)];
    first = false;
  }
  return t.byte_level_decoder ? utf8::lossy(bytes) : bytes;
}

std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (!impl_) return std::nullopt;
  if (const auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
  if (const auto it = impl_->model_vocab.find(token); it != impl_->model_vocab.end()) return it->second;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(std::int32_t id) const {
  if (!impl_ || id < 0 || id >= impl_->vocab_size || !impl_->known[static_cast<std::size_t>(id)]) return std::nullopt;
  return impl_->token_text(id);
}

std::int32_t Tokenizer::vocab_size() const { return impl_ ? impl_->vocab_size : 0; }

bool Tokenizer::is_special(std::int32_t id) const {
  if (!impl_) return false;
  const auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

Diagnostics Tokenizer::check_vocab(std::int64_t model_vocab_size, const std::string& config_file) const {
  Diagnostics out;
  if (!impl_ || model_vocab_size <= 0) return out;
  const TokenizerImpl& t = *impl_;
  constexpr std::size_t kListed = 5;
  std::size_t beyond = 0;
  auto report = [&](const std::string& key, const std::string& what, std::int64_t id) {
    if (beyond++ >= kListed) return;
    Diagnostic d;
    d.file = t.file;
    d.key = key;
    d.message = what + " has id " + std::to_string(id) + ", beyond the model's vocab_size " +
                std::to_string(model_vocab_size) + " (" + config_file +
                "): the embedding has no row for it; use the tokenizer that belongs to this model";
    out.push_back(std::move(d));
  };
  for (std::int64_t id = model_vocab_size; id < t.vocab_size; ++id) {
    const auto i = static_cast<std::int32_t>(id);
    if (!t.known[static_cast<std::size_t>(id)]) continue;
    const auto added = t.added_by_id.find(i);
    if (added != t.added_by_id.end())
      report("added_tokens",
             std::string(t.added[added->second].special ? "special token " : "added token ") +
                 text::quoted(t.added[added->second].content),
             id);
    else report("model.vocab", "token " + text::quoted(t.token_text(i)), id);
  }
  for (const PostTemplate& p : t.post)
    for (const std::int32_t id : p.items)
      if (id != PostTemplate::kSequence && id >= model_vocab_size)
        report("post_processor", "a template token the post-processor adds", id);
  if (beyond > kListed) {
    Diagnostic d;
    d.file = t.file;
    d.message = "... and " + std::to_string(beyond - kListed) + " more ids beyond vocab_size " +
                std::to_string(model_vocab_size);
    out.push_back(std::move(d));
  }
  return out;
}

std::optional<std::int32_t> Tokenizer::bos_id() const {
  return !impl_ || impl_->bos_token.empty() ? std::nullopt : token_to_id(impl_->bos_token);
}
std::optional<std::int32_t> Tokenizer::eos_id() const {
  return !impl_ || impl_->eos_token.empty() ? std::nullopt : token_to_id(impl_->eos_token);
}
std::optional<std::int32_t> Tokenizer::pad_id() const {
  return !impl_ || impl_->pad_token.empty() ? std::nullopt : token_to_id(impl_->pad_token);
}
namespace {
const TokenizerImpl& or_empty(const std::shared_ptr<const TokenizerImpl>& p) {
  static const TokenizerImpl empty;
  return p ? *p : empty;
}
}  // namespace

std::string Tokenizer::bos_token() const { return or_empty(impl_).bos_token; }
std::string Tokenizer::eos_token() const { return or_empty(impl_).eos_token; }
const std::string& Tokenizer::chat_template_source() const { return or_empty(impl_).chat_template; }
const std::string& Tokenizer::chat_template_file() const { return or_empty(impl_).chat_template_file; }
const std::string& Tokenizer::tool_use_chat_template() const { return or_empty(impl_).tool_use_chat_template; }
const std::string& Tokenizer::file() const { return or_empty(impl_).file; }
void Tokenizer::clear_cache() const { or_empty(impl_).bpe.clear_cache(); }

}  // namespace odyssey
