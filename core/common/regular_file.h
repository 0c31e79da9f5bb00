// Input files opened without ever blocking on something that is not a file. open(2) of a
// FIFO for reading waits for a writer, forever: a FIFO named model.safetensors hung `run`
// while its heartbeat said alive. Every input Odyssey reads (weights, config.json,
// tokenizer.json, dataset files, the token cache) is opened here: refused by stat when it
// is a FIFO, device, socket or directory, then opened with O_NONBLOCK (so a FIFO swapped in
// after the stat does not block either) and checked again with fstat on the open file.
#pragma once

#include <cstdint>
#include <istream>
#include <memory>
#include <streambuf>
#include <string>

namespace odyssey {

// "" when `path` (symbolic links followed) is a regular file; otherwise what it is instead,
// as a message fragment: "no such file", "is a FIFO (named pipe), not a regular file", ...
std::string regular_file_problem(const std::string& path);

// A read-only descriptor of the regular file `path` (O_CLOEXEC, blocking reads), or -1
// with `*why` set as regular_file_problem() words it (or the errno text).
int open_regular_file(const std::string& path, std::string* why);

// The whole of a regular file of at most `max_bytes`; false with `*why` set otherwise.
bool read_regular_file(const std::string& path, std::uint64_t max_bytes, std::string* out, std::string* why);

// An input stream over a regular file opened by open_regular_file (seekable; binary).
class RegularFileStream : public std::istream {
 public:
  explicit RegularFileStream(const std::string& path);
  ~RegularFileStream() override;
  RegularFileStream(const RegularFileStream&) = delete;
  RegularFileStream& operator=(const RegularFileStream&) = delete;
  bool is_open() const { return buf_ != nullptr; }
  const std::string& error() const { return error_; }  // why it is not open

 private:
  class Buf;
  std::unique_ptr<Buf> buf_;
  std::string error_;
};

}  // namespace odyssey
