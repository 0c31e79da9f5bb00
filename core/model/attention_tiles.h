// How tiled_causal_attention (model/tiled_attention.h) cuts a row into tiles of query rows:
// shared with the memory planner, which counts the tiles' working set. No LibTorch here.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace odyssey::model {

// The fp32 scores one tile may hold (its [Hq, rows, keys] block). The backward holds three
// such blocks' bytes at once on CUDA: the fp32 scores and dP, the 16-bit P and dS
// (kernels/attention_tile.h).
inline constexpr std::int64_t kTiledScoreBytes = std::int64_t{512} << 20;
// Blocks of kTiledScoreBytes alive at once in the backward (tiled_attention.cpp).
inline constexpr std::int64_t kTiledBackwardBlocks = 3;

// Query rows per tile for a row of `total` tokens whose queries reach at most `reach` keys back
// (the longest sample, or the window when shorter), with `q_heads` query heads: the most rows n
// whose block 4 * q_heads * n * (reach + n) bytes stays within kTiledScoreBytes, rounded down
// to a multiple of 64 and at least 64; the whole row when that covers it.
inline std::int64_t tiled_attention_rows(std::int64_t total, std::int64_t reach, std::int64_t q_heads) {
  reach = std::clamp<std::int64_t>(reach, 1, std::max<std::int64_t>(total, 1));
  const double budget =
      static_cast<double>(kTiledScoreBytes) / (4.0 * static_cast<double>(std::max<std::int64_t>(q_heads, 1)));
  const double r = static_cast<double>(reach);
  const auto rows = static_cast<std::int64_t>((std::sqrt(r * r + 4.0 * budget) - r) / 2.0);
  const std::int64_t n = std::max<std::int64_t>(64, rows / 64 * 64);
  return n >= total ? std::max<std::int64_t>(total, 1) : n;
}

// The fp32 bytes of the largest tile's scores for such a row (the planner's block size).
inline std::int64_t tiled_attention_block_bytes(std::int64_t total, std::int64_t reach, std::int64_t q_heads) {
  const std::int64_t n = tiled_attention_rows(total, reach, q_heads);
  return 4 * q_heads * n * std::min(total, std::clamp<std::int64_t>(reach, 1, std::max<std::int64_t>(total, 1)) + n);
}

}  // namespace odyssey::model
