#include "tokenizer/unicode_nfc.h"

#include <algorithm>
#include <array>
#include <bitset>
#include <memory>
#include <unordered_map>

#include "tokenizer/utf8.h"

namespace odyssey::unicode {

namespace {

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kSCount = kLCount * kVCount * kTCount;

struct Decomposition {
  std::uint8_t n = 0;
  std::array<char32_t, 4> cp{};
};

struct Tables {
  std::unordered_map<char32_t, std::uint8_t> ccc;
  std::unordered_map<char32_t, Decomposition> decomposition;
  std::unordered_map<std::uint64_t, char32_t> composition;
  // Characters that are not a safe segment start: they may change under NFC, have a
  // non-zero combining class, or compose with the character before them.
  std::bitset<0x110000> unsafe;
};

std::uint64_t pair_key(char32_t a, char32_t b) { return (std::uint64_t{a} << 21) | b; }

void append_full(const Tables& t, const std::unordered_map<char32_t, std::pair<char32_t, char32_t>>& pairs, char32_t c,
                 Decomposition* d) {
  if (const auto it = pairs.find(c); it != pairs.end()) {
    append_full(t, pairs, it->second.first, d);
    append_full(t, pairs, it->second.second, d);
  } else if (const auto u = t.decomposition.find(c); u != t.decomposition.end()) {
    for (std::uint8_t k = 0; k < u->second.n && d->n < 4; ++k) d->cp[d->n++] = u->second.cp[k];
  } else if (d->n < 4) {
    d->cp[d->n++] = c;
  }
}

const Tables& tables() {
  static const std::unique_ptr<Tables> t = [] {
    auto r = std::make_unique<Tables>();
    using namespace unicode_data;
    for (std::size_t i = 0; i + 2 < kCombiningClassSize; i += 3)
      for (std::uint32_t c = kCombiningClass[i]; c <= kCombiningClass[i + 1]; ++c) {
        r->ccc[c] = static_cast<std::uint8_t>(kCombiningClass[i + 2]);
        r->unsafe.set(c);
      }
    for (std::size_t i = 0; i + 1 < kUnstableDecompositionsSize;) {
      const std::uint32_t c = kUnstableDecompositions[i], n = kUnstableDecompositions[i + 1];
      Decomposition d;
      for (std::uint32_t k = 0; k < n && k < 4; ++k) d.cp[d.n++] = kUnstableDecompositions[i + 2 + k];
      r->decomposition[c] = d;
      r->unsafe.set(c);
      i += 2 + n;
    }
    std::unordered_map<char32_t, std::pair<char32_t, char32_t>> pairs;
    for (std::size_t i = 0; i + 2 < kCompositionsSize; i += 3) {
      const char32_t a = kCompositions[i], b = kCompositions[i + 1], c = kCompositions[i + 2];
      r->composition[pair_key(a, b)] = c;
      pairs[c] = {a, b};
      r->unsafe.set(b);
    }
    for (const auto& [c, ab] : pairs) {
      Decomposition d;
      append_full(*r, pairs, c, &d);
      r->decomposition[c] = d;
    }
    for (char32_t c = kVBase; c < kVBase + kVCount; ++c) r->unsafe.set(c);
    for (char32_t c = kTBase + 1; c < kTBase + kTCount; ++c) r->unsafe.set(c);
    return r;
  }();
  return *t;
}

std::uint8_t ccc_of(const Tables& t, char32_t c) {
  const auto it = t.ccc.find(c);
  return it == t.ccc.end() ? 0 : it->second;
}

void decompose(const Tables& t, char32_t c, std::vector<char32_t>* out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out->push_back(kLBase + s / (kVCount * kTCount));
    out->push_back(kVBase + (s % (kVCount * kTCount)) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const auto it = t.decomposition.find(c);
  if (it == t.decomposition.end()) {
    out->push_back(c);
    return;
  }
  for (std::uint8_t k = 0; k < it->second.n; ++k) out->push_back(it->second.cp[k]);
}

char32_t compose_pair(const Tables& t, char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto it = t.composition.find(pair_key(a, b));
  return it == t.composition.end() ? 0 : it->second;
}

// Decompose, reorder and recompose one segment.
std::string normalize_segment(const Tables& t, std::string_view seg) {
  std::vector<char32_t> buf;
  for (std::size_t i = 0; i < seg.size();) decompose(t, utf8::decode(seg, i), &buf);
  for (std::size_t i = 1; i < buf.size(); ++i) {  // canonical ordering: stable by class
    const std::uint8_t c = ccc_of(t, buf[i]);
    if (c == 0) continue;
    for (std::size_t j = i; j > 0; --j) {
      const std::uint8_t p = ccc_of(t, buf[j - 1]);
      if (p == 0 || p <= c) break;
      std::swap(buf[j - 1], buf[j]);
    }
  }
  std::size_t starter = 0, out = 1;
  int last_class = buf.empty() ? 0 : (ccc_of(t, buf[0]) == 0 ? 0 : 256);
  for (std::size_t i = 1; i < buf.size(); ++i) {
    const char32_t ch = buf[i];
    const int cls = ccc_of(t, ch);
    const char32_t composite = last_class == 256 ? 0 : compose_pair(t, buf[starter], ch);
    if (composite != 0 && (last_class < cls || last_class == 0)) {
      buf[starter] = composite;
      continue;
    }
    if (cls == 0) starter = out;
    last_class = cls;
    buf[out++] = ch;
  }
  buf.resize(std::min(out, buf.size()));
  std::string r;
  for (const char32_t c : buf) utf8::append(r, c);
  return r;
}

}  // namespace

bool nfc(std::string_view s, std::string* out, std::vector<std::uint32_t>* origin) {
  const Tables& t = tables();
  bool changed = false;
  std::size_t copied = 0;  // input consumed into *out
  std::size_t safe = 0;    // start of the last safe (unflagged) character
  std::size_t i = 0;
  auto copy_through = [&](std::size_t end) {
    for (std::size_t k = copied; k < end; ++k) {
      out->push_back(s[k]);
      if (origin) origin->push_back(static_cast<std::uint32_t>(k));
    }
    copied = end;
  };
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      safe = i++;
      continue;
    }
    std::size_t next = i;
    const char32_t c = utf8::decode(s, next);
    if (!t.unsafe.test(c)) {
      safe = i;
      i = next;
      continue;
    }
    std::size_t end = next;  // extend to the next safe character
    while (end < s.size()) {
      std::size_t k = end;
      if (!t.unsafe.test(utf8::decode(s, k))) break;
      end = k;
    }
    const std::size_t start = std::max(safe, copied);
    const std::string seg = normalize_segment(t, s.substr(start, end - start));
    if (seg != s.substr(start, end - start)) {
      if (!changed) {
        changed = true;
        out->clear();
        out->reserve(s.size() + 16);
        if (origin) origin->clear();
      }
      copy_through(start);
      out->append(seg);
      if (origin) origin->insert(origin->end(), seg.size(), static_cast<std::uint32_t>(start));
      copied = end;
    }
    safe = end;
    i = end;
  }
  if (!changed) return false;
  copy_through(s.size());
  if (origin) origin->push_back(static_cast<std::uint32_t>(s.size()));
  return true;
}

std::string nfc(std::string_view s) {
  std::string out;
  if (!nfc(s, &out, nullptr)) return std::string(s);
  return out;
}

}  // namespace odyssey::unicode
