#include "data/token_cache.h"

#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#if __has_include(<unistd.h>)
#include <unistd.h>
#define ODYSSEY_HAVE_UNISTD 1
#endif

#include "common/json_dump.h"
#include "common/regular_file.h"
#include "common/text.h"
#include "config/train_config.h"

namespace odyssey::data {

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return Sha256::hex(h.digest());
}

std::optional<std::array<std::uint8_t, 32>> sha256_file(const std::string& path, std::string* error) {
  RegularFileStream in(path);  // a dataset that is a FIFO is refused here, not waited on
  if (!in.is_open()) {
    if (error) *error = path + ": " + in.error();
    return std::nullopt;
  }
  Sha256 h;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) {
    if (error) *error = path + ": read failed: " + std::strerror(errno);
    return std::nullopt;
  }
  return h.digest();
}

// ---- key ------------------------------------------------------------------------------------

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kMagic[8] = {'O', 'D', 'Y', 'T', 'O', 'K', 'N', '\x1a'};
constexpr std::size_t kKeyChars = 64;
constexpr std::size_t kHeaderSize = 8 + 4 + kKeyChars + 8 + 8 + 8;  // magic, version, key, samples, tokens, meta

// Length-prefixed fields, so no two different inputs hash the same byte string.
void field(Sha256& h, std::string_view s) {
  const std::uint64_t n = s.size();
  std::uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(n >> (8 * i));
  h.update(len, 8);
  h.update(s);
}
void field(Sha256& h, std::uint64_t v) { field(h, std::to_string(v)); }

}  // namespace

Result<std::string> token_cache_key(const TokenCacheKeyInputs& in) {
  Result<std::string> r;
  Sha256 h;
  field(h, "odyssey token cache");
  field(h, kTokenCacheVersion);
  field(h, in.specs.size());
  for (const auto& spec : in.specs) {
    DatasetSpec ds;
    std::string error;
    if (!parse_dataset_spec(spec, &ds, &error)) {
      r.diagnostics.push_back(diagnostic_at(Severity::Error, "", {}, text::quoted(spec) + ": " + error));
      return r;
    }
    const std::string path = resolve_dataset_path(ds.path, in.base_dir);
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      r.diagnostics.push_back(diagnostic_at(Severity::Error, path, {}, "not a readable file"));
      return r;
    }
    const auto digest = sha256_file(path, &error);
    if (!digest) {
      r.diagnostics.push_back(diagnostic_at(Severity::Error, "", {}, error));
      return r;
    }
    field(h, spec);
    field(h, path);
    h.update(digest->data(), digest->size());
  }
  field(h, in.seed);
  field(h, text::format_double(in.max_bad_sample_ratio));
  std::string error;
  const auto tok = sha256_file(in.tokenizer_file, &error);
  if (!tok) {
    r.diagnostics.push_back(diagnostic_at(Severity::Error, "", {}, error.empty() ? "no tokenizer file" : error));
    return r;
  }
  h.update(tok->data(), tok->size());
  field(h, in.bos_token);
  field(h, in.template_name);
  field(h, in.tokenize.system);
  field(h, static_cast<std::uint64_t>(in.tokenize.max_length));
  field(h, truncation_name(in.tokenize.truncation));
  field(h, in.tokenize.train_on_all ? "all" : "assistant");
  field(h, in.tokenize.ignore_empty_think ? "ignore_empty_think" : "train_empty_think");
  field(h, in.tokenize.chat.date_string);
  r.value = Sha256::hex(h.digest());
  return r;
}

std::string default_token_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x && fs::path(x).is_absolute())
    return (fs::path(x) / "odyssey" / "tokenized").string();
  if (const char* home = std::getenv("HOME"); home && *home)
    return (fs::path(home) / ".cache" / "odyssey" / "tokenized").string();
  std::error_code ec;
  return (fs::temp_directory_path(ec) / "odyssey-tokenized").string();
}

std::string token_cache_file(const std::string& dir, const std::string& key) {
  return (fs::path(dir) / (key + ".odtok")).string();
}

// ---- file format ------------------------------------------------------------------------------

namespace {

void put_u32(std::string& s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>(v >> (8 * i));
}
void put_u64(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s += static_cast<char>(v >> (8 * i));
}
std::uint32_t get_u32(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t{p[i]} << (8 * i);
  return v;
}
std::uint64_t get_u64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}

void to_le(std::vector<std::int32_t>& v) {
  if constexpr (std::endian::native == std::endian::big)
    for (auto& x : v) {
      const auto u = static_cast<std::uint32_t>(x);
      x = static_cast<std::int32_t>((u >> 24) | ((u >> 8) & 0xff00u) | ((u << 8) & 0xff0000u) | (u << 24));
    }
}

json diag_json(const Diagnostic& d) {
  return {{"severity", d.severity == Severity::Error     ? "error"
                       : d.severity == Severity::Warning ? "warning"
                                                         : "note"},
          {"file", d.file},
          {"line", d.line},
          {"column", d.column},
          {"key", d.key},
          {"message", d.message}};
}
Diagnostic diag_from(const json& j) {
  Diagnostic d;
  const std::string s = j.at("severity").get<std::string>();
  d.severity = s == "error" ? Severity::Error : s == "warning" ? Severity::Warning : Severity::Note;
  d.file = j.at("file").get<std::string>();
  d.line = j.at("line").get<int>();
  d.column = j.at("column").get<int>();
  d.key = j.at("key").get<std::string>();
  d.message = j.at("message").get<std::string>();
  return d;
}

json meta_json(const TokenCacheContents& c) {
  json files = json::array();
  for (const auto& f : c.files)
    files.push_back({{"spec", f.spec},
                     {"path", f.path},
                     {"format", f.format},
                     {"lines", f.lines},
                     {"samples", f.samples},
                     {"malformed", f.malformed},
                     {"requested", f.requested},
                     {"selected", f.selected}});
  const auto& r = c.report;
  json report = {{"template", r.template_name},
                 {"max_length", r.max_length},
                 {"truncation", r.truncation},
                 {"samples_in", r.samples_in},
                 {"kept", r.kept},
                 {"truncated", r.truncated},
                 {"dropped_too_long", r.dropped_too_long},
                 {"dropped_no_labels", r.dropped_no_labels},
                 {"total_tokens", r.total_tokens},
                 {"label_tokens", r.label_tokens}};
  json notes = json::array();
  for (const auto& d : c.notes) notes.push_back(diag_json(d));
  return {{"files", files}, {"report", report}, {"notes", notes}};
}

// Throws nlohmann's exceptions on a missing or mistyped member; the caller catches.
void meta_from(const json& j, TokenCacheContents& c) {
  for (const json& f : j.at("files")) {
    FileReport r;
    r.spec = f.at("spec").get<std::string>();
    r.path = f.at("path").get<std::string>();
    r.format = f.at("format").get<std::string>();
    r.lines = f.at("lines").get<std::int64_t>();
    r.samples = f.at("samples").get<std::int64_t>();
    r.malformed = f.at("malformed").get<std::int64_t>();
    r.requested = f.at("requested").get<std::int64_t>();
    r.selected = f.at("selected").get<std::int64_t>();
    c.files.push_back(std::move(r));
  }
  const json& r = j.at("report");
  auto& t = c.report;
  t.template_name = r.at("template").get<std::string>();
  t.max_length = r.at("max_length").get<std::int64_t>();
  t.truncation = r.at("truncation").get<std::string>();
  t.samples_in = r.at("samples_in").get<std::int64_t>();
  t.kept = r.at("kept").get<std::int64_t>();
  t.truncated = r.at("truncated").get<std::int64_t>();
  t.dropped_too_long = r.at("dropped_too_long").get<std::int64_t>();
  t.dropped_no_labels = r.at("dropped_no_labels").get<std::int64_t>();
  t.total_tokens = r.at("total_tokens").get<std::int64_t>();
  t.label_tokens = r.at("label_tokens").get<std::int64_t>();
  for (const json& d : j.at("notes")) c.notes.push_back(diag_from(d));
}

// Reads exactly what the file holds, hashing every byte; refuses to read past `left`.
class HashedReader {
 public:
  HashedReader(std::istream& in, std::uint64_t size) : in_(in), left_(size) {}
  bool read(void* dst, std::uint64_t n) {
    if (n > left_) return false;
    if (n == 0) return true;
    if (!in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n))) return false;
    hash.update(dst, static_cast<std::size_t>(n));
    left_ -= n;
    return true;
  }
  std::uint64_t left() const { return left_; }
  Sha256 hash;

 private:
  std::istream& in_;
  std::uint64_t left_;
};

std::string temp_name(const std::string& file) {
  static std::atomic<unsigned> counter{0};
  const auto now = static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count());
#ifdef ODYSSEY_HAVE_UNISTD
  const long pid = static_cast<long>(::getpid());
#else
  const long pid = 0;
#endif
  return file + ".tmp-" + std::to_string(pid) + "-" + std::to_string(now) + "-" + std::to_string(counter++);
}

}  // namespace

Result<std::optional<TokenCacheContents>> read_token_cache(const std::string& file, const std::string& key) {
  Result<std::optional<TokenCacheContents>> r;
  std::error_code ec;
  if (!fs::exists(file, ec)) return r;
  auto corrupt = [&](const std::string& why) {
    r.diagnostics.push_back(diagnostic_at(Severity::Warning, file, {}, "token cache ignored and rebuilt: " + why));
    r.value.reset();
    return r;
  };
  try {
    const std::uint64_t size = fs::file_size(file, ec);
    if (ec) return corrupt("cannot read its size: " + ec.message());
    RegularFileStream in(file);
    if (!in.is_open()) return corrupt(in.error());
    if (size < kHeaderSize + 32) return corrupt("truncated (" + std::to_string(size) + " bytes)");
    HashedReader rd(in, size - 32);
    unsigned char head[kHeaderSize];
    if (!rd.read(head, kHeaderSize)) return corrupt("cannot read its header");
    if (std::memcmp(head, kMagic, sizeof kMagic) != 0) return corrupt("not an Odyssey token cache file");
    const std::uint32_t version = get_u32(head + 8);
    if (version != kTokenCacheVersion)
      return corrupt("written in cache format " + std::to_string(version) + ", this build reads format " +
                     std::to_string(kTokenCacheVersion));
    if (std::string_view(reinterpret_cast<const char*>(head + 12), kKeyChars) != key)
      return corrupt("it belongs to another key");
    const std::uint64_t n_samples = get_u64(head + 12 + kKeyChars);
    const std::uint64_t n_tokens = get_u64(head + 20 + kKeyChars);
    const std::uint64_t meta_size = get_u64(head + 28 + kKeyChars);
    // Every sample takes at least 8 bytes, every token 8: counts that cannot fit are corruption.
    if (meta_size > rd.left() || n_samples > rd.left() / 8 || n_tokens > rd.left() / 8)
      return corrupt("its counts do not fit its size (truncated or damaged)");
    std::string meta(static_cast<std::size_t>(meta_size), '\0');
    if (!rd.read(meta.data(), meta_size)) return corrupt("truncated in its metadata");
    TokenCacheContents c;
    c.samples.reserve(static_cast<std::size_t>(n_samples));
    std::uint64_t tokens = 0;
    for (std::uint64_t i = 0; i < n_samples; ++i) {
      unsigned char lens[8];
      if (!rd.read(lens, 8)) return corrupt("truncated at sample " + std::to_string(i));
      const std::uint32_t origin_len = get_u32(lens), n = get_u32(lens + 4);
      if (origin_len > rd.left() || std::uint64_t{n} * 8 > rd.left() || tokens + n > n_tokens)
        return corrupt("sample " + std::to_string(i) + " does not fit the file (truncated or damaged)");
      TokenizedSample s;
      s.origin.resize(origin_len);
      s.ids.resize(n);
      s.labels.resize(n);
      if (!rd.read(s.origin.data(), origin_len) || !rd.read(s.ids.data(), std::uint64_t{n} * 4) ||
          !rd.read(s.labels.data(), std::uint64_t{n} * 4))
        return corrupt("truncated at sample " + std::to_string(i));
      to_le(s.ids);
      to_le(s.labels);
      tokens += n;
      c.samples.push_back(std::move(s));
    }
    if (rd.left() != 0 || tokens != n_tokens) return corrupt("its size does not match its counts");
    unsigned char stored[32];
    if (!in.read(reinterpret_cast<char*>(stored), 32)) return corrupt("truncated before its checksum");
    const auto digest = rd.hash.digest();
    if (std::memcmp(stored, digest.data(), 32) != 0) return corrupt("checksum mismatch (the file is damaged)");
    // The checksum matched: the file is what was written. The checks below catch a writer bug.
    meta_from(json::parse(meta), c);
    for (const auto& s : c.samples)
      for (std::size_t k = 0; k < s.ids.size(); ++k)
        if (s.ids[k] < 0 || (s.labels[k] != kIgnoreIndex && s.labels[k] != s.ids[k]))
          return corrupt("inconsistent ids and labels");
    if (c.report.kept != static_cast<std::int64_t>(c.samples.size()) ||
        c.report.total_tokens != static_cast<std::int64_t>(tokens))
      return corrupt("its report does not match its samples");
    c.report.lengths.reserve(c.samples.size());
    for (const auto& s : c.samples) c.report.lengths.push_back(static_cast<std::int32_t>(s.ids.size()));
    r.value = std::move(c);
  } catch (const std::exception& e) {
    return corrupt("unreadable metadata: " + text::excerpt(e.what()));
  }
  return r;
}

Diagnostics write_token_cache(const std::string& file, const std::string& key, const TokenCacheContents& c) {
  Diagnostics d;
  auto fail = [&](const std::string& why) {
    d.push_back(diagnostic_at(Severity::Warning, file, {}, "token cache not written: " + why));
    return d;
  };
  if (key.size() != kKeyChars) return fail("bad key");
  std::error_code ec;
  const fs::path dir = fs::path(file).parent_path();
  if (!dir.empty()) {
    fs::create_directories(dir, ec);
    if (ec) return fail("cannot create " + dir.string() + ": " + ec.message());
  }
  const std::string tmp = temp_name(file);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return fail("cannot create " + tmp + ": " + std::strerror(errno));
  Sha256 h;
  bool ok = true;
  auto put = [&](const void* p, std::size_t n) {
    if (!ok || n == 0) return;
    ok = std::fwrite(p, 1, n, f) == n;
    h.update(p, n);
  };
  try {
    const std::string meta = dump_json(meta_json(c));
    std::uint64_t tokens = 0;
    for (const auto& s : c.samples) tokens += s.ids.size();
    std::string head(kMagic, sizeof kMagic);
    put_u32(head, kTokenCacheVersion);
    head += key;
    put_u64(head, c.samples.size());
    put_u64(head, tokens);
    put_u64(head, meta.size());
    put(head.data(), head.size());
    put(meta.data(), meta.size());
    std::vector<std::int32_t> buf;
    for (const auto& s : c.samples) {
      std::string lens;
      put_u32(lens, static_cast<std::uint32_t>(s.origin.size()));
      put_u32(lens, static_cast<std::uint32_t>(s.ids.size()));
      put(lens.data(), lens.size());
      put(s.origin.data(), s.origin.size());
      buf = s.ids;
      buf.resize(s.ids.size());
      to_le(buf);
      put(buf.data(), buf.size() * 4);
      buf.assign(s.labels.begin(), s.labels.end());
      buf.resize(s.ids.size(), kIgnoreIndex);
      to_le(buf);
      put(buf.data(), buf.size() * 4);
    }
    const auto digest = h.digest();
    if (ok) ok = std::fwrite(digest.data(), 1, digest.size(), f) == digest.size();
  } catch (const std::exception& e) {
    ok = false;
    d.push_back(diagnostic_at(Severity::Warning, file, {}, std::string("token cache not written: ") + e.what()));
  }
  if (ok) ok = std::fflush(f) == 0;
#ifdef ODYSSEY_HAVE_UNISTD
  if (ok) ok = ::fsync(::fileno(f)) == 0;
#endif
  const int saved = errno;
  if (std::fclose(f) != 0) ok = false;
  if (!ok) {
    fs::remove(tmp, ec);
    if (d.empty()) return fail("writing " + tmp + " failed: " + std::strerror(saved));
    return d;
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return fail("cannot rename the temporary file into place: " + ec.message());
  }
  return d;
}

namespace {

// "" when every id is in [0, vocab_size), else which sample and id are not.
std::string ids_outside_vocabulary(const std::vector<TokenizedSample>& samples, std::int32_t vocab_size) {
  for (std::size_t i = 0; i < samples.size(); ++i)
    for (const std::int32_t id : samples[i].ids)
      if (id < 0 || id >= vocab_size)
        return "sample " + std::to_string(i) + " (" + text::excerpt(samples[i].origin) + ") holds token id " +
               std::to_string(id) + ", outside the tokenizer's " + std::to_string(vocab_size) + " ids";
  return {};
}

}  // namespace

Result<PreparedDataset> load_tokenized(const std::vector<std::string>& specs, const LoadOptions& load,
                                       const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                       const TokenizeOptions& tokenize, const TokenCacheOptions& cache) {
  Result<PreparedDataset> r;
  std::string key, file;
  if (cache.enabled && tokenizer.valid()) {
    TokenCacheKeyInputs in;
    in.specs = specs;
    in.base_dir = load.base_dir;
    in.seed = load.seed;
    in.max_bad_sample_ratio = load.max_bad_sample_ratio;
    in.tokenizer_file = tokenizer.file();
    in.bos_token = tokenizer.bos_token();
    in.template_name = chat_template.identity();  // a Jinja template: its text's digest
    in.tokenize = tokenize;
    auto k = token_cache_key(in);
    if (k.ok()) {
      key = k.value;
      file = token_cache_file(cache.dir.empty() ? default_token_cache_dir() : cache.dir, key);
      auto hit = read_token_cache(file, key);
      r.diagnostics = hit.diagnostics;
      if (hit.value) {
        // The checksum proves only that the file is as some writer wrote it: a forged entry
        // with ids beyond the vocabulary failed every run at step 1 ("index out of range in
        // self") until --no-token-cache. Such an entry is discarded and rebuilt.
        if (std::string why = ids_outside_vocabulary(hit.value->samples, tokenizer.vocab_size()); !why.empty()) {
          r.diagnostics.push_back(
              diagnostic_at(Severity::Warning, file, {}, "token cache ignored and rebuilt: " + why));
          hit.value.reset();
        }
      }
      if (hit.value) {
        auto& c = *hit.value;
        r.diagnostics.insert(r.diagnostics.end(), c.notes.begin(), c.notes.end());
        r.diagnostics.push_back(diagnostic_at(Severity::Note, file, {}, "tokenized data read from the cache"));
        r.value.samples = std::move(c.samples);
        r.value.files = std::move(c.files);
        r.value.report = std::move(c.report);
        r.value.from_cache = true;
        r.value.cache_file = file;
        r.value.cache_key = key;
        return r;
      }
    } else if (!tokenizer.file().empty() && !fs::is_regular_file(tokenizer.file())) {
      r.diagnostics.push_back(
          diagnostic_at(Severity::Note, tokenizer.file(), {}, "not a file on disk; tokenized data is not cached"));
    }
  }
  auto loaded = load_datasets(specs, load);
  r.diagnostics.insert(r.diagnostics.end(), loaded.diagnostics.begin(), loaded.diagnostics.end());
  r.value.files = loaded.value.files;
  if (!loaded.ok()) return r;
  auto tok = tokenize_samples(loaded.value.samples, tokenizer, chat_template, tokenize);
  r.diagnostics.insert(r.diagnostics.end(), tok.diagnostics.begin(), tok.diagnostics.end());
  r.value.report = tok.value.report;
  if (!tok.ok()) return r;
  r.value.samples = std::move(tok.value.samples);
  if (!file.empty()) {
    TokenCacheContents c;
    c.files = r.value.files;
    c.report = r.value.report;
    for (const auto& d : loaded.diagnostics)
      if (d.severity != Severity::Error) c.notes.push_back(d);
    for (const auto& d : tok.diagnostics)
      if (d.severity != Severity::Error) c.notes.push_back(d);
    c.samples = std::move(r.value.samples);  // lent to the writer, taken back below
    auto w = write_token_cache(file, key, c);
    r.value.samples = std::move(c.samples);
    r.diagnostics.insert(r.diagnostics.end(), w.begin(), w.end());
    if (w.empty()) {
      r.value.cache_file = file;
      r.value.cache_key = key;
    }
  }
  return r;
}

}  // namespace odyssey::data
