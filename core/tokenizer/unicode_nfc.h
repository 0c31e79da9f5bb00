// Unicode Normalization Form C, as Hugging Face tokenizers' NFC normalizer applies it (Qwen's
// tokenizer.json asks for it). The tables in unicode_nfc_tables.cpp are derived from the
// oracle's own NFD/NFC by tests/reference/make_tokenizer_fixtures.py --nfc-tables, so the
// Unicode version is the one HF uses, and tst_tokenizer compares against HF on hard cases.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace odyssey::unicode {

// NFC of valid UTF-8 `s`. Returns false, leaving *out and *origin alone, when `s` is already
// in NFC (the common case: one pass, no copy). Otherwise *out is the normalized text and,
// when `origin` is given, origin->at(p) is the offset in `s` that output byte p comes from
// (origin has out->size() + 1 entries; the bytes of a rewritten segment all point at the
// segment's start, so origin[p] == origin[p - 1] inside one).
bool nfc(std::string_view s, std::string* out, std::vector<std::uint32_t>* origin);

// Convenience: the NFC text.
std::string nfc(std::string_view s);

}  // namespace odyssey::unicode

namespace odyssey::unicode_data {
// (first, last, class) ranges of canonical combining classes.
extern const std::uint32_t kCombiningClass[];
extern const std::size_t kCombiningClassSize;
// (first, second, composite) primary composites.
extern const std::uint32_t kCompositions[];
extern const std::size_t kCompositionsSize;
// (code point, n, n code points) full decompositions of characters NFC never keeps.
extern const std::uint32_t kUnstableDecompositions[];
extern const std::size_t kUnstableDecompositionsSize;
}  // namespace odyssey::unicode_data
