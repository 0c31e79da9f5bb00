#include "tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <queue>

namespace odyssey::tok {

namespace {

struct ByteTables {
  std::array<char32_t, 256> to_char{};
  std::unordered_map<char32_t, int> to_byte;
  ByteTables() {
    // Printable Latin-1 bytes stand for themselves; the rest are moved to U+0100 and up.
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[static_cast<std::size_t>(b)]] = b;
    }
  }
};

const ByteTables& byte_tables() {
  static const ByteTables t;
  return t;
}

// Pre-tokens shorter than this are cached (HF uses the same bound).
constexpr std::size_t kMaxCachedLength = 256;
// Each thread keeps its own cache per model (as HF tokenizers does): no locks, and a flat
// table small enough to stay in L2. A full table is cleared.
constexpr std::size_t kSlots = 1 << 15;
constexpr std::size_t kMaxEntries = kSlots / 2;
constexpr std::size_t kModelsPerThread = 4;

std::uint64_t hash_bytes(std::string_view s) {
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0xC4CEB9FE1A85EC53ull;
  return h ^ (h >> 29);
}

std::atomic<std::uint64_t> g_next_model_id{1};

}  // namespace

char32_t byte_char(std::uint8_t b) { return byte_tables().to_char[b]; }

int char_byte(char32_t c) {
  const auto& m = byte_tables().to_byte;
  const auto it = m.find(c);
  return it == m.end() ? -1 : it->second;
}

class BpeCache {
 public:
  BpeCache() : slots_(kSlots) {}
  bool find(std::string_view w, std::uint64_t h, std::vector<std::int32_t>* ids) const {
    for (std::size_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      const Slot& s = slots_[i];
      if (s.n == 0) return false;
      if (s.hash == h && s.key_len == w.size() && std::memcmp(keys_.data() + s.key_off, w.data(), w.size()) == 0) {
        ids->insert(ids->end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.n);
        return true;
      }
    }
  }
  void insert(std::string_view w, std::uint64_t h, const std::int32_t* ids, std::size_t n) {
    if (n == 0 || n > 0xFFFF) return;
    if (used_ >= kMaxEntries) clear();
    std::size_t i = h & (kSlots - 1);
    while (slots_[i].n != 0) i = (i + 1) & (kSlots - 1);
    slots_[i] = {h, static_cast<std::uint32_t>(keys_.size()), static_cast<std::uint32_t>(ids_.size()),
                 static_cast<std::uint16_t>(w.size()), static_cast<std::uint16_t>(n)};
    keys_.append(w);
    ids_.insert(ids_.end(), ids, ids + n);
    ++used_;
  }
  void clear() {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    ids_.clear();
    used_ = 0;
  }

 private:
  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t key_off = 0, ids_off = 0;
    std::uint16_t key_len = 0, n = 0;  // n == 0: empty
  };
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<std::int32_t> ids_;
  std::size_t used_ = 0;
};

namespace {

BpeCache& thread_cache(std::uint64_t model) {
  thread_local std::vector<std::pair<std::uint64_t, std::unique_ptr<BpeCache>>> caches;
  for (auto& [id, c] : caches)
    if (id == model) return *c;
  if (caches.size() >= kModelsPerThread) caches.erase(caches.begin());
  caches.emplace_back(model, std::make_unique<BpeCache>());
  return *caches.back().second;
}

}  // namespace

BpeModel::BpeModel() : cache_id_(g_next_model_id++) {}
BpeModel::~BpeModel() = default;
BpeModel::BpeModel(BpeModel&& o) noexcept
    : by_bytes(std::move(o.by_bytes)),
      tokens(std::move(o.tokens)),
      byte_length(std::move(o.byte_length)),
      byte_id(o.byte_id),
      merges(std::move(o.merges)),
      unk_id(o.unk_id),
      fuse_unk(o.fuse_unk),
      ignore_merges(o.ignore_merges),
      cache_id_(g_next_model_id++) {}

void BpeModel::clear_cache() const { cache_id_ = g_next_model_id++; }

void BpeModel::encode(std::string_view word, std::vector<std::int32_t>* ids,
                      std::vector<std::uint32_t>* lengths) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (const auto it = by_bytes.find(word); it != by_bytes.end()) {
      ids->push_back(it->second);
      if (lengths) lengths->push_back(static_cast<std::uint32_t>(word.size()));
      return;
    }
  }
  const bool cacheable = word.size() < kMaxCachedLength;
  const std::uint64_t h = cacheable ? hash_bytes(word) : 0;
  BpeCache* cache = cacheable ? &thread_cache(cache_id_) : nullptr;
  const std::size_t first = ids->size();
  if (cache && cache->find(word, h, ids)) {
    if (lengths)
      for (std::size_t i = first; i < ids->size(); ++i)
        lengths->push_back(byte_length[static_cast<std::size_t>((*ids)[i])]);
    return;
  }
  std::vector<std::uint32_t> lens;
  merge_word(word, ids, &lens);
  if (lengths) lengths->insert(lengths->end(), lens.begin(), lens.end());
  if (!cache) return;
  for (std::size_t i = 0; i < lens.size(); ++i)  // an unknown-token run has its own length
    if (lens[i] != byte_length[static_cast<std::size_t>((*ids)[first + i])]) return;
  cache->insert(word, h, ids->data() + first, ids->size() - first);
}

void BpeModel::merge_word(std::string_view word, std::vector<std::int32_t>* ids,
                          std::vector<std::uint32_t>* lengths) const {
  struct Symbol {
    std::int32_t id;
    std::int32_t prev, next;
    std::uint32_t len;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  std::int32_t pending_unk = -1;
  std::uint32_t pending_len = 0;
  auto push = [&](std::int32_t id, std::uint32_t len) {
    const auto n = static_cast<std::int32_t>(sym.size());
    sym.push_back({id, n - 1, n + 1, len});
  };
  for (const char ch : word) {
    const std::int32_t id = byte_id[static_cast<unsigned char>(ch)];
    if (id >= 0) {
      if (pending_unk >= 0) push(pending_unk, pending_len);
      pending_unk = -1;
      push(id, 1);
    } else if (unk_id >= 0) {  // HF: unknown characters become unk, fused when fuse_unk
      if (pending_unk >= 0 && fuse_unk) {
        ++pending_len;
      } else {
        if (pending_unk >= 0) push(pending_unk, pending_len);
        pending_unk = unk_id;
        pending_len = 1;
      }
    }  // without an unk token HF drops the character
  }
  if (pending_unk >= 0) push(pending_unk, pending_len);
  if (sym.empty()) return;
  sym.back().next = -1;

  // Candidate merges ordered by (rank, position), as HF's heap orders them.
  struct Candidate {
    std::int32_t rank, pos, id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](std::int32_t pos) {
    const Symbol& a = sym[static_cast<std::size_t>(pos)];
    if (a.next < 0) return;
    const auto it = merges.find(pair_key(a.id, sym[static_cast<std::size_t>(a.next)].id));
    if (it != merges.end()) heap.push({it->second.first, pos, it->second.second});
  };
  for (std::int32_t i = 0; i + 1 < static_cast<std::int32_t>(sym.size()); ++i) consider(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = sym[static_cast<std::size_t>(top.pos)];
    if (left.len == 0 || left.next < 0) continue;
    const Symbol right = sym[static_cast<std::size_t>(left.next)];
    // A stale entry: the pair at this position has changed since it was queued.
    const auto it = merges.find(pair_key(left.id, right.id));
    if (it == merges.end() || it->second.second != top.id) continue;
    sym[static_cast<std::size_t>(left.next)].len = 0;
    left.id = top.id;
    left.len += right.len;
    left.next = right.next;
    if (right.next >= 0) sym[static_cast<std::size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (const Symbol& s : sym) {
    if (s.len == 0) continue;
    ids->push_back(s.id);
    lengths->push_back(s.len);
  }
}

}  // namespace odyssey::tok
