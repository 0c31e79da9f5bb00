#include "dist/store_message.h"

#include <cstring>
#include <stdexcept>

namespace odyssey::dist {

namespace {

constexpr std::uint32_t kMagic = 0x4d59444f;  // "ODYM" little-endian
constexpr std::uint32_t kMaxText = 4096;
constexpr std::uint32_t kMaxDims = 64;

void put(std::vector<std::uint8_t>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

void put(std::vector<std::uint8_t>& out, const std::string& s) {
  put(out, s.size(), 4);
  out.insert(out.end(), s.begin(), s.end());
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

std::string printable(const std::string& s) {
  std::string t;
  for (char c : s.substr(0, 200)) t += (c >= 0x20 && c < 0x7f) ? c : '?';
  return "\"" + t + (s.size() > 200 ? "...\" (" + std::to_string(s.size()) + " bytes)" : "\"");
}

// Reads the header fields in order; running off the end is a truncated message.
class Reader {
 public:
  Reader(const std::vector<std::uint8_t>& m, std::string context) : m_(m), context_(std::move(context)) {}
  std::uint64_t uint(int bytes) {
    need(static_cast<std::size_t>(bytes));
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= std::uint64_t{m_[at_ + static_cast<std::size_t>(i)]} << (8 * i);
    at_ += static_cast<std::size_t>(bytes);
    return v;
  }
  std::string text(const char* field) {
    const std::uint64_t n = uint(4);
    if (n > kMaxText)
      fail(std::string("its ") + field + " is " + std::to_string(n) + " bytes long (at most " +
           std::to_string(kMaxText) + ")");
    need(n);
    std::string s(reinterpret_cast<const char*>(m_.data() + at_), n);
    at_ += n;
    return s;
  }
  std::size_t at() const { return at_; }
  [[noreturn]] void fail(const std::string& why) const { throw std::runtime_error(context_ + why); }

 private:
  void need(std::size_t n) const {
    if (m_.size() - at_ < n)
      fail("it is " + std::to_string(m_.size()) +
           " byte(s), cut off inside its header (not a message of this transport)");
  }
  const std::vector<std::uint8_t>& m_;
  std::string context_;
  std::size_t at_ = 0;
};

}  // namespace

MessageHeader describe(MessageHeader h, const torch::Tensor& t) {
  h.dtype = t.scalar_type();
  h.shape = t.sizes().vec();
  h.bytes = static_cast<std::uint64_t>(t.numel()) * static_cast<std::uint64_t>(t.element_size());
  return h;
}

std::vector<std::uint8_t> pack_message(const MessageHeader& h, const torch::Tensor& t) {
  std::vector<std::uint8_t> out;
  out.reserve(64 + h.run_id.size() + h.group.size() + 8 * h.shape.size() + h.bytes);
  put(out, kMagic, 4);
  put(out, h.run_id);
  put(out, h.group);
  put(out, static_cast<std::uint64_t>(h.src), 4);
  put(out, static_cast<std::uint64_t>(h.dst), 4);
  put(out, h.seq, 8);
  put(out, static_cast<std::uint64_t>(static_cast<std::int8_t>(h.dtype)) & 0xff, 1);
  put(out, h.shape.size(), 4);
  for (std::int64_t d : h.shape) put(out, static_cast<std::uint64_t>(d), 8);
  put(out, h.bytes, 8);
  const auto* p = static_cast<const std::uint8_t*>(t.data_ptr());
  if (h.bytes > 0) out.insert(out.end(), p, p + h.bytes);
  return out;
}

void unpack_message(const std::vector<std::uint8_t>& msg, const MessageHeader& want, torch::Tensor& out,
                    const char* what) {
  Reader r(msg, std::string("store transport: the message from rank ") + std::to_string(want.src) + " to rank " +
                    std::to_string(want.dst) + " on group " + printable(want.group) + " (" + what + " #" +
                    std::to_string(want.seq) + ") is refused: ");
  auto mismatch = [&](const char* field, const std::string& got, const std::string& expected) {
    r.fail(std::string(field) + " " + got + " came, " + expected + " expected");
  };
  const std::uint64_t magic = r.uint(4);
  if (magic != kMagic) r.fail("it does not start with the transport's header (a value written by something else)");
  const std::string run_id = r.text("run id");
  if (run_id != want.run_id) mismatch("run id", printable(run_id), printable(want.run_id));
  const std::string group = r.text("group");
  if (group != want.group) mismatch("group", printable(group), printable(want.group));
  const auto src = static_cast<std::int64_t>(r.uint(4));
  if (src != want.src) mismatch("sender rank", std::to_string(src), std::to_string(want.src));
  const auto dst = static_cast<std::int64_t>(r.uint(4));
  if (dst != want.dst) mismatch("receiver rank", std::to_string(dst), std::to_string(want.dst));
  const std::uint64_t seq = r.uint(8);
  if (seq != want.seq)
    r.fail("sequence number " + std::to_string(seq) + " came, " + std::to_string(want.seq) +
           " expected (a replayed or reordered message)");
  const auto dtype_code = static_cast<std::int8_t>(r.uint(1));
  if (dtype_code != static_cast<std::int8_t>(want.dtype)) {
    const bool known = dtype_code >= 0 && dtype_code < static_cast<std::int8_t>(c10::ScalarType::NumOptions);
    mismatch("dtype",
             known ? std::string(c10::toString(static_cast<c10::ScalarType>(dtype_code)))
                   : "code " + std::to_string(dtype_code),
             c10::toString(want.dtype));
  }
  const std::uint64_t ndim = r.uint(4);
  if (ndim > kMaxDims)
    r.fail("its shape has " + std::to_string(ndim) + " dimensions (at most " + std::to_string(kMaxDims) + ")");
  std::vector<std::int64_t> shape;
  for (std::uint64_t i = 0; i < ndim; ++i) shape.push_back(static_cast<std::int64_t>(r.uint(8)));
  if (shape != want.shape) mismatch("shape", shape_text(shape), shape_text(want.shape));
  const std::uint64_t bytes = r.uint(8);
  if (bytes != want.bytes) mismatch("byte count", std::to_string(bytes), std::to_string(want.bytes));
  const std::size_t payload = msg.size() - r.at();
  if (payload != want.bytes)
    mismatch("payload of", std::to_string(payload) + " byte(s)",
             std::to_string(want.bytes) + " (the header's byte count)");
  const auto out_bytes = static_cast<std::uint64_t>(out.numel()) * static_cast<std::uint64_t>(out.element_size());
  TORCH_CHECK(out.is_contiguous() && out_bytes == want.bytes,
              "store transport: the receive buffer does not match the expected message");
  if (payload > 0) std::memcpy(out.data_ptr(), msg.data() + r.at(), payload);
}

}  // namespace odyssey::dist
