// HMAC-SHA256 (RFC 2104) over common/sha256.h's SHA-256, for the rendezvous store's
// authentication (dist/store_auth.h). Written here because LibTorch links no crypto library
// and the store needs nothing more; tested against RFC 4231's vectors and Python's hmac
// module (tests/core/tst_store_auth.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/sha256.h"

namespace odyssey::dist {

using Digest = std::array<std::uint8_t, 32>;
using odyssey::Sha256;  // common/sha256.h

// HMAC-SHA256 over a message given in pieces (the store's tags cover several fields without
// copying them into one buffer).
class HmacSha256 {
 public:
  explicit HmacSha256(std::string_view key);
  void update(const void* data, std::size_t n) { inner_.update(data, n); }
  void update(std::string_view s) { inner_.update(s); }
  // A length-prefixed field (8 bytes little-endian, then the bytes): concatenated fields stay
  // unambiguous ("ab"+"c" and "a"+"bc" give different tags).
  void field(const void* data, std::size_t n);
  void field(std::string_view s) { field(s.data(), s.size()); }
  Digest finish();

 private:
  Sha256 inner_, outer_;
};

Digest sha256(std::string_view data);
Digest hmac_sha256(std::string_view key, std::string_view message);

// Compares in time independent of where the first difference is (a tag check must not tell a
// forger how many leading bytes it got right).
bool equal_constant_time(const std::uint8_t* a, const std::uint8_t* b, std::size_t n);

std::string to_hex(const std::uint8_t* data, std::size_t n);
inline std::string to_hex(const Digest& d) { return to_hex(d.data(), d.size()); }

}  // namespace odyssey::dist
