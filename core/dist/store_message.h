// The store transport's message (dist/comm.cpp): a header that says what the bytes are, then
// the tensor's bytes. The receiver checks every field against what it expects before it uses
// a byte of the payload: a message of another run, from another rank or group, replayed or
// reordered (the sequence number counts per sender -> receiver pair), or of another dtype,
// shape or size is refused with what was expected and what came. Authentication (the HMAC)
// is the store's (dist/store_auth.h); this check catches what a tag cannot: a message that is
// genuine but not the one this receive is waiting for.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace odyssey::dist {

struct MessageHeader {
  std::string run_id;  // the AuthStore's run id ("" on an unauthenticated store)
  std::string group;   // the group's store prefix, e.g. odyssey/ulysses/dp0/ring0
  int src = 0, dst = 0;
  std::uint64_t seq = 0;  // messages src sent dst on this group before this one
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<std::int64_t> shape;
  std::uint64_t bytes = 0;  // payload bytes
};

// The header for sending `t` (contiguous, CPU) with the other fields from `h`.
MessageHeader describe(MessageHeader h, const torch::Tensor& t);

std::vector<std::uint8_t> pack_message(const MessageHeader& h, const torch::Tensor& t);

// Checks `msg` against `want` (what `out` is: dtype, shape, bytes) and copies its payload into
// `out`; throws std::runtime_error naming the field, what was expected and what came.
// `what` names the collective for the message.
void unpack_message(const std::vector<std::uint8_t>& msg, const MessageHeader& want, torch::Tensor& out,
                    const char* what);

}  // namespace odyssey::dist
