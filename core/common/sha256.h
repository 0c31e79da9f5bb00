// SHA-256 (FIPS 180-4), fed in pieces: the one implementation, for the token cache's keys
// (data/token_cache.h) and the rendezvous store's HMAC (dist/hmac_sha256.h). Odyssey links no
// crypto library (LibTorch brings none); checked against hashlib (tst_dataset) and RFC 4231's
// HMAC vectors (tst_store_auth).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace odyssey {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::array<std::uint8_t, 32> digest();  // finishes; the object must not be updated after
  static std::string hex(const std::array<std::uint8_t, 32>& d);

 private:
  void block(const std::uint8_t* p);
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buf_{};
  std::size_t used_ = 0;
  std::uint64_t bytes_ = 0;
};

}  // namespace odyssey
