#include "series_buffer.h"

#include <algorithm>
#include <cmath>

namespace odyssey::ui {

namespace {
// Older points are merged four to two (min and max of each bucket): halving the older
// half frees a quarter of the buffer, so decimation runs once per capacity/4 appends and
// costs O(1) amortised per point.
constexpr std::size_t kBucket = 4;
}  // namespace

SeriesBuffer::SeriesBuffer(std::size_t capacity) : capacity_(std::max<std::size_t>(capacity, 64)) {
  x_.reserve(capacity_);
  y_.reserve(capacity_);
}

void SeriesBuffer::clear() {
  x_.clear();
  y_.clear();
  marks_.clear();
  appended_ = 0;
  have_range_ = false;
  min_x_ = max_x_ = min_y_ = max_y_ = min_pos_y_ = last_x_ = last_y_ = 0;
}

void SeriesBuffer::append(double x, double y) {
  ++appended_;
  last_x_ = x;
  last_y_ = y;
  if (!std::isfinite(y)) {
    const NonFinite kind = std::isnan(y) ? NonFinite::NaN : (y > 0 ? NonFinite::PosInf : NonFinite::NegInf);
    marks_.push_back({x, kind});
    if (marks_.size() > capacity_) decimate_marks();
    return;
  }
  if (x_.size() >= capacity_) decimate_older_half();
  x_.push_back(x);
  y_.push_back(y);
  if (!have_range_) {
    min_x_ = max_x_ = x;
    min_y_ = max_y_ = y;
    have_range_ = true;
  } else {
    min_x_ = std::min(min_x_, x);
    max_x_ = std::max(max_x_, x);
    min_y_ = std::min(min_y_, y);
    max_y_ = std::max(max_y_, y);
  }
  if (y > 0 && (min_pos_y_ == 0 || y < min_pos_y_)) min_pos_y_ = y;
}

void SeriesBuffer::decimate_older_half() {
  const std::size_t half = (x_.size() / 2 / kBucket) * kBucket;
  std::size_t out = 0;
  for (std::size_t b = 0; b < half; b += kBucket) {
    std::size_t lo = b, hi = b;
    for (std::size_t i = b + 1; i < b + kBucket; ++i) {
      if (y_[i] < y_[lo]) lo = i;
      if (y_[i] > y_[hi]) hi = i;
    }
    const std::size_t first = std::min(lo, hi), second = std::max(lo, hi);
    x_[out] = x_[first];
    y_[out] = y_[first];
    ++out;
    if (second != first) {
      x_[out] = x_[second];
      y_[out] = y_[second];
      ++out;
    }
  }
  // Shift the recent half down behind the decimated part. Extremes were kept, so the
  // cached y range stays exact; min_x stays the first x ever appended (the axis origin).
  x_.erase(x_.begin() + static_cast<std::ptrdiff_t>(out), x_.begin() + static_cast<std::ptrdiff_t>(half));
  y_.erase(y_.begin() + static_cast<std::ptrdiff_t>(out), y_.begin() + static_cast<std::ptrdiff_t>(half));
}

void SeriesBuffer::decimate_marks() {
  // A NaN storm (every step for hours) must not grow memory either: thin the older half
  // to every other mark. Marks of another kind than their neighbours are always kept.
  const std::size_t half = marks_.size() / 2;
  std::vector<NonFiniteMark> kept;
  kept.reserve(marks_.size());
  for (std::size_t i = 0; i < half; ++i) {
    const bool differs = i > 0 && marks_[i].kind != marks_[i - 1].kind;
    if (i % 2 == 0 || differs) kept.push_back(marks_[i]);
  }
  kept.insert(kept.end(), marks_.begin() + static_cast<std::ptrdiff_t>(half), marks_.end());
  marks_ = std::move(kept);
}

}  // namespace odyssey::ui
