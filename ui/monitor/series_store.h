// SeriesStore: the GUI thread's named series buffers of the attached run. Batches from the
// watcher arrive as queued signals on the GUI thread, so appending needs no lock (the
// "producer" of PlotJuggler's design is the queued-signal delivery here); charts read the
// buffers only from the redraw timer and skip series whose version did not change.
#pragma once

#include <QString>

#include <cstdint>
#include <map>

#include "series_buffer.h"

namespace odyssey::ui {

class SeriesStore {
 public:
  struct Entry {
    SeriesBuffer buffer;
    std::uint64_t version = 0;  // bumped on every change
  };

  explicit SeriesStore(std::size_t capacity = 20000) : capacity_(capacity) {}

  void append(const QString& name, const std::vector<double>& x, const std::vector<double>& y) {
    auto it = series_.find(name);
    if (it == series_.end()) it = series_.emplace(name, Entry{SeriesBuffer(capacity_), 0}).first;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) it->second.buffer.append(x[i], y[i]);
    it->second.version = ++clock_;
  }
  void clear() {
    series_.clear();
    ++clock_;
    ++epoch_;
  }
  const Entry* find(const QString& name) const {
    auto it = series_.find(name);
    return it == series_.end() ? nullptr : &it->second;
  }
  const std::map<QString, Entry>& all() const { return series_; }
  // Changes whenever clear() ran: charts drop their graphs.
  std::uint64_t epoch() const { return epoch_; }
  std::uint64_t clock() const { return clock_; }

 private:
  std::size_t capacity_;
  std::map<QString, Entry> series_;
  std::uint64_t clock_ = 0;
  std::uint64_t epoch_ = 0;
};

}  // namespace odyssey::ui
