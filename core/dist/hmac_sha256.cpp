#include "dist/hmac_sha256.h"

#include <algorithm>
#include <cstring>

namespace odyssey::dist {

HmacSha256::HmacSha256(std::string_view key) {
  // RFC 2104: a key longer than the block is hashed first; then zero-padded to 64 bytes.
  std::array<std::uint8_t, 64> k{};
  if (key.size() > k.size()) {
    const Digest d = sha256(key);
    std::memcpy(k.data(), d.data(), d.size());
  } else if (!key.empty()) {
    std::memcpy(k.data(), key.data(), key.size());
  }
  std::array<std::uint8_t, 64> pad{};
  for (std::size_t i = 0; i < k.size(); ++i) pad[i] = static_cast<std::uint8_t>(k[i] ^ 0x36);
  inner_.update(pad.data(), pad.size());
  for (std::size_t i = 0; i < k.size(); ++i) pad[i] = static_cast<std::uint8_t>(k[i] ^ 0x5c);
  outer_.update(pad.data(), pad.size());
}

void HmacSha256::field(const void* data, std::size_t n) {
  std::uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(n) >> (8 * i));
  inner_.update(len, 8);
  if (n > 0) inner_.update(data, n);
}

Digest HmacSha256::finish() {
  const Digest in = inner_.digest();
  outer_.update(in.data(), in.size());
  return outer_.digest();
}

Digest sha256(std::string_view data) {
  Sha256 s;
  s.update(data);
  return s.digest();
}

Digest hmac_sha256(std::string_view key, std::string_view message) {
  HmacSha256 h(key);
  h.update(message);
  return h.finish();
}

bool equal_constant_time(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
  // volatile: the compiler may not turn the loop into an early-exit comparison.
  volatile std::uint8_t diff = 0;
  for (std::size_t i = 0; i < n; ++i) diff = static_cast<std::uint8_t>(diff | (a[i] ^ b[i]));
  return diff == 0;
}

std::string to_hex(const std::uint8_t* data, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[data[i] >> 4];
    s[2 * i + 1] = digits[data[i] & 15];
  }
  return s;
}

}  // namespace odyssey::dist
