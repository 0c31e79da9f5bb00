#include "data/packing.h"

#include <algorithm>
#include <numeric>

namespace odyssey::data {

namespace {

// Leftmost bin with remaining capacity >= need, over a max segment tree of capacities.
class BinTree {
 public:
  explicit BinTree(std::size_t max_bins) {
    while (size_ < std::max<std::size_t>(max_bins, 1)) size_ *= 2;
    tree_.assign(2 * size_, -1);  // -1: no bin there yet
  }
  std::int64_t find(std::int64_t need) const {
    if (tree_[1] < need) return -1;
    std::size_t node = 1;
    while (node < size_) node = tree_[2 * node] >= need ? 2 * node : 2 * node + 1;
    return static_cast<std::int64_t>(node - size_);
  }
  void set(std::size_t bin, std::int64_t remaining) {
    std::size_t node = bin + size_;
    tree_[node] = remaining;
    for (node /= 2; node >= 1; node /= 2) tree_[node] = std::max(tree_[2 * node], tree_[2 * node + 1]);
  }

 private:
  std::size_t size_ = 1;
  std::vector<std::int64_t> tree_;
};

}  // namespace

std::vector<std::vector<std::size_t>> pack_bins(std::span<const std::int32_t> lengths, std::int64_t max_length) {
  std::vector<std::vector<std::size_t>> bins;
  std::vector<std::size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return lengths[a] > lengths[b]; });
  BinTree tree(lengths.size());
  std::vector<std::int64_t> remaining;
  for (const std::size_t i : order) {
    const std::int64_t len = std::max<std::int64_t>(lengths[i], 0);
    const std::int64_t b = len > max_length ? -1 : tree.find(len);
    if (b >= 0) {
      const auto k = static_cast<std::size_t>(b);
      bins[k].push_back(i);
      remaining[k] -= len;
      tree.set(k, remaining[k]);
    } else {  // a new bin; one longer than max_length is never offered to another sample
      bins.push_back({i});
      remaining.push_back(len > max_length ? -1 : max_length - len);
      tree.set(bins.size() - 1, remaining.back());
    }
  }
  return bins;
}

PackingReport packing_report(std::span<const std::int32_t> lengths, const std::vector<std::vector<std::size_t>>& bins,
                             std::int64_t max_length) {
  PackingReport r;
  r.bins = bins.size();
  for (const auto& b : bins) {
    r.samples += b.size();
    for (std::size_t i : b)
      if (i < lengths.size()) r.tokens += lengths[i];
  }
  if (!bins.empty() && max_length > 0)
    r.efficiency = static_cast<double>(r.tokens) / (static_cast<double>(bins.size()) * static_cast<double>(max_length));
  return r;
}

Row make_row(const std::vector<const TokenizedSample*>& samples) {
  Row row;
  std::size_t total = 0;
  for (const auto* s : samples)
    if (s) total += s->ids.size();
  row.input_ids.reserve(total);
  row.labels.reserve(total);
  row.position_ids.reserve(total);
  row.cu_seqlens.push_back(0);
  for (const auto* s : samples) {
    if (!s || s->ids.empty()) continue;
    const auto n = static_cast<std::int32_t>(s->ids.size());
    row.input_ids.insert(row.input_ids.end(), s->ids.begin(), s->ids.end());
    const std::size_t first = row.labels.size();
    for (std::size_t k = 0; k < s->ids.size(); ++k)
      row.labels.push_back(k < s->labels.size() ? s->labels[k] : kIgnoreIndex);
    row.labels[first] = kIgnoreIndex;
    for (std::int32_t p = 0; p < n; ++p) row.position_ids.push_back(p);
    row.cu_seqlens.push_back(row.cu_seqlens.back() + n);
    row.max_seqlen = std::max(row.max_seqlen, n);
  }
  return row;
}

}  // namespace odyssey::data
