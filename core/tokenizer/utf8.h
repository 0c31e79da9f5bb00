// UTF-8 helpers for the tokenizer and chat templates: validation with the offending byte's
// offset, decoding, lossy conversion as Rust's String::from_utf8_lossy (which HF tokenizers'
// decoders use) and the two notions of whitespace the reference implementations rely on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace odyssey::utf8 {

inline constexpr std::size_t npos = static_cast<std::size_t>(-1);

// Offset of the first byte of the first ill-formed sequence (overlong forms, surrogates and
// values above U+10FFFF are ill-formed, as in Rust's str), or npos when `s` is valid.
std::size_t find_invalid(std::string_view s);

// Length of the sequence starting with lead byte `b` (1 for ASCII and stray bytes).
inline std::size_t sequence_length(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

// Decode the code point at s[i] of valid UTF-8 and advance i past it.
inline char32_t decode(std::string_view s, std::size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  const std::size_t n = sequence_length(b0);
  char32_t c = b0 & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (std::size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return c;
}

void append(std::string& out, char32_t c);

// Bytes to valid UTF-8: each maximal ill-formed subpart becomes U+FFFD (Rust's
// String::from_utf8_lossy, the W3C/Unicode "substitution of maximal subparts").
std::string lossy(std::string_view bytes);

// Python's str.isspace() (what str.strip() and Jinja's `trim` remove).
bool is_python_space(char32_t c);
// Unicode White_Space (Rust's char::is_whitespace and regex \s; Oniguruma's \s).
bool is_white_space(char32_t c);

}  // namespace odyssey::utf8
