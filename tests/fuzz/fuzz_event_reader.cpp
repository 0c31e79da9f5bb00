// libFuzzer target for the events.jsonl reader: whatever bytes are on disk, the reader must
// not crash, and it must agree with itself.
//  1. Every line goes through decode_event_line; an event it accepts must survive
//     encode -> decode -> encode unchanged (the writer's output is always readable).
//  2. The same bytes are tailed by an EventReader from a file written in two appends split
//     at a point the input chooses, with limits the input chooses; the reader must return
//     exactly the events that decoding the complete lines one by one gives.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "run/event_reader.h"
#include "run/event_schema.h"

using namespace odyssey::run;

namespace {

[[noreturn]] void fail(const char* what, std::string_view detail) {
  std::fprintf(stderr, "fuzz_event_reader: %s: %.*s\n", what, static_cast<int>(detail.size()), detail.data());
  std::abort();
}

void put(const std::string& path, std::string_view bytes, bool append) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0600);
  if (fd < 0) fail("cannot open temp file", path);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) fail("cannot write temp file", path);
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

const std::string& temp_file() {
  static const std::string path = [] {
    char dir[] = "/tmp/fuzz_event_reader.XXXXXX";
    if (::mkdtemp(dir) == nullptr) fail("mkdtemp", dir);
    return std::string(dir) + "/events.jsonl";
  }();
  return path;
}

void check_round_trip(const Event& e) {
  const std::string once = encode_event(e);
  const DecodedLine again = decode_event_line(once, "re", 1);
  if (!again.event) fail("encoded event does not decode", once);
  const std::string twice = encode_event(*again.event);
  if (twice != once) fail("encode/decode is not a fixed point", once);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  // Two control bytes: where to split the appends, and the reader's limits.
  const std::size_t split_seed = data[0];
  const std::uint8_t mode = data[1];
  const std::string_view bytes(reinterpret_cast<const char*>(data + 2), size - 2);

  EventReaderOptions options;
  options.max_line_bytes = (mode & 1) != 0 ? 64 : std::size_t{1} << 20;
  options.max_bytes_per_poll = (mode & 2) != 0 ? 61 : 0;
  options.max_reported_problems = (mode & 4) != 0 ? 1 : 100;

  // What the reader should return: the complete lines, decoded one by one.
  std::size_t expected = 0;
  std::size_t start = 0;
  int line_no = 0;
  for (std::size_t nl = bytes.find('\n'); nl != std::string_view::npos; nl = bytes.find('\n', start)) {
    std::string_view line = bytes.substr(start, nl - start);
    start = nl + 1;
    ++line_no;
    if (line.size() > options.max_line_bytes) continue;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const DecodedLine d = decode_event_line(line, "fuzz", line_no);
    if (d.refused) break;
    if (d.event) {
      ++expected;
      check_round_trip(*d.event);
    }
  }

  const std::string& path = temp_file();
  const std::size_t split = bytes.empty() ? 0 : split_seed * bytes.size() / 255;
  put(path, bytes.substr(0, split), false);
  EventReader reader(path, options);
  std::size_t got = 0;
  auto drain = [&] {
    for (int polls = 0;; ++polls) {
      const PollResult p = reader.poll();
      if (p.restarted) fail("restart without truncation", "");
      got += p.events.size();
      if (!p.more) break;
      if (polls > 1 << 20) fail("poll never reaches the end", "");
    }
  };
  drain();
  put(path, bytes.substr(split), true);
  drain();
  if (got != expected)
    fail("reader and line decoder disagree", std::to_string(got) + " vs " + std::to_string(expected));
  return 0;
}
