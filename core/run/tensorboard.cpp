// tfevents encoding and the file writer (the format is described in tensorboard.h).
#include "run/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "run/event_writer.h"
#include "run/status_file.h"

namespace odyssey::run {

namespace {

// CRC-32C lookup table for the reflected polynomial, one byte at a time: a record is a few
// hundred bytes a step, so a faster slicing variant would buy nothing.
constexpr std::array<std::uint32_t, 256> make_crc32c_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrc32cTable = make_crc32c_table();

// Protocol buffers' wire format, the few parts an Event needs
// (https://protobuf.dev/programming-guides/encoding/). Fields holding their type's default
// are left out, as proto3 serializers do.
enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

class ProtoOut {
 public:
  void varint(std::uint64_t v) {
    while (v >= 0x80) {
      out_ += static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    out_ += static_cast<char>(v);
  }
  void key(std::uint32_t field, WireType type) { varint((std::uint64_t{field} << 3) | type); }
  // int64 and enums: a negative value is its 64-bit two's complement (ten bytes).
  void int64_field(std::uint32_t field, std::int64_t v) {
    if (v == 0) return;
    key(field, kVarint);
    varint(static_cast<std::uint64_t>(v));
  }
  void double_field(std::uint32_t field, double v) {
    if (v == 0) return;
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    key(field, kFixed64);
    little_endian(bits, 8);
  }
  // A float always: a scalar of 0 is still a point on the chart.
  void float_field(std::uint32_t field, float v) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    key(field, kFixed32);
    little_endian(bits, 4);
  }
  void bytes_field(std::uint32_t field, std::string_view b) {
    key(field, kLengthDelimited);
    varint(b.size());
    out_.append(b);
  }
  const std::string& str() const { return out_; }

 private:
  void little_endian(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string out_;
};

// Field numbers (tensorboard/compat/proto).
namespace event_field {
constexpr std::uint32_t kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5;
}
namespace value_field {
constexpr std::uint32_t kTag = 1, kSimpleValue = 2, kTensor = 8, kMetadata = 9;
}
constexpr std::uint32_t kSummaryValue = 1;
constexpr std::uint32_t kMetadataPluginData = 1, kPluginName = 1;
namespace tensor_field {
constexpr std::uint32_t kDtype = 1, kShape = 2, kStringVal = 8;
}
constexpr std::int64_t kDtString = 7;  // types.proto DT_STRING

std::string text_value(const TbText& t) {
  ProtoOut plugin;
  plugin.bytes_field(kPluginName, "text");
  ProtoOut metadata;
  metadata.bytes_field(kMetadataPluginData, plugin.str());
  ProtoOut tensor;
  tensor.int64_field(tensor_field::kDtype, kDtString);
  tensor.bytes_field(tensor_field::kShape, "");  // no dimensions: a scalar string
  tensor.bytes_field(tensor_field::kStringVal, t.text);
  ProtoOut v;
  v.bytes_field(value_field::kTag, t.tag);
  v.bytes_field(value_field::kMetadata, metadata.str());
  v.bytes_field(value_field::kTensor, tensor.str());
  return v.str();
}

void put_le(std::string& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

// The host part of the file name: TensorBoard's writers put the hostname there; a '/' would
// make it a path.
std::string host_for_name() {
  std::string h = this_hostname();
  for (char& c : h)
    if (c == '/') c = '_';
  return h.empty() ? "localhost" : h;
}

}  // namespace

std::uint32_t crc32c(std::string_view data) {
  std::uint32_t c = 0xffffffffu;
  for (unsigned char b : data) c = kCrc32cTable[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

std::uint32_t masked_crc32c(std::string_view data) {
  const std::uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out), 4);
  out.append(data);
  put_le(out, masked_crc32c(data), 4);
  return out;
}

std::string encode_file_version_event(double wall_time) {
  ProtoOut e;
  e.double_field(event_field::kWallTime, wall_time);
  e.bytes_field(event_field::kFileVersion, "brain.Event:2");
  return e.str();
}

std::string encode_summary_event(const TbRecord& r) {
  ProtoOut summary;
  for (const TbScalar& s : r.scalars) {
    ProtoOut v;
    v.bytes_field(value_field::kTag, s.tag);
    v.float_field(value_field::kSimpleValue, s.value);
    summary.bytes_field(kSummaryValue, v.str());
  }
  for (const TbText& t : r.texts) summary.bytes_field(kSummaryValue, text_value(t));
  ProtoOut e;
  e.double_field(event_field::kWallTime, r.wall_time);
  e.int64_field(event_field::kStep, r.step);
  e.bytes_field(event_field::kSummary, summary.str());
  return e.str();
}

Result<TensorBoardWriter> TensorBoardWriter::open(const std::filesystem::path& dir, double wall_time) {
  Result<TensorBoardWriter> r;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    r.diagnostics.push_back(error_at(
        dir.string(), {},
        "cannot create the TensorBoard directory" + (ec ? ": " + ec.message() : std::string(": not a directory"))));
    return r;
  }
  const std::string stem = "events.out.tfevents." + std::to_string(static_cast<std::int64_t>(wall_time)) + "." +
                           host_for_name() + "." + std::to_string(::getpid()) + ".";
  // O_EXCL: a second writer of this process in the same second takes the next number
  // instead of appending to the first one's file.
  for (int n = 0; n < 1000; ++n) {
    const std::string name = (dir / (stem + std::to_string(n))).string();
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      r.diagnostics.push_back(error_at(name, {}, std::string("cannot create: ") + std::strerror(errno)));
      return r;
    }
    ::close(fd);
    const std::string header = tfrecord(encode_file_version_event(wall_time));
    if (Diagnostics d = append_whole(name, header, false); !d.empty()) {
      ::unlink(name.c_str());  // ours, and without its first record no reader would take it
      r.diagnostics = std::move(d);
      return r;
    }
    r.value.path_ = name;
    r.value.mu_ = std::make_unique<std::mutex>();
    return r;
  }
  r.diagnostics.push_back(
      error_at(dir.string(), {}, "cannot create a TensorBoard file: " + stem + "0 to 999 all exist"));
  return r;
}

Diagnostics TensorBoardWriter::write(const TbRecord& r) {
  if (!mu_) return {error_at(path_, {}, "TensorBoard file is not open")};
  const std::string frame = tfrecord(encode_summary_event(r));
  std::lock_guard<std::mutex> lock(*mu_);
  return append_whole(path_, frame, false);
}

}  // namespace odyssey::run
