// SeriesBuffer: one chart series held in bounded memory. A run of 200k steps must not
// grow the window's memory with it, yet a loss spike at step 3,000 must still be visible
// after step 190,000: when the buffer fills, its older half is decimated by buckets that
// keep each bucket's minimum and maximum (in x order), so extremes survive and the curve's
// envelope is preserved. Non-finite values (NaN, ±inf) are kept apart as marks, never
// dropped: a NaN loss is exactly what a training monitor must show.
// Plain C++ (no Qt), so worker threads can fill one too.
#pragma once

#include <cstddef>
#include <vector>

namespace odyssey::ui {

enum class NonFinite { NaN, PosInf, NegInf };

struct NonFiniteMark {
  double x = 0;
  NonFinite kind = NonFinite::NaN;
};

class SeriesBuffer {
 public:
  // capacity: finite points kept at most (at least 64).
  explicit SeriesBuffer(std::size_t capacity = 20000);

  // x must not decrease (steps); a smaller x is accepted and kept in order of arrival.
  void append(double x, double y);
  void clear();

  const std::vector<double>& xs() const { return x_; }
  const std::vector<double>& ys() const { return y_; }
  const std::vector<NonFiniteMark>& marks() const { return marks_; }
  std::size_t size() const { return x_.size(); }
  bool empty() const { return x_.empty() && marks_.empty(); }
  std::size_t capacity() const { return capacity_; }
  // Points ever appended (finite or not), before decimation.
  std::size_t total_appended() const { return appended_; }

  // Cached ranges of what is held (finite values only); valid when !empty().
  double min_x() const { return min_x_; }
  double max_x() const { return max_x_; }
  double min_y() const { return min_y_; }
  double max_y() const { return max_y_; }
  // Smallest y > 0, for a logarithmic axis; 0 when there is none.
  double min_positive_y() const { return min_pos_y_; }
  double last_y() const { return last_y_; }
  double last_x() const { return last_x_; }

 private:
  void decimate_older_half();
  void decimate_marks();

  std::size_t capacity_;
  std::vector<double> x_;
  std::vector<double> y_;
  std::vector<NonFiniteMark> marks_;
  std::size_t appended_ = 0;
  double min_x_ = 0, max_x_ = 0, min_y_ = 0, max_y_ = 0, min_pos_y_ = 0;
  double last_x_ = 0, last_y_ = 0;
  bool have_range_ = false;
};

}  // namespace odyssey::ui
