// The bits of a LoRA dropout mask (kernels/linear.h, LoraDropout), shared by the CPU loop
// (linear.cpp) and the CUDA kernels (lora_dropout.cu) so both give the same mask, bit for bit:
// a counter-based generator, Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random
// numbers: as easy as 1, 2, 3", SC 2011), keyed by the draw's 64-bit seed, one counter per four
// elements of the [n, in] input in row-major order. Any element's bit is a function of (seed,
// its index) alone, so a kernel computes it where it reads the element, no mask is stored, and
// blocks of rows, grids and threads may split the input any way.
//
// Element e (row * in + column) is kept when word e % 4 of Philox(counter = (e / 4 as two 32-bit
// halves, 0, 0), key = the seed's two halves) is below round((1 - p) 2^32): Bernoulli(1 - p) to
// within 2^-32.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ODYSSEY_HD __host__ __device__ __forceinline__
#else
#define ODYSSEY_HD inline
#endif

namespace odyssey::kernels::dropout_bits {

struct Words {
  std::uint32_t w[4];
};

ODYSSEY_HD void mul_hi_lo(std::uint32_t a, std::uint32_t b, std::uint32_t* hi, std::uint32_t* lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  *hi = static_cast<std::uint32_t>(p >> 32);
  *lo = static_cast<std::uint32_t>(p);
}

// Philox4x32 with 10 rounds on counter (c0, c1, 0, 0) and key (k0, k1).
ODYSSEY_HD Words philox4x32_10(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3, std::uint32_t k0,
                               std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(0xD2511F53u, c0, &hi0, &lo0);
    mul_hi_lo(0xCD9E8D57u, c2, &hi1, &lo1);
    const std::uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Words{{c0, c1, c2, c3}};
}

// The four words of elements 4q … 4q + 3 under `seed`.
ODYSSEY_HD Words quad(std::uint64_t seed, std::uint64_t q) {
  return philox4x32_10(static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(q >> 32), 0u, 0u,
                       static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// The threshold a word is compared with: round((1 - p) 2^32), in [0, 2^32] (p in (0, 1)).
inline std::uint64_t keep_threshold(double p) {
  return static_cast<std::uint64_t>(std::llround((1.0 - p) * 4294967296.0));
}

ODYSSEY_HD bool kept(std::uint32_t word, std::uint64_t threshold) { return word < threshold; }

}  // namespace odyssey::kernels::dropout_bits
