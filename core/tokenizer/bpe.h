// The byte-level BPE model of tokenizer.json: vocabulary, merges by rank, the merge loop of
// HF tokenizers (a heap of candidate pairs over a linked list of symbols, so a long word is
// O(n log n)), ignore_merges, and a bounded cache from pre-token to ids that makes long
// documents fast. Thread-safe: encode() is const and each thread has its own cache.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace odyssey::tok {

// GPT-2's byte-to-unicode table: byte b is written as the character byte_char(b).
char32_t byte_char(std::uint8_t b);
// The byte a character stands for, or -1 when it is not one of the 256.
int char_byte(char32_t c);

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  BpeModel();
  ~BpeModel();
  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) = delete;

  // Filled by the loader. Keys of `by_bytes` are the raw bytes a token stands for (only tokens
  // written entirely in the byte alphabet; the others cannot come out of byte-level BPE).
  StringIdMap by_bytes;
  std::vector<std::string> tokens;          // id -> the token as tokenizer.json writes it
  std::vector<std::uint32_t> byte_length;   // id -> bytes it stands for
  std::array<std::int32_t, 256> byte_id{};  // byte -> id of its single-byte token, -1 if none
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>> merges;  // (a,b) -> (rank, id)
  std::int32_t unk_id = -1;
  bool fuse_unk = false;
  bool ignore_merges = false;

  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  // Append the ids of one pre-token (its raw bytes) to *ids and, when `lengths` is given, the
  // number of bytes each covers.
  void encode(std::string_view word, std::vector<std::int32_t>* ids, std::vector<std::uint32_t>* lengths) const;

  // Forget cached encodings (every thread's): benchmarks start cold with it.
  void clear_cache() const;

 private:
  void merge_word(std::string_view word, std::vector<std::int32_t>* ids, std::vector<std::uint32_t>* lengths) const;
  // Names this model's per-thread caches; a new id orphans the old ones (evicted later).
  mutable std::atomic<std::uint64_t> cache_id_;
};

}  // namespace odyssey::tok
