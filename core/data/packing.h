// Packing and padding-free rows. pack_bins groups samples into bins of at most max_length
// tokens (first-fit decreasing); make_row concatenates the samples of a micro-batch (or of a
// bin) into one row without padding: positions restart at 0 for every sample, cu_seqlens
// marks the boundaries (for varlen attention or a block-diagonal mask), and the first label
// of each sample is -100, so the shifted loss never predicts one sample from another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "data/tokenize.h"

namespace odyssey::data {

// First-fit decreasing: samples by length, longest first (ties: lower index first), each into
// the first bin (in creation order) with room for it. Every index is in exactly one bin; a
// sample longer than max_length (the tokenizer never keeps one) gets a bin of its own. Within
// a bin, indices are in placement order. Deterministic; O(n log n).
std::vector<std::vector<std::size_t>> pack_bins(std::span<const std::int32_t> lengths, std::int64_t max_length);

struct PackingReport {
  std::size_t samples = 0;
  std::size_t bins = 0;
  std::int64_t tokens = 0;
  double efficiency = 0.0;  // tokens / (bins * max_length); 0 without bins
};
PackingReport packing_report(std::span<const std::int32_t> lengths, const std::vector<std::vector<std::size_t>>& bins,
                             std::int64_t max_length);

// One padding-free row.
struct Row {
  std::vector<std::int32_t> input_ids;
  std::vector<std::int32_t> labels;        // the samples' labels; each sample's first one is -100
  std::vector<std::int32_t> position_ids;  // 0..len-1 for each sample
  std::vector<std::int32_t> cu_seqlens;    // [0, len0, len0 + len1, ...]
  std::int32_t max_seqlen = 0;
  bool operator==(const Row&) const = default;
};

// Null pointers and empty samples are skipped (they add no boundary).
Row make_row(const std::vector<const TokenizedSample*>& samples);

}  // namespace odyssey::data
