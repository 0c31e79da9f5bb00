#include "common/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace odyssey {

namespace {

std::string kind_problem(mode_t m) {
  if (S_ISREG(m)) return {};
  if (S_ISDIR(m)) return "is a directory, not a regular file";
  if (S_ISFIFO(m)) return "is a FIFO (named pipe), not a regular file";
  if (S_ISSOCK(m)) return "is a socket, not a regular file";
  if (S_ISCHR(m)) return "is a character device, not a regular file";
  if (S_ISBLK(m)) return "is a block device, not a regular file";
  return "is not a regular file";
}

std::string errno_problem(int e) {
  if (e == ENOENT) return "no such file";
  return std::string("cannot be opened: ") + std::strerror(e);
}

}  // namespace

std::string regular_file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno_problem(errno);
  return kind_problem(st.st_mode);
}

int open_regular_file(const std::string& path, std::string* why) {
  auto fail = [&](std::string w) {
    if (why) *why = std::move(w);
    return -1;
  };
  if (std::string w = regular_file_problem(path); !w.empty()) return fail(w);
  // O_NONBLOCK: should a FIFO take the file's place after the stat, open returns at once
  // instead of waiting for a writer; fstat below then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return fail(errno_problem(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return fail(std::string("cannot be examined: ") + std::strerror(e));
  }
  if (std::string w = kind_problem(st.st_mode); !w.empty()) {
    ::close(fd);
    return fail(w);
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

bool read_regular_file(const std::string& path, std::uint64_t max_bytes, std::string* out, std::string* why) {
  const int fd = open_regular_file(path, why);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    if (why)
      *why = "is " + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes) + " allowed";
    return false;
  }
  out->clear();
  std::vector<char> buf(1 << 16);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      if (why) *why = std::string("read failed: ") + std::strerror(e);
      return false;
    }
    if (n == 0) break;
    out->append(buf.data(), static_cast<std::size_t>(n));
    if (out->size() > max_bytes) {  // grew after the fstat
      ::close(fd);
      if (why) *why = "is more than the " + std::to_string(max_bytes) + " bytes allowed";
      return false;
    }
  }
  ::close(fd);
  return true;
}

// A plain buffered reader over a descriptor: std::ifstream cannot be given one, and opening
// by name again would reopen the race open_regular_file closes.
class RegularFileStream::Buf : public std::streambuf {
 public:
  explicit Buf(int fd) : fd_(fd), data_(1 << 16) {}
  ~Buf() override { ::close(fd_); }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    ssize_t n;
    do n = ::read(fd_, data_.data(), data_.size());
    while (n < 0 && errno == EINTR);
    // The stream turns an exception from its buffer into badbit, which readers check.
    if (n < 0) throw std::ios_base::failure(std::strerror(errno));
    if (n == 0) return traits_type::eof();
    setg(data_.data(), data_.data(), data_.data() + n);
    return traits_type::to_int_type(*gptr());
  }
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode) override {
    if (dir == std::ios_base::cur) off -= static_cast<off_type>(egptr() - gptr());
    const int whence = dir == std::ios_base::beg ? SEEK_SET : dir == std::ios_base::cur ? SEEK_CUR : SEEK_END;
    const off_t p = ::lseek(fd_, static_cast<off_t>(off), whence);
    if (p < 0) return pos_type(off_type(-1));
    setg(data_.data(), data_.data(), data_.data());
    return pos_type(static_cast<off_type>(p));
  }
  pos_type seekpos(pos_type pos, std::ios_base::openmode which) override {
    return seekoff(off_type(pos), std::ios_base::beg, which);
  }

 private:
  int fd_;
  std::vector<char> data_;
};

RegularFileStream::RegularFileStream(const std::string& path) : std::istream(nullptr) {
  const int fd = open_regular_file(path, &error_);
  if (fd < 0) {
    setstate(std::ios_base::failbit);
    return;
  }
  buf_ = std::make_unique<Buf>(fd);
  rdbuf(buf_.get());
}

RegularFileStream::~RegularFileStream() { rdbuf(nullptr); }

}  // namespace odyssey
